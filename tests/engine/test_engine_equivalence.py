"""Uneven splits compute exactly what one device computes.

For a small 2-D and 3-D CNN in the alternating split pattern, the loss, every
gradient and every activation on an uneven model split (3 devices), an uneven
batch split (2 devices) and a 2-D mesh with both must equal stock
Mesh-TensorFlow on one device with the same weights (max relative error
1e-5), and every device must hold a slice of exactly its planned size.
"""

import pytest

import harness
import models.cnn2d
from harness import BATCH, CPUS, HYBRID_SPLIT, MODEL_SPLIT, BATCH_SPLIT

# A split sums partial products in another order than one device: a few
# float32 ulps (6e-8) per sum, compounded through a few layers forward and
# back. Measured <= 1.6e-6 over weight seeds 0-3; the harness seeds every
# graph, so the error is the same in every run.
TOLERANCE = 1e-5
MODELS = {"cnn2d": (harness.cnn2d, harness.data_2d),
          "cnn3d": (harness.cnn3d, harness.data_3d)}


@pytest.fixture(scope="module", params=sorted(MODELS))
def reference(request):
    model, make_data = MODELS[request.param]
    data = make_data()
    result = harness.loss_and_gradients(model, data, harness.SINGLE_DEVICE)
    return model, data, result


@pytest.mark.parametrize("split", sorted(harness.UNEVEN_CONFIGS))
def test_loss_gradients_activations_match_single_device(reference, split):
    model, data, expected = reference
    actual = harness.loss_and_gradients(model, data, harness.UNEVEN_CONFIGS[split],
                                        weights=expected.weights)
    assert harness.max_relative_error(actual.loss, expected.loss) <= TOLERANCE
    assert sorted(actual.grads) == sorted(expected.grads)
    for name, grad in expected.grads.items():
        assert harness.max_relative_error(actual.grads[name], grad) <= TOLERANCE, name
    for name, activation in expected.activations.items():
        assert harness.max_relative_error(actual.activations[name], activation) <= TOLERANCE, name


def _shapes(result, name):
    return [shape for shape, _ in result.slices[name]]


def _devices(result, name):
    return [device.lower().replace("device:", "").split("/")[-1]
            for _, device in result.slices[name]]


def test_model_split_slices_have_planned_sizes():
    result = harness.loss_and_gradients(harness.cnn2d, harness.data_2d(), MODEL_SPLIT)
    sizes = MODEL_SPLIT.splits["filters1"]
    assert _shapes(result, "conv1/kernel") == [[3, 3, 5, s] for s in sizes]
    assert _shapes(result, "conv1/bias") == [[s] for s in sizes]
    assert _shapes(result, "conv2/kernel") == [[3, 3, s, 6] for s in sizes]
    assert _shapes(result, "conv2/bias") == [[6]] * 3
    assert _shapes(result, "conv1") == [[BATCH, 7, 7, s] for s in sizes]
    assert _shapes(result, "conv2") == [[BATCH, 5, 5, 6]] * 3
    assert _devices(result, "conv1/kernel") == ["cpu:0", "cpu:1", "cpu:2"]
    assert _devices(result, "conv1") == ["cpu:0", "cpu:1", "cpu:2"]


def test_batch_split_slices_have_planned_sizes():
    result = harness.loss_and_gradients(harness.cnn3d, harness.data_3d(), BATCH_SPLIT)
    sizes = BATCH_SPLIT.splits["batch"]
    assert _shapes(result, "conv1") == [[s, 9, 5, 5, 12] for s in sizes]
    assert _shapes(result, "conv2") == [[s, 4, 3, 3, 4] for s in sizes]
    assert _shapes(result, "pool") == [[s, 4, 2, 2, 4] for s in sizes]
    assert _shapes(result, "conv1/kernel") == [[3, 3, 3, 1, 12]] * 2


def test_hybrid_mesh_slices_have_planned_sizes():
    result = harness.loss_and_gradients(harness.cnn2d, harness.data_2d(), HYBRID_SPLIT)
    batch, filters = HYBRID_SPLIT.splits["batch"], HYBRID_SPLIT.splits["filters1"]
    # Device (b, m) is devices[2 * b + m]: batch share b, filter share m.
    assert _shapes(result, "conv1") == [[b, 7, 7, f] for b in batch for f in filters]
    assert _shapes(result, "conv1/kernel") == [[3, 3, 5, f] for _ in batch for f in filters]
    assert _shapes(result, "logits") == [[b, 4] for b in batch for _ in filters]
    assert _devices(result, "conv1") == [c[1:] for c in CPUS]


def _cnn2d_model(mesh, x_np, y_np):
    """The built-in cnn2d at width 3 (filters1 6, filters2 6, hidden 12), inference mode
    (batch norm on its moving averages, no dropout), with a cross-entropy loss."""
    batch = harness.mtf.Dimension("batch", x_np.shape[0])
    x = harness.mtf.import_tf_tensor(mesh, harness.tf.constant(x_np), harness.mtf.Shape(
        [batch] + [harness.mtf.Dimension(n, s) for n, s in zip(("h", "w", "bands"),
                                                                x_np.shape[1:])]))
    y = harness.mtf.import_tf_tensor(mesh, harness.tf.constant(y_np), harness.mtf.Shape([batch]))
    classes = harness.mtf.Dimension("classes", harness.N_CLASSES)
    logits = models.cnn2d.logits(x, classes, width=3, training=False)
    loss = harness.mtf.reduce_mean(harness.layers.softmax_cross_entropy(logits, y, classes))
    return loss, {"logits": logits}


def test_model_split_with_a_replicated_dim_matches_single_device():
    # filters2 is left out of the layout rules (replicated: every device computes block 2
    # whole), filters1 and hidden are split unevenly over 3 devices.
    data = harness.data_2d()
    expected = harness.loss_and_gradients(_cnn2d_model, data, harness.SINGLE_DEVICE)
    config = harness.MeshConfig("model:3", "filters1:model;hidden:model", CPUS[:3],
                                {"filters1": [3, 2, 1], "hidden": [7, 4, 1]})
    actual = harness.loss_and_gradients(_cnn2d_model, data, config, weights=expected.weights)
    assert harness.max_relative_error(actual.loss, expected.loss) <= TOLERANCE
    assert sorted(actual.grads) == sorted(expected.grads)
    for name, grad in expected.grads.items():
        assert harness.max_relative_error(actual.grads[name], grad) <= TOLERANCE, name
    assert harness.max_relative_error(actual.activations["logits"],
                                      expected.activations["logits"]) <= TOLERANCE
    assert _shapes(actual, "block1/split_out/kernel") == [[3, 3, 5, s] for s in (3, 2, 1)]
    assert _shapes(actual, "block2/split_out/kernel") == [[3, 3, 3, 6]] * 3  # whole
    assert _shapes(actual, "block2/split_in/kernel") == [[3, 3, 6, 3]] * 3
    assert _shapes(actual, "hidden/kernel") == [[4, 4, 3, s] for s in (7, 4, 1)]
