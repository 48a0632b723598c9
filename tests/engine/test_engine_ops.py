"""hmp's operations on uneven splits against plain TensorFlow and numpy."""

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

import harness
import hmp
from hmp import layers
from hmp.mesh import ops
from hmp.compat import import_mesh_tensorflow

mtf = import_mesh_tensorflow()
TOLERANCE = 1e-5
CPUS = harness.CPUS

# Layouts for one op's dims "batch", "cin", "cout" on a 2x2 mesh, all uneven.
LAYOUTS = {
    "in_channels": ("a:2;b:2", "cin:a", {"cin": [4, 2]}),
    "out_channels": ("a:2;b:2", "cout:b", {"cout": [5, 2]}),
    "batch_and_in": ("a:2;b:2", "batch:a;cin:b", {"batch": [4, 2], "cin": [1, 5]}),
    "batch_and_out": ("a:2;b:2", "batch:b;cout:a", {"batch": [5, 1], "cout": [3, 4]}),
    "batch_only": ("a:2;b:2", "batch:a", {"batch": [4, 2]}),
}


def run_on_mesh(build, layout, inputs):
    """Builds ``build(mesh, *mtf_inputs) -> (output, [wrt...])`` and returns
    the output, d(sum(output * r))/d(each wrt), all as numpy, and the slices."""
    mesh_shape, rules, splits = layout
    graph, mesh, mtf_inputs = harness.mesh_with_inputs(inputs)
    output = build(mesh, *mtf_inputs)
    weight = np.random.RandomState(1).randn(*output.shape.to_integer_list).astype(np.float32)
    objective = mtf.reduce_sum(output * mtf.import_tf_tensor(mesh, tf.constant(weight),
                                                             output.shape))
    grads = mtf.gradients([objective], mtf_inputs)
    impl = hmp.HeteroMeshImpl(mesh_shape, rules, CPUS, splits)
    lowering = hmp.HeteroLowering(graph, {mesh: impl})
    fetch = [lowering.export_to_tf_tensor(output)] + [
        lowering.export_to_tf_tensor(g) for g in grads if g is not None]
    slices = [t.shape.as_list() for t in
              lowering.tensors[output].to_laid_out_tensor().tensor_list]
    with tf.Session(config=harness.session_config()) as session:
        harness.initialise(session, graph, lowering, weights=None)
        values = session.run(fetch)
    return values[0], values[1:], weight, slices


def tf_reference(fn, arrays, weight):
    """fn(*tf tensors) and the gradients of sum(fn * weight), in plain TF."""
    tf.reset_default_graph()
    tensors = [tf.constant(a) for a in arrays]
    out = fn(*tensors)
    grads = tf.gradients(tf.reduce_sum(out * weight), tensors)
    with tf.Session() as session:
        values = session.run([out] + grads)
    return values[0], values[1:]


def dims(*pairs):
    return [mtf.Dimension(n, s) for n, s in pairs]


CONV_CASES = {
    "2d_same": (2, (3, 3), (1, 1), "SAME"),
    "2d_valid_strided": (2, (3, 2), (2, 1), "VALID"),
    "3d_same_strided": (3, (3, 3, 3), (2, 1, 1), "SAME"),
    "3d_valid": (3, (5, 3, 1), (1, 1, 1), "VALID"),
}


@pytest.mark.parametrize("case", sorted(CONV_CASES))
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_convolution_matches_tf_nn(case, layout):
    rank, kernel, strides, padding = CONV_CASES[case]
    rng = np.random.RandomState(0)
    spatial = (7, 6, 5)[:rank]
    x = rng.randn(6, *spatial, 6).astype(np.float32)
    w = rng.randn(*kernel, 6, 7).astype(np.float32)
    x_dims = dims(("batch", 6), *zip("dhw"[-rank:], spatial), ("cin", 6))
    w_dims = dims(*zip(["k%d" % i for i in range(rank)], kernel), ("cin", 6), ("cout", 7))

    def build(mesh, tx, tw):
        return ops.convolution(tx, tw, strides, padding, [x_dims[-1]])
    out, grads, weight, _ = run_on_mesh(build, LAYOUTS[layout], [(x, x_dims), (w, w_dims)])

    tf_conv = tf.nn.conv2d if rank == 2 else tf.nn.conv3d
    expected, expected_grads = tf_reference(
        lambda a, b: tf_conv(a, b, [1, *strides, 1], padding), [x, w], weight)
    assert out.shape == expected.shape
    assert harness.max_relative_error(out, expected) <= TOLERANCE
    for grad, expected_grad in zip(grads, expected_grads):
        assert harness.max_relative_error(grad, expected_grad) <= TOLERANCE


def test_conv2d_over_two_input_dims_equals_reshaped_conv():
    """The hybrid 3D->2D step: contract (depth, channels) without a reshape."""
    rng = np.random.RandomState(0)
    x = rng.randn(4, 5, 5, 3, 6).astype(np.float32)   # [b, h, w, depth, channels]
    w = rng.randn(3, 3, 3, 6, 5).astype(np.float32)
    x_dims = dims(("batch", 4), ("h", 5), ("w", 5), ("depth", 3), ("cin", 6))
    w_dims = dims(("fh", 3), ("fw", 3), ("depth", 3), ("cin", 6), ("cout", 5))

    def build(mesh, tx, tw):
        return ops.convolution(tx, tw, (1, 1), "SAME", x_dims[-2:])
    out, grads, weight, _ = run_on_mesh(build, LAYOUTS["in_channels"],
                                        [(x, x_dims), (w, w_dims)])
    expected, expected_grads = tf_reference(
        lambda a, b: tf.nn.conv2d(tf.reshape(a, [4, 5, 5, 18]), tf.reshape(b, [3, 3, 18, 5]),
                                  [1, 1, 1, 1], "SAME"), [x, w], weight)
    assert harness.max_relative_error(out, expected) <= TOLERANCE
    for grad, expected_grad in zip(grads, expected_grads):
        assert harness.max_relative_error(grad, expected_grad) <= TOLERANCE


POOLS = {
    "max2d": (layers.max_pool2d, tf.nn.max_pool2d, (2, 2), (2, 2), "VALID"),
    "max2d_overlap_same": (layers.max_pool2d, tf.nn.max_pool2d, (3, 3), (2, 2), "SAME"),
    "avg2d_odd": (layers.avg_pool2d, tf.nn.avg_pool2d, (2, 2), (2, 2), "VALID"),
    "max3d": (layers.max_pool3d, tf.nn.max_pool3d, (2, 2, 1), (2, 2, 1), "VALID"),
    "avg3d_same": (layers.avg_pool3d, tf.nn.avg_pool3d, (3, 2, 2), (2, 1, 2), "SAME"),
}


@pytest.mark.parametrize("case", sorted(POOLS))
def test_pooling_matches_tf_nn(case):
    layer, tf_pool, window, strides, padding = POOLS[case]
    rank = len(window)
    spatial = (7, 5, 4)[:rank]
    x = np.random.RandomState(0).randn(6, *spatial, 7).astype(np.float32)
    x_dims = dims(("batch", 6), *zip("dhw"[-rank:], spatial), ("cout", 7))

    def build(mesh, tx):
        return layer(tx, window, strides, padding)
    out, grads, weight, slices = run_on_mesh(build, LAYOUTS["batch_and_out"], [(x, x_dims)])
    expected, expected_grads = tf_reference(
        lambda a: tf_pool(a, [1, *window, 1], [1, *strides, 1], padding), [x], weight)
    assert harness.max_relative_error(out, expected) <= TOLERANCE
    assert harness.max_relative_error(grads[0], expected_grads[0]) <= TOLERANCE
    # batch on mesh axis b ([5, 1]), channels on axis a ([3, 4]).
    assert [s[0] for s in slices] == [5, 1, 5, 1]
    assert [s[-1] for s in slices] == [3, 3, 4, 4]


def test_one_whole_number_is_the_size_of_every_spatial_dim():
    """``filter_size=3, strides=2`` and a pool's ``window=2``: a 3-D convolution and pool
    of (3, 3, 3), (2, 2, 2) and (2, 2, 2), as plain TensorFlow computes them."""
    rng = np.random.RandomState(0)
    x = rng.randn(6, 7, 6, 5, 6).astype(np.float32)
    w = rng.randn(3, 3, 3, 6, 7).astype(np.float32)
    x_dims = dims(("batch", 6), ("d", 7), ("h", 6), ("w", 5), ("cin", 6))

    def build(mesh, tx):
        features = layers.conv3d(tx, mtf.Dimension("cout", 7), filter_size=3, strides=2,
                                 use_bias=False, kernel_initializer=tf.constant_initializer(w))
        return layers.max_pool3d(features, 2)
    out, grads, weight, _ = run_on_mesh(build, LAYOUTS["batch_and_out"], [(x, x_dims)])
    twos = [1, 2, 2, 2, 1]
    expected, expected_grads = tf_reference(
        lambda a: tf.nn.max_pool3d(tf.nn.conv3d(a, w, twos, "SAME"), twos, twos, "VALID"),
        [x], weight)
    assert out.shape == expected.shape == (6, 2, 1, 1, 7)
    assert harness.max_relative_error(out, expected) <= TOLERANCE
    assert harness.max_relative_error(grads[0], expected_grads[0]) <= TOLERANCE


def test_dense_reducing_split_feature_map_matches_numpy():
    rng = np.random.RandomState(0)
    x = rng.randn(6, 3, 3, 6).astype(np.float32)
    x_dims = dims(("batch", 6), ("h", 3), ("w", 3), ("cin", 6))
    classes = mtf.Dimension("cout", 7)

    def build(mesh, tx):
        return layers.dense(tx, classes, reduced_dims=x_dims[1:], use_bias=False,
                            kernel_initializer=tf.constant_initializer(0.5))
    out, grads, weight, _ = run_on_mesh(build, LAYOUTS["batch_and_in"], [(x, x_dims)])
    expected = x.reshape(6, -1).sum(axis=1, keepdims=True) * 0.5 * np.ones((1, 7))
    assert harness.max_relative_error(out, expected) <= TOLERANCE
    expected_grad = np.broadcast_to(weight.sum(axis=1)[:, None, None, None] * 0.5, x.shape)
    assert harness.max_relative_error(grads[0], expected_grad) <= TOLERANCE


def test_batch_norm_makes_two_allreduces_and_the_gradients_of_plain_tf():
    """On an uneven batch split batch norm all-reduces once forward (its statistics) and
    once backward; its input, scale and offset gradients are plain TF's."""
    rng = np.random.RandomState(2)
    x = (1 + 3 * rng.randn(6, 3, 4, 6)).astype(np.float32)
    graph, mesh, (tx,) = harness.mesh_with_inputs(
        [(x, dims(("batch", 6), ("h", 3), ("w", 4), ("cin", 6)))])
    y = layers.batch_norm(tx, training=True, epsilon=1e-3)[0]
    weight = rng.randn(*x.shape).astype(np.float32)
    objective = mtf.reduce_sum(y * mtf.import_tf_tensor(mesh, tf.constant(weight), y.shape))
    scale, offset = graph.trainable_variables
    grads = mtf.gradients([objective], [tx, scale.outputs[0], offset.outputs[0]])
    mesh_shape, rules, splits = LAYOUTS["batch_and_in"]
    impl = harness.CountingMeshImpl(mesh_shape, rules, CPUS, splits)
    lowering = hmp.HeteroLowering(graph, {mesh: impl})
    fetch = [lowering.export_to_tf_tensor(t) for t in [y] + grads]
    with tf.Session(config=harness.session_config()) as session:
        harness.initialise(session, graph, lowering, weights=None)
        values = session.run(fetch)
    assert impl.allreduces == [[0], [0]]   # over mesh axis a (the batch), forward and backward

    tf.reset_default_graph()
    tensors = [tf.constant(x), tf.ones([6]), tf.zeros([6])]
    reference = tf.nn.batch_normalization(tensors[0], *tf.nn.moments(tensors[0], [0, 1, 2]),
                                          tensors[2], tensors[1], 1e-3)
    expected = tf.gradients(tf.reduce_sum(reference * weight), tensors)
    with tf.Session() as session:
        expected = session.run([reference] + expected)
    for actual, wanted in zip(values, expected):
        assert actual.shape == wanted.shape
        assert harness.max_relative_error(actual, wanted) <= 1e-4


def test_one_hot_constant_and_broadcast_on_uneven_dims():
    labels = np.array([0, 3, 6, 2, 5, 1], np.int32)
    label_dims = dims(("batch", 6))

    def build(mesh, tlabels):
        encoded = ops.one_hot(tlabels, mtf.Dimension("cout", 7))
        bias = ops.constant(mesh, 2.0, dims(("cout", 7)))
        return encoded * 10.0 + bias    # broadcast of bias over the uneven batch
    for layout in ("batch_and_out", "out_channels"):
        out, _, _, slices = run_on_mesh(build, LAYOUTS[layout], [(labels, label_dims)])
        np.testing.assert_array_equal(out, np.eye(7, dtype=np.float32)[labels] * 10 + 2)
    assert slices == [[6, 5], [6, 2], [6, 5], [6, 2]]   # cout on axis b: [5, 2]


def test_random_and_dropout_slices_follow_the_split():
    x = np.ones((6, 7), np.float32)
    x_dims = dims(("batch", 6), ("cout", 7))

    def build(mesh, tx):
        return layers.dropout(tx, training=True, rate=0.5)
    out, _, _, slices = run_on_mesh(build, LAYOUTS["batch_and_out"], [(x, x_dims)])
    assert slices == [[5, 3], [1, 3], [5, 4], [1, 4]]
    assert set(np.unique(out)) <= {0.0, 2.0}
    assert 0.2 < (out == 0).mean() < 0.8


RESHAPES = {
    # layout, new dims: a split dim is gathered, kept, or created.
    "gather_split_dim": ("in_channels", (("batch", 6), ("flat", 6))),
    "keep_uneven_batch": ("batch_only", (("batch", 6), ("hw", 6))),
    "gather_keeping_batch": ("batch_and_in", (("batch", 6), ("flat", 6))),
    "split_new_dim": ("out_channels", (("cout", 7),)),
}


@pytest.mark.parametrize("case", sorted(RESHAPES))
def test_reshape_on_uneven_splits_matches_numpy(case):
    layout, new_dims = RESHAPES[case]
    old = {"in_channels": (("batch", 6), ("cin", 6)),
           "batch_and_in": (("batch", 6), ("cin", 6)),
           "batch_only": (("batch", 6), ("h", 2), ("w", 3)),
           "out_channels": (("h", 7),)}[layout]
    x = np.arange(np.prod([s for _, s in old]), dtype=np.float32).reshape([s for _, s in old])

    def build(mesh, tx):
        return ops.reshape(tx, dims(*new_dims)) * 1.0
    out, grads, weight, _ = run_on_mesh(build, LAYOUTS[layout], [(x, dims(*old))])
    np.testing.assert_array_equal(out, x.reshape([s for _, s in new_dims]))
    np.testing.assert_array_equal(grads[0], weight.reshape(x.shape))


def test_keep_own_parts_splits_a_whole_axis_unevenly():
    impl = hmp.HeteroMeshImpl("a:2;b:2", "cin:b", CPUS, {"cin": [4, 2]})
    tf.reset_default_graph()
    whole = tf.constant(np.arange(12, dtype=np.float32).reshape(2, 6))
    parts = impl.keep_own_parts(impl.LaidOutTensor([whole] * 4), mesh_axis=1,
                                split_axis=1, sizes=[4, 2])
    with tf.Session(config=harness.session_config()) as session:
        values = session.run(parts.tensor_list)
    expected = [whole_part for _ in range(2) for whole_part in
                (np.arange(12).reshape(2, 6)[:, :4], np.arange(12).reshape(2, 6)[:, 4:])]
    for value, part in zip(values, expected):
        np.testing.assert_array_equal(value, part)
