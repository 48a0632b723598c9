"""Cluster mode: hmp.worker processes on loopback, TensorFlow's gRPC runtime.

One 2-worker local cluster (two CPU devices per worker) serves the module:
an uneven model split over its two tasks trains exactly like one process, so
does a batch split over all four devices, whose gradients are summed within
each worker first, then across workers; a stopped worker ends a step with
an error naming it; a killed worker ends ``python -m hmp.train --cluster``
with one line naming it, and ``--resume`` continues once it is back.
"""

import concurrent.futures
import os
import select
import signal
import socket
import subprocess
import sys
import threading

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from cli_batch import HUNG_S, run_batch, started, wait_for_file
from hmp.cluster.launch import free_loopback_ports, local_cluster, parse_cpus
from hmp.cluster.runtime import Cluster, WorkerUnavailable, client_server, device, trainer_port
from hmp.cluster.sessions import close_session
from hmp.cluster import sources
from hmp.errors import InvalidInput
from hmp.graph.graph import TrainingGraph
from hmp.graph.graph_config import Placement
from hmp.hosts import is_hierarchical
from hmp.measure.speeds import random_batch
from models import model_config

CONFIG = model_config("cnn2d", patch=5, bands=6, n_classes=4, width=4)
BATCH = 16
SPLITS = {"filters1": [5, 3], "filters2": [2, 6], "hidden": [9, 7]}
RULES = "filters1:model;filters2:model;hidden:model"


@pytest.fixture(scope="module")
def workers():
    with local_cluster(2, virtual_cpus=2) as cluster:
        yield cluster


def _losses(layout, steps, target="", config=None, check_graph=lambda graph: None):
    batch = random_batch(CONFIG, BATCH)
    graph = TrainingGraph(CONFIG, layout, BATCH, batch.image_shape, "adam", 1e-2, seed=5)
    check_graph(graph)
    with graph.session(batch.padded_cube, config, target) as session:
        return np.array([session.run([graph.loss, graph.train_op], batch.feed(graph))[0]
                         for _ in range(steps)])


@pytest.fixture(scope="module")
def one_process_losses():
    """5 losses of the model on one local device: the reference both cluster layouts
    must equal (the same seeded graph and batch, so built and run once for both)."""
    return _losses(Placement("", "", ("/cpu:0",), {}), 5)


def test_uneven_split_over_two_workers_equals_one_process(workers, one_process_losses):
    flag, devices = workers
    assert flag.count("127.0.0.1:") == 2
    assert devices == tuple("/job:worker/task:%d/device:CPU:%d" % (task, index)
                            for task in (0, 1) for index in (0, 1))
    expected = one_process_losses
    losses = _losses(Placement("model:2", RULES, devices[::2], SPLITS), 5, workers.target,
                     workers.cluster.session_config())
    # it trains (cnn2d's dropout makes 5 losses noisy, so no "it decreases")
    assert np.all(np.isfinite(expected)) and len(set(expected.tolist())) == len(expected)
    np.testing.assert_allclose(losses, expected, rtol=1e-5)


def test_two_level_gradient_reduction_over_two_workers_equals_one_process(workers,
                                                                         one_process_losses):
    def reduces_within_each_worker_first(graph):
        assert graph.mesh_impl.hosts == ["/job:worker/replica:0/task:%d" % t for t in (0, 0, 1, 1)]
        assert is_hierarchical(graph.mesh_impl.hosts)
    expected = one_process_losses
    losses = _losses(Placement("batch:4", "batch:batch", workers.devices, {"batch": [6, 4, 3, 3]}),
                     5, workers.target, workers.cluster.session_config(),
                     check_graph=reduces_within_each_worker_first)
    np.testing.assert_allclose(losses, expected, rtol=1e-5)


def test_stopped_worker_ends_the_step_with_its_name(workers):
    cluster = Cluster(workers.cluster.addresses, timeout_s=2)
    graph = TrainingGraph(CONFIG, Placement("model:2", RULES, workers.devices[::2], SPLITS), BATCH,
                          (4, 4))
    with tf.Session(cluster.target, graph=graph.tf_graph,
                    config=cluster.session_config()) as session:
        # the healthy run under a hang guard alone, not the 2 s the stopped worker gets
        session.run(graph.init, options=tf.RunOptions(timeout_in_ms=1000 * HUNG_S))
        os.kill(workers.pid(1), signal.SIGSTOP)
        try:
            with pytest.raises(WorkerUnavailable) as error, cluster.failures("; hint"):
                session.run(graph.copy_masters_to_slices)
        finally:
            os.kill(workers.pid(1), signal.SIGCONT)
    assert str(error.value).startswith(
        "worker 1 (%s) did not answer within 2 s" % cluster.addresses[1])
    assert str(error.value).endswith("; hint")


def test_the_trainers_process_is_the_master_and_runs_the_ops_placed_nowhere(workers, tmp_path):
    """The session's master is this process's own server (the job "client"): the ops
    given no device (the global step's, the saver's) run here, not on task 0, and a
    restore hands the weights saved here back to a worker."""
    cluster = workers.cluster
    assert cluster.target == "grpc://127.0.0.1:%s" % client_server().target.rpartition(":")[2]
    with tf.Graph().as_default():
        step = tf.train.get_or_create_global_step()
        with tf.device(device(1)):
            weights = tf.Variable([1.0, 2.0, 3.0])
        scale = weights.assign(weights * 2.0)
        count = step.assign_add(1)
        saver = tf.train.Saver()
        devices_run = set()
        with tf.Session(cluster.target, config=cluster.session_config()) as session:
            session.run(tf.global_variables_initializer())
            metadata = tf.RunMetadata()
            session.run([scale, count], options=tf.RunOptions(output_partition_graphs=True),
                        run_metadata=metadata)
            devices_run = {node.device for graph in metadata.partition_graphs
                           for node in graph.node}
            saved = saver.save(session, str(tmp_path / "ckpt"))
            session.run([scale, count])
            saver.restore(session, saved)
            np.testing.assert_array_equal(session.run(weights), [2.0, 4.0, 6.0])
            assert session.run(step) == 1
    assert devices_run == {"/job:client/replica:0/task:0/device:CPU:0",
                           "/job:worker/replica:0/task:1/device:CPU:0"}
    assert os.path.exists(saved + ".index")


class StandInSession:
    """A session whose ``close`` blocks until ``release`` is set (as TensorFlow's master
    holds a session whose step failed on a lost worker until the cluster's timeout),
    then raises ``error`` if given."""

    def __init__(self, error=None):
        self.release, self.closed, self.error = threading.Event(), threading.Event(), error

    def close(self):
        self.release.wait(HUNG_S)   # a hang guard: a close_session that waits fails
        self.closed.set()
        if self.error:
            raise self.error


def test_a_session_that_does_not_close_in_time_is_left_to_close_on_its_own():
    held = StandInSession()
    assert close_session(held, wait_s=0) is False   # returned while the close goes on
    assert not held.closed.is_set()
    held.release.set()
    held.closed.wait()   # its thread, inside close() (so no wait is timed here), ends it
    assert held.closed.is_set() and held.error is None
    quick = StandInSession()
    quick.release.set()
    assert close_session(quick, wait_s=None) is True
    failing = StandInSession(tf.errors.UnavailableError(None, None, "gone"))
    failing.release.set()
    with pytest.raises(tf.errors.UnavailableError, match="gone"):
        close_session(failing, wait_s=None)   # an error of a close in time is raised


def test_workers_that_cannot_reach_the_trainer_are_refused_in_one_line(workers, monkeypatch):
    # 127.0.0.1: the workers answer and reach it (within a hang guard: how soon is no part
    # of the test)
    Cluster(workers.cluster.addresses, timeout_s=HUNG_S).check_answers()
    monkeypatch.setenv("HMP_TRAINER_HOST", "trainer.invalid")   # a name nobody resolves
    # only the reach that must fail waits the short timeout (check_answers' last check)
    cluster = Cluster(workers.cluster.addresses, timeout_s=2)
    assert cluster.client_address.startswith("trainer.invalid:")
    with pytest.raises(WorkerUnavailable) as error:
        cluster.check_reach()
    assert str(error.value) == (
        "the workers of %s cannot reach this trainer at %s (HMP_TRAINER_HOST="
        "trainer.invalid): set HMP_TRAINER_HOST to an address of this machine that they "
        "reach, or HMP_TRAINER_PORT to a port a firewall lets them reach"
        % (cluster.flag, cluster.client_address))


def test_a_device_no_worker_offers_is_refused_naming_those_offered(workers):
    cluster = Cluster(workers.cluster.addresses, timeout_s=HUNG_S)   # a hang guard
    cluster.check_offered(["/job:worker/task:0/device:CPU:1", "/job:worker/task:1/cpu:0"])
    with pytest.raises(InvalidInput) as refused:   # each worker has two virtual CPUs
        cluster.check_offered(["/job:worker/task:0/device:CPU:0",
                               "/job:worker/task:1/device:CPU:2"])
    assert str(refused.value) == (
        "/job:worker/task:1/device:CPU:2: not offered by the workers, which offer "
        "/job:worker/task:0/device:CPU:0, /job:worker/task:0/device:CPU:1, "
        "/job:worker/task:1/device:CPU:0, /job:worker/task:1/device:CPU:1 (a worker's "
        "virtual CPUs: hmp.worker --virtual_cpus)")


def test_the_trainer_listens_on_the_port_given_and_names_one_it_cannot_take(workers):
    """In a process of its own: this one's server (``client_server``) is started."""
    free, taken_port = free_loopback_ports(2)
    program = (
        "import os, sys\n"
        "from hmp.cluster.runtime import Cluster, client_server\n"
        "from hmp.errors import InvalidInput\n"
        "os.environ['HMP_TRAINER_PORT'] = sys.argv[1]\n"
        "try:\n"
        "    client_server()\n"
        "except InvalidInput as error:\n"
        "    print(error)\n"
        "os.environ['HMP_TRAINER_PORT'] = sys.argv[2]\n"
        "cluster = Cluster(sys.argv[3].split(','), timeout_s=%d)\n"   # a hang guard
        "cluster.check_answers()   # the workers reach it there\n"
        "print(client_server().target, cluster.target)\n") % HUNG_S
    with socket.socket() as taken:
        taken.bind(("", taken_port))
        taken.listen()
        run = subprocess.run([sys.executable, "-c", program, str(taken_port), str(free),
                              ",".join(workers.cluster.addresses)],
                             capture_output=True, text=True, timeout=HUNG_S)
    assert run.returncode == 0, run.stderr[-2000:]
    refused, served = run.stdout.splitlines()
    assert refused == ("HMP_TRAINER_PORT=%d: this trainer cannot listen there: port %d is in "
                       "use on this machine (by another worker or program)"
                       % (taken_port, taken_port))
    own, master = served.split()
    assert own == "grpc://localhost:%d" % free and master == "grpc://127.0.0.1:%d" % free


@pytest.mark.parametrize("value", ["x", "0", "65536", "-1", "80.5", "\u00b2"])
def test_a_trainer_port_that_is_no_port_is_refused_in_one_line(value):
    with pytest.raises(InvalidInput) as error:
        trainer_port(value)
    assert str(error.value) == ("HMP_TRAINER_PORT=%s: give a port number from 1 to 65535, "
                                "or leave it unset for a free one" % value)
    assert (trainer_port(""), trainer_port("8470")) == (0, 8470)


def test_bad_cluster_flags_are_refused():
    with pytest.raises(ValueError, match="'x:y' is not host:port"):
        Cluster.parse("127.0.0.1:1,x:y")
    for port in (0, 99999):   # a port out of TCP's range: said so
        with pytest.raises(ValueError, match=r"^'127.0.0.1:%d': a port is a whole number from "
                                             r"1 to 65535, got %d$" % (port, port)):
            Cluster.parse("127.0.0.1:%d" % port)
    with pytest.raises(ValueError, match="127.0.0.1:1 is given more than once"):
        Cluster.parse("127.0.0.1:1,127.0.0.1:1")
    with pytest.raises(ValueError, match=r"'127.0.0.1:1;127.0.0.1:2' is not host:port \(e.g. "
                                         r"127.0.0.1:2222; several: separated by commas\)"):
        Cluster.parse("127.0.0.1:1;127.0.0.1:2")
    with pytest.raises(ValueError, match="an empty address between commas"):
        Cluster.parse("127.0.0.1:1,")
    with pytest.raises(ValueError, match="'tfconfig' is none of tf_config, slurm or a "
                                         "host:port list"):
        sources.resolve("tfconfig")
    with pytest.raises(ValueError, match="/cpu:0 is not a device of the cluster's 2 tasks"):
        Cluster.parse("a:1,b:2").check_devices(["/job:worker/task:1/device:CPU:0", "/cpu:0"])
    with pytest.raises(ValueError, match="/cpu:0 is not a device of the cluster's 1 task; "):
        Cluster.parse("a:1").check_devices(["/cpu:0"])


def test_cpu_lists_take_numbers_and_ranges():
    assert parse_cpus("0-7") == list(range(8))
    assert parse_cpus("8,9") == [8, 9]
    assert parse_cpus("0,2,4-6,2") == [0, 2, 4, 5, 6]
    # "²" is a digit to str.isdigit, not to int; a range to a CPU beyond any machine's
    # would be built before any check (a typo of 12 digits: memory, or minutes)
    for bad in ("", "7-3", "a", "1-", "-1", "0,,1", "1:2", "²", "0-²", "0-99999999999"):
        with pytest.raises(InvalidInput, match=r"allowed are CPU numbers \(below 65536\) "
                                               r"and ranges"):
            parse_cpus(bad)


def _worker(*flags):
    return subprocess.Popen([sys.executable, "-m", "hmp.worker", *flags],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


BAD_WORKER_FLAGS = {"--task=2": "--task=2: give a task index from 0 to 1",
                    "--cpus=0": "--task is required with --cluster=127.0.0.1:1,127.0.0.1:2: "
                                "give a task index from 0 to 1",
                    "--task=0 --cpus=0,99": "--cpus=0,99: give CPU numbers this process may use",
                    "--task=0 --threads=-1": "--threads=-1: must be 0",
                    "--task=0 --inter_op_threads=-1": "--inter_op_threads=-1: must be 0",
                    # TensorFlow's int32 fields: refused, not a traceback
                    "--task=0 --threads=3000000000": "--threads=3000000000: must be 0",
                    "--task=0 --virtual_cpus=3000000000": "--virtual_cpus=3000000000: a task "
                                                         "offers at least 1 CPU device",
                    # refused as any value, not only where Slurm would use it
                    "--task=2 --port_base=0": "--port_base=0: a port is a whole number from "
                                              "1 to 65535, got 0"}


def test_worker_pins_cpus_stops_on_sigint_and_refuses_bad_flags():
    good = _worker("--cluster=127.0.0.1:%d" % free_loopback_ports(1)[0], "--task=0",
                   "--cpus=0", "--threads=1")
    refused = dict(zip(BAD_WORKER_FLAGS, run_batch("hmp.worker", [   # one interpreter
        {"args": ["--cluster=127.0.0.1:1,127.0.0.1:2", *flags.split()]}
        for flags in BAD_WORKER_FLAGS])))
    serving = good.stdout.readline()
    # one thread, but two inter-op threads: a transfer need not wait for an op
    assert "(cpus 0, threads 1, inter-op threads 2)" in serving, good.stderr.read()[-2000:]
    assert os.sched_getaffinity(good.pid) == {0}
    good.send_signal(signal.SIGINT)
    returncode = good.wait(timeout=HUNG_S)   # a hang guard, not a time it must keep
    assert returncode == 0 and "stopped" in good.stdout.read()
    for flags, (returncode, _, stderr) in refused.items():
        lines = [l for l in stderr.splitlines() if l.startswith("hmp.worker: error:")]
        assert returncode == 2 and len(lines) == 1, stderr[-2000:]
        assert BAD_WORKER_FLAGS[flags] in lines[0] and "Traceback" not in stderr


def test_local_cluster_stops_its_workers_when_the_body_raises():
    with pytest.raises(RuntimeError, match="body failed"):
        with local_cluster(1, cpus=[1], threads=1) as cluster:
            pid = cluster.pid(0)
            assert os.sched_getaffinity(pid) == {1}
            raise RuntimeError("body failed")
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


# cnn2d: its resume restores split conv kernels and batch-norm statistics across workers
TRAIN = ["--model=cnn2d", "--width=4", "--patch_size=5", "--batch_size=64",
         "--train_fraction=0.05", "--speeds=2,1", "--mesh=model:2", "--checkpoint_every=3",
         "--notta"]


def _train_flags(workers, *flags):
    return ["--cluster=" + workers.flag, *TRAIN, *flags]


def test_train_refuses_a_bad_or_silent_cluster():
    silent, other = ("127.0.0.1:%d" % port for port in free_loopback_ports(2))
    both = "%s,%s" % (silent, other)
    expected = {"127.0.0.1:1,x": (2, "error: --cluster=127.0.0.1:1,x: 'x' is not host:port"),
                silent: (1, "worker 0 (%s) does not answer: start it with python -m "
                            "hmp.worker --cluster=%s --task=0" % (silent, silent)),
                both: (1, "worker 0 (%s) and worker 1 (%s) do not answer: start them with "
                          "python -m hmp.worker --cluster=%s --task=0; python -m hmp.worker "
                          "--cluster=%s --task=1" % (silent, other, both, both))}
    # a silent worker is waited for --cluster_timeout seconds
    runs = run_batch("hmp.train", [{"args": ["--cluster=" + spec, "--cluster_timeout=1"]}
                                   for spec in expected])
    for spec, (returncode, _, stderr) in zip(expected, runs):
        lines = [l for l in stderr.splitlines() if l.startswith("hmp.train: error:")]
        assert (returncode, len(lines)) == (expected[spec][0], 1), stderr[-2000:]
        assert expected[spec][1] in lines[0] and "Traceback" not in stderr


def test_killed_worker_stops_training_and_resume_continues(workers, tmp_path, small_scene):
    # the run in the session's hmp.train interpreter (tests/cli_batch.py), waited for in
    # a thread of this process: it trains while the worker dies (no TensorFlow start of
    # its own); its stop is an exit code there, as it is for a process
    started("hmp.train")   # on this thread: the interpreter ends with the thread starting it
    with concurrent.futures.ThreadPoolExecutor(1) as thread:
        training = thread.submit(run_batch, "hmp.train", [{"args": _train_flags(
            workers, *small_scene, "--epochs=30", "--model_dir=%s" % tmp_path)}])
        wait_for_file(tmp_path / "ckpt-3.index", training.done)
        workers.stop(1, signal.SIGKILL)
        (returncode, _, stderr), = training.result()   # run_batch's own time-out ends a hang
    assert (tmp_path / "ckpt-3.index").exists(), stderr[-2000:]
    lines = [l for l in stderr.splitlines() if l.startswith("hmp.train: error:")]
    assert returncode == 1 and len(lines) == 1, stderr[-2000:]
    assert "worker 1 (%s) is unreachable" % workers.cluster.addresses[1] in lines[0]
    assert lines[0].endswith("restart the worker, then continue with --flagfile=%s --resume"
                             % (tmp_path / "flags.txt")) and "Traceback" not in stderr
    last = tf.train.latest_checkpoint(str(tmp_path))
    assert int(last.rpartition("-")[2]) >= 3

    workers.start(1)   # on the same port
    resumed, = run_batch("hmp.train", [{"args": _train_flags(
        workers, *small_scene, "--epochs=1", "--resume", "--model_dir=%s" % tmp_path)}])
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resumed from %s" % last in resumed.stdout
    assert "overall accuracy (OA)" in resumed.stdout


def test_a_child_started_with_die_with_parent_ends_when_its_parent_is_killed(tmp_path):
    # The parent starts a child with die_with_parent and waits; the child reports the
    # signal the kernel will send it when its parent dies (prctl PR_GET_PDEATHSIG) and
    # waits for a signal. Neither sleeps: nothing here depends on how long anything
    # takes. SIGKILL to the parent must then end the child (no orphaned worker or busy
    # loop); the test waits for that on the child's pidfd.
    parent = subprocess.Popen([sys.executable, "-c", (
        "import signal, subprocess, sys\n"
        "from hmp.cluster.subprocesses import die_with_parent\n"
        "child = subprocess.Popen([sys.executable, '-c', "
        "'import ctypes, signal; s = ctypes.c_int(); "
        "ctypes.CDLL(None).prctl(2, ctypes.byref(s)); "   # PR_GET_PDEATHSIG
        "print(\"child\", s.value, flush=True); signal.pause()'],"
        " preexec_fn=die_with_parent)\n"
        "print('parent', child.pid, flush=True)\n"
        "signal.pause()\n")], stdout=subprocess.PIPE, text=True)
    try:
        said = dict(parent.stdout.readline().split() for _ in range(2))   # in either order
        child = int(said["parent"])
        ended = os.pidfd_open(child)   # readable once the child has ended
    finally:
        parent.kill()   # also when the test fails: no waiting parent left behind
        parent.wait()
    assert int(said["child"]) == signal.SIGTERM
    select.select([ended], [], [])
    os.close(ended)
    assert not _alive(child)
    assert parent.stdout.read() == ""   # nothing more was said


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open("/proc/%d/stat" % pid) as f:   # a zombie (not reaped by init yet) is gone
        return f.read().split(")")[-1].split()[0] != "Z"
