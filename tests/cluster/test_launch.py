"""Launching where users run: a cluster from TF_CONFIG or Slurm (TensorFlow's resolvers),
``hmp.train --local_workers`` (its workers stopped however the run ends, checked by
process id), progress lines in a log file and the flagfile that repeats a run.

The Slurm environment is faked: its variables as ``srun`` sets them for a task (the
step's) and as a batch script has them (the job's, where the trainer runs).
TensorFlow's resolver expands the node list itself (no ``scontrol``).
"""

import concurrent.futures
import json
import os
import pathlib
import re
import signal
import socket
import subprocess
import sys

import numpy as np
import pytest

from cli_batch import HUNG_S, run_batch, started, wait_for_file
from hmp.cluster import launch, runtime, sources
from hmp.cluster.runtime import Cluster, port_in_use
from hmp.errors import InvalidInput
from hmp.run import progress

# The model is incidental to launching: spectral builds a third of cnn2d's graph.
TRAIN = ["--model=spectral", "--width=4", "--patch_size=5", "--batch_size=64", "--speeds=2,1",
         "--mesh=model:2", "--notta"]
CPUS = sorted(os.sched_getaffinity(0))
LOCAL_WORKERS = "%d:1,%d:1" % (CPUS[0], CPUS[-1])   # two pinned workers, one thread each
ENVIRONMENT = {name: value for name, value in os.environ.items()
               if not name.startswith("SLURM_") and name != "TF_CONFIG"}


@pytest.fixture
def clean_environment(monkeypatch):
    """No TF_CONFIG or Slurm variable of the machine the tests run on."""
    for name in set(os.environ) - set(ENVIRONMENT):
        monkeypatch.delenv(name)
    return monkeypatch


# -- clusters from the environment ---------------------------------------------------------

def test_slurm_tasks_get_ports_by_node_and_the_batch_script_finds_the_same(clean_environment):
    env = clean_environment
    # srun's task 3 of 2 + 3 + 1 tasks on node08 to node10 (zero-padded names)
    env.setenv("SLURM_PROCID", "3")
    env.setenv("SLURM_STEP_NODELIST", "node[08-10]")
    env.setenv("SLURM_STEP_TASKS_PER_NODE", "2,3,1")
    expected = ("node08:7000", "node08:7001", "node09:7000", "node09:7001", "node09:7002",
                "node10:7000")
    gpus = os.environ.get("CUDA_VISIBLE_DEVICES")
    cluster, task = sources.resolve("slurm", port_base=7000)
    assert (cluster.addresses, task) == (expected, 3)
    assert os.environ.get("CUDA_VISIBLE_DEVICES") == gpus   # GPUs are Slurm's to give
    # the batch script (task 0, no step): the job's variables give the same cluster
    for name in ("SLURM_STEP_NODELIST", "SLURM_STEP_TASKS_PER_NODE"):
        env.delenv(name)
    env.setenv("SLURM_PROCID", "0")
    env.setenv("SLURM_JOB_NODELIST", "node[08-10]")
    env.setenv("SLURM_TASKS_PER_NODE", "2,3,1")
    assert sources.resolve("slurm", port_base=7000)[0].addresses == expected
    env.setenv("SLURM_TASKS_PER_NODE", "2(x2),1")   # Slurm's repeat count
    assert sources.resolve("slurm", port_base=7000)[0].addresses == (
        "node08:7000", "node08:7001", "node09:7000", "node09:7001", "node10:7000")
    env.setenv("SLURM_JOB_NODELIST", "node[08-x]")
    with pytest.raises(InvalidInput, match=r"^SLURM_JOB_NODELIST=node\[08-x\]: the range '08-x' "
                                            r"is not N or LOW-HIGH"):
        sources.resolve("slurm")
    env.delenv("SLURM_JOB_NODELIST")
    with pytest.raises(InvalidInput, match="neither SLURM_STEP_NODELIST nor SLURM_JOB_NODELIST"):
        sources.resolve("slurm")


def test_slurm_lists_of_different_lengths_are_refused_naming_both(clean_environment):
    """A node list and its tasks per node that disagree in count, or a node listed twice,
    are one line naming the variables and both counts: the resolver's zip (and a dict)
    dropped the longer list's tail."""
    env = clean_environment
    env.setenv("SLURM_PROCID", "0")
    refused = {("node[1-3]", "2,1"): "SLURM_JOB_NODELIST=node[1-3] names 3 nodes but "
                                     "SLURM_TASKS_PER_NODE=2,1 gives 2 task counts; "
                                     "allowed: one count a node",
               ("node[1-2]", "1(x3)"): "SLURM_JOB_NODELIST=node[1-2] names 2 nodes but "
                                       "SLURM_TASKS_PER_NODE=1(x3) gives 3 task counts",
               ("a,b,a", "1(x3)"): "SLURM_JOB_NODELIST=a,b,a names the node a more than "
                                   "once; allowed: each node once",
               ("a", "2,x"): "SLURM_TASKS_PER_NODE=2,x: allowed are task counts"}
    for (nodes, counts), message in refused.items():
        env.setenv("SLURM_JOB_NODELIST", nodes)
        env.setenv("SLURM_TASKS_PER_NODE", counts)
        with pytest.raises(InvalidInput) as refusal:
            sources.resolve("slurm")
        assert str(refusal.value).startswith(message) and "\n" not in str(refusal.value)
    # a step's node list with the job's counts (the step's not set): both named as read
    env.setenv("SLURM_STEP_NODELIST", "a,b")
    env.setenv("SLURM_TASKS_PER_NODE", "1")
    with pytest.raises(InvalidInput, match=r"^SLURM_STEP_NODELIST=a,b names 2 nodes but "
                                            r"SLURM_TASKS_PER_NODE=1 gives 1 task counts"):
        sources.resolve("slurm")


def test_slurm_hostlists_are_read_as_slurm_writes_them(clean_environment):
    """Prefix, bracketed ranges zero-padded to their first number's width, suffix; groups
    separated by commas; several brackets give every combination (Slurm's order)."""
    read = {"node[01-03]-ib": ["node01-ib", "node02-ib", "node03-ib"],
            "a[1-2]b,c5": ["a1b", "a2b", "c5"],
            "n[1-2],m5,o[3-4,6,7-9]": ["n1", "n2", "m5", "o3", "o4", "o6", "o7", "o8", "o9"],
            "node[8-10]": ["node8", "node9", "node10"],
            "node[08-10]": ["node08", "node09", "node10"],
            "r[1-2]n[1-2].ib": ["r1n1.ib", "r1n2.ib", "r2n1.ib", "r2n2.ib"],
            "[7]x,solo": ["7x", "solo"]}
    for hostlist, names in read.items():
        assert sources.expand_hostlist(hostlist) == names, hostlist
    refused = {"node[08-x]": "the range '08-x' is not N or LOW-HIGH with LOW <= HIGH",
               "a[3-1]": "the range '3-1' is not N or LOW-HIGH",
               "a[]": "the range '' is not N",
               "a[1-2": "'a[1-2' is not a node name with bracketed ranges",
               "a]b": "'a]b' is not a node name",
               "a,,b": "'' is not a node name",
               "a[[1]]": "'a[[1]]' is not a node name",
               "a[0-70000]": "the range '0-70000' names 70001 nodes; allowed: at most 65536",
               "a[0-999]b[0-999]": "'a[0-999]b[0-999]' names 1000000 nodes"}
    for hostlist, message in refused.items():
        with pytest.raises(InvalidInput) as refusal:
            sources.expand_hostlist(hostlist)
        assert str(refusal.value).startswith(message), (hostlist, str(refusal.value))
    # the names with a suffix are the cluster's hosts, the tasks by node as ever
    env = clean_environment
    env.setenv("SLURM_PROCID", "2")
    env.setenv("SLURM_STEP_NODELIST", "node[01-02]-ib")
    env.setenv("SLURM_STEP_TASKS_PER_NODE", "1,2")
    cluster, task = sources.resolve("slurm", port_base=7000)
    assert (cluster.addresses, task) == (("node01-ib:7000", "node02-ib:7000", "node02-ib:7001"),
                                         2)


def test_a_slurm_task_is_the_address_of_its_own_node_and_place(clean_environment):
    """Node numbers not zero-padded: the resolver lists node10 before node9, Slurm ranks
    node9's two tasks 0 and 1 (SLURM_PROCID). Each task is the address of its node and
    its place there (SLURMD_NODENAME, SLURM_LOCALID), not its rank: ranks 0 and 1 would
    both have listened at node10's and node9's first port."""
    env = clean_environment
    env.setenv("SLURM_STEP_NODELIST", "node[9-10]")
    env.setenv("SLURM_STEP_TASKS_PER_NODE", "2,1")
    expected = ("node10:8888", "node9:8888", "node9:8889")
    for rank, node, local in ((0, "node9", 0), (1, "node9", 1), (2, "node10", 0)):
        env.setenv("SLURM_PROCID", str(rank))
        env.setenv("SLURMD_NODENAME", node)
        env.setenv("SLURM_LOCALID", str(local))
        cluster, task = sources.resolve("slurm", port_base=8888)
        assert cluster.addresses == expected
        assert cluster.addresses[task] == "%s:%d" % (node, 8888 + local)


def test_tf_config_gives_the_worker_job_and_the_task(clean_environment):
    env = clean_environment
    assert sources.detect() is None
    env.setenv("SLURM_PROCID", "0")
    assert sources.detect() == sources.SLURM
    config = {"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": 1}}
    env.setenv("TF_CONFIG", json.dumps(config))
    assert sources.detect() == sources.TF_CONFIG   # the explicit one first
    cluster, task = sources.resolve("tf_config", timeout_s=5)
    assert (cluster.addresses, task, cluster.timeout_s) == (("a:1", "b:2"), 1, 5.0)
    del config["task"]   # the trainer's: no task
    env.setenv("TF_CONFIG", json.dumps(config))
    assert sources.resolve("tf_config")[1] is None
    refused = {'{"cluster": {"chief": ["a:1"], "worker": ["b:2"]}}':
               'TF_CONFIG\'s cluster has the jobs ["chief", "worker"]',
               '{"cluster": {"worker": ["a:1"]}, "task": {"type": "ps", "index": 0}}':
               'TF_CONFIG\'s task has the type "ps"',
               '{"cluster": {"worker": ["a:1", "a:1"]}}':
               "TF_CONFIG: a:1 is given more than once (tasks 0, 1)",
               "worker: a:1": "TF_CONFIG is not a cluster description",
               # an empty job, or one of tasks by number: named as it is
               '{"cluster": {"worker": []}, "task": {"type": "worker", "index": 0}}':
               'TF_CONFIG\'s job "worker" is {}; give it as a list of host:port, task 0 first',
               '{"cluster": {"worker": {"1": "a:1"}}}':
               'TF_CONFIG\'s job "worker" is {"1": "a:1"}; give it as a list of host:port'}
    for text, message in refused.items():
        env.setenv("TF_CONFIG", text)
        with pytest.raises(InvalidInput) as refusal:
            sources.resolve("tf_config")
        assert str(refusal.value).startswith(message)


def test_a_tf_config_task_index_is_a_whole_number_of_the_job(clean_environment):
    """The resolver takes int() of the index: 0.5 was task 0, true task 1."""
    env = clean_environment
    for index in (0.5, True, False, 1.0, "1", -1, 2, None):
        config = {"cluster": {"worker": ["a:1", "b:2"]},
                  "task": {"type": "worker", "index": index}}
        env.setenv("TF_CONFIG", json.dumps(config))
        with pytest.raises(InvalidInput) as refusal:
            sources.resolve("tf_config")
        assert str(refusal.value) == (
            'TF_CONFIG\'s task index is %s; allowed: a whole number >= 0 below 2 (the job '
            '"worker"\'s task count)' % json.dumps(index))
    env.setenv("TF_CONFIG", '{"cluster": {"worker": ["a:1"]}, "task": [0]}')
    with pytest.raises(InvalidInput, match=r'^TF_CONFIG\'s task is \[0\]; give it as'):
        sources.resolve("tf_config")
    env.setenv("TF_CONFIG", '{"cluster": {"worker": ["a:1", "b:2"]}, "task": {"index": 1}}')
    assert sources.resolve("tf_config")[1] == 1


def test_unknown_hosts_and_shared_ports_are_named_before_training():
    # the cluster given is wrong: bad input, not a worker gone
    with pytest.raises(InvalidInput, match=r"^worker 1 \(nohost.invalid:2\) is unreachable:"
                                            r" its host nohost.invalid is unknown here"):
        Cluster.of(["localhost:1", "nohost.invalid:2"]).check_answers()
    with pytest.raises(InvalidInput, match=r"^worker 0 \(localhost:3\) and worker 1 "
                                            r"\(127.0.0.1:3\) are the same port of one"):
        Cluster.of(["localhost:3", "127.0.0.1:3"], origin="TF_CONFIG").check_answers()


def test_a_bracketed_ipv6_address_is_checked_and_reached_as_its_host():
    """``[::1]:P`` (TensorFlow's form): its host is ::1 to the sockets, which refused the
    brackets as an unknown host; a listener there is reached, and it shares its port with
    ``localhost:P`` where localhost is ::1."""
    try:
        listener = socket.create_server(("::1", 0), family=socket.AF_INET6)
    except OSError:
        pytest.skip("no IPv6 loopback here")
    with listener:
        port = listener.getsockname()[1]
        assert runtime.accepts_connections("[::1]:%d" % port, 5.0)
        Cluster.of(["[::1]:%d" % port])._check_addresses()
        with pytest.raises(InvalidInput, match=r"^worker 0 \(\[::1\]:%d\) and worker 1 "
                                               r"\(::1:%d\) are the same port" % (port, port)):
            Cluster.of(["[::1]:%d" % port, "::1:%d" % port])._check_addresses()
    assert not runtime.accepts_connections("[::1]:%d" % port, 1.0)   # closed: refused


def test_a_server_is_started_only_on_a_free_port_and_a_failed_start_says_why():
    import tensorflow.compat.v1 as tf
    port, = launch.free_loopback_ports(1)

    def refused():
        raise tf.errors.UnknownError(None, None, " could not start: reason R \n")

    assert runtime.served(port, lambda: "server") == "server"
    with pytest.raises(InvalidInput, match="^could not start: reason R$"):
        runtime.served(port, refused)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", port))
        taken.listen()
        with pytest.raises(InvalidInput, match="^port %d is in use on this machine" % port):
            runtime.served(port, lambda: pytest.fail("started on a taken port"))


def test_a_port_taken_on_ipv6_alone_is_in_use(monkeypatch):
    """A listener on ::1 or on :: (IPv6 only) takes the port a worker's server would
    listen on; the IPv4 probe alone saw it free. Without IPv6 the IPv4 probe decides."""
    for host in ("::1", "::"):
        try:
            listener = socket.socket(socket.AF_INET6)
            listener.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            listener.bind((host, 0))
        except OSError:
            pytest.skip("no IPv6 here")
        with listener:
            listener.listen()
            port = listener.getsockname()[1]
            assert port_in_use(port), host
            with pytest.raises(InvalidInput, match="^port %d is in use on this machine" % port):
                runtime.served(port, lambda: pytest.fail("started on a taken port"))
        assert not port_in_use(port)
    real_socket = socket.socket

    def no_ipv6(family=socket.AF_INET, *args, **kwargs):
        if family == socket.AF_INET6:
            raise OSError(97, "Address family not supported by protocol")
        return real_socket(family, *args, **kwargs)

    monkeypatch.setattr(socket, "socket", no_ipv6)
    port, = launch.free_loopback_ports(1)
    assert not port_in_use(port)
    with real_socket() as taken:
        taken.bind(("127.0.0.1", port))
        taken.listen()
        assert port_in_use(port)


def _consecutive_free_ports():
    """A port P with P + 1 free too (Slurm's tasks of one node take P, P + 1)."""
    while True:
        port, = launch.free_loopback_ports(1)
        if port < 65535 and not port_in_use(port + 1):
            return port


def _slurm_task(task):
    """srun's variables of task ``task`` of a 2-task step on this machine."""
    return {"SLURM_PROCID": str(task), "SLURM_STEP_NODELIST": "localhost",
            "SLURM_STEP_TASKS_PER_NODE": "2", "SLURM_STEP_NUM_TASKS": "2"}


def _tf_config(port_base, task=None):
    config = {"cluster": {"worker": ["localhost:%d" % (port_base + t) for t in (0, 1)]}}
    if task is not None:
        config["task"] = {"type": "worker", "index": task}
    return {"TF_CONFIG": json.dumps(config)}


def _start_worker(env, *flags):
    return subprocess.Popen([sys.executable, "-m", "hmp.worker", *flags],
                            env={**ENVIRONMENT, **env}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


@pytest.fixture(scope="module")
def environment_cluster(tmp_path_factory, small_scene):
    """Two workers from the environment (task 0 from Slurm's variables, task 1 from
    TF_CONFIG) and the runs that train on them beside each other, as in a batch script.
    The TF_CONFIG run is test_the_flagfile_of_a_run_repeats_it's first run too, repeated
    here from its flagfile while the workers are up: a run fewer than a first run of its
    own. Returns (the first port, each worker's (exit code, stdout, stderr), {name: Run}
    of "slurm", "tf_config" and "again", {name: its --model_dir})."""
    folder = tmp_path_factory.mktemp("environment_cluster")
    port = _consecutive_free_ports()
    # task 0 from Slurm's variables, task 1 from TF_CONFIG: the two rules agree
    workers = [_start_worker(_slurm_task(0), "--port_base=%d" % port, "--threads=1"),
               _start_worker(_tf_config(port, task=1), "--threads=1")]
    model_dirs = {name: folder / name for name in ("slurm", "tf_config", "again")}
    try:   # the trainer starts beside them, as in a batch script, and waits for them
        batch_script = {"SLURM_PROCID": "0", "SLURM_JOB_NODELIST": "localhost",
                        "SLURM_TASKS_PER_NODE": "2"}
        trained = run_batch("hmp.train", [
            {"args": [*TRAIN, *small_scene, "--epochs=1", "--cluster=slurm",
                      "--port_base=%d" % port, "--model_dir=%s" % model_dirs["slurm"]],
             "env": batch_script},
            {"args": [*_tf_config_run(small_scene, model_dirs["tf_config"]), "--overwrite"],
             "env": _tf_config(port)},
            {"args": ["--flagfile=%s" % (model_dirs["tf_config"] / "flags.txt"),
                      "--model_dir=%s" % model_dirs["again"]],
             "env": _tf_config(port)}])
    finally:
        for worker in workers:
            worker.send_signal(signal.SIGTERM)
        ended = [worker.communicate(timeout=HUNG_S) for worker in workers]
    return (port, [(worker.returncode, *out) for worker, out in zip(workers, ended)],
            dict(zip(model_dirs, trained)), model_dirs)


def _tf_config_run(small_scene, model_dir):
    """The flags of environment_cluster's TF_CONFIG run (but --overwrite)."""
    return [*TRAIN, *small_scene, "--epochs=1", "--cluster=tf_config",
            "--model_dir=%s" % model_dir]


def test_workers_from_slurm_and_tf_config_form_one_cluster_that_trains(environment_cluster):
    port, ended, runs, model_dirs = environment_cluster
    for task, (returncode, stdout, stderr) in enumerate(ended):
        assert returncode == 0, stderr[-2000:]
        assert stdout.startswith("worker %d (localhost:%d) serving" % (task, port + task))
    for source in ("slurm", "tf_config"):
        run = runs[source]
        assert run.returncode == 0, run.stderr[-2000:]
        history = json.loads((model_dirs[source] / "history.json").read_text())
        assert len(history["history"]) == 1
        assert history["plans"][0]["devices"] == ["/job:worker/task:0/device:CPU:0",
                                                  "/job:worker/task:1/device:CPU:0"]


def test_workers_and_trainer_name_the_task_of_a_taken_port_or_a_bad_environment():
    port = _consecutive_free_ports()
    taken = socket.socket()
    taken.bind(("127.0.0.1", port + 1))
    taken.listen()
    with taken:
        refused = run_batch("hmp.worker", [
            {"args": [], "env": _tf_config(port, task=1)},
            {"args": ["--port_base=%d" % port], "env": _slurm_task(1)},
            {"args": ["--task=1"], "env": _tf_config(port, task=1)},
            {"args": [], "env": {"TF_CONFIG": '{"cluster": {"chief": ["a:1"]}}'}},
            {"args": [], "env": {"SLURM_PROCID": "0"}},
            {"args": [], "env": {"TF_CONFIG": '{"cluster": {"worker": ["a:1", "b:2"]}}'}},
            {"args": ["--port_base=%d" % port], "env": _slurm_task(5)},
            {"args": [], "env": {"TF_CONFIG": "[1, 2]"}}])
    served = "worker 1 (localhost:%d) of %%s cannot serve: port %d is in use on this machine" % (
        port + 1, port + 1)
    expected = [served % "TF_CONFIG", served % ("Slurm's job (--port_base=%d)" % port),
                "--task=1: TF_CONFIG gives this worker its task; leave --task out",
                'TF_CONFIG\'s cluster has the jobs ["chief"]',
                "neither SLURM_STEP_NODELIST nor SLURM_JOB_NODELIST is set",
                'TF_CONFIG gives this process no task; give it "task": {"type": "worker", '
                '"index": N}, N from 0 to 1',
                "Slurm's job (--port_base=%d) gives this process no task: SLURM_PROCID=5 is "
                "not one of its tasks 0 to 1; start the workers with one srun over the whole "
                "job, one task each" % port,
                'TF_CONFIG holds no cluster ([1, 2]); give it as {"cluster": {"worker": '
                '["host:port", ...]}, "task": {"type": "worker", "index": N}}']
    for run, message in zip(refused, expected):
        lines = run.stderr.splitlines()   # no TensorFlow line before it: a taken port is
        assert run.returncode == 2 and len(lines) == 1, run.stderr[-2000:]   # seen first
        assert lines[0].startswith("hmp.worker: error:") and message in lines[0]
    silent = run_batch("hmp.train", [
        {"args": ["--cluster=tf_config"],
         "env": {"TF_CONFIG": json.dumps({"cluster": {"worker": ["localhost:%d" % port,
                                                                 "nohost.invalid:2"]}})}},
        {"args": ["--cluster=tf_config", "--cluster_timeout=1"], "env": _tf_config(port)}])
    expected = [   # an unknown host is the input's fault (2), silent workers the run's (1)
        (2, "worker 1 (nohost.invalid:2) is unreachable: its host nohost.invalid is unknown"),
        (1, "worker 0 (localhost:%d) and worker 1 (localhost:%d) do not answer: start them "
            "with python -m hmp.worker as task 0 of TF_CONFIG; python -m hmp.worker as task 1 "
            "of TF_CONFIG (waited 1 s)" % (port, port + 1))]
    for run, (code, message) in zip(silent, expected):
        lines = [l for l in run.stderr.splitlines() if l.startswith("hmp.train: error:")]
        assert run.returncode == code and len(lines) == 1, run.stderr[-2000:]
        assert message in lines[0] and "Traceback" not in run.stderr


# -- --local_workers -------------------------------------------------------------------------

def test_worker_lists_take_cpu_sets_and_threads_and_bad_ones_are_one_line():
    assert launch.parse_worker_list("0-7:8,8-9:2") == [(list(range(8)), 8), ([8, 9], 2)]
    assert launch.parse_worker_list("3:1") == [([3], 1)]
    for bad in ("0-7", "0-7:0", "a:1", "7-0:2", "0-1:2,", ""):
        with pytest.raises(InvalidInput, match="give CPUS:THREADS per worker"):
            launch.parse_worker_list(bad)
    outside = max(CPUS) + 1
    allowed = ",".join(map(str, CPUS))
    with pytest.raises(InvalidInput, match="worker 1 would be pinned to CPUs %d; this process "
                                           "may use CPUs %s" % (outside, allowed)):
        launch.check_cpus_allowed([([CPUS[0]], 1), ([outside], 1)])
    refused = {"--local_workers=0-1": "--local_workers=0-1: give CPUS:THREADS per worker",
               "--local_workers=%d:1,%d:1" % (CPUS[0], outside):
               "--local_workers=%d:1,%d:1: worker 1 would be pinned to CPUs %d; this process "
               "may use CPUs %s" % (CPUS[0], outside, outside, allowed),
               "--local_workers=0:1 --cluster=a:1": "--cluster=a:1, --local_workers=0:1: "
                                                    "give one of them"}
    runs = run_batch("hmp.train", [{"args": flags.split()} for flags in refused])
    for (flags, message), run in zip(refused.items(), runs):
        lines = [l for l in run.stderr.splitlines() if l.startswith("hmp.train: error:")]
        assert run.returncode == 2 and len(lines) == 1, run.stderr[-2000:]
        assert lines[0].startswith("hmp.train: error: " + message), lines[0]
        assert "Traceback" not in run.stderr, flags


WORKER_LINE = re.compile(r"^  worker (\d) \(127\.0\.0\.1:\d+\): pid (\d+), CPUs (\d+), 1 thread")


def _worker_pids(stdout):
    """{task: pid} of the workers hmp.train says it started, checked against LOCAL_WORKERS."""
    found = [WORKER_LINE.match(line) for line in stdout.splitlines()]
    found = [m.groups() for m in found if m]
    assert [(int(t), int(c)) for t, _, c in found] == [(0, CPUS[0]), (1, CPUS[-1])], stdout
    return {int(task): int(pid) for task, pid, _ in found}


def _gone(pid):
    return not os.path.exists("/proc/%d" % pid)


def test_local_workers_train_then_stop_and_a_log_gets_progress_lines(tmp_path, small_scene):
    run, = run_batch("hmp.train", [{"args": [
        *TRAIN, *small_scene, "--epochs=1", "--local_workers=" + LOCAL_WORKERS,
        "--log_every=1e-9", "--model_dir=%s" % tmp_path]}])
    assert run.returncode == 0, run.stderr[-2000:]
    pids = _worker_pids(run.stdout)
    assert all(_gone(pid) for pid in pids.values())
    history = json.loads((tmp_path / "history.json").read_text())
    steps = history["history"][0]["steps"]
    # stdout is no terminal: a line of its own per step (--log_every), as a log file gets
    # (the loss from the first read of the sums on, hmp.run.trainer.METRICS_EVERY)
    line = r"^  epoch 1/1  step (\d+)/%d(?:  loss \d+\.\d{4})?  \d+ samples/s  ETA \d+ s$"
    logged = re.findall(line % steps, run.stdout, re.MULTILINE)
    assert [int(s) for s in logged] == list(range(1, steps + 1))


# killed after its step-3 checkpoint: epochs enough that it is still training then
BACKGROUND_RUN = [*TRAIN, "--epochs=300", "--checkpoint_every=3",
                  "--local_workers=" + LOCAL_WORKERS]   # and the scene, its folder


def _train_in_background(tmp_path, small_scene):
    """hmp.train --local_workers in a session of its own (as a terminal's foreground job)
    and its {task: worker pid}, once its step-3 checkpoint is written."""
    process = subprocess.Popen(
        [sys.executable, "-m", "hmp.train", *BACKGROUND_RUN, *small_scene,
         "--model_dir=%s" % tmp_path], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, start_new_session=True)
    said = "".join(process.stdout.readline() for _ in range(3))
    pids = _worker_pids(said)
    wait_for_file(tmp_path / "ckpt-3.index", lambda: process.poll() is not None)
    assert process.poll() is None, process.communicate()[1][-2000:]
    assert (tmp_path / "ckpt-3.index").exists(), "no step-3 checkpoint: the run never got going"
    return process, pids


def _workers_started_by(parent):
    """{task: pid} of the running hmp.worker processes that process ``parent`` started
    (read from /proc)."""
    workers = {}
    for process in pathlib.Path("/proc").glob("[0-9]*"):
        try:
            ppid = int((process / "stat").read_text().rpartition(")")[2].split()[1])
            args = (process / "cmdline").read_text().split("\0")
        except (OSError, ValueError):   # it ended meanwhile
            continue
        if ppid == parent and "hmp.worker" in args:
            task, = [a for a in args if a.startswith("--task=")]
            workers[int(task.partition("=")[2])] = int(process.name)
    return workers


def test_ctrl_c_saves_then_stops_every_local_worker(tmp_path, small_scene):
    process, pids = _train_in_background(tmp_path, small_scene)
    os.killpg(process.pid, signal.SIGINT)   # what Ctrl-C at a terminal sends
    _, stderr = process.communicate(timeout=HUNG_S)
    lines = [l for l in stderr.splitlines() if l.startswith("hmp.train: ")]
    assert process.returncode == 130 and len(lines) == 1, stderr[-2000:]
    assert "interrupted at epoch" in lines[0] and "--resume" in lines[0]
    assert all(_gone(pid) for pid in pids.values())


def test_a_killed_local_worker_is_named_and_the_other_stopped(tmp_path, small_scene):
    # the run in the session's hmp.train interpreter (tests/cli_batch.py), waited for in
    # a thread while its worker dies: no TensorFlow start of its own (a Ctrl-C needs a
    # process of its own; a killed worker does not). Its workers are that interpreter's
    # children; its stdout, which names them, comes back when the run ends.
    interpreter = started("hmp.train")   # on this thread: it ends with the thread starting it
    with concurrent.futures.ThreadPoolExecutor(1) as thread:
        training = thread.submit(run_batch, "hmp.train", [{"args": [
            *BACKGROUND_RUN, *small_scene, "--model_dir=%s" % tmp_path]}])
        wait_for_file(tmp_path / "ckpt-3.index", training.done)
        assert (tmp_path / "ckpt-3.index").exists(), "no step-3 checkpoint: the run never got going"
        pids = _workers_started_by(interpreter)
        assert sorted(pids) == [0, 1], "the run's workers not found: %s" % pids
        os.kill(pids[1], signal.SIGKILL)
        run, = training.result()   # run_batch's own time-out ends a hang
    assert _worker_pids(run.stdout) == pids
    lines = [l for l in run.stderr.splitlines() if l.startswith("hmp.train: error:")]
    assert run.returncode == 1 and len(lines) == 1, run.stderr[-2000:]
    assert re.search(r"worker 1 \(127\.0\.0\.1:\d+\) is unreachable", lines[0]), lines[0]
    assert lines[0].endswith(
        "; the checkpoints so far are kept in %s: continue with --flagfile=%s --resume (it "
        "starts the local workers anew)" % (tmp_path, tmp_path / "flags.txt")), lines[0]
    assert all(_gone(pid) for pid in pids.values())


# -- progress in a log file, the flagfile -------------------------------------------------------

class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_progress_in_a_file_is_a_line_every_log_every_seconds(monkeypatch, tmp_path):
    clock = Clock()
    monkeypatch.setattr(progress.time, "monotonic", clock)
    with open(tmp_path / "log", "w") as log:
        line = progress.ProgressLine(log, log_every=30)
        for second, text in ((10, "a"), (30, "b"), (45, "c"), (59, None), (61, "d"), (62, "e")):
            clock.now = 100.0 + second
            line(text)
    assert (tmp_path / "log").read_text() == "  b\n  d\n"   # 30 s after it was made, 30 s on


def test_the_flagfile_of_a_run_repeats_it(environment_cluster, small_scene):
    """The run repeated from its flagfile is environment_cluster's TF_CONFIG run (so a
    failure to form that cluster fails this test too): its flags, then its losses."""
    _, _, runs, model_dirs = environment_cluster   # TF_CONFIG's run, and it again
    first = _tf_config_run(small_scene, model_dirs["tf_config"])
    flagfile = model_dirs["tf_config"] / "flags.txt"
    assert [runs[name].returncode for name in ("tf_config", "again")] == [0, 0], (
        runs["again"].stderr[-2000:])
    lines = flagfile.read_text().splitlines()
    assert lines[0].startswith("#")   # a comment saying how to use it
    # every flag as given but --overwrite, and --batch_norm always (settings.ALWAYS_WRITTEN)
    assert sorted(lines[1:]) == sorted([*first, "--batch_norm=local"])
    results = [json.loads((model_dirs[name] / "results.json").read_text())
               for name in ("tf_config", "again")]
    assert results[1]["flags"] == {**results[0]["flags"], "overwrite": False,
                                   "model_dir": str(model_dirs["again"])}
    np.testing.assert_allclose([e["loss"] for e in results[1]["history"]],
                               [e["loss"] for e in results[0]["history"]], rtol=1e-5)
