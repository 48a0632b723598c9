"""The optimizer's share of a one-device training step: hmp's Adam (TensorFlow's fused
kernel) against Mesh-TF's Adam (about 13 element-wise ops per weight slice) and SGD.

Each model's whole training step (``hmp.measure.speeds.DeviceStep``: the default recipe's
input work and the model, on one device) is built once per optimizer and timed in
turns (A B C A B C ...), so the machine's noise hits all alike; the table gives the
median milliseconds per step, the graph's op count and each step against Mesh-TF's
Adam. Every optimizer computes the same update (up to rounding).

  python scripts/bench_optimizer.py --models=hybridsn,cnn3d --batch_size=32
"""

import statistics

from hmp import cli

cli.import_tensorflow_quietly()   # before anything imports TensorFlow

import tensorflow.compat.v1 as tf  # noqa: E402
from absl import flags  # noqa: E402

from hmp.compat import import_mesh_tensorflow  # noqa: E402
from hmp.measure.speeds import DeviceStep, in_turns  # noqa: E402
from hmp.mesh import optimizers  # noqa: E402
from models import model_config  # noqa: E402

mtf = import_mesh_tensorflow()

flags.DEFINE_list("models", ["hybridsn", "cnn3d"], "Models to time.")
flags.DEFINE_integer("batch_size", 32, "Batch size of the step.")
flags.DEFINE_integer("patch", 9, "Spatial patch size.")
flags.DEFINE_integer("bands", 45, "Bands of the model's input.")
flags.DEFINE_integer("steps", 10, "Timed steps per repeat.")
flags.DEFINE_integer("repeats", 5, "Turns of every optimizer.")
FLAGS = flags.FLAGS

CLASSES = 16
REFERENCE = "mtf adam"
# hmp's optimizers by name, and Mesh-TF's own Adam with hmp's weight-decay settings
OPTIMIZERS = {"adam (fused)": "adam", REFERENCE: "mtf_adam", "sgd": "sgd"}


def register_mtf_adam():
    """Adds Mesh-TF's Adam to hmp's optimizer registry as ``mtf_adam``."""
    optimizers.OPTIMIZERS["mtf_adam"] = lambda lr, wd: mtf.optimize.AdamWeightDecayOptimizer(
        lr, weight_decay_rate=wd,
        exclude_from_weight_decay=[n + "$" for n in optimizers.NOT_DECAYED])
    optimizers.DEFAULT_WEIGHT_DECAY["mtf_adam"] = optimizers.DEFAULT_WEIGHT_DECAY["adam"]


def time_model(name):
    """{optimizer: [ms per step, one per repeat]} and {optimizer: op count}."""
    config = model_config(name, FLAGS.patch, FLAGS.bands, CLASSES)
    steps = {label: DeviceStep(config, "/cpu:0", FLAGS.batch_size, optimizer=optimizer)
             for label, optimizer in OPTIMIZERS.items()}
    try:
        op_counts = {label: len(step.session.graph.get_operations())
                     for label, step in steps.items()}
        in_turns(steps, 2)   # warm-up turns
        times = {label: [1e3 * t for t in seconds]
                 for label, seconds in in_turns(steps, FLAGS.repeats, FLAGS.steps).items()}
        print("%s: %d repeats done" % (name, FLAGS.repeats), flush=True)
        return times, op_counts
    finally:
        for step in steps.values():
            step.close()


def main(_):
    tf.disable_eager_execution()
    tf.logging.set_verbosity(tf.logging.ERROR)
    register_mtf_adam()
    rows = []
    for name in FLAGS.models:
        times, op_counts = time_model(name)
        reference = statistics.median(times[REFERENCE])
        for label, samples in times.items():
            median = statistics.median(samples)
            rows.append("| %s | %s | %.1f (%.1f - %.1f) | %d | %.3f |" % (
                name, label, median, min(samples), max(samples), op_counts[label],
                median / reference))
    print("\nbatch %d, patch %dx%d, %d bands, one device (/cpu:0), %d steps x %d repeats"
          % (FLAGS.batch_size, FLAGS.patch, FLAGS.patch, FLAGS.bands, FLAGS.steps,
             FLAGS.repeats))
    print("| model | optimizer | ms per step (range of repeats) | graph ops | "
          "step / %s |" % REFERENCE)
    print("|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    cli.run(main, "bench_optimizer")
