"""The cost model's predicted step times against measured ones.

Two modes, the same table:

* virtual CPU devices in this process (default): ``/cpu:0`` ... share the
  process's cores and thread pools; the link is an in-process hand-over.
* ``--workers=2``: real ``hmp.worker`` processes (``tf.distribute.Server``),
  each pinned to its own core with one TensorFlow thread and
  ``--virtual_cpus`` devices (2: a 4-device ``batch:2;model:2`` puts each
  batch row on one worker, its model columns on that worker's two devices).
  The link is gRPC between the workers; devices of one worker hand over
  in-process (the link's ``local`` figures).

First every figure the cost model needs is *calibrated*, by measurements
that are none of the validated layouts:

* per device, the one-device training step alone (``hmp.measure.speeds``,
  devices taking turns) at two batch sizes (``--batch_size`` and 1/8 of it),
  and the time to feed a batch to that device (a trivial op on the fed
  tensors) at the same sizes: the slope of step minus feed gives the
  device's FLOP rate, the intercept its fixed per-step overhead;
* the feed link (client to the first device) from the feed times;
* the link (and the local link) as the trainer's profiler measures it
  (``hmp.measure.linkprobe``): a tensor handed back and forth between two
  devices and added there, a chain of 16 hand-overs minus one, for 256 B
  and 1 MiB: latency and bandwidth; two such chains at once against one:
  ``cpu_share`` (which the profiler does not measure); the link again under load
  (``LinkSpec.loaded``): the same chains while both of its devices run the
  model's one-device step in background threads;
* per device, the one-device step at half the width (``--width / 2``,
  batch ``--batch_size``): with the full-width steps it separates the peak
  FLOP rate from the fixed cost per sample and layer op
  (``half_rate_flops``): per-sample time at width w is ``3 (F(w) + L h) /
  peak`` (``F``: forward FLOPs per sample, ``L``: layer ops with FLOPs);
* per device, the element-wise work on activations (``elementwise_s_per_element``):
  a bias add + ReLU and their gradients (ReLU gradient, bias gradient
  summed over the batch) on a tensor shaped like the first layer's output,
  alone, at the same two batch sizes: the slope per element. The one-device
  steps' per-sample times minus this work on every layer's output are what
  the FLOP rate and ``half_rate_flops`` are fitted to;
* the link's ``cpu_share``: two hand-over chains between the same two
  devices at once against one alone (``t_two / t_one - 1``, clipped to
  0..1), the part of a hand-over that needs the hosts' cores;
* with ``--workers``, the wait at each barrier of a batch split (``LinkSpec.barrier_s``),
  as ``hmp.train``'s profiler measures it (``hmp.measure.speeds.measure_barrier``): the
  model's step split by batch over the link's two devices against each device alone
  on its share, in turns (``--steps`` x ``--repeats`` steps each). That split is
  nearly the ``batch:2`` layout's (planned from the effective rates), so that row
  checks the barrier nearly against itself; ``batch:2;model:2`` checks it. (Virtual devices share
  the process's cores: a split's wait there is their turns on the cores, which
  ``host_cores`` prices; so it is not measured there.)
* per host (this process, or each worker), how many of its devices can
  compute at once: the one-device steps of all its devices run side by side
  (one thread each), ``host_cores = sum over devices of (step alone minus
  its feed) / step side by side`` (feeds, which run on the client, are
  taken out so that they do not count as a second core).

Then every layout of ``--layouts`` is planned (``plan_layout`` with those
figures), predicted, and run (interleaved repeats A B C A B C ..., so machine
noise hits all alike; median). Each layout is predicted with the full model,
with the full model but the idle link everywhere (no ``loaded`` figures), and
with the basic model (rates measured alone as the effective step rate, one
idle link, no overhead, op-size or element-wise term, hosts, CPU share or
feed), the figures the planner had before. One traced step per layout gives
every device's busy time (``hmp.run.profiler.busy_times``), to see where the time
goes.

  python scripts/bench_costmodel.py --layouts=model:1,model:2,batch:2 --repeats=5
  python scripts/bench_costmodel.py --batch_norm=sync   # the exact mode's barriers
  python scripts/bench_costmodel.py --workers=2
"""

import contextlib
import dataclasses
import os
import statistics
import threading
import time

from hmp import cli

cli.import_tensorflow_quietly()   # before anything imports TensorFlow

import tensorflow.compat.v1 as tf  # noqa: E402
from absl import flags  # noqa: E402

from hmp.cluster.launch import local_cluster  # noqa: E402
from hmp.graph.from_graph import model_spec  # noqa: E402
from hmp.graph.graph import TrainingGraph  # noqa: E402
from hmp.graph.graph_config import Placement  # noqa: E402
from models import model_config  # noqa: E402
from hmp.hosts import group_by_host  # noqa: E402
from hmp.planning import DeviceSpec, LinkSpec, parse_mesh, plan_layout, predict  # noqa: E402
from hmp.planning.costmodel import (FED_BYTES_PER_SAMPLE, per_sample_totals,  # noqa: E402
                                    train_flops_per_sample)
from hmp.formatting import aligned_columns  # noqa: E402
from hmp.measure.calibration import (ElementwiseStep, elementwise_slope, fit_op_size,  # noqa: E402
                                     half_width)
from hmp.measure.linkprobe import (HANDOVER_BYTES, HOPS, handover_seconds, hop_chain,  # noqa: E402
                                   link_from_handovers, no_rewrites)
from hmp.layers import BATCH_STATISTICS  # noqa: E402
from hmp.measure.speeds import (DeviceStep, measure_barrier, measure_speeds,  # noqa: E402
                                random_batch)
from hmp.run.profiler import run_traced  # noqa: E402
from hmp.run.settings import DEFAULT  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_enum("model", "cnn2d", ["cnn2d", "cnn3d", "hybrid", "spectral"], "The model.")
flags.DEFINE_integer("width", 16, "Model width.")
flags.DEFINE_integer("patch_size", 9, "Spatial patch size.")
flags.DEFINE_integer("bands", 64, "Spectral bands.")
flags.DEFINE_integer("classes", 16, "Classes.")
flags.DEFINE_integer("batch_size", 256, "Global batch size.")
flags.DEFINE_enum("batch_norm", DEFAULT.model.batch_norm, BATCH_STATISTICS, "Batch norm's "
                  "statistics while training (hmp.train --batch_norm): sync adds a barrier "
                  "per batch norm to a batch split.")
flags.DEFINE_list("layouts", ["model:1", "model:2", "batch:2", "batch:2;model:2"],
                  "Meshes to plan, predict and measure.")
flags.DEFINE_string("optimizer", "sgd", "Optimizer of the training step.")
flags.DEFINE_integer("warmup", 3, "Untimed steps per layout and per profiled device.")
flags.DEFINE_integer("steps", 10, "Timed steps per repeat.")
flags.DEFINE_integer("repeats", 5, "Interleaved repeats per layout.")
flags.DEFINE_integer("intra_op_threads", 1, "TensorFlow intra-op threads (of this process, "
                     "or of each worker).")
flags.DEFINE_integer("inter_op_threads", 2, "TensorFlow inter-op threads (of this process, "
                     "or of each worker: with 1, a worker sends another task's input only "
                     "after running its own ops).")
flags.DEFINE_integer("workers", 0, "0: virtual CPU devices in this process; N: N hmp.worker "
                     "processes, worker i pinned to core i mod cores.")
flags.DEFINE_integer("virtual_cpus", 2, "CPU devices per worker (with --workers).")

LOADED_REPEATS = 40  # hand-over chains timed while the link's devices compute
SMALL_BATCH_DIVISOR = 8  # the overhead's second batch size: batch_size / 8


class Platform:
    """Where the layouts run: devices per layout size, their hosts, session target/config."""

    def __init__(self, devices, hosts, target, config, link_pairs, pids=()):
        self.devices = list(devices)  # all devices, host by host
        self.hosts = hosts  # {device: host}
        self.target = target
        self.config = config
        self.link_pairs = link_pairs  # {"link": (a, b), "local": (a, b) or None}
        self.pids = pids  # worker processes

    def layout_devices(self, n):
        """``n`` devices for a layout: one per host first, then a host's further devices.

        With 2 workers x 2 devices: n=2 is one device on each worker, n=4 puts
        batch row r on worker r.
        """
        by_host = group_by_host([self.hosts[d] for d in self.devices])
        if n <= len(by_host):
            return [self.devices[positions[0]] for positions in by_host.values()][:n]
        return self.devices[:n]


@contextlib.contextmanager
def platform(count):
    """The Platform of the flags, with at least ``count`` devices; stops workers on leaving."""
    if not FLAGS.workers:
        config = tf.ConfigProto(device_count={"CPU": max(count, 2)},
                                intra_op_parallelism_threads=FLAGS.intra_op_threads,
                                inter_op_parallelism_threads=FLAGS.inter_op_threads)
        devices = ["/cpu:%d" % i for i in range(max(count, 2))]
        yield Platform(devices, {d: "local" for d in devices}, "", config,
                       {"link": ("/cpu:0", "/cpu:1"), "local": None})
        return
    cores = sorted(os.sched_getaffinity(0))
    with local_cluster(FLAGS.workers, cpus=[[cores[i % len(cores)]] for i in range(FLAGS.workers)],
                       threads=FLAGS.intra_op_threads, inter_op_threads=FLAGS.inter_op_threads,
                       virtual_cpus=FLAGS.virtual_cpus) as workers:
        devices = list(workers.devices)
        hosts = {d: "worker%d" % tf.DeviceSpec.from_string(d).task for d in devices}
        local = (devices[0], devices[1]) if FLAGS.virtual_cpus > 1 else None
        yield Platform(devices, hosts, workers.target, workers.cluster.session_config(),
                       {"link": (devices[0], devices[FLAGS.virtual_cpus]), "local": local},
                       [workers.pid(t) for t in range(FLAGS.workers)])


def machine_busy_seconds():
    """CPU seconds all processes of the machine spent so far (``/proc/stat``)."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def own_cpu_seconds(pids):
    """CPU seconds of this process and of the processes ``pids`` (``/proc/<pid>/stat``)."""
    times = os.times()
    total = times.user + times.system
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def median_seconds(session, fetch, repeats=20, feed=None):
    """Median wall time of ``session.run(fetch, feed)``."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        session.run(fetch, feed)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure_link(plat, pair, load=()):
    """LinkSpecs (idle, under load or None) between the devices ``pair``, as the trainer's
    profiler measures them (``hmp.measure.linkprobe``: hand-over chains of a small and a
    large tensor), under load while ``load`` (the model's one-device ``DeviceStep``s on
    the pair's devices) keeps running, as in a split step; idle also with ``cpu_share``
    (``handovers_side_by_side``), which the profiler does not measure."""
    idle = link_from_handovers(handover_seconds(pair, plat.target, plat.config, repeats=20))
    loaded = (link_from_handovers(handover_seconds(
        pair, plat.target, plat.config, LOADED_REPEATS, busy=[step.run for step in load]))
        if load else None)
    return dataclasses.replace(idle, cpu_share=handovers_side_by_side(plat, pair)), loaded


def handovers_side_by_side(plat, pair):
    """``cpu_share``: two chains of small hand-overs between ``pair`` at once against
    one; 0 if they overlap fully, 1 if they take turns."""
    with tf.Graph().as_default():
        with tf.device(pair[0]):
            starts = [tf.Variable(tf.zeros([HANDOVER_BYTES[0] // 4])) for _ in range(2)]
        short = hop_chain(starts[0], pair, 1)
        long, other = (hop_chain(start, pair, HOPS + 1) for start in starts)
        with tf.Session(plat.target, config=no_rewrites(plat.config)) as session:
            session.run(tf.global_variables_initializer())
            median_seconds(session, [long, other], 3)  # warm-up
            one = median_seconds(session, long) - median_seconds(session, short)
            two = median_seconds(session, [long, other]) - median_seconds(session, short)
    return min(max(two / max(one, 1e-12) - 1.0, 0.0), 1.0)


def line_fit(sizes, seconds):
    """A LinkSpec through two (bytes, seconds) points: 1 / slope and intercept (>= 0);
    the feed's (two batch sizes, so its fixed cost is the intercept)."""
    (small_bytes, large_bytes), (small, large) = sizes, seconds
    bandwidth = (large_bytes - small_bytes) / max(large - small, 1e-12)
    return LinkSpec(bandwidth, max(small - small_bytes / bandwidth, 0.0))


def feed_seconds(plat, device, batch_size, cfg):
    """Median seconds of feeding a batch (pixel indices and labels) to a trivial op on
    ``device``."""
    batch = random_batch(cfg, batch_size)
    with tf.Graph().as_default():
        indices = tf.placeholder(tf.int32, [batch_size])
        y = tf.placeholder(tf.int32, [batch_size])
        with tf.device(device):
            fetch = indices[0] + y[0]
        feed = {indices: batch.indices, y: batch.labels}
        with tf.Session(plat.target, config=plat.config) as session:
            median_seconds(session, fetch, 3, feed)
            return median_seconds(session, fetch, FLAGS.steps * FLAGS.repeats, feed)


def elementwise_seconds(plat, device, batch_size, spec):
    """Median seconds of ``hmp.measure.calibration.ElementwiseStep`` (a bias add + ReLU and
    their gradients on a tensor shaped like the first layer's output) on ``device``."""
    step = ElementwiseStep(spec, device, batch_size, plat.target, plat.config)
    try:
        for _ in range(3):  # warm-up
            step.run()
        return statistics.median(step.run() for _ in range(FLAGS.steps * FLAGS.repeats))
    finally:
        step.close()


def side_by_side_seconds(steps):
    """Median seconds per step of every step of ``steps`` while they all run at once,
    one thread each."""
    seconds = [[] for _ in steps]

    def work(i):
        seconds[i].append(sum(steps[i].run() for _ in range(FLAGS.steps)) / FLAGS.steps)

    for _ in range(FLAGS.repeats):
        threads = [threading.Thread(target=work, args=(i,)) for i in range(len(steps))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    return [statistics.median(s) for s in seconds]


def host_cores(plat, cfg, devices, work):
    """Per host of ``devices``: sum over its devices of (step alone minus feed) / step
    side by side. ``work``: {device: seconds of its step alone without the feed}."""
    cores = {}
    for host, positions in group_by_host([plat.hosts[d] for d in devices]).items():
        members = [devices[p] for p in positions]
        if len(members) == 1:
            continue
        steps = [DeviceStep(cfg, d, FLAGS.batch_size, plat.target, plat.config,
                            FLAGS.optimizer) for d in members]
        for step in steps:
            step.run()  # warm-up
        seconds = side_by_side_seconds(steps)
        for step in steps:
            step.close()
        # At least one device computes at its rate alone, whatever the noise.
        cores[host] = max(1.0, sum(work[d] / t for d, t in zip(members, seconds)))
    return cores


def calibrate(plat, cfg, full_spec, devices):
    """From calibration runs of ``cfg`` (its ``model_spec`` ``full_spec``): the full
    DeviceSpecs ({name: spec}), the full LinkSpec, the variants to compare ({name:
    (specs, link)}) and the calibration's report lines."""
    half_cfg = half_width(cfg)
    half_spec = model_spec(half_cfg)
    totals = [per_sample_totals(s) for s in (full_spec, half_spec)]
    sizes = (FLAGS.batch_size // SMALL_BATCH_DIVISOR, FLAGS.batch_size)
    step = {}  # (device, batch, width) -> seconds
    alone = {}
    for b, c, c_spec in ((sizes[0], cfg, full_spec), (sizes[1], cfg, full_spec),
                         (sizes[1], half_cfg, half_spec)):
        for s in measure_speeds(c, devices, b, FLAGS.warmup, FLAGS.steps * FLAGS.repeats,
                                plat.target, plat.config, FLAGS.optimizer, progress=print,
                                spec=c_spec):
            step[s.name, b, c.width] = b / s.samples_per_s
            if b == FLAGS.batch_size and c is cfg:
                alone[s.name] = s
    feed = {(d, b): feed_seconds(plat, d, b, cfg) for d in devices for b in sizes}
    # Element-wise work per activation element: slope of the bias + ReLU step over the batch.
    elementwise = {d: elementwise_slope(elementwise_seconds(plat, d, sizes[1], full_spec),
                                        elementwise_seconds(plat, d, sizes[0], full_spec),
                                        sizes[1], sizes[0], full_spec) for d in devices}
    specs, rows, work_alone = [], [], {}
    # each device's effective rate: its samples/s alone (overhead included) in FLOP/s
    # (the profiler's flops_per_s is the slope's, without the per-step overhead)
    effective = {d: alone[d].samples_per_s * train_flops_per_sample(full_spec) for d in devices}
    for d in devices:
        work = [step[d, b, cfg.width] - feed[d, b] for b in sizes]  # the step without its feed
        work_alone[d] = work[1]
        per_sample = (work[1] - work[0]) / (sizes[1] - sizes[0])
        overhead = max(work[0] - sizes[0] * per_sample, 0.0)
        # Half width at the full batch: per-sample time 3 (F + L h) / peak + E e at both
        # widths (E: activation elements of all layers, e: element-wise seconds per element).
        half_per_sample = (step[d, sizes[1], half_cfg.width] - feed[d, sizes[1]]
                           - overhead) / sizes[1]
        peak, half, elementwise[d] = fit_op_size(per_sample, half_per_sample, *totals,
                                                 elementwise[d])
        specs.append((d, peak, overhead, half, elementwise[d]))
        rows.append(f"  {d}: alone {effective[d] / 1e9:.3g} GFLOP/s effective "
                    f"({alone[d].samples_per_s:.4g} samples/s); step "
                    f"{fmt(step[d, sizes[0], cfg.width])} at {sizes[0]}, "
                    f"{fmt(step[d, sizes[1], cfg.width])} at {sizes[1]}, "
                    f"{fmt(step[d, sizes[1], half_cfg.width])} at half width; feed "
                    f"{fmt(feed[d, sizes[0]])} / {fmt(feed[d, sizes[1]])} -> peak "
                    f"{peak / 1e9:.3g} GFLOP/s, half rate at {half / 1e6:.3g} MFLOP per "
                    f"sample and op, overhead {fmt(overhead)}, element-wise "
                    f"{elementwise[d] * 1e9:.3g} ns per element ("
                    f"{fmt(totals[0][1] * sizes[1] * elementwise[d])} of the step)")
    feed_link = line_fit([FED_BYTES_PER_SAMPLE * b for b in sizes], [feed[devices[0], b] for b in sizes])
    loads = [DeviceStep(cfg, d, FLAGS.batch_size, plat.target, plat.config, FLAGS.optimizer)
             for d in plat.link_pairs["link"]]
    link, loaded = measure_link(plat, plat.link_pairs["link"], loads)
    for step in loads:
        step.close()
    local = (measure_link(plat, plat.link_pairs["local"])[0]
             if plat.link_pairs["local"] else None)
    cores = host_cores(plat, cfg, devices, work_alone)
    full = [DeviceSpec(d, rate, overhead_s=overhead, host=plat.hosts[d],
                       host_cores=cores.get(plat.hosts[d]), half_rate_flops=half,
                       elementwise_s_per_element=e, channel_block=alone[d].channel_block)
            for d, rate, overhead, half, e in specs]
    full_link = dataclasses.replace(link, local=local, feed=feed_link, loaded=loaded)
    pair = plat.link_pairs["link"]
    apart = plat.hosts[pair[0]] != plat.hosts[pair[1]]   # else host_cores prices the wait
    if apart:
        full_link = measure_barrier(cfg, full_spec, list(pair), [alone[d] for d in pair],
                                    full_link, FLAGS.batch_size, FLAGS.warmup,
                                    FLAGS.steps * FLAGS.repeats, plat.target, plat.config,
                                    FLAGS.optimizer, progress=print)
    basic = [DeviceSpec(d, effective[d]) for d in devices]
    variants = {  # the full model without the link under load, and the basic model
        "idle link": ({d.name: d for d in full}, dataclasses.replace(full_link, loaded=None)),
        "basic model": ({d.name: d for d in basic},
                        LinkSpec(link.bandwidth_bytes_per_s, link.latency_s))}
    rows.append("  hosts: " + ", ".join(f"{h} {c:.2f} cores" for h, c in cores.items()))
    for name, l in (("link", link), ("link under load", loaded), ("local link", local),
                    ("feed link", feed_link)):
        if l is not None:
            rows.append(f"  {name}: {l.bandwidth_bytes_per_s / 1e9:.3g} GB/s, latency "
                        f"{l.latency_s * 1e6:.3g} us"
                        + (f", cpu share {l.cpu_share:.2f}" if l.cpu_share else ""))
    rows.append(f"  barrier: {fmt(full_link.barrier_s)} a barrier" if apart
                else "  barrier: not measured (the link's devices share one host's cores: "
                     "host_cores prices their turns)")
    return {d.name: d for d in full}, full_link, variants, rows


def build_run(cfg, plan, plat):
    """A warmed-up session running ``plan``'s layout; returns (graph, session, feed)."""
    batch = random_batch(cfg, FLAGS.batch_size)
    graph = TrainingGraph(cfg, Placement.from_plan(plan), FLAGS.batch_size, batch.image_shape,
                          FLAGS.optimizer)
    session = graph.session(batch.padded_cube, plat.config, plat.target)
    feed = batch.feed(graph)
    for _ in range(FLAGS.warmup):
        session.run(graph.train_op, feed)
    return graph, session, feed


def time_steps(graph, session, feed):
    """Mean seconds per step over ``--steps`` steps."""
    start = time.perf_counter()
    for _ in range(FLAGS.steps):
        session.run(graph.train_op, feed)
    return (time.perf_counter() - start) / FLAGS.steps


def fmt(seconds):
    return f"{seconds * 1e3:.2f} ms"


def error(predicted, measured):
    return f"{100 * (predicted - measured) / measured:+.1f}%"


def main(_):
    tf.disable_eager_execution()
    tf.logging.set_verbosity(tf.logging.ERROR)
    load_before = os.getloadavg()[0]
    cfg = model_config(FLAGS.model, FLAGS.patch_size, FLAGS.bands, FLAGS.classes, FLAGS.width,
                       batch_norm=FLAGS.batch_norm)
    if half_width(cfg) is None:
        raise cli.UsageError(f"--width={FLAGS.width}: the calibration also times the model at "
                             "half width; allowed: 0 (the model's default) or >= 2")
    spec = model_spec(cfg)
    with cli.blame("layouts"):
        sizes = {layout: parse_mesh(layout).size for layout in FLAGS.layouts}
    with platform(max(sizes.values())) as plat:
        start = time.perf_counter(), machine_busy_seconds(), own_cpu_seconds(plat.pids)
        used = list(dict.fromkeys(d for n in sizes.values() for d in plat.layout_devices(n)))
        full, full_link, variants, calibration = calibrate(plat, cfg, spec, used)
        print("\n".join(calibration), flush=True)
        runs = {}
        for layout, n in sizes.items():
            devices = plat.layout_devices(n)
            plan = plan_layout(spec, [full[d] for d in devices], None, FLAGS.batch_size,
                               layout, link=full_link, replicated=())  # every dim split
            others = [predict(spec, [specs[d] for d in devices], parse_mesh(layout),
                              FLAGS.batch_size, plan.splits, link)
                      for specs, link in variants.values()]
            runs[layout] = (plan, others, build_run(cfg, plan, plat), [])
            print(f"built {layout} on {', '.join(devices)}", flush=True)
        for repeat in range(FLAGS.repeats):
            for _, _, run, times in runs.values():
                times.append(time_steps(*run))
            print(f"repeat {repeat + 1}/{FLAGS.repeats} done", flush=True)
        busy = {layout: run_traced(session, graph.train_op, feed, plan.devices)[1]
                for layout, (plan, _, (graph, session, feed), _) in runs.items()}
        wall = time.perf_counter() - start[0]
        others = (machine_busy_seconds() - start[1]) - (own_cpu_seconds(plat.pids) - start[2])
        for _, _, (_, session, _), _ in runs.values():
            session.close()

    threads = (f"{FLAGS.intra_op_threads} intra-op / {FLAGS.inter_op_threads} inter-op "
               "threads")
    mode = (f"{FLAGS.workers} hmp.worker processes (1 core, {threads}, {FLAGS.virtual_cpus} "
            "devices each), gRPC" if FLAGS.workers else
            f"virtual CPU devices in one process, {threads}")
    print(f"\n{spec.name}, batch {FLAGS.batch_size}, optimizer {FLAGS.optimizer}, {mode}, "
          f"{os.cpu_count()} cores, load average {load_before:.2f} before / "
          f"{os.getloadavg()[0]:.2f} after; other processes used {others / wall:.2f} "
          f"cores on average during the run ({wall:.0f} s)")
    print("\n".join(calibration))
    rows = [["layout", "splits", "predicted (compute + comm)", "measured (min - max)",
             "error", *(c for name in variants for c in (name, "error")),
             "busy predicted", "busy traced"]]
    for layout, (plan, others, _, times) in runs.items():
        measured = statistics.median(times)
        p = plan.prediction
        rows.append([
            layout, " ".join(f"{k}={v}" for k, v in plan.splits.items()),
            f"{fmt(p.step)} ({fmt(p.compute)} + {fmt(p.comm)})",
            f"{fmt(measured)} ({fmt(min(times))} - {fmt(max(times))})",
            error(p.step, measured),
            *(c for o in others for c in (fmt(o.step), error(o.step, measured))),
            " ".join(f"{b * 1e3:.1f}" for b in p.busy),
            " ".join(f"{b * 1e3:.1f}" for b in busy[layout])])
    print("\n".join(aligned_columns(rows)))


if __name__ == "__main__":
    cli.run(main, "bench_costmodel")
