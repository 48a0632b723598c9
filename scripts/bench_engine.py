"""Training steps/s of hmp's mesh implementation against stock Mesh-TF's.

With an even split hmp must cost nothing: both lower the same model (hmp
layers, a conv split over the model axis, the batch over the batch axis) on
the same virtual CPU devices; only the mesh implementation and the lowering
differ. Runs are interleaved (A B A B ...) so machine noise hits both alike,
and the table reports the median steps/s and the ratio hmp / stock.

  python scripts/bench_engine.py --mesh=model:2 --steps=30
"""

import statistics
import time

import numpy as np
import tensorflow.compat.v1 as tf
from absl import app, flags

import hmp
from hmp import layers

mtf = hmp.mesh_impl.mtf

flags.DEFINE_string("mesh", "batch:2;model:2", "Mesh shape (model:N, batch:M or both).")
flags.DEFINE_integer("batch_size", 64, "Global batch size.")
flags.DEFINE_integer("patch", 9, "Spatial patch size.")
flags.DEFINE_integer("bands", 32, "Spectral bands.")
flags.DEFINE_integer("steps", 20, "Timed steps per repeat.")
flags.DEFINE_integer("repeats", 3, "Interleaved repeats per implementation.")
FLAGS = flags.FLAGS

LAYOUT = "batch:batch;filters1:model;filters3:model"


def build_model(mesh, batch_size, patch, bands):
    """A 2-D CNN with two filter-split blocks; returns the loss."""
    rng = np.random.RandomState(0)
    batch = mtf.Dimension("batch", batch_size)
    x = mtf.import_tf_tensor(mesh, tf.constant(
        rng.randn(batch_size, patch, patch, bands).astype(np.float32)), mtf.Shape(
            [batch, mtf.Dimension("h", patch), mtf.Dimension("w", patch),
             mtf.Dimension("bands", bands)]))
    labels = mtf.import_tf_tensor(mesh, tf.constant(
        rng.randint(0, 8, batch_size).astype(np.int32)), mtf.Shape([batch]))
    h = layers.filter_split_block(x, mtf.Dimension("filters1", 64),
                                  mtf.Dimension("filters2", 32), name="block1")
    h = layers.max_pool2d(h, (2, 2))
    h = layers.filter_split_block(h, mtf.Dimension("filters3", 64),
                                  mtf.Dimension("filters4", 32), name="block2")
    logits = layers.dense(h, mtf.Dimension("classes", 8), reduced_dims=h.shape.dims[1:])
    return mtf.reduce_mean(layers.softmax_cross_entropy(logits, labels, logits.shape.dims[-1]))


def make_session(use_hmp):
    """Builds one training step lowered by hmp or by stock Mesh-TF."""
    graph = tf.Graph()
    with graph.as_default():
        mtf_graph = mtf.Graph()
        mesh = mtf.Mesh(mtf_graph, "mesh")
        loss = build_model(mesh, FLAGS.batch_size, FLAGS.patch, FLAGS.bands)
        updates = hmp.train_step(loss, mtf.optimize.SgdOptimizer(0.01))
        size = mtf.convert_to_shape(FLAGS.mesh).size
        devices = ["/cpu:%d" % i for i in range(size)]
        if use_hmp:
            impl = hmp.HeteroMeshImpl(FLAGS.mesh, LAYOUT, devices)
            lowering = hmp.HeteroLowering(mtf_graph, {mesh: impl})
        else:
            impl = mtf.placement_mesh_impl.PlacementMeshImpl(FLAGS.mesh, LAYOUT, devices)
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
    app.run(main)
