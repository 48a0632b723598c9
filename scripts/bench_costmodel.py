"""The cost model's predicted step times against measured ones, on virtual CPU devices.

In one run: every device's FLOP rate is measured with ``hmp.profiler`` (the
training step alone on each device), the link's latency and bandwidth are
estimated from a measured in-process hand-over (a tensor passed from one
virtual CPU device to another and added there, which is what every step of a
ring all-reduce does), then every layout of ``--layouts`` is planned
(``plan_layout`` with those figures), predicted by the cost model, and run
(interleaved repeats A B C A B C ..., so machine noise hits all alike).

Virtual CPU devices are not independent processors: in one process they share
TensorFlow's thread pools, so two of them computing at once each go slower
than alone. The cost model takes devices to be independent. So each layout is
predicted twice: with the rates measured alone (the planner's input) and with
the rates the devices reach *side by side* (each device's one-device step
run in its own thread, as many devices at once as the layout has), which
checks the model's structure given the right device figures. Multi-process
workers (one TensorFlow server per core or host) are not covered yet.

  python scripts/bench_costmodel.py --layouts=model:1,model:2,batch:2 --repeats=5
"""

import os
import statistics
import threading
import time

import numpy as np
import tensorflow.compat.v1 as tf
from absl import app, flags

from hmp.graph import Layout, ModelConfig, TrainingGraph
from hmp.planning import DeviceSpec, LinkSpec, parse_mesh, plan_layout, predict
from hmp.planning.from_graph import model_spec
from hmp.profiler import DeviceStep, measure_speeds, train_flops_per_sample

FLAGS = flags.FLAGS
flags.DEFINE_enum("model", "cnn2d", ["cnn2d", "cnn3d", "hybrid", "spectral"], "The model.")
flags.DEFINE_integer("width", 16, "Model width.")
flags.DEFINE_integer("patch_size", 9, "Spatial patch size.")
flags.DEFINE_integer("bands", 64, "Spectral bands.")
flags.DEFINE_integer("classes", 16, "Classes.")
flags.DEFINE_integer("batch_size", 256, "Global batch size.")
flags.DEFINE_list("layouts", ["model:1", "model:2", "batch:2", "batch:2;model:2"],
                  "Meshes to plan, predict and measure.")
flags.DEFINE_string("optimizer", "sgd", "Optimizer of the training step.")
flags.DEFINE_integer("warmup", 3, "Untimed steps per layout and per profiled device.")
flags.DEFINE_integer("steps", 10, "Timed steps per repeat.")
flags.DEFINE_integer("repeats", 5, "Interleaved repeats per layout.")
flags.DEFINE_integer("intra_op_threads", 1, "TensorFlow intra-op threads.")
flags.DEFINE_integer("inter_op_threads", 2, "TensorFlow inter-op threads.")

HANDOVER_BYTES = (256, 4 << 20)  # small: latency; large: bandwidth
HOPS = 16


def session_config(devices, rewrites=True):
    """Virtual CPUs and threads from the flags; ``rewrites=False`` turns grappler off."""
    config = tf.ConfigProto(device_count={"CPU": devices},
                            intra_op_parallelism_threads=FLAGS.intra_op_threads,
                            inter_op_parallelism_threads=FLAGS.inter_op_threads)
    config.graph_options.rewrite_options.disable_meta_optimizer = not rewrites
    return config


def median_seconds(session, fetch, repeats=20):
    """Median wall time of ``session.run(fetch)``."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        session.run(fetch)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure_link(config):
    """A LinkSpec from the time of handing a tensor from /cpu:0 to /cpu:1 and adding it.

    A chain of ``HOPS + 1`` adds alternating between the two devices, minus a
    chain of one, gives the time per hand-over (graph rewrites must be off in
    ``config``, or the chain is folded); a small and a large tensor give
    latency and bandwidth.
    """
    per_hop = []
    with tf.Graph().as_default():
        chains = []
        for nbytes in HANDOVER_BYTES:
            with tf.device("/cpu:0"):
                x = tf.Variable(tf.zeros([nbytes // 4]))
            ends = []
            for hops in (1, HOPS + 1):
                y = x
                for hop in range(hops):
                    with tf.device("/cpu:%d" % ((hop + 1) % 2)):
                        y = y + 1.0
                ends.append(tf.group(y))
            chains.append(ends)
        with tf.Session(config=config) as session:
            session.run(tf.global_variables_initializer())
            for short, long in chains:
                median_seconds(session, long, 3)  # warm-up
                per_hop.append((median_seconds(session, long)
                                - median_seconds(session, short)) / HOPS)
    (small_bytes, large_bytes), (small, large) = HANDOVER_BYTES, per_hop
    bandwidth = (large_bytes - small_bytes) / max(large - small, 1e-12)
    latency = max(small - small_bytes / bandwidth, 0.0)
    return LinkSpec(bandwidth, latency)


def side_by_side_rates(steps, count, train_flops):
    """FLOP/s of ``steps[:count]`` while they all run at once, one thread each (median)."""
    rates = [[] for _ in range(count)]

    def work(i):
        seconds = sum(steps[i].run() for _ in range(FLAGS.steps))
        rates[i].append(FLAGS.steps * FLAGS.batch_size * train_flops / seconds)

    for _ in range(FLAGS.repeats):
        threads = [threading.Thread(target=work, args=(i,)) for i in range(count)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    return [statistics.median(r) for r in rates]


def build_run(config, plan, config_proto):
    """A warmed-up session running ``plan``'s layout; returns (session, train_op, feed)."""
    graph = TrainingGraph(config, Layout.from_plan(plan), FLAGS.batch_size, FLAGS.optimizer)
    session = graph.session(config_proto)
    rng = np.random.RandomState(0)
    feed = {graph.x: rng.randn(FLAGS.batch_size, config.patch, config.patch, config.bands),
            graph.y: rng.randint(0, config.n_classes, FLAGS.batch_size)}
    for _ in range(FLAGS.warmup):
        session.run(graph.train_op, feed)
    return session, graph.train_op, feed


def time_steps(session, train_op, feed):
    """Mean seconds per step over ``--steps`` steps."""
    start = time.perf_counter()
    for _ in range(FLAGS.steps):
        session.run(train_op, feed)
    return (time.perf_counter() - start) / FLAGS.steps


def fmt(seconds):
    return f"{seconds * 1e3:.2f} ms"


def error(predicted, measured):
    return f"{100 * (predicted - measured) / measured:+.1f}%"


def main(_):
    tf.disable_eager_execution()
    tf.logging.set_verbosity(tf.logging.ERROR)
    load_before = os.getloadavg()[0]
    config = ModelConfig(FLAGS.model, FLAGS.patch_size, FLAGS.bands, FLAGS.classes,
                         FLAGS.width)
    spec = model_spec(config)
    train_flops = train_flops_per_sample(config)
    sizes = {layout: parse_mesh(layout).size for layout in FLAGS.layouts}
    devices = ["/cpu:%d" % i for i in range(max(sizes.values()))]
    cfg = session_config(max(len(devices), 2))
    alone = measure_speeds(config, devices, FLAGS.batch_size, FLAGS.warmup,
                           FLAGS.steps * FLAGS.repeats, session_config=cfg,
                           optimizer=FLAGS.optimizer, progress=print)
    steps = [DeviceStep(config, d, FLAGS.batch_size, session_config=cfg,
                        optimizer=FLAGS.optimizer) for d in devices]
    for step in steps:
        step.run()  # warm-up
    together = {n: side_by_side_rates(steps, n, train_flops) for n in set(sizes.values())}
    for step in steps:
        step.close()
    link = measure_link(session_config(max(len(devices), 2), rewrites=False))
    print(f"link (in-process hand-over + add): {link.bandwidth_bytes_per_s / 1e9:.3g} GB/s, "
          f"latency {link.latency_s * 1e6:.3g} us")

    runs = {}
    for layout, n in sizes.items():
        plan = plan_layout(spec, [DeviceSpec(s.device, s.flops_per_s) for s in alone[:n]],
                           None, FLAGS.batch_size, layout, link=link)
        # The same layout, priced with the rates the devices reach side by side.
        side_by_side = predict(spec, [DeviceSpec(d, r) for d, r in zip(devices, together[n])],
                               parse_mesh(layout), FLAGS.batch_size, plan.splits, link)
        runs[layout] = (plan, side_by_side, build_run(config, plan, cfg), [])
        print(f"built {layout}", flush=True)
    for repeat in range(FLAGS.repeats):
        for _, _, run, times in runs.values():
            times.append(time_steps(*run))
        print(f"repeat {repeat + 1}/{FLAGS.repeats} done", flush=True)

    print(f"\n{spec.name}, batch {FLAGS.batch_size}, optimizer {FLAGS.optimizer}, "
          f"{FLAGS.intra_op_threads} intra-op / {FLAGS.inter_op_threads} inter-op threads, "
          f"{os.cpu_count()} cores, load average {load_before:.2f} before / "
          f"{os.getloadavg()[0]:.2f} after")
    for i, s in enumerate(alone):
        print(f"  {s.device}: alone {s.flops_per_s / 1e9:.3g} GFLOP/s "
              f"({s.samples_per_s:.4g} samples/s, {s.min_samples_per_s:.4g} - "
              f"{s.max_samples_per_s:.4g}); with n devices at once "
              + ", ".join(f"n={n}: {together[n][i] / 1e9:.3g}"
                          for n in sorted(together) if i < n))
    rows = [["layout", "splits", "predicted, alone rates", "predicted, side-by-side rates",
             "measured (min - max)", "error alone", "error side by side"]]
    for layout, (plan, side_by_side, _, times) in runs.items():
        measured = statistics.median(times)
        rows.append([
            layout, " ".join(f"{k}={v}" for k, v in plan.splits.items()),
            f"{fmt(plan.prediction.step)} (comm {fmt(plan.prediction.comm)})",
            fmt(side_by_side.step),
            f"{fmt(measured)} ({fmt(min(times))} - {fmt(max(times))})",
            error(plan.prediction.step, measured), error(side_by_side.step, measured)])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())


if __name__ == "__main__":
    app.run(main)
