"""What the work before the model costs in a training step: augmentation and in-graph PCA.

A run's step cuts each sample's patch from the scene on the device, may turn it into
one of the 8 symmetries of the square, give it another field's look (a shift and gain
of its raw spectrum), scale its brightness, and, for a PCA model with
``--pca_in_graph``, project its raw bands onto the components. This script times the
one-device training step (``hmp.measure.speeds.DeviceStep``, the step the profiler
times) with each part of that work on and off, the variants taking turns step by step,
and prints the median step and its ratio to the model alone:

    python scripts/bench_input_work.py                      # hybridsn, 200 raw bands
    python scripts/bench_input_work.py --model=cnn3d --pca=0 --raw_bands=100

The scene and the projection are random (the work does not depend on the values).
"""

import statistics

from hmp import cli

cli.import_tensorflow_quietly()   # before anything imports TensorFlow

import numpy as np  # noqa: E402
import tensorflow.compat.v1 as tf  # noqa: E402
from absl import flags  # noqa: E402

import models  # noqa: E402
from hmp.graph.graph_config import Augmentation, Projection, Recipe  # noqa: E402
from hmp.measure.speeds import DeviceStep  # noqa: E402

flags.DEFINE_string("model", "hybridsn", "Model (see hmp.train --model).")
flags.DEFINE_integer("raw_bands", 200, "Bands of the scene (Indian Pines: 200).")
flags.DEFINE_integer("pca", 30, "PCA components projected onto in the graph (0: none; "
                     "the model then reads the raw bands).")
flags.DEFINE_integer("patch_size", 9, "Patch side (odd).")
flags.DEFINE_integer("classes", 16, "Classes.")
flags.DEFINE_integer("batch_size", 256, "Samples per step.")
flags.DEFINE_integer("repeats", 8, "Timed steps per variant (in turns).")
flags.DEFINE_string("device", "/cpu:0", "TensorFlow device.")
FLAGS = flags.FLAGS


def variants(raw_bands, projection):
    """{name: Recipe}: the model alone, then the input work part by part and in full."""
    identity = {"band_offset": (0.0,) * raw_bands, "band_scale": (1.0,) * raw_bands}
    look = {"spectral_shift": 4.0, "spectral_gain": 0.5, **identity}
    named = {"model alone": Augmentation(flips=False),
             "flips": Augmentation(flips=True),
             "field look": Augmentation(flips=False, **look),
             "flips, look, brightness (default)": Augmentation(brightness=0.1, **look)}
    recipes = {name: Recipe(augmentation=a) for name, a in named.items()}
    if projection is None:
        return recipes
    return {"model alone": recipes["model alone"],
            "projection": Recipe(augmentation=named["model alone"], projection=projection),
            **{name + " + projection": Recipe(augmentation=a, projection=projection)
               for name, a in named.items() if name != "model alone"}}


def main(argv):
    if len(argv) > 1:
        raise cli.UsageError("unexpected arguments %s (flags start with --)" % argv[1:])
    tf.disable_eager_execution()
    bands = FLAGS.pca or FLAGS.raw_bands
    with cli.blame("model", "patch_size", "pca", "raw_bands"):
        config = models.model_config(FLAGS.model, FLAGS.patch_size, bands, FLAGS.classes)
    if FLAGS.pca > FLAGS.raw_bands:
        raise cli.UsageError("--pca=%d: at most --raw_bands=%d" % (FLAGS.pca, FLAGS.raw_bands))
    rng = np.random.RandomState(0)
    projection = (Projection(rng.randn(FLAGS.raw_bands).astype(np.float32),
                             (rng.randn(FLAGS.raw_bands, FLAGS.pca)
                              / np.sqrt(FLAGS.raw_bands)).astype(np.float32))
                  if FLAGS.pca else None)
    steps = {}
    try:
        for name, recipe in variants(FLAGS.raw_bands, projection).items():
            print("building %s" % name, flush=True)
            steps[name] = DeviceStep(config, FLAGS.device, FLAGS.batch_size, recipe=recipe)
            steps[name].run()
            steps[name].run()
        seconds = {name: [] for name in steps}
        for repeat in range(FLAGS.repeats):
            print("timing: repeat %d/%d" % (repeat + 1, FLAGS.repeats), flush=True)
            for name, step in steps.items():
                seconds[name].append(step.run())
    finally:
        for step in steps.values():
            step.close()
    alone = statistics.median(seconds["model alone"])
    print("\n%s, %dx%d patches of %d raw bands%s, batch %d, %s"
          % (FLAGS.model, FLAGS.patch_size, FLAGS.patch_size, FLAGS.raw_bands,
             " projected onto %d components" % FLAGS.pca if FLAGS.pca else "",
             FLAGS.batch_size, FLAGS.device))
    print("%-46s %10s %12s" % ("step", "median ms", "x model alone"))
    for name, times in seconds.items():
        median = statistics.median(times)
        print("%-46s %10.1f %12.3f" % (name, 1e3 * median, median / alone))


if __name__ == "__main__":
    cli.run(main, "bench_input_work.py")
