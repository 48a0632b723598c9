"""One task of an hmp cluster: ``python -m hmp.worker --cluster=... --task=N``.

Starts TensorFlow's gRPC server (``tf.distribute.Server``) for task N of the
job "worker" and serves until SIGTERM or SIGINT. With no ``--cluster``, the
cluster and the task come from TF_CONFIG or, under ``srun``, from Slurm
(``hmp.cluster.sources``: the rule ``hmp.train --cluster=tf_config|slurm`` uses). The trainer
(``python -m hmp.train --cluster=...``) then runs each mesh device's part of
the graph on its task. ``--cpus`` pins the process to some cores and
``--threads`` bounds TensorFlow's thread pools, so that one machine can host
workers of unequal, known speed. ``--virtual_cpus=K`` gives the task K CPU
devices (``/job:worker/task:N/device:CPU:0`` to ``CPU:K-1``), e.g. to stand in
for a host with several accelerators.
"""

import os
import signal
import sys
import threading

from hmp import cli

cli.import_tensorflow_quietly()   # before anything imports TensorFlow

import tensorflow.compat.v1 as tf  # noqa: E402
from absl import flags

from hmp.cluster import sources
from hmp.cluster.addresses import DEFAULT_PORT_BASE, check_port
from hmp.cluster.launch import parse_cpus
from hmp.cluster.runtime import JOB, served
from hmp.errors import InvalidInput
from hmp.measure.devices import default_devices
from hmp.mesh.numerics import exact_float32, require_determinism

flags.DEFINE_string("cluster", None, "Comma-separated host:port of every task, in task order; "
                    "or tf_config (TF_CONFIG's job worker and task) or slurm (Slurm's tasks "
                    "of the job, this process's SLURM_PROCID). Default: tf_config when "
                    "TF_CONFIG is set, else slurm inside a Slurm job.")
flags.DEFINE_integer("task", None, "This worker's task index (its address in a host:port "
                     "--cluster; TF_CONFIG and Slurm give it themselves).")
flags.DEFINE_integer("port_base", DEFAULT_PORT_BASE, "Slurm: the port of a node's "
                     "first task; its next tasks listen at +1, +2, ... (the same for "
                     "hmp.train --cluster=slurm).")
flags.DEFINE_integer("threads", 0, "Intra- and inter-op threads of TensorFlow (0: its default).")
flags.DEFINE_integer("inter_op_threads", 0, "Inter-op threads (0: --threads, but at least 2 "
                     "so that a transfer can start while an op computes).")
flags.DEFINE_string("cpus", "", "CPU numbers and ranges (0-7 or 8,9) to pin the process to "
                    "(empty: all it may use).")
flags.DEFINE_integer("virtual_cpus", 1, "CPU devices this task offers (device:CPU:0 to "
                     "CPU:K-1), like the devices of a host with several accelerators.")
flags.DEFINE_bool("deterministic", False, "TensorFlow's op determinism for the ops this task "
                  "runs (give it to every worker of an hmp.train --deterministic run).")
FLAGS = flags.FLAGS


def _cluster_and_task():
    """(the Cluster, this worker's task) of --cluster and --task, or of the environment."""
    source = FLAGS.cluster or sources.detect()
    if source is None:
        raise cli.UsageError("--cluster: give every task's host:port, e.g. "
                             "127.0.0.1:2222,127.0.0.1:2223, or start the worker with "
                             "TF_CONFIG set or with srun in a Slurm job")
    with cli.blame("port_base"):
        check_port(FLAGS.port_base)
    try:
        cluster, task = sources.resolve(source, port_base=FLAGS.port_base)
    except InvalidInput as error:   # TF_CONFIG's and Slurm's messages name them
        named = "--cluster=%s: " % FLAGS.cluster if FLAGS.cluster else ""
        raise cli.UsageError("%s%s" % (named, error)) from None
    if source in (sources.TF_CONFIG, sources.SLURM):
        if FLAGS.task is not None:
            raise cli.UsageError("--task=%d: %s gives this worker its task; leave --task out"
                                 % (FLAGS.task, cluster.origin))
        if task is None and source == sources.SLURM:
            raise cli.UsageError("%s gives this process no task: SLURM_PROCID=%s is not one "
                                 "of its tasks 0 to %d; start the workers with one srun over "
                                 "the whole job, one task each"
                                 % (cluster.origin, os.environ.get("SLURM_PROCID"),
                                    len(cluster.addresses) - 1))
        if task is None:
            raise cli.UsageError('%s gives this process no task; give it "task": {"type": '
                                 '"worker", "index": N}, N from 0 to %d'
                                 % (cluster.origin, len(cluster.addresses) - 1))
        if not 0 <= task < len(cluster.addresses):
            raise cli.UsageError("%s gives this process the task %s, not one of its tasks "
                                 "0 to %d" % (cluster.origin, task, len(cluster.addresses) - 1))
        return cluster, task
    if FLAGS.task is None:
        raise cli.UsageError("--task is required with --cluster=%s: give a task index from 0 "
                             "to %d" % (FLAGS.cluster, len(cluster.addresses) - 1))
    if not 0 <= FLAGS.task < len(cluster.addresses):
        raise cli.UsageError("--task=%s: give a task index from 0 to %d (one per --cluster "
                             "address)" % (FLAGS.task, len(cluster.addresses) - 1))
    return cluster, FLAGS.task


def _server(cluster, task, config):
    """TensorFlow's server of ``task``; a UsageError naming the task when it cannot
    listen (its port taken, e.g. by another worker)."""
    try:
        return served(cluster.port(task), lambda: tf.distribute.Server(
            cluster.cluster_spec(), job_name=JOB, task_index=task, config=config, start=True))
    except InvalidInput as error:
        raise cli.UsageError("%s of %s cannot serve: %s" % (
            cluster.describe(task), cluster.origin, error)) from None


def _pin_cpus():
    """Pins the process to --cpus, before TensorFlow starts its threads."""
    if not FLAGS.cpus:
        return
    allowed = sorted(os.sched_getaffinity(0))
    with cli.blame("cpus"):
        cpus = set(parse_cpus(FLAGS.cpus))
    if not cpus <= set(allowed):
        raise cli.UsageError("--cpus=%s: give CPU numbers this process may use: %s"
                             % (FLAGS.cpus, ",".join(map(str, allowed))))
    os.sched_setaffinity(0, cpus)


def _server_config():
    for name in ("threads", "inter_op_threads"):
        if not 0 <= FLAGS[name].value < 2 ** 31:
            raise cli.UsageError("--%s=%d: must be 0 (TensorFlow's default) or more, below "
                                 "2**31" % (name, FLAGS[name].value))
    if not 1 <= FLAGS.virtual_cpus < 2 ** 31:
        raise cli.UsageError("--virtual_cpus=%d: a task offers at least 1 CPU device (below "
                             "2**31)" % FLAGS.virtual_cpus)
    return tf.ConfigProto(device_count={"CPU": FLAGS.virtual_cpus},
                          intra_op_parallelism_threads=FLAGS.threads,
                          inter_op_parallelism_threads=_inter_op_threads())


def _inter_op_threads():
    """--inter_op_threads, or --threads but at least 2 (0 when both are TensorFlow's
    default). With one inter-op thread a worker runs its own ops depth-first and
    serves another task's tensors (its batch slice, a gradient all-reduce hand-over)
    only after them, which serialises a data-parallel step: hmp.train --cluster over two
    workers ran at 3285 and 3028 samples/s with one inter-op thread against 5857, 5747 and
    4839, 4956 with two (docs/benchmarks.md, "Heterogeneity", the table of hmp.train
    --cluster, its rows of 2026-11-22)."""
    if FLAGS.inter_op_threads:
        return FLAGS.inter_op_threads
    return max(2, FLAGS.threads) if FLAGS.threads else 0


def main(argv):
    if len(argv) > 1:
        raise cli.UsageError("unexpected arguments %s (flags start with --)" % argv[1:])
    cluster, task = _cluster_and_task()
    config = _server_config()
    _pin_cpus()
    # Calls to a lost task fail at once rather than wait for it to come back,
    # so that e.g. closing a session that used it does not block.
    os.environ.setdefault("GRPC_FAIL_FAST", "true")
    exact_float32(default_devices())   # this task's kernels: float32 in full on its GPUs
    if FLAGS.deterministic:
        require_determinism()
    server = _server(cluster, task, config)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    print("%s serving %d device(s) at %s (cpus %s, threads %s, inter-op threads %s); stop "
          "with SIGTERM or Ctrl-C"
          % (cluster.describe(task), FLAGS.virtual_cpus, server.target,
             ",".join(map(str, sorted(os.sched_getaffinity(0)))), FLAGS.threads or "default",
             config.inter_op_parallelism_threads or "default"), flush=True)
    while not stop.wait(0.5):   # the timeout lets this thread run the handler of a
        pass                    # signal that one of TensorFlow's threads received
    print("%s stopped" % cluster.describe(task), flush=True)
    sys.stderr.flush()
    os._exit(0)   # TensorFlow cannot stop a gRPC server: skip its slow teardown


if __name__ == "__main__":
    cli.run(main, "hmp.worker")
