"""hmp's gradient of a 3-D convolution against TensorFlow's gradient kernels, and where
hmp's convolutions use it (hmp.mesh.conv3d_gradient)."""

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from hmp.compat import import_mesh_tensorflow
from hmp.graph.graph import TrainingGraph
from hmp.graph.graph_config import Placement
from hmp.mesh import conv3d_gradient, ops
from models import model_config

mtf = import_mesh_tensorflow()

# (input [batch, d, h, w, in], window [d, h, w], strides, padding, output channels):
# stride 1, strides along each dim and several at once, one sample and channel, windows smaller than, equal to and
# larger than the stride, SAME with uneven padding, sizes the stride does not divide.
CASES = {
    "cnn3d_first_layer": ((3, 30, 9, 9, 1), (7, 3, 3), (2, 1, 1), "VALID", 4),
    "spectral_pooling": ((2, 12, 5, 5, 4), (3, 1, 1), (2, 1, 1), "VALID", 3),
    "every_dim_valid": ((2, 11, 7, 6, 3), (3, 2, 3), (3, 2, 2), "VALID", 5),
    "every_dim_same": ((2, 11, 7, 6, 3), (3, 2, 3), (2, 3, 2), "SAME", 5),
    "window_below_stride": ((2, 10, 8, 9, 2), (1, 2, 1), (3, 3, 2), "SAME", 4),
    "window_below_stride_valid": ((2, 10, 8, 9, 2), (1, 1, 2), (3, 2, 3), "VALID", 4),
    "hybridsn_stride_1": ((3, 9, 9, 30, 1), (3, 3, 7), (1, 1, 1), "VALID", 4),
    "stride_1_same": ((2, 6, 7, 5, 3), (3, 2, 3), (1, 1, 1), "SAME", 2),
    "one_sample_window_over_the_input": ((1, 3, 2, 5, 1), (5, 3, 1), (2, 2, 3), "SAME", 1),
}


def _gradients(case, override):
    """(dx, dw) of sum(conv3d(x, w) * r) in float64, with this module's gradient or
    (``override`` False) TensorFlow's kernels."""
    shape, window, strides, padding, channels = CASES[case]
    rng = np.random.default_rng(0)
    x = rng.normal(size=shape)
    w = rng.normal(size=(*window, shape[-1], channels))
    with tf.Graph().as_default():
        tx, tw = tf.placeholder(tf.float64, x.shape), tf.placeholder(tf.float64, w.shape)
        y = (conv3d_gradient.conv3d(tx, tw, strides, padding) if override
             else tf.nn.conv3d(tx, tw, [1, *strides, 1], padding))
        r = rng.normal(size=y.shape.as_list())
        gradients = tf.gradients(tf.reduce_sum(y * r), [tx, tw])
        with tf.Session() as session:
            return session.run(gradients, {tx: x, tw: w})


@pytest.mark.parametrize("case", sorted(CASES))
def test_gradients_equal_tensorflows_kernels(case):
    ours, reference = _gradients(case, True), _gradients(case, False)
    for got, expected in zip(ours, reference):
        assert got.shape == expected.shape
        assert np.abs(expected).max() > 0
        np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-10)


def _gradient_op_types(strides, device):
    """The op types of the gradient of hmp's 3-D convolution's per-device function
    (``LocalOperation.local_fn``) placed on ``device``."""
    x_dims = [mtf.Dimension(n, s) for n, s in (("batch", 2), ("d", 9), ("h", 5), ("w", 5),
                                                ("cin", 1))]
    w_dims = [mtf.Dimension(n, s) for n, s in (("k0", 3), ("k1", 3), ("k2", 3), ("cin", 1),
                                                ("cout", 4))]
    with tf.Graph().as_default() as graph:
        mesh = mtf.Mesh(mtf.Graph(), "mesh")
        x, w = (mtf.zeros(mesh, mtf.Shape(d)) for d in (x_dims, w_dims))
        y = ops.convolution(x, w, strides, "VALID", [x_dims[-1]])
        with tf.device(device):
            tx, tw = tf.zeros([2, 9, 5, 5, 1]), tf.zeros([3, 3, 3, 1, 4])
            ty = y.operation.local_fn(tx, tw)
            known = set(graph.get_operations())
            tf.gradients(ty, [tx, tw], grad_ys=tf.ones_like(ty))
        return {op.type for op in graph.get_operations() if op not in known}


def test_a_cpus_3d_convolutions_take_this_gradient_and_a_gpus_tensorflows():
    backprop_filter, backprop_input = "Conv3DBackpropFilterV2", "Conv3DBackpropInputV2"
    strided = _gradient_op_types((2, 1, 1), "/cpu:0")
    assert not strided & {backprop_filter, backprop_input} and "Conv3D" in strided
    # stride 1: TensorFlow's input gradient (as fast), this module's filter gradient
    stride_1 = _gradient_op_types((1, 1, 1), "/cpu:0")
    assert backprop_input in stride_1 and backprop_filter not in stride_1
    # a GPU's convolutions keep TensorFlow's (cuDNN) gradients
    assert {backprop_filter, backprop_input} <= _gradient_op_types((2, 1, 1), "/gpu:0")


def test_a_mixed_precision_3d_model_on_a_cpu_trains_with_it_in_float32():
    """cnn3d's lowered training step in bfloat16 on a CPU: each convolution (4) takes
    this gradient, on float32 values (``hmp.mesh.ops._float32_on_cpu``); of TensorFlow's
    gradient kernels only the stride-1 one's input gradient is left."""
    config = model_config("cnn3d", patch=5, bands=30, n_classes=3, width=2,
                          precision="mixed_bfloat16")
    graph = TrainingGraph(config, Placement("batch:2", "batch:batch", ("/cpu:0", "/cpu:1"),
                                            {"batch": [3, 2]}), 5, (4, 4)).tf_graph
    ops = graph.get_operations()
    overridden = [op for op in ops if "_gradient_op_type" in op.node_def.attr]
    # each convolution on each device, twice: the forward pass and the copy of it that
    # LocalGradOperation differentiates
    assert len(overridden) == 4 * 2 * 2
    assert {op.inputs[0].dtype for op in overridden} == {tf.float32}
    assert "Conv3DBackpropFilterV2" not in {op.type for op in ops}
    # TensorFlow's input gradient only for the one stride-1 convolution, conv2
    assert {op.name.split("/")[0] for op in ops if op.type == "Conv3DBackpropInputV2"} == {
        "conv2"}
