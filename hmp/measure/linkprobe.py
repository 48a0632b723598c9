"""The link between devices, measured for the planner: ``measure_link`` -> ``LinkSpec``.

A tensor is handed back and forth between two devices: a chain of
``HOPS + 1`` adds alternating between them, minus a chain of one add, is
``HOPS`` hand-overs (each a message and the op that takes it). Timed for a
small tensor (``HANDOVER_BYTES[0]``: its per-hop time is the latency, its
bytes are negligible) and a large one (the slope between the two is the
bandwidth): the short and the long chain run in turns, and the median of
``repeats`` differences counts (turns, so that a change in the machine's
load hits both). Grappler is off for these runs (it would fold the chain).

Which devices share a host decides which link a collective uses
(``LinkSpec.local``): ``hmp.mesh.collectives.host_of`` says a device's host -- the task of a
``/job:.../task:K`` device (a worker process of ``--cluster`` mode), else
``"localhost"`` (virtual devices and GPUs of this process). With devices on
several hosts the pair is one device of the first host and one of another
(the returned link), and, if some host has two devices, also two devices of
one host (``local``); with one host only the local pair is measured and is
the link itself.

``with_hosts`` puts measured DeviceSpecs on those hosts, with ``host_cores=1`` for
CPU devices that share a host with another CPU device: each was measured alone with
all of its process's cores, so together they compute no faster than one of them
alone.
"""

import contextlib
import dataclasses
import statistics
import threading
import time

import tensorflow.compat.v1 as tf

from hmp.cluster.sessions import session_on
from hmp.hosts import group_by_host
from hmp.mesh.collectives import host_of, is_cpu
from hmp.planning import LinkSpec

HANDOVER_BYTES = (256, 1 << 20)  # small: latency; large: bandwidth
HOPS = 16
MIN_SECONDS = 1e-9  # floor of a per-hop time (a LinkSpec needs positive figures)


def with_hosts(specs):
    """``specs`` (DeviceSpecs of measured devices) each on its device's host
    (``host_of``) and, for CPUs sharing a host, with ``host_cores=1``."""
    hosts = [host_of(s.name) for s in specs]
    cpus = [is_cpu(s.name) for s in specs]
    shared = {h for h in hosts if sum(c for c, g in zip(cpus, hosts) if g == h) > 1}
    return [dataclasses.replace(spec, host=host,
                                host_cores=1 if cpu and host in shared else None)
            for spec, host, cpu in zip(specs, hosts, cpus)]


def link_pairs(devices):
    """``{"link": pair or None, "local": pair or None}``: the pairs ``measure_link`` times."""
    groups = list(group_by_host([host_of(d) for d in devices]).values())
    remote = (devices[0], devices[groups[1][0]]) if len(groups) > 1 else None
    local = next(((devices[g[0]], devices[g[1]]) for g in groups if len(g) > 1), None)
    return {"link": remote, "local": local}


def no_rewrites(config):
    """A copy of ``config`` (or a new one) with grappler off: it would fold a hop chain."""
    config = tf.ConfigProto.FromString(config.SerializeToString()) if config else \
        tf.ConfigProto()
    config.graph_options.rewrite_options.disable_meta_optimizer = True
    return config


def hop_chain(start, pair, hops):
    """``start`` handed ``hops`` times between ``pair``'s two devices, an add on each
    arrival (each hop is a message and the op that takes it); the op to run."""
    y = start
    for hop in range(hops):
        with tf.device(pair[(hop + 1) % 2]):
            y = y + 1.0
    return tf.group(y)


def _seconds(session, fetch):
    start = time.perf_counter()
    session.run(fetch)
    return time.perf_counter() - start


def _median_difference(session, short, long, repeats):
    """Median over ``repeats`` turns of (long chain's seconds - short chain's)."""
    return statistics.median(-_seconds(session, short) + _seconds(session, long)
                             for _ in range(repeats))


@contextlib.contextmanager
def running(functions):
    """Calls every function of ``functions`` over and over, each in a thread of its own,
    until the block is left (e.g. the devices' training steps: the devices busy)."""
    stop = threading.Event()

    def work(function):
        while not stop.is_set():
            function()

    threads = [threading.Thread(target=work, args=(f,), daemon=True) for f in functions]
    for thread in threads:
        thread.start()
    try:
        yield
    finally:
        stop.set()
        for thread in threads:
            thread.join()


def handover_seconds(pair, target=None, session_config=None, repeats=9, busy=()):
    """Median seconds of one hand-over between ``pair``'s devices, per HANDOVER_BYTES,
    while the functions ``busy`` keep running (``running``)."""
    with tf.Graph().as_default():
        chains = []
        for nbytes in HANDOVER_BYTES:
            with tf.device(pair[0]):
                start = tf.Variable(tf.zeros([nbytes // 4]))
            chains.append([hop_chain(start, pair, hops) for hops in (1, HOPS + 1)])
        with session_on(target or "", config=no_rewrites(session_config)) as session, \
                running(busy):
            session.run(tf.global_variables_initializer())
            for short, long in chains:  # warm-up
                _median_difference(session, short, long, 2)
            return [max(_median_difference(session, short, long, repeats) / HOPS, MIN_SECONDS)
                    for short, long in chains]


def link_from_handovers(seconds):
    """A LinkSpec from per-hop seconds of the small and the large tensor
    (``handover_seconds``): the small one's is the latency, the slope the bandwidth."""
    (small_bytes, large_bytes), (small, large) = HANDOVER_BYTES, seconds
    bandwidth = (large_bytes - small_bytes) / max(large - small, MIN_SECONDS)
    return LinkSpec(bandwidth, small)


def no_faster_than(loaded, idle):
    """The link under load, no faster than ``idle`` in latency or bandwidth: a loaded
    figure that comes out faster is noise of the difference of two timings (a link
    whose ends also compute does not hand over sooner)."""
    return LinkSpec(min(loaded.bandwidth_bytes_per_s, idle.bandwidth_bytes_per_s),
                    max(loaded.latency_s, idle.latency_s))


def measure_link(devices, target=None, session_config=None, repeats=9, progress=None,
                 busy=()):
    """The link between ``devices`` as a LinkSpec, or None for fewer than two devices.

    Args:
      devices: TensorFlow device names (their hosts: ``host_of``).
      target: session target for remote devices, or None.
      session_config: a ``tf.ConfigProto`` (virtual CPU devices, cluster
        timeouts), or None.
      repeats: timed runs per chain; the median counts.
      progress: optional ``callable(str)`` told what is measured.
      busy: functions that keep the devices busy, e.g. each device's one-device
        training step (``hmp.measure.speeds.DeviceStep.run``). If given, each link is
        timed again while they run, in threads of their own: its figures under
        load (``LinkSpec.loaded``), which the cost model uses for the hand-overs
        that run beside a step's compute (a model split's collectives). On a CPU
        they wait for and share the cores that compute.
    """
    if len(devices) < 2:
        return None
    say = progress or (lambda message: None)
    pairs = link_pairs(devices)
    figures = {}
    for kind in ("link", "local"):
        if pairs[kind] is not None:
            say("profiling the link between %s and %s" % pairs[kind])
            idle = link_from_handovers(handover_seconds(pairs[kind], target, session_config,
                                                        repeats))
            if busy:
                say("profiling the same link while the devices train")
                loaded = link_from_handovers(handover_seconds(
                    pairs[kind], target, session_config, repeats, busy))
                idle = dataclasses.replace(idle, loaded=no_faster_than(loaded, idle))
            figures[kind] = idle
    if "link" not in figures:  # one host: its local link is the only one
        return figures["local"]
    return dataclasses.replace(figures["link"], local=figures.get("local"))
