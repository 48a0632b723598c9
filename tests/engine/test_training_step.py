"""Training on uneven splits follows the single-device trajectory exactly.

Also checks the ordering that makes it so: every optimizer update must wait
for the whole backward pass (Mesh-TF reads variables without a snapshot, so an
early assign would change another variable's gradient).
"""

import functools
import itertools

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

import harness
import hmp
from hmp import layers
from hmp.mesh.optimizers import OPTIMIZERS, make_optimizer
from hmp.compat import import_mesh_tensorflow

mtf = import_mesh_tensorflow()
STEPS = 10
# Max relative error (harness.max_relative_error) allowed after STEPS steps.
# The harness seeds every graph, so each error below is one fixed number per
# machine: these tests cannot flake, and a tolerance only has to cover how
# rounding differs between the split and the single-device run.
#
# A split sums partial products in another order, so a gradient element
# differs by a few float32 ulps of the largest terms summed (~1e-7 of the
# tensor's largest element). The losses see only that: 1e-5 (measured
# <= 1.4e-6 for all optimizers over weight seeds 0-6).
LOSS_TOLERANCE = 1e-5
WEIGHT_TOLERANCE = {
    # Updates linear in the gradient (LARS scales by a ratio of whole-tensor
    # norms): the weights carry the gradients' ~1e-7 per step; over 10 steps
    # <= 1e-6 expected, 2.3e-6 measured (seeds 0-6).
    "sgd": 1e-5, "momentum": 1e-5, "lars": 1e-5,
    # Adam divides every element by its own RMS (lr * m / (sqrt(v) + 1e-6)),
    # so an element's update carries the *relative* rounding error of its own
    # gradient, magnified by max|g| / |g_i|; this model has elements 1e-6 of
    # the largest (the 1e-6 epsilon caps it). Any bound from that is too loose
    # to test anything, so this is the measured worst case, 2.3e-5 over seeds
    # 0-6 (1.21e-5 was once seen with unseeded weights), with 4x margin.
    "adam": 1e-4,
    # Adafactor normalises 1-D variables (biases) per element like Adam, and
    # factored matrices by row and column RMS: measured <= 5.1e-6; 10x margin.
    "adafactor": 5e-5,
}

LEARNING_RATES = {"sgd": 0.05, "momentum": 0.05, "adam": 0.01, "adafactor": 0.01,
                  "lars": 0.5}
OPTIMIZERS = {name: functools.partial(make_optimizer, name, lr)
              for name, lr in LEARNING_RATES.items()}


@pytest.fixture(scope="module")
def initial_weights():
    return harness.loss_and_gradients(harness.cnn2d, harness.data_2d(),
                                      harness.SINGLE_DEVICE).weights


@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_ten_steps_match_single_device(optimizer, initial_weights):
    make = OPTIMIZERS[optimizer]
    data = harness.data_2d()
    expected_losses, expected_weights = harness.train(
        harness.cnn2d, data, harness.SINGLE_DEVICE, make, STEPS, initial_weights)
    assert expected_losses[-1] < expected_losses[0]   # it does learn
    for config in (harness.HYBRID_SPLIT, harness.MODEL_SPLIT):
        losses, weights = harness.train(harness.cnn2d, data, config, make, STEPS,
                                        initial_weights)
        assert harness.max_relative_error(losses, expected_losses) <= LOSS_TOLERANCE
        for name, value in expected_weights.items():
            assert (harness.max_relative_error(weights[name], value)
                    <= WEIGHT_TOLERANCE[optimizer]), name


def test_3d_cnn_trains_like_single_device_on_batch_split():
    data = harness.data_3d()
    weights = harness.loss_and_gradients(harness.cnn3d, data, harness.SINGLE_DEVICE).weights
    # Adam divides by sqrt(v), which magnifies rounding differences of
    # near-zero gradients (a batch split sums in another order): momentum
    # shows the same thing without that noise.
    make = OPTIMIZERS["momentum"]
    expected_losses, expected_weights = harness.train(
        harness.cnn3d, data, harness.SINGLE_DEVICE, make, STEPS, weights)
    losses, final = harness.train(harness.cnn3d, data, harness.BATCH_SPLIT, make, STEPS,
                                  weights)
    assert harness.max_relative_error(losses, expected_losses) <= LOSS_TOLERANCE
    for name, value in expected_weights.items():
        assert (harness.max_relative_error(final[name], value)
                <= WEIGHT_TOLERANCE["momentum"]), name


def _early_reads(ordered, optimizer="sgd", config=harness.MODEL_SPLIT):
    """Variable reads that an update of the same variable does not wait for.

    Lowers one training step of ``optimizer`` (``hmp.mesh.optimizers``, with its
    weight decay) and, for every write to a slice variable made by the optimizer,
    lists the reads of that variable by the forward/backward pass that are not among
    the write's ancestors (so may run after it).
    """
    tf.reset_default_graph()
    tf.train.get_or_create_global_step()
    graph = mtf.Graph()
    mesh = mtf.Mesh(graph, "mesh")
    loss, _ = harness.cnn2d(mesh, *harness.data_2d())
    step = make_optimizer(optimizer, 0.1, weight_decay=0.01)
    updates = (hmp.train_step(loss, step) if ordered
               else harness.unordered_train_step(loss, step))
    _, lowering = harness.lower(graph, mesh, config)
    tf_loss = lowering.export_to_tf_tensor(loss)
    assigns = [op for u in updates for op in _assign_ops(lowering.lowered_operation(u))]
    assert assigns
    step_ops = _ancestors([tf_loss.op] + assigns)
    early = []
    for assign in assigns:
        variable = assign.inputs[0].op
        before = _ancestors([assign])
        early += [reader.name for out in variable.outputs for reader in out.consumers()
                  if reader in step_ops and reader is not assign and reader not in before
                  and assign not in _ancestors([reader])]   # a later write waits for it
    return early


def _assign_ops(op):
    """The variable-writing TF ops inside a (grouped) lowered update: assigns (also
    adding and subtracting ones) and fused optimizer kernels."""
    return [a for a in _ancestors([op])
            if a.type.startswith("Assign") or a.type.startswith("ResourceApply")]


def _ancestors(ops):
    seen, stack = set(), list(ops)
    while stack:
        op = stack.pop()
        if op in seen:
            continue
        seen.add(op)
        stack.extend(t.op for t in op.inputs)
        stack.extend(op.control_inputs)
    return seen


@pytest.mark.parametrize("config", ["model", "batch"])
@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_every_update_waits_for_all_gradient_reads(optimizer, config):
    """Also the weight decay's write, which needs no gradient of its own. On the batch
    split each device's updates wait for its own summed gradients only."""
    assert _early_reads(True, optimizer, harness.UNEVEN_CONFIGS[config]) == []


@pytest.mark.parametrize("config", ["model", "batch"])
def test_naive_step_lets_updates_race_with_gradient_reads(config):
    """The check above can fail: without the barrier, reads go unordered."""
    assert _early_reads(False, config=harness.UNEVEN_CONFIGS[config])


@pytest.mark.parametrize("config", ["model", "batch", "hybrid"])
def test_barrier_waits_across_devices_only_where_variables_are_split(config):
    """Where filters are split, each device's ordered gradients wait for every device's;
    on a batch split (every variable a copy per device) for the device's own only, so the
    barrier adds no exchange between devices to the all-reduce's."""
    config = harness.UNEVEN_CONFIGS[config]
    tf.reset_default_graph()
    graph = mtf.Graph()
    mesh = mtf.Mesh(graph, "mesh")
    loss, _ = harness.cnn2d(mesh, *harness.data_2d())
    hmp.train_step(loss, make_optimizer("sgd", 0.1))
    harness.lower(graph, mesh, config)
    ordered = [op for op in tf.get_default_graph().get_operations()
               if op.name.startswith("all_gradients/") and op.type == "Identity"]
    waited_for = {op.device: {c.device for c in op.control_inputs} for op in ordered}
    devices = set(waited_for)
    assert len(devices) == len(config.devices)
    for device, others in waited_for.items():
        assert others == ({device} if config is harness.BATCH_SPLIT else devices), device


def _dropout_masks(config, optimizer, steps=3):
    """Each step's dropout mask in a user's loop (docs/engine.md's) of ``steps`` runs of
    the 2-D CNN's ordered step, its hidden filters multiplied by a dropout of ones;
    ``optimizer`` Adafactor (which makes a global step) or Adam, the user making one."""
    harness.reset_graph()
    if optimizer == "adam":
        tf.train.get_or_create_global_step()
    graph = mtf.Graph()
    mesh = mtf.Mesh(graph, "mesh")
    x, y = harness.data_2d()
    batch = mtf.Dimension("batch", x.shape[0])
    tx = mtf.import_tf_tensor(mesh, tf.constant(x), mtf.Shape(
        [batch] + [mtf.Dimension(n, s) for n, s in zip(("h", "w", "bands"), x.shape[1:])]))
    hidden = layers.conv2d(tx, mtf.Dimension("filters1", 12), activation=mtf.relu)
    mask = layers.dropout(mtf.ones(mesh, hidden.shape), True, 0.5)
    logits = layers.dense(hidden * mask, mtf.Dimension("classes", harness.N_CLASSES),
                              reduced_dims=hidden.shape.dims[1:])
    labels = mtf.import_tf_tensor(mesh, tf.constant(y), mtf.Shape([batch]))
    loss = mtf.reduce_mean(layers.softmax_cross_entropy(logits, labels,
                                                            logits.shape.dims[-1]))
    updates = hmp.train_step(loss, make_optimizer(optimizer, 0.01))
    assert tf.train.get_global_step() is not None
    impl = hmp.HeteroMeshImpl(config.shape, config.layout, config.devices, config.splits)
    lowering = hmp.HeteroLowering(graph, {mesh: impl})
    tf_mask = lowering.export_to_tf_tensor(mask)
    step = tf.group([lowering.lowered_operation(u) for u in updates])
    with tf.Session(config=harness.session_config()) as session:
        harness.initialise(session, graph, lowering, weights=None)
        return [session.run([tf_mask, step])[0] for _ in range(steps)]


@pytest.mark.parametrize("optimizer", ["adafactor", "adam"])
def test_a_users_loop_drops_other_units_every_step_as_on_one_device(optimizer):
    """The graph has a global step that nothing advances (``hmp.train_step`` does not):
    the draws are not keyed by it (only a ``TrainingGraph``'s are, by each device's step
    counter), so every step draws a new mask, on a filter split the same as on one device."""
    masks = _dropout_masks(harness.MODEL_SPLIT, optimizer)
    for mask, alone in zip(masks, _dropout_masks(harness.MeshConfig("", "", [""], {}),
                                                 optimizer)):
        np.testing.assert_array_equal(mask, alone)
    assert {float(v) for mask in masks for v in np.unique(mask)} == {0.0, 2.0}
    for earlier, later in itertools.combinations(masks, 2):
        assert 0.3 < (earlier != later).mean() < 0.7   # half of the units differ
