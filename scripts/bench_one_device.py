"""hmp's training step on one device against the same model in plain TensorFlow.

For each model with a plain-TensorFlow twin (``plain_tf_models.py``: the same layers,
shapes and Adam, ``tf.nn`` ops in a TF1 graph, what a user would write without hmp)
and each batch size, both training steps are built once on /cpu:0 and timed in turns
(hmp, plain, hmp, plain, ...), so that the machine's noise hits both alike. hmp's step
is the whole ``hmp.measure.speeds.DeviceStep`` (patches cut on the device, the model,
the fused Adam update; no augmentation); the plain step is fed its patches. The table
gives the median milliseconds per step, the range of the repeats, and plain
TensorFlow's step over hmp's (above 1: hmp is faster).

  python scripts/bench_one_device.py --models=cnn2d,cnn3d --batch_sizes=32,256 --threads=1
"""

import statistics

from hmp import cli

cli.import_tensorflow_quietly()   # before anything imports TensorFlow

import numpy as np  # noqa: E402
import tensorflow.compat.v1 as tf  # noqa: E402
from absl import flags  # noqa: E402

import plain_tf_models  # noqa: E402
from hmp.measure.speeds import DeviceStep, in_turns  # noqa: E402
from models import model_config  # noqa: E402

flags.DEFINE_list("models", list(plain_tf_models.MODELS), "Models to time (%s)."
                  % ", ".join(plain_tf_models.MODELS))
flags.DEFINE_list("batch_sizes", ["32", "256"], "Batch sizes of the step.")
flags.DEFINE_integer("patch", 9, "Spatial patch size.")
flags.DEFINE_integer("bands", 30, "Bands of the model's input.")
flags.DEFINE_integer("threads", 0, "Intra-op threads of both sessions (0: TensorFlow's "
                     "default, every core).", lower_bound=0)
flags.DEFINE_integer("steps", 5, "Timed steps per repeat (their median is the repeat's).",
                     lower_bound=1)
flags.DEFINE_integer("repeats", 5, "Turns of each step.", lower_bound=1)
FLAGS = flags.FLAGS

CLASSES = 16
HMP, PLAIN = "hmp", "plain TF"


class PlainStep(DeviceStep):
    """The plain-TensorFlow twin's training step on a fixed random batch of patches,
    run and closed as hmp's ``DeviceStep``."""

    def __init__(self, config, batch_size, session_config):   # pylint: disable=super-init-not-called
        graph = plain_tf_models.PlainTrainingGraph(config, "/cpu:0", batch_size)
        self.session = graph.session(session_config)
        rng = np.random.RandomState(0)
        self._feed = {graph.x: rng.randn(*graph.x.shape.as_list()).astype(np.float32),
                      graph.y: rng.randint(0, config.n_classes, batch_size)}
        self._train_op = graph.train_op


def time_steps(config, batch_size, session_config, steps, repeats):
    """{HMP: [ms per step, one per repeat], PLAIN: [...]}: medians of ``steps`` steps,
    the two in turns, after two warm-up turns."""
    both = {HMP: DeviceStep(config, "/cpu:0", batch_size, session_config=session_config),
            PLAIN: PlainStep(config, batch_size, session_config)}
    try:
        in_turns(both, 2)
        return {label: [1e3 * t for t in seconds]
                for label, seconds in in_turns(both, repeats, steps).items()}
    finally:
        for step in both.values():
            step.close()


def check_flags():
    """The batch sizes; a UsageError for a model without a plain twin or a size below 1."""
    for name in FLAGS.models:
        if name not in plain_tf_models.MODELS:
            raise cli.UsageError("--models=%s: %r has no plain-TensorFlow twin; choose from %s"
                                 % (",".join(FLAGS.models), name,
                                    ", ".join(plain_tf_models.MODELS)))
    return cli.whole_numbers("batch_sizes")


def main(_):
    batch_sizes = check_flags()
    tf.disable_eager_execution()
    tf.logging.set_verbosity(tf.logging.ERROR)
    session_config = tf.ConfigProto(intra_op_parallelism_threads=FLAGS.threads,
                                    inter_op_parallelism_threads=FLAGS.threads)
    rows = []
    for name in FLAGS.models:
        config = model_config(name, FLAGS.patch, FLAGS.bands, CLASSES)
        for batch_size in batch_sizes:
            times = time_steps(config, batch_size, session_config, FLAGS.steps, FLAGS.repeats)
            median = {label: statistics.median(t) for label, t in times.items()}
            rows.append("| %s | %d | %s | %.2f |" % (
                name, batch_size, " | ".join("%.1f (%.1f - %.1f)" % (
                    median[label], min(times[label]), max(times[label])) for label in times),
                median[PLAIN] / median[HMP]))
            print("%s, batch %d: done" % (name, batch_size), flush=True)
    print("\npatch %dx%d, %d bands, /cpu:0, %s threads, %d steps x %d repeats"
          % (FLAGS.patch, FLAGS.patch, FLAGS.bands, FLAGS.threads or "all", FLAGS.steps,
             FLAGS.repeats))
    print("| model | batch | hmp ms per step (range) | plain TF ms per step (range) | "
          "plain / hmp |")
    print("|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    cli.run(main, "bench_one_device")
