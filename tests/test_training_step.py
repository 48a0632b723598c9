"""Training on uneven splits follows the single-device trajectory exactly.

Also checks the ordering that makes it so: every optimizer update must wait
for the whole backward pass (Mesh-TF reads variables without a snapshot, so an
early assign would change another variable's gradient).
"""

import functools

import pytest
import tensorflow.compat.v1 as tf

import harness
import hmp
from hmp.optimizers import make_optimizer

mtf = hmp.mesh_impl.mtf
TOLERANCE = 1e-5
STEPS = 10

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
        assert harness.max_relative_error(losses, expected_losses) <= TOLERANCE
        for name, value in expected_weights.items():
            assert harness.max_relative_error(weights[name], value) <= TOLERANCE, name


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
    assert harness.max_relative_error(losses, expected_losses) <= TOLERANCE
    for name, value in expected_weights.items():
        assert harness.max_relative_error(final[name], value) <= TOLERANCE, name


def _early_reads(ordered):
    """Variable reads that an update of the same variable does not wait for.

    Lowers one training step and, for every assign to a slice variable made by
    the optimizer, lists the reads of that variable by the forward/backward
    pass that are not among the assign's ancestors (so may run after it).
    """
    tf.reset_default_graph()
    tf.train.get_or_create_global_step()
    graph = mtf.Graph()
    mesh = mtf.Mesh(graph, "mesh")
    loss, _ = harness.cnn2d(mesh, *harness.data_2d())
    optimizer = mtf.optimize.SgdOptimizer(0.1)
    updates = (hmp.train_step(loss, optimizer) if ordered
               else harness.unordered_train_step(loss, optimizer))
    _, lowering = harness.lower(graph, mesh, harness.MODEL_SPLIT)
    tf_loss = lowering.export_to_tf_tensor(loss)
    assigns = [op for u in updates for op in _assign_ops(lowering.lowered_operation(u))]
    assert assigns
    step_ops = _ancestors([tf_loss.op] + assigns)
    early = []
    for assign in assigns:
        variable = assign.inputs[0].op
        before = _ancestors([assign])
        early += [reader.name for out in variable.outputs for reader in out.consumers()
                  if reader in step_ops and reader is not assign and reader not in before]
    return early


def _assign_ops(op):
    """The variable-assigning TF ops inside a (grouped) lowered update."""
    return [a for a in _ancestors([op]) if a.type in ("Assign", "AssignVariableOp")]


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


def test_every_update_waits_for_all_gradient_reads():
    assert _early_reads(ordered=True) == []


def test_naive_step_lets_updates_race_with_gradient_reads():
    """The check above can fail: without the barrier, reads go unordered."""
    assert _early_reads(ordered=False)
