"""Gradient sums in one all-reduce: equal to numpy, one collective instead of one per tensor."""

import numpy as np
import tensorflow.compat.v1 as tf

import harness
from hmp.compat import import_mesh_tensorflow
from hmp.graph.graph import TrainingGraph
from hmp.graph.graph_config import Placement
from hmp.mesh.bucketing import reduce_together
from hmp.mesh.lowering import HeteroLowering
from hmp.mesh.mesh_impl import HeteroMeshImpl
from models import model_config

mtf = import_mesh_tensorflow()


def lowered_sums(monkeypatch, bucketed):
    """Two sums over an uneven batch split (one of them a bias-sized vector) and a
    sum that is not pending; returns (values, number of all-reduce calls)."""
    calls = []
    original = HeteroMeshImpl.allreduce
    monkeypatch.setattr(HeteroMeshImpl, "allreduce", lambda self, x, axes, fn: (
        calls.append(axes), original(self, x, axes, fn))[1])
    rng = np.random.RandomState(0)
    a, b = rng.randn(9, 4, 3).astype(np.float32), rng.randn(9, 5).astype(np.float32)
    with tf.Graph().as_default():
        graph = mtf.Graph()
        mesh = mtf.Mesh(graph, "mesh")
        batch = mtf.Dimension("batch", 9)
        dims = [mtf.Dimension("r", 4), mtf.Dimension("c", 3), mtf.Dimension("k", 5)]
        ta = mtf.import_tf_tensor(mesh, tf.constant(a), mtf.Shape([batch] + dims[:2]))
        tb = mtf.import_tf_tensor(mesh, tf.constant(b), mtf.Shape([batch, dims[2]]))
        sums = [mtf.reduce_sum(ta, reduced_dim=batch), mtf.reduce_sum(tb, reduced_dim=batch)]
        done = mtf.reduce_max(tb, reduced_dim=batch)   # not a pending sum
        outputs = reduce_together(sums + [done]) if bucketed else sums + [done]
        mesh_impl = HeteroMeshImpl("batch:3", "batch:batch", harness.CPUS[:3],
                                   {"batch": [5, 3, 1]})
        lowering = HeteroLowering(graph, {mesh: mesh_impl})
        exported = [lowering.export_to_tf_tensor(o) for o in outputs]
        with tf.Session(config=harness.session_config()) as session:
            values = session.run(exported)
    return (a, b), values, calls


def test_pending_sums_are_one_allreduce_and_equal_numpy(monkeypatch):
    (a, b), values, calls = lowered_sums(monkeypatch, bucketed=True)
    np.testing.assert_allclose(values[0], a.sum(0), rtol=1e-6)
    np.testing.assert_allclose(values[1], b.sum(0), rtol=1e-6)
    np.testing.assert_array_equal(values[2], b.max(0))
    assert values[0].shape == (4, 3) and values[1].shape == (5,)
    assert calls.count([0]) == 2   # the MAX, and one SUM for both pending sums


def test_without_the_bucket_every_sum_is_its_own_allreduce(monkeypatch):
    _, _, calls = lowered_sums(monkeypatch, bucketed=False)
    assert calls.count([0]) == 3


def test_training_step_sums_every_gradient_in_one_bucket():
    config = model_config("cnn2d", patch=5, bands=6, n_classes=3, width=4)
    layout = Placement("batch:2;model:2", "batch:batch;filters1:model;filters2:model",
                    tuple(harness.CPUS), {"batch": [5, 3], "filters1": [6, 2]})
    graph = TrainingGraph(config, layout, 8, (4, 4))
    buckets = [key for key, _ in graph.lowering.counters if key.startswith("allreduce_bucket")]
    n_variables = len(graph.mtf_graph.trainable_variables)
    # cnn2d's four batch norms each sum two statistics forward and two backward in one
    # bucket, and their backward one is already the sum of their scale's and offset's
    # gradients: the training step's own bucket holds every other gradient.
    norms = ["allreduce_bucket/[0]/2 tensors"] * 2 * 4
    assert sorted(buckets) == sorted(norms + ["allreduce_bucket/[0]/%d tensors"
                                              % (n_variables - 2 * 4)])


def bucket_length(n, hosts=None, allreduce="hierarchical"):
    """Elements of the one bucket that carries a 3-value gradient over ``batch:n``."""
    with tf.Graph().as_default():
        graph = mtf.Graph()
        mesh = mtf.Mesh(graph, "mesh")
        batch, f = mtf.Dimension("batch", n), mtf.Dimension("f", 3)
        x = mtf.import_tf_tensor(mesh, tf.ones([n, 3]), mtf.Shape([batch, f]))
        weights = mtf.get_variable(mesh, "w", [f])
        summed, = reduce_together([mtf.reduce_sum(x * weights, output_shape=[f])])
        impl = HeteroMeshImpl("batch:%d" % n, "batch:batch", ["/cpu:%d" % i for i in range(n)],
                              None, hosts, allreduce)
        HeteroLowering(graph, {mesh: impl})
        concats = [op for op in tf.get_default_graph().get_operations()
                   if op.type == "ConcatV2" and "reduce_together" in op.name]
        return concats[0].outputs[0].shape.as_list()[0], impl.ring_lengths([0])


def test_a_bucket_is_padded_to_its_rings_lengths_only():
    # one ring over all 16 devices: 16 elements (padding to every length up to 16 took 720720)
    assert bucket_length(16) == (16, [16])
    # two-level over 2 hosts of 4 devices: the leaders' ring of 2
    assert bucket_length(8, hosts=["a"] * 4 + ["b"] * 4) == (4, [2])
    assert bucket_length(8, hosts=["a"] * 4 + ["b"] * 4, allreduce="flat") == (8, [8])
    assert bucket_length(6, hosts=["a"] * 3 + ["b"] * 2 + ["c"]) == (3, [3])
