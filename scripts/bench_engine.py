"""Training steps/s of hmp's mesh implementation against stock Mesh-TF's.

With an even split hmp must cost nothing: both lower the same model
(``models.cnn2d``, its filters split over the model axis, the batch over the
batch axis) on the same virtual CPU devices; only the mesh implementation and
the lowering differ. Runs are interleaved (A B A B ...) so machine noise hits both alike,
and the table reports the median steps/s and the ratio hmp / stock.

  python scripts/bench_engine.py --mesh=model:2 --steps=30
"""

import statistics
import time

from hmp import cli

cli.import_tensorflow_quietly()   # before anything imports TensorFlow

import numpy as np  # noqa: E402
import tensorflow.compat.v1 as tf  # noqa: E402
from absl import flags  # noqa: E402

import hmp  # noqa: E402
import models.cnn2d  # noqa: E402
from hmp.compat import import_mesh_tensorflow  # noqa: E402
from hmp.graph.graph import build_model_graph, imported  # noqa: E402
from models import model_config  # noqa: E402

mtf = import_mesh_tensorflow()

flags.DEFINE_string("mesh", "batch:2;model:2", "Mesh shape (model:N, batch:M or both).")
flags.DEFINE_integer("batch_size", 64, "Global batch size.")
flags.DEFINE_integer("patch", 9, "Spatial patch size.")
flags.DEFINE_integer("bands", 32, "Spectral bands.")
flags.DEFINE_integer("steps", 20, "Timed steps per repeat.")
flags.DEFINE_integer("repeats", 3, "Interleaved repeats per implementation.")
FLAGS = flags.FLAGS

CLASSES = 8


def make_session(use_hmp):
    """Builds one training step lowered by hmp or by stock Mesh-TF."""
    graph = tf.Graph()
    with graph.as_default():
        rng = np.random.RandomState(0)
        x = tf.constant(rng.randn(FLAGS.batch_size, FLAGS.patch, FLAGS.patch,
                                  FLAGS.bands).astype(np.float32))
        y = tf.constant(rng.randint(0, CLASSES, FLAGS.batch_size).astype(np.int32))
        config = model_config("cnn2d", FLAGS.patch, FLAGS.bands, CLASSES)
        mtf_graph, mesh, loss, _, _ = build_model_graph(config, FLAGS.batch_size, imported(x), y)
        updates = hmp.train_step(loss, mtf.optimize.SgdOptimizer(0.01))
        size = mtf.convert_to_shape(FLAGS.mesh).size
        devices = ["/cpu:%d" % i for i in range(size)]
        layout = ";".join(["batch:batch"] + ["%s:model" % d for d in models.cnn2d.SPLIT_DIMS])
        if use_hmp:
            impl = hmp.HeteroMeshImpl(FLAGS.mesh, layout, devices)
            lowering = hmp.HeteroLowering(mtf_graph, {mesh: impl})
        else:
            impl = mtf.placement_mesh_impl.PlacementMeshImpl(FLAGS.mesh, layout, devices)
            lowering = mtf.Lowering(mtf_graph, {mesh: impl})
        step = tf.group([lowering.lowered_operation(u) for u in updates])
        session = tf.Session(graph=graph, config=tf.ConfigProto(
            device_count={"CPU": size}))
        session.run(tf.global_variables_initializer())
        session.run(lowering.copy_masters_to_slices())
        for _ in range(3):   # warm-up
            session.run(step)
    return session, step


def steps_per_second(session, step):
    start = time.perf_counter()
    for _ in range(FLAGS.steps):
        session.run(step)
    return FLAGS.steps / (time.perf_counter() - start)


def main(_):
    tf.disable_eager_execution()
    tf.logging.set_verbosity(tf.logging.ERROR)
    sessions = {"stock PlacementMeshImpl": make_session(False),
                "hmp HeteroMeshImpl": make_session(True)}
    rates = {name: [] for name in sessions}
    for repeat in range(FLAGS.repeats):
        for name, (session, step) in sessions.items():
            rates[name].append(steps_per_second(session, step))
        print("repeat %d/%d done" % (repeat + 1, FLAGS.repeats), flush=True)
    print("\nmesh %s, batch %d, patch %dx%dx%d, %d steps x %d repeats (even split)"
          % (FLAGS.mesh, FLAGS.batch_size, FLAGS.patch, FLAGS.patch, FLAGS.bands,
             FLAGS.steps, FLAGS.repeats))
    print("%-26s %12s %18s" % ("implementation", "steps/s", "(min - max)"))
    medians = {name: statistics.median(r) for name, r in rates.items()}
    for name, median in medians.items():
        print("%-26s %12.2f %8.2f - %-8.2f" % (name, median, min(rates[name]),
                                               max(rates[name])))
    print("%-26s %12.3f" % ("ratio hmp / stock", medians["hmp HeteroMeshImpl"]
                            / medians["stock PlacementMeshImpl"]))


if __name__ == "__main__":
    cli.run(main, "bench_engine")
