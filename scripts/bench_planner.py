"""Times ``plan_layout`` on a large case: many devices, many layers (target < 1 s).

    python scripts/bench_planner.py --devices 1024 --layers 100 --mesh auto
"""

import time

import numpy as np
from absl import flags

from hmp import cli
from hmp.planning import LinkSpec, ModelSpec, conv_layer_spec, plan_layout

FLAGS = flags.FLAGS
flags.DEFINE_integer("devices", 1024, "number of devices")
flags.DEFINE_integer("layers", 100, "number of conv layers (pairs split output / input)")
flags.DEFINE_integer("filters", 4096, "filters per split dim (>= devices for model:N)")
flags.DEFINE_string("mesh", "auto", 'mesh to plan: "auto", "model:N", "batch:M", ...')
flags.DEFINE_integer("repeats", 3, "timed runs; the best is printed")


def bench_model(layers, filters):
    """Conv layers in the alternating pattern: 2k splits its outputs, 2k+1 its inputs."""
    specs = []
    for i in range(layers):
        dim = f"filters{i // 2 + 1}"
        role = "output" if i % 2 == 0 else "input"
        specs.append(conv_layer_spec(f"conv{i + 1}", "conv2d", (9, 9), 3, filters, filters,
                                     split_dim=dim, split_role=role))
    return ModelSpec("bench", specs, (9, 9, filters))


def main(_):
    spec = bench_model(FLAGS.layers, FLAGS.filters)
    rng = np.random.default_rng(0)
    speeds = (rng.uniform(1e11, 2e13, FLAGS.devices)).tolist()
    devices = [f"/job:worker/task:{i}/device:GPU:0" for i in range(FLAGS.devices)]
    link = LinkSpec(1.25e10, 5e-6)
    times = []
    for _ in range(FLAGS.repeats):
        start = time.perf_counter()
        plan = plan_layout(spec, devices, speeds, 8 * FLAGS.devices, FLAGS.mesh, link=link)
        times.append(time.perf_counter() - start)
    print(f"plan_layout: {FLAGS.devices} devices x {FLAGS.layers} layers, mesh {FLAGS.mesh} "
          f"-> {plan.mesh}: best of {FLAGS.repeats} {min(times):.3f} s (target < 1 s)")


if __name__ == "__main__":
    cli.run(main, "bench_planner")
