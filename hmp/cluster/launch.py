"""Workers of unequal speed on this machine in one command: ``--local_workers=0-7:8,8-9:2``.

Each entry is one ``hmp.worker``: the CPUs it is pinned to (``a-b`` or one CPU)
and its intra-op threads. ``local_workers`` starts them on free loopback ports
(``local_cluster``, which tests and benchmarks also use: a ``LocalCluster`` of worker
processes, each one stopped and restarted on its port at will), says where each one runs, and stops
them all when the block ends: normally, on an error, on Ctrl-C (the workers
run in a session of their own, so the trainer saves its work first) and, when
the trainer itself is killed, by the kernel (``die_with_parent``).
``hmp.train --local_workers`` and ``scripts/bench_hetero.py --workers`` read
the same list.
"""

import contextlib
import dataclasses
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

from hmp.cli import Interrupted
from hmp.cluster.addresses import DEFAULT_TIMEOUT_S, check_timeout
from hmp.cluster.runtime import Cluster, WorkerUnavailable, accepts_connections, device
from hmp.cluster.subprocesses import die_with_parent
from hmp.errors import InvalidInput, is_digits

EXAMPLE = "0-7:8,8-9:2"
MAX_CPUS = 1 << 16   # a CPU number beyond any machine's: a typo, not a range to build


def parse_worker_list(text):
    """``"0-7:8,8-9:2"`` -> ``[([0, ..., 7], 8), ([8, 9], 2)]``: each worker's CPUs and
    intra-op threads (at least 1); ``InvalidInput`` saying what is allowed."""
    workers = []
    for item in text.split(","):
        cpus, _, threads = item.strip().partition(":")
        try:
            cpus = parse_cpus(cpus)
        except InvalidInput:
            cpus = None
        if not (cpus and is_digits(threads) and int(threads) >= 1):
            raise InvalidInput("give CPUS:THREADS per worker, CPUS as a-b or one CPU and "
                               "THREADS at least 1, e.g. %s" % EXAMPLE)
        workers.append((cpus, int(threads)))
    return workers


def check_cpus_allowed(workers):
    """``InvalidInput`` naming the first worker pinned to a CPU this process may not use."""
    allowed = os.sched_getaffinity(0)
    for task, (cpus, _) in enumerate(workers):
        if not set(cpus) <= allowed:
            raise InvalidInput("worker %d would be pinned to CPUs %s; this process may use "
                               "CPUs %s" % (task, _listed(cpus), _listed(allowed)))


def _listed(cpus):
    return ",".join(map(str, sorted(cpus)))


@contextlib.contextmanager
def local_workers(workers, timeout_s=DEFAULT_TIMEOUT_S, say=print):
    """Runs one ``hmp.worker`` per ``(cpus, threads)`` of ``workers`` on this machine.

    Yields their ``Cluster`` (operations time out after ``timeout_s``) once every
    worker answers (within ``timeout_s``), and tells ``say`` each one's address, process
    id, CPUs and threads. Stops them all on leaving, however the block ends. ``InvalidInput``
    first for a CPU this process may not use or a timeout that is not positive; a
    worker that exits as it starts raises ``WorkerUnavailable`` naming it; Ctrl-C
    while they start raises ``hmp.cli.Interrupted``.
    """
    check_cpus_allowed(workers)
    timeout_s = check_timeout(timeout_s)
    say("starting %d local worker(s) ..." % len(workers))
    with contextlib.ExitStack() as stack:
        try:
            started = stack.enter_context(local_cluster(
                len(workers), cpus=[c for c, _ in workers], threads=[t for _, t in workers],
                timeout_s=timeout_s))   # --cluster_timeout: they may take as long to answer
        except KeyboardInterrupt:   # before the trainer's own handler is in place
            raise Interrupted("interrupted while the local workers started; they are "
                              "stopped", signal.SIGINT) from None
        for task, (cpus, threads) in enumerate(workers):
            say("  %s: pid %d, CPUs %s, %d thread(s)" % (
                started.cluster.describe(task), started.pid(task), _listed(cpus), threads))
        yield dataclasses.replace(started.cluster, timeout_s=timeout_s)


# -- worker processes on this machine ------------------------------------------------
class LocalCluster:
    """Worker processes of a cluster on this machine's loopback interface.

    Made by ``local_cluster``. Unpacks as ``(flag, devices)``; ``cluster``
    is the ``Cluster``, ``stop(task)`` and ``start(task)`` end and (re)start
    one worker on its port, e.g. to test what a lost worker does.
    """

    def __init__(self, cluster, worker_flags, virtual_cpus, log_dir):
        self.cluster = cluster
        self._worker_flags = worker_flags   # per task: hmp.worker flags beyond --cluster/--task
        self._virtual_cpus = virtual_cpus
        self._log_dir = log_dir
        self._processes = [None] * len(cluster.addresses)

    flag = property(lambda self: self.cluster.flag)
    target = property(lambda self: self.cluster.target)

    @property
    def devices(self):
        """Every device of every worker, task by task."""
        return tuple(device(task, index) for task, count in enumerate(self._virtual_cpus)
                     for index in range(count))

    def __iter__(self):
        return iter((self.flag, self.devices))

    def pid(self, task):
        return self._processes[task].pid

    def start(self, task, timeout_s=DEFAULT_TIMEOUT_S):
        """Starts worker ``task`` and waits until the whole cluster answers
        (not at all if ``timeout_s`` is None).

        The worker runs in a session of its own: a Ctrl-C at the terminal reaches
        only this process, which stops its workers once it has saved its work;
        it dies with this process all the same (``die_with_parent``).
        """
        command = [sys.executable, "-m", "hmp.worker", "--cluster=" + self.flag,
                   "--task=%d" % task, *self._worker_flags[task]]
        with open(self._log_path(task), "w") as log:
            self._processes[task] = subprocess.Popen(command, stdout=log,
                                                     stderr=subprocess.STDOUT,
                                                     preexec_fn=die_with_parent,
                                                     start_new_session=True)
        if timeout_s is not None:
            self.wait_until_ready(timeout_s)

    def wait_until_ready(self, timeout_s=DEFAULT_TIMEOUT_S):
        """Waits until task 0 runs an op on every task; ``WorkerUnavailable`` with
        the worker's last log line if one exits or the time runs out."""
        deadline = time.monotonic() + timeout_s
        while not (all(accepts_connections(a, 1.0) for a in self.cluster.addresses)
                   and self.cluster.answers(timeout_s=2.0)):
            for task, process in enumerate(self._processes):
                if process is not None and process.poll() is not None:
                    raise WorkerUnavailable("%s exited with code %d as it started: %s" % (
                        self.cluster.describe(task), process.returncode, self._last_line(task)))
            if time.monotonic() > deadline:
                raise WorkerUnavailable("the local cluster %s did not answer within %g s"
                                        % (self.flag, timeout_s))
            time.sleep(0.2)

    def stop(self, task, signum=signal.SIGTERM, timeout_s=10.0):
        """Sends ``signum`` to worker ``task`` and waits for it to end
        (SIGKILL after ``timeout_s``); a no-op if it is not running."""
        process = self._processes[task]
        if process is None:
            return
        if process.poll() is None:
            process.send_signal(signum)
            try:
                process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self._processes[task] = None

    def stop_all(self):
        """Stops every worker (SIGTERM, then SIGKILL if one does not end)."""
        for process in self._processes:   # all signalled first: they stop side by side
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for task in range(len(self._processes)):
            self.stop(task)

    def _log_path(self, task):
        return os.path.join(self._log_dir, "worker%d.log" % task)

    def _last_line(self, task):
        with open(self._log_path(task)) as log:
            lines = [l.strip() for l in log if l.strip()]
        return lines[-1] if lines else "(no output)"


def free_loopback_ports(n):
    """``n`` distinct ports nobody listens on at the moment."""
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _per_task(value, n, name):
    """A per-task list from one value for all tasks or a list of ``n``."""
    if value is None or not isinstance(value, (list, tuple)):
        return [value] * n
    if len(value) != n:
        raise InvalidInput("%s: %d entries for %d workers" % (name, len(value), n))
    return list(value)


def parse_cpus(text):
    """``"0-7"``, ``"8,9"`` or ``"0,2,4-6"`` -> the sorted CPU numbers; InvalidInput
    naming what is allowed when ``text`` is none of these (or a range runs backwards)."""
    cpus = set()
    for item in text.split(","):
        first, dash, last = item.strip().partition("-")
        if not (is_digits(first) and (is_digits(last) if dash else True)
                and int(first) <= int(last or first) < MAX_CPUS):
            raise InvalidInput("CPUs %r: allowed are CPU numbers (below %d) and ranges, e.g. "
                               "0-7 or 8,9 or 0,2,4-6" % (text, MAX_CPUS))
        cpus.update(range(int(first), int(last or first) + 1))
    return sorted(cpus)


def _worker_flags(cpus, threads, inter_op_threads, virtual_cpus):
    """The ``hmp.worker`` flags of one task (its defaults left out)."""
    flags = []
    if cpus:
        flags.append("--cpus=" + ",".join(map(str, cpus)))
    if threads:
        flags.append("--threads=%d" % threads)
    if inter_op_threads:
        flags.append("--inter_op_threads=%d" % inter_op_threads)
    if virtual_cpus != 1:
        flags.append("--virtual_cpus=%d" % virtual_cpus)
    return flags


@contextlib.contextmanager
def local_cluster(n, cpus=None, threads=None, timeout_s=DEFAULT_TIMEOUT_S, virtual_cpus=1,
                  inter_op_threads=None):
    """Runs ``n`` ``hmp.worker`` processes on free 127.0.0.1 ports.

    Args:
      n: number of workers (tasks 0 to n-1).
      cpus: CPUs to pin each worker to: one list for all workers, or one
        list (or None) per worker, e.g. ``[[0], [1]]``.
      threads: TensorFlow threads of each worker: one number, or one per worker.
      timeout_s: how long the workers may take to answer.
      virtual_cpus: CPU devices of each worker: one number, or one per worker.
      inter_op_threads: inter-op threads of each worker if not ``threads``: one
        number, or one per worker.

    Yields a ``LocalCluster``, which unpacks as ``(flag, devices)``: the
    ``--cluster`` string and every ``/job:worker/task:N/device:CPU:K``, task by task. Waits
    until task 0 runs an op on every task; on leaving (also by an exception)
    stops every worker with SIGTERM, SIGKILL if one does not end.
    """
    if n < 1:
        raise InvalidInput("a local cluster needs at least one worker, got %d" % n)
    if cpus is not None and all(isinstance(c, int) for c in cpus):
        cpus = [cpus] * n
    virtual_cpus = _per_task(virtual_cpus, n, "virtual_cpus")
    worker_flags = [_worker_flags(*task) for task in zip(
        _per_task(cpus, n, "cpus"), _per_task(threads, n, "threads"),
        _per_task(inter_op_threads, n, "inter_op_threads"), virtual_cpus)]
    cluster = Cluster(tuple("127.0.0.1:%d" % p for p in free_loopback_ports(n)),
                      origin="the local cluster", local_workers=tuple(
                          " ".join(["local", *flags]) for flags in worker_flags))
    with tempfile.TemporaryDirectory(prefix="hmp-cluster-") as log_dir:
        workers = LocalCluster(cluster, worker_flags, virtual_cpus, log_dir)
        try:
            for task in range(n):   # all started first: they import TensorFlow side by side
                workers.start(task, timeout_s=None)
            workers.wait_until_ready(timeout_s)
            yield workers
        finally:
            workers.stop_all()
