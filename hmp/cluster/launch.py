"""Workers of unequal speed on this machine in one command: ``--local_workers=0-7:8,8-9:2``.

Each entry is one ``hmp.worker``: the CPUs it is pinned to (``a-b`` or one CPU)
and its intra-op threads. ``local_workers`` starts them on free loopback ports
(``hmp.cluster.runtime.local_cluster``), says where each one runs, and stops
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

from hmp.cli import Interrupted
from hmp.cluster.addresses import DEFAULT_TIMEOUT_S, check_timeout
from hmp.cluster.runtime import local_cluster, parse_cpus
from hmp.errors import InvalidInput

EXAMPLE = "0-7:8,8-9:2"


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
        if not (cpus and threads.isdigit() and int(threads) >= 1):
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
    worker answers, and tells ``say`` each one's address, process id, CPUs and
    threads. Stops them all on leaving, however the block ends. ``InvalidInput``
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
                len(workers), cpus=[c for c, _ in workers], threads=[t for _, t in workers]))
        except KeyboardInterrupt:   # before the trainer's own handler is in place
            raise Interrupted("interrupted while the local workers started; they are "
                              "stopped", signal.SIGINT) from None
        for task, (cpus, threads) in enumerate(workers):
            say("  %s: pid %d, CPUs %s, %d thread(s)" % (
                started.cluster.describe(task), started.pid(task), _listed(cpus), threads))
        yield dataclasses.replace(started.cluster, timeout_s=timeout_s)
