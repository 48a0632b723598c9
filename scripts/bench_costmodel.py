"""The cost model's predicted step times against measured ones, on virtual CPU devices.

In one run: every device's FLOP rate is measured with ``hmp.profiler`` (the
training step alone on each device), the link's latency and bandwidth are
estimated from a measured in-process hand-over (a tensor passed from one
virtual CPU device to another and added there, which is what every step of a
ring all-reduce does), then every layout of ``--layouts`` is planned
(``plan_layout`` with those figures), predicted by the cost model, and run;
the table gives the relative error per layout. Runs are interleaved (A B C A
B C ...) so that machine noise hits every layout alike.

Virtual CPU devices share the machine's cores: with ``--intra_op_threads=1``
and ``--inter_op_threads`` = cores every op runs on one core and up to that
many ops run at once, so a device measured alone is about one core, as it is
when devices run side by side -- as long as a layout has no more devices than
the machine has cores. Multi-process workers (one per host) are not covered
yet.

  python scripts/bench_costmodel.py --layouts=model:1,model:2,batch:2 --repeats=5
"""

import statistics
import time

import numpy as np
import tensorflow.compat.v1 as tf
from absl import app, flags

from hmp.graph import Layout, ModelConfig, TrainingGraph
from hmp.planning import DeviceSpec, LinkSpec, parse_mesh, plan_layout
from hmp.planning.from_graph import model_spec
from hmp.profiler import measure_speeds

FLAGS = flags.FLAGS
flags.DEFINE_enum("model", "cnn2d", ["cnn2d", "cnn3d", "hybrid", "spectral"], "The model.")
flags.DEFINE_integer("width", 16, "Model width.")
flags.DEFINE_integer("patch_size", 9, "Spatial patch size.")
flags.DEFINE_integer("bands", 64, "Spectral bands.")
flags.DEFINE_integer("classes", 16, "Classes.")
flags.DEFINE_integer("batch_size", 64, "Global batch size.")
flags.DEFINE_list("layouts", ["model:1", "model:2", "batch:2", "batch:2;model:2"],
                  "Meshes to plan, predict and measure.")
flags.DEFINE_string("optimizer", "sgd", "Optimizer of the training step.")
flags.DEFINE_integer("warmup", 3, "Untimed steps per layout (and per profiled device).")
flags.DEFINE_integer("steps", 10, "Timed steps per repeat.")
flags.DEFINE_integer("repeats", 5, "Interleaved repeats per layout.")
flags.DEFINE_integer("intra_op_threads", 1, "Threads per op.")
flags.DEFINE_integer("inter_op_threads", 2, "Ops running at once (the machine's cores).")

HANDOVER_BYTES = (256, 4 << 20)  # small: latency; large: bandwidth
HOPS = 16


def session_config(devices):
    return tf.ConfigProto(device_count={"CPU": devices},
                          intra_op_parallelism_threads=FLAGS.intra_op_threads,
                          inter_op_parallelism_threads=FLAGS.inter_op_threads)


def link_config(devices):
    """``session_config`` without graph rewrites, which would fold the chain of adds."""
    config = session_config(devices)
    config.graph_options.rewrite_options.disable_meta_optimizer = True
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

    A chain of ``HOPS`` adds alternating between the two devices, minus a
    chain of one, gives the time per hand-over; a small and a large tensor
    give latency and bandwidth.
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


def build_run(config, plan, session_cfg, batch):
    """A session running ``plan``'s layout, warmed up; returns (session, train_op, feed)."""
    graph = TrainingGraph(config, Layout.from_plan(plan), batch, FLAGS.optimizer)
    session = graph.session(session_cfg)
    rng = np.random.RandomState(0)
    feed = {graph.x: rng.randn(batch, config.patch, config.patch, config.bands),
            graph.y: rng.randint(0, config.n_classes, batch)}
    for _ in range(FLAGS.warmup):
        session.run(graph.train_op, feed)
    return session, graph.train_op, feed


def time_steps(session, train_op, feed):
    start = time.perf_counter()
    for _ in range(FLAGS.steps):
        session.run(train_op, feed)
    return (time.perf_counter() - start) / FLAGS.steps


def fmt(seconds):
    return f"{seconds * 1e3:.2f} ms"


def main(_):
    tf.disable_eager_execution()
    tf.logging.set_verbosity(tf.logging.ERROR)
    config = ModelConfig(FLAGS.model, FLAGS.patch_size, FLAGS.bands, FLAGS.classes,
                         FLAGS.width)
    spec = model_spec(config)
    n = max(parse_mesh(layout).size for layout in FLAGS.layouts)
    devices = ["/cpu:%d" % i for i in range(n)]
    cfg = session_config(max(n, 2))
    speeds = measure_speeds(config, devices, FLAGS.batch_size, FLAGS.warmup,
                            FLAGS.steps * FLAGS.repeats, session_config=cfg,
                            optimizer=FLAGS.optimizer, progress=print)
    link = measure_link(link_config(max(n, 2)))
    print(f"link (in-process hand-over + add): {link.bandwidth_bytes_per_s / 1e9:.2f} GB/s, "
          f"latency {link.latency_s * 1e6:.1f} us")
    runs = {}
    for layout in FLAGS.layouts:
        size = parse_mesh(layout).size
        specs = [DeviceSpec(s.device, s.flops_per_s) for s in speeds[:size]]
        plan = plan_layout(spec, specs, None, FLAGS.batch_size, layout, link=link)
        runs[layout] = (plan, build_run(config, plan, cfg, FLAGS.batch_size), [])
        print(f"built {layout}", flush=True)
    for repeat in range(FLAGS.repeats):
        for plan, run, times in runs.values():
            times.append(time_steps(*run))
        print(f"repeat {repeat + 1}/{FLAGS.repeats} done", flush=True)

    print(f"\n{spec.name}, batch {FLAGS.batch_size}, optimizer {FLAGS.optimizer}, "
          f"{FLAGS.intra_op_threads} intra-op / {FLAGS.inter_op_threads} inter-op threads")
    for s in speeds:
        print(f"  {s.device}: {s.samples_per_s:.4g} samples/s alone "
              f"({s.min_samples_per_s:.4g} - {s.max_samples_per_s:.4g}), "
              f"{s.flops_per_s / 1e9:.3g} GFLOP/s")
    rows = [["layout", "splits", "predicted (compute + comm)", "measured (min - max)",
             "error"]]
    for layout, (plan, _, times) in runs.items():
        p, measured = plan.prediction, statistics.median(times)
        rows.append([layout, " ".join(f"{k}={v}" for k, v in plan.splits.items()) or "-",
                     f"{fmt(p.step)} ({fmt(p.compute)} + {fmt(p.comm)})",
                     f"{fmt(measured)} ({fmt(min(times))} - {fmt(max(times))})",
                     f"{100 * (p.step - measured) / measured:+.1f}%"])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())


if __name__ == "__main__":
    app.run(main)
