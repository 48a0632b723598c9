"""Mixed precision (``--precision``): a split computes and trains as one device at the
same precision; weights, slots and checkpoints stay float32; float16's loss scaling leaves
the update as it is; the run records its precision for hmp.predict and --resume.

References: the same model on one device at the same precision (``harness``: stock
Mesh-TensorFlow's lowering), float32 training of the same model, and the checkpoint as
TensorFlow's own reader reads it.

Tolerances are in units of the precision's machine epsilon ``EPS`` (2**-8 for bfloat16,
2**-10 for float16; float32's is 2**-23), the gap between 1 and the next number: one
rounding moves a value by at most half of it, relatively. Measured worst cases are over
the harness's data seeds 0-2 (``harness.data_2d(seed)``), both precisions, on this
machine's CPU (hmp.mesh.ops computes a CPU's low-precision convolutions in float32 on the
rounded values, as a GPU's tensor cores do).
"""

import functools
import json

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

import harness
from cli_batch import run_batch
from hmp.graph.from_graph import model_spec
from hmp.graph.graph import TrainingGraph
from hmp.graph.graph_config import PRECISIONS, Placement
from hmp.graph.workload import layer_ops
from hmp.mesh.optimizers import make_optimizer
from hmp.planning import (DeviceSpec, LinkSpec, ModelSpec, conv_layer_spec, dense_layer_spec,
                          memory_bytes, parse_mesh, predict)
from hmp.run import experiment, inference
from hmp.run.trainer import Trainer
from models import get_model, model_config

EPS = {"mixed_bfloat16": 2.0 ** -8, "mixed_float16": 2.0 ** -10}
MIXED = sorted(EPS)
# One forward pass. An input-split layer's partial sums are rounded on each device and
# again as they are summed (half an EPS of the largest each), where one device rounds
# once; the layers after add their own roundings of values that differ: a few EPS of a
# tensor's largest element (measured <= 3.7 EPS).
ACTIVATION_TOLERANCE = 8
# The loss: a mean of float32 cross-entropies of logits a few EPS apart, whose
# differences average out over the batch (measured <= 0.85 EPS, also after 10 steps).
LOSS_TOLERANCE = 2
# Gradients, and the weights' change over 10 steps, as the norm of the difference over
# the norm of the one-device value. A weight gradient sums products of mixed signs over
# the batch and positions, so each term's rounding (an EPS) grows by how much the terms
# cancel; and a difference of one rounding flips a few discrete choices (a ReLU at 0, the
# largest of a pool window: bfloat16 values tie often), each moving a gradient element
# whole. Measured <= 23 EPS (about as far as one device at the same precision is from
# float32: <= 31 EPS); a lost or doubled partial sum is off by a whole gradient, 1/EPS.
GRADIENT_TOLERANCE = 64
STEPS = 10


def _f32(value):
    return np.asarray(value, np.float32)


def _relative(actual, expected):
    """max |a - e| / max |e| (``harness.max_relative_error``) in float32 arithmetic."""
    return harness.max_relative_error(_f32(actual), _f32(expected))


def _norm_relative(actual, expected):
    """|a - e| / |e| (Frobenius norms) in float32 arithmetic."""
    return float(np.linalg.norm(_f32(actual) - _f32(expected)) / np.linalg.norm(_f32(expected)))


def _dtype(precision):
    return tf.as_dtype(PRECISIONS[precision].dtype)


@pytest.fixture(scope="module")
def weights():
    """The initial weights of harness.cnn2d (float32, as every precision keeps them)."""
    return harness.loss_and_gradients(harness.cnn2d, harness.data_2d(),
                                      harness.SINGLE_DEVICE).weights


@pytest.mark.parametrize("precision", MIXED)
def test_splits_compute_like_one_device(precision, weights):
    model = functools.partial(harness.cnn2d, dtype=_dtype(precision))
    data = harness.data_2d()
    expected = harness.loss_and_gradients(model, data, harness.SINGLE_DEVICE, weights)
    assert expected.activations["logits"].dtype == _dtype(precision).as_numpy_dtype
    eps = EPS[precision]
    for config in (harness.HYBRID_SPLIT, harness.MODEL_SPLIT):
        out = harness.loss_and_gradients(model, data, config, weights)
        assert _relative(out.loss, expected.loss) <= LOSS_TOLERANCE * eps
        for name, value in expected.activations.items():
            assert _relative(out.activations[name], value) <= ACTIVATION_TOLERANCE * eps, name
        for name, value in expected.grads.items():
            assert _norm_relative(out.grads[name], value) <= GRADIENT_TOLERANCE * eps, name


def _train(model, data, config, weights, precision):
    make = functools.partial(make_optimizer, "momentum", 0.05)
    return harness.train(model, data, config, make, STEPS, weights,
                         loss_scale=PRECISIONS[precision].loss_scale)


@pytest.mark.parametrize("precision", MIXED)
def test_splits_train_like_one_device(precision, weights):
    """Ten momentum steps (an update linear in the gradient) of the 2-D CNN on the hybrid
    split and of the 3-D CNN on a batch split, against one device."""
    eps = EPS[precision]
    dtype = _dtype(precision)
    data_3d = harness.data_3d()
    weights_3d = harness.loss_and_gradients(harness.cnn3d, data_3d,
                                            harness.SINGLE_DEVICE).weights
    for model, data, config, initial in (
            (harness.cnn2d, harness.data_2d(), harness.HYBRID_SPLIT, weights),
            (harness.cnn3d, data_3d, harness.BATCH_SPLIT, weights_3d)):
        model = functools.partial(model, dtype=dtype)
        expected_losses, expected = _train(model, data, harness.SINGLE_DEVICE, initial,
                                           precision)
        assert expected_losses[-1] < 0.5 * expected_losses[0]   # it does learn
        losses, final = _train(model, data, config, initial, precision)
        assert _relative(losses, expected_losses) <= LOSS_TOLERANCE * eps
        for name, start in initial.items():   # the weights (the slots start at 0)
            assert (_norm_relative(_f32(final[name]) - _f32(start),
                                   _f32(expected[name]) - _f32(start))
                    <= GRADIENT_TOLERANCE * eps), name


# Trainer-level: test_train_equivalence.py's run (cnn2d with batch norm and dropout, Adam
# at 1e-3, the scene on the devices) at mixed_bfloat16, one device against the hybrid split.
# Adam divides each gradient element by its own RMS, so an element's rounding can flip
# its update (test_training_step.py): measured 2.3 EPS over 20 steps.
ADAM_LOSS_TOLERANCE = 8
HYBRID = Placement("batch:2;model:2", "batch:batch;filters1:model;hidden:model",
                   tuple(harness.CPUS), {"batch": [37, 27], "filters1": [6, 2], "hidden": [11, 5]})
TRAINER_STEPS = 20


@pytest.fixture(scope="module")
def small_experiment():
    return experiment.prepare(experiment.DataConfig(patch_size=5, train_fraction=0.15,
                                                    pca=12, seed=3))


def _trainer_run(exp, placement, model_dir, precision):
    """(losses of TRAINER_STEPS steps, the graph, the checkpoint written at step 0)."""
    config = model_config("cnn2d", 5, exp.bands, exp.n_classes, width=4,
                          precision=precision)
    graph = TrainingGraph(config, placement, 64, exp.scene.labels.shape, "adam", 1e-3, seed=1)
    trainer = Trainer(graph, exp, str(model_dir), seed=7,
                      session_config=harness.session_config(), log=lambda line: None)
    trainer.initialise(False)
    losses = []
    for batch in exp.train.batches(64, seed=7, epoch=0, drop_remainder=True):
        if len(losses) == TRAINER_STEPS:
            break
        losses.append(trainer.session.run([graph.loss, graph.train_op],
                                          graph.feed(batch.indices, batch.labels))[0])
    trainer.close()
    return np.array(losses), graph, tf.train.latest_checkpoint(str(model_dir))


def test_trainer_on_a_split_follows_one_device_with_float32_weights(small_experiment,
                                                                     tmp_path):
    expected, _, _ = _trainer_run(small_experiment, Placement("", "", ("/cpu:0",), {}),
                                  tmp_path / "one", "mixed_bfloat16")
    losses, graph, checkpoint = _trainer_run(small_experiment, HYBRID, tmp_path / "hybrid",
                                             "mixed_bfloat16")
    # it learns: a step's loss jumps by ~0.1 with its batch, so five steps' means
    assert expected[-5:].mean() < 0.8 * expected[:5].mean()
    assert _relative(losses, expected) <= ADAM_LOSS_TOLERANCE * EPS["mixed_bfloat16"]
    # the model computed in bfloat16: its layers' outputs, and TensorFlow ops of the step
    layers = layer_ops(graph.mtf_graph)
    assert len(layers) == 7 and {l.op.outputs[0].dtype for l in layers} == {tf.bfloat16}
    assert any(op.outputs and op.outputs[0].dtype == tf.bfloat16
               for op in graph.tf_graph.get_operations() if op.type in ("MatMul", "Einsum"))
    # ... from float32 weights and slots: masters, every device's slices, the checkpoint
    slices = [t for v in graph.mtf_graph.all_variables
              for t in graph.lowering.variables[v].laid_out_tensor.tensor_list]
    assert len(slices) > len(graph.mtf_graph.all_variables)   # split over 4 devices
    assert {t.dtype.base_dtype for t in slices} == {tf.float32}
    assert {v.dtype.base_dtype for v in graph.tf_graph.get_collection(
        tf.GraphKeys.GLOBAL_VARIABLES) if v.name != "global_step:0"} == {tf.float32}
    saved = tf.train.load_checkpoint(checkpoint).get_variable_to_dtype_map()
    assert any(name.endswith("/adam_m") for name in saved)
    assert {dtype for name, dtype in saved.items() if name != "global_step"} == {tf.float32}


def test_float16_loss_scaling_leaves_the_update_as_it_is(weights):
    """One SGD step (the update: the gradient times the rate) of the 2-D CNN in float16
    with its loss scale, against float16 without one and float32."""
    data, one = harness.data_2d(), harness.SINGLE_DEVICE
    make = functools.partial(make_optimizer, "sgd", 0.05)
    model = functools.partial(harness.cnn2d, dtype=tf.float16)
    scale = PRECISIONS["mixed_float16"].loss_scale
    assert scale == 2 ** 12
    _, scaled = harness.train(model, data, one, make, 1, weights, loss_scale=scale)
    _, unscaled = harness.train(model, data, one, make, 1, weights)
    _, reference = harness.train(harness.cnn2d, data, one, make, 1, weights)
    eps = EPS["mixed_float16"]
    for name, start in weights.items():
        update = _f32(scaled[name]) - start
        # Scaling by a power of two commutes with every rounding but below float16's
        # smallest normal number (6e-5), where the unscaled step keeps fewer digits:
        # measured 1e-3 EPS apart, most tensors equal bit for bit.
        assert _norm_relative(update, _f32(unscaled[name]) - start) <= eps / 8, name
        assert (_norm_relative(update, _f32(reference[name]) - start)
                <= GRADIENT_TOLERANCE * eps), name   # measured <= 9.5 EPS


# the model is incidental to what the run records (its precision, for predict and resume;
# the split's training in 16 bits: the in-process tests above): spectral's graph is a third
# of cnn2d's
TINY = ["--model=spectral", "--width=4", "--patch_size=5", "--batch_size=64",
        "--devices=/cpu:0,/cpu:1", "--speeds=2,1", "--mesh=model:2", "--notta"]


@pytest.fixture(scope="module")
def cli_runs(tmp_path_factory, small_scene):
    """hmp.train's runs (tests/cli_batch.py): a bad --precision; one epoch at
    mixed_bfloat16 on conftest's small scene; its --resume without --precision."""
    folder = tmp_path_factory.mktemp("mixed")
    tiny = [*TINY, *small_scene, "--model_dir=%s" % folder]
    return folder, run_batch("hmp.train", [
        {"args": ["--precision=float8"]},
        {"args": [*tiny, "--precision=mixed_bfloat16", "--epochs=1"]},
        {"args": [*tiny, "--resume", "--epochs=2"]}])


def test_bad_precision_gives_one_line_error(cli_runs):
    bad = cli_runs[1][0]
    assert bad.returncode == 2
    lines = bad.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("hmp.train: error:"), bad.stderr[-2000:]
    assert "--precision=float8" in lines[0], lines[0]
    assert "one of <float32|mixed_bfloat16|mixed_float16>" in lines[0], lines[0]


def test_the_run_records_its_precision_for_predict_and_resume(cli_runs):
    folder, (_, trained, resumed) = cli_runs
    assert trained.returncode == 0, trained.stderr[-2000:]
    results = json.loads((folder / "results.json").read_text())
    assert results["flags"]["precision"] == "mixed_bfloat16"
    assert "--precision=mixed_bfloat16" in (folder / "flags.txt").read_text().splitlines()
    # hmp.predict builds the run's model in its precision, from float32 weights
    run = inference.TrainedRun.open(str(folder), get_model)
    assert run.model_config.precision == "mixed_bfloat16"
    graph = inference.InferenceGraph(run.model_config, inference.batch_placement(
        ["/cpu:0"], 8), 8, (12, 12))
    assert any(op.outputs and op.outputs[0].dtype == tf.bfloat16
               for op in graph.tf_graph.get_operations() if op.type in ("MatMul", "Einsum"))
    saved = tf.train.load_checkpoint(run.checkpoint).get_variable_to_dtype_map()
    assert {dtype for name, dtype in saved.items() if name != "global_step"} == {tf.float32}
    # --resume in another precision (here the default, float32) is refused
    assert resumed.returncode == 2
    assert resumed.stderr.strip() == (
        "hmp.train: error: --precision=float32: the run in %s was trained with "
        "--precision=mixed_bfloat16; resume it with that (--flagfile=%s gives all its "
        "flags), or start over with --overwrite" % (folder, folder / "flags.txt"))


@pytest.mark.parametrize("precision, activation_bytes",
                         [("float32", 4), ("mixed_bfloat16", 2), ("mixed_float16", 2)])
def test_the_spec_reads_its_activation_bytes_off_the_graph(precision, activation_bytes):
    spec = model_spec(model_config("cnn2d", 5, 8, 4, width=4, precision=precision))
    assert spec.activation_bytes == activation_bytes
    assert spec.layers == model_spec(model_config("cnn2d", 5, 8, 4, width=4)).layers


def _pair(activation_bytes):
    """conv1 splits its 8 output filters, conv2 its 8 input channels
    (tests/planning/test_costmodel.py)."""
    return ModelSpec("pair", [
        conv_layer_spec("conv1", "conv2d", (4, 4), 3, 3, 8, split_dim="filters1",
                        split_role="output"),
        conv_layer_spec("conv2", "conv2d", (4, 4), 1, 8, 2, split_dim="filters1",
                        split_role="input"),
    ], (4, 4, 3), activation_bytes=activation_bytes)


def test_the_cost_model_prices_16_bit_activations_and_float32_gradient_sums():
    full, mixed = _pair(4), _pair(2)
    conv1, conv2 = mixed.layers
    fractions = np.array([[0.75, 0.25], [0.75, 0.25]])
    # memory: weights, gradient sum and two slots in float32, the 16-bit read and gradient
    # of each weight; float32 input patches, 16-bit layer outputs
    assert memory_bytes(mixed, [10], fractions)[0] == pytest.approx(
        [(4 * 4 + 2 * 2) * f * (conv1.params + conv2.params)
         + 10 * (4 * 48 + 2 * (f * conv1.output_elems_per_sample
                               + conv2.output_elems_per_sample)) for f in (0.75, 0.25)])
    # the model axis moves activations and their gradients: half the bytes (no latency)
    link = LinkSpec(bandwidth_bytes_per_s=1e6)
    two = [DeviceSpec("/device:0", 1e9), DeviceSpec("/device:1", 1e9)]
    model = [predict(spec, two, parse_mesh("model:2"), 10, {"filters1": [5, 3]}, link)
             for spec in (full, mixed)]
    assert model[0].comm > 0 and model[1].comm == pytest.approx(model[0].comm / 2)
    # the batch axis sums the weight gradients in float32: the same bytes
    batch = [predict(spec, two, parse_mesh("batch:2"), 10, {"batch": [6, 4]}, link)
             for spec in (full, mixed)]
    assert batch[0].comm > 0 and batch[1].comm == pytest.approx(batch[0].comm)
    # a layer's memory traffic (weights read and outputs written in 16 bits)
    one = ModelSpec("one", [dense_layer_spec("fc", 100, 10)], (100,), activation_bytes=2)
    slow_memory = [DeviceSpec("/cpu:0", 1e12, mem_bw=1e3)]
    step = predict(one, slow_memory, parse_mesh("batch:1"), 2, {"batch": [2]}).step
    assert step == pytest.approx(3 * 2 * (1010 + 2 * 10) / 1e3)
