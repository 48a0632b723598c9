"""A convolution's training step against its filter count: the channel blocks behind
``DeviceSpec.channel_block`` (``hmp.measure.channel_blocks``, ``docs/costmodel.md``).

Plain TensorFlow, one thread, the forward and backward pass (input and weight
gradients) of one convolution at every filter count of ``--filters``: as the output
filters of an output-split layer (``--in_channels`` -> c) and as the input channels of
an input-split one (c -> ``--out_channels``), 2-D (a ``--patch`` square patch) and 3-D
(the patch over ``--depth`` bands). The counts take turns, repeat after repeat, so the
machine's noise hits all alike; the table gives the fastest repeat's milliseconds per
step and that time over the time of ``--reference`` filters.

  python scripts/bench_channel_blocks.py --filters=8,16,20,23,24,32,41,48,64
"""

import time

from hmp import cli

cli.import_tensorflow_quietly()   # before anything imports TensorFlow

import numpy as np  # noqa: E402
import tensorflow.compat.v1 as tf  # noqa: E402
from absl import flags  # noqa: E402

from hmp.measure.channel_blocks import channel_blocks  # noqa: E402

flags.DEFINE_list("filters", ["8", "16", "20", "23", "24", "32", "41", "48", "64"],
                  "Filter counts to time.")
flags.DEFINE_integer("reference", 64, "The count the last columns divide by (one of --filters).")
flags.DEFINE_integer("batch_size", 256, "Samples per step.")
flags.DEFINE_integer("patch", 9, "Spatial patch side.")
flags.DEFINE_integer("depth", 10, "Bands of the 3-D convolutions' input.")
flags.DEFINE_integer("in_channels", 100, "Input channels of the 2-D output-split convolution.")
flags.DEFINE_integer("out_channels", 32, "Output channels of the input-split convolutions.")
flags.DEFINE_integer("steps", 5, "Timed steps per repeat.")
flags.DEFINE_integer("repeats", 5, "Turns of every count.")
FLAGS = flags.FLAGS

KINDS = ("conv2d output", "conv2d input", "conv3d output")


def conv_step(kind, filters):
    """``(session, op)``: one training step (both gradients) of ``kind`` at ``filters``."""
    graph = tf.Graph()
    with graph.as_default():
        b, p = FLAGS.batch_size, FLAGS.patch
        if kind == "conv2d output":
            x, kernel = [b, p, p, FLAGS.in_channels], [3, 3, FLAGS.in_channels, filters]
        elif kind == "conv2d input":
            x, kernel = [b, p, p, filters], [3, 3, filters, FLAGS.out_channels]
        else:   # 3-D over the bands, 8 channels in, as hybridsn's first layers
            x, kernel = [b, p, p, FLAGS.depth, 8], [3, 3, 7, 8, filters]
        x = tf.constant(np.random.default_rng(0).normal(size=x).astype(np.float32))
        w = tf.Variable(tf.random.normal(kernel, stddev=0.05, seed=0))
        conv = tf.nn.conv3d if len(kernel) == 5 else tf.nn.conv2d
        y = conv(x, w, [1] * (len(kernel)), "SAME")
        # fetched sums: a group of the gradients would let grappler drop their work
        op = [tf.reduce_sum(g) for g in tf.gradients(tf.reduce_sum(tf.square(y)), [x, w])]
        session = tf.Session(graph=graph, config=tf.ConfigProto(
            intra_op_parallelism_threads=1, inter_op_parallelism_threads=1))
        session.run(tf.global_variables_initializer())
    return session, op


def main(_):
    tf.disable_eager_execution()
    counts = sorted({int(c) for c in FLAGS.filters})
    if FLAGS.reference not in counts:
        raise cli.UsageError("--reference=%d: not one of --filters=%s"
                             % (FLAGS.reference, ",".join(FLAGS.filters)))
    steps = {(kind, c): conv_step(kind, c) for kind in KINDS for c in counts}
    best = {key: float("inf") for key in steps}
    for session, op in steps.values():
        session.run(op)   # warm-up
    for repeat in range(FLAGS.repeats):
        for key, (session, op) in steps.items():
            started = time.perf_counter()
            for _ in range(FLAGS.steps):
                session.run(op)
            best[key] = min(best[key], 1e3 * (time.perf_counter() - started) / FLAGS.steps)
        print("repeat %d/%d done" % (repeat + 1, FLAGS.repeats), flush=True)
    (lanes,) = channel_blocks(["/cpu:0"])
    print("\nbatch %d, patch %dx%d (3-D: x %d bands), one thread; this host's channel block "
          "(hmp.measure.channel_blocks): %d" % (FLAGS.batch_size, FLAGS.patch, FLAGS.patch,
                                               FLAGS.depth, lanes))
    print("| filters | blocks | %s | %s |" % (
        " | ".join("%s ms" % k for k in KINDS),
        " | ".join("%s / %d" % (k, FLAGS.reference) for k in KINDS)))
    print("|---" * (2 + 2 * len(KINDS)) + "|")
    for c in counts:
        print("| %d | %d | %s | %s |" % (
            c, -(-c // lanes), " | ".join("%.1f" % best[k, c] for k in KINDS),
            " | ".join("%.2f" % (best[k, c] / best[k, FLAGS.reference]) for k in KINDS)))
    for session, _ in steps.values():
        session.close()


if __name__ == "__main__":
    cli.run(main, "bench_channel_blocks")
