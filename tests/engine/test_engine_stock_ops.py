"""Stock Mesh-TensorFlow operations on uneven splits: exact, or refused by name.

Every case lowers the same stock-op graph twice, with hmp on an uneven split
and with stock Mesh-TF on one device, and compares the outputs and the
gradients of sum(output * r) with respect to the float inputs. Operations that
only move, select or encode values must agree bit for bit; ones that sum in
another order (reductions, softmax, layer norm, cumsum, einsum) within 1e-6
relative (float32 rounds at 6e-8 per operation; these chains are a few
operations deep on tiny tensors).
"""

import io
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

import harness
import hmp
from hmp.compat import import_mesh_tensorflow

mtf = import_mesh_tensorflow()
CPUS = harness.CPUS
ROUNDING = 1e-6

BATCH = mtf.Dimension("batch", 6)
CLASSES = mtf.Dimension("classes", 8)
H = mtf.Dimension("h", 3)
CIN2 = mtf.Dimension("cin", 2)

# Uneven layouts of [batch, classes, h] on 2 or 2x2 devices.
LAYOUTS = {
    "classes": ("model:2", "classes:model", CPUS[:2], {"classes": [6, 2]}),
    "batch": ("model:2", "batch:model", CPUS[:2], {"batch": [5, 1]}),
    "both": ("a:2;b:2", "batch:a;classes:b", CPUS, {"batch": [2, 4], "classes": [1, 7]}),
}


def evaluate(build, inputs, mesh_impl=None):
    """Outputs of ``build(mesh, *inputs)`` and the gradients of
    sum(output * r) over its float outputs, with respect to the float inputs
    it depends on.

    Lowered by hmp on ``mesh_impl``, or by stock Mesh-TF on one device.
    """
    graph, mesh, tensors = harness.mesh_with_inputs(inputs)
    outputs = build(mesh, *tensors)
    rng = np.random.RandomState(1)
    objective = [mtf.reduce_sum(y * mtf.import_tf_tensor(mesh, tf.constant(
        rng.randn(*y.shape.to_integer_list).astype(np.float32)), y.shape))
                 for y in outputs if y.dtype.is_floating]
    wrt = [t for t in tensors if t.dtype.is_floating]
    grads = mtf.gradients([mtf.add_n(objective)], wrt) if objective and wrt else []
    grads = [g for g in grads if g is not None]   # none through stop_gradient
    if mesh_impl is None:
        lowering = mtf.Lowering(graph, {mesh: mtf.placement_mesh_impl.PlacementMeshImpl(
            "", "", [""])})
    else:
        lowering = hmp.HeteroLowering(graph, {mesh: mesh_impl})
    fetches = [lowering.export_to_tf_tensor(t) for t in outputs + grads]
    with tf.Session(config=harness.session_config()) as session:
        harness.initialise(session, graph, lowering, weights=None)
        return session.run(fetches)


def assert_like_one_device(build, inputs, layout, tolerance=0.0):
    expected = evaluate(build, inputs)
    actual = evaluate(build, inputs, hmp.HeteroMeshImpl(*layout))
    assert len(actual) == len(expected)
    for got, want in zip(actual, expected):
        assert got.shape == want.shape and got.dtype == want.dtype
        if tolerance:
            assert harness.max_relative_error(got, want) <= tolerance
        else:
            np.testing.assert_array_equal(got, want)
    return actual


def logits(seed=0):
    """[batch, classes, h] floats without ties."""
    values = np.random.RandomState(seed).permutation(6 * 8 * 3).astype(np.float32)
    return values.reshape(6, 8, 3) / 10.0, [BATCH, CLASSES, H]


LABELS = (np.array([0, 7, 3, 6, 1, 5], np.int32), [BATCH])


def test_argmax_finds_the_peak_in_the_small_part():
    """The audit's case: classes split [3, 1], every row peaks at class 3."""
    batch, classes = mtf.Dimension("batch", 4), mtf.Dimension("classes", 4)
    x = np.random.RandomState(0).rand(4, 4).astype(np.float32)
    x[:, 3] += 2.0
    layout = ("model:2", "classes:model", CPUS[:2], {"classes": [3, 1]})
    actual, = assert_like_one_device(
        lambda mesh, t: [mtf.argmax(t, classes)], [(x, [batch, classes])], layout)
    np.testing.assert_array_equal(actual, np.argmax(x, axis=1))


# name: (build(mesh, *inputs) -> [outputs], inputs, tolerance)
CASES = {
    "argmax": (lambda mesh, x: [mtf.argmax(x, CLASSES)], [logits()], 0),
    "top_1": (lambda mesh, x: list(mtf.top_1(x, CLASSES)), [logits()], 0),
    "top_k_iterative": (lambda mesh, x: list(mtf.top_k(x, CLASSES, mtf.Dimension("k", 3))),
                        [logits()], 0),
    "top_k_5": (lambda mesh, x: list(mtf.top_k(x, CLASSES, mtf.Dimension("k", 5))),
                [logits()], 0),
    "sample_at_temperature_0": (
        lambda mesh, x: [mtf.sample_with_temperature(x, CLASSES, temperature=0.0)],
        [logits()], 0),
    "one_hot": (lambda mesh, y: [mtf.one_hot(y, CLASSES, on_value=2.0, off_value=-1.0)],
                [LABELS], 0),
    "gather": (lambda mesh, x, y: [mtf.gather(x, y, CLASSES)], [logits(), LABELS], ROUNDING),
    "zeros_ones": (lambda mesh, x: [x + mtf.zeros(mesh, x.shape) + mtf.ones(mesh, [CLASSES])],
                   [logits()], 0),
    "range": (lambda mesh, x: [x * mtf.range(mesh, CLASSES, tf.float32)], [logits()], 0),
    "rename_dimension": (lambda mesh, x: [mtf.rename_dimension(x, "classes", "c2") * 1.0],
                         [logits()], 0),
    "reshape_merge": (lambda mesh, x: [mtf.reshape(x, [BATCH, mtf.Dimension("flat", 24)])],
                      [logits()], 0),
    "shift_right": (lambda mesh, x: [mtf.shift(x, 1, CLASSES, wrap=False)], [logits()], 0),
    "shift_left_3": (lambda mesh, x: [mtf.shift(x, -3, CLASSES, wrap=False)], [logits()], 0),
    "shift_wrap": (lambda mesh, x: [mtf.shift(x, 5, CLASSES, wrap=True)], [logits()], 0),
    "shift_batch": (lambda mesh, x: [mtf.shift(x, 2, BATCH, wrap=True)], [logits()], 0),
    "shift_unsplit": (lambda mesh, x: [mtf.shift(x, 1, H, wrap=False)], [logits()], 0),
    "pad_unsplit": (lambda mesh, x: [mtf.pad(x, [1, 2], "h")], [logits()], 0),
    "cumsum": (lambda mesh, x: [mtf.cumsum(x, CLASSES)], [logits()], ROUNDING),
    "softmax": (lambda mesh, x: [mtf.softmax(x, CLASSES)], [logits()], ROUNDING),
    "layer_norm": (lambda mesh, x: [mtf.layers.layer_norm(x, CLASSES)], [logits()], ROUNDING),
    "reduce_sum_mean": (lambda mesh, x: [mtf.reduce_sum(x, reduced_dim=CLASSES),
                                         mtf.reduce_mean(x, reduced_dim=BATCH)],
                        [logits()], ROUNDING),
    "reduce_max_min": (lambda mesh, x: [mtf.reduce_max(x, reduced_dim=CLASSES),
                                        mtf.reduce_min(x, reduced_dim=BATCH)], [logits()], 0),
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("case", sorted(CASES))
def test_stock_op_on_uneven_split_equals_one_device(case, layout):
    build, inputs, tolerance = CASES[case]
    assert_like_one_device(build, inputs, LAYOUTS[layout], tolerance)


def test_sampling_with_temperature_picks_the_peak_in_the_small_part():
    """Gumbel noise -log(-log(u)), u in [1e-9, 1), lies in (-3.1, 16.7) in
    float32: it cannot overturn a margin of 100."""
    x = np.zeros((6, 8, 3), np.float32)
    peaks = np.array([7, 6, 0, 7, 3, 6])
    x[np.arange(6), peaks, :] = 100.0
    build = lambda mesh, t: [mtf.sample_with_temperature(t, CLASSES, temperature=1.0)]
    sample, = evaluate(build, [(x, [BATCH, CLASSES, H])], hmp.HeteroMeshImpl(*LAYOUTS["both"]))
    np.testing.assert_array_equal(sample, np.repeat(peaks[:, None], 3, axis=1))


RESHAPE_LAYOUT = ("a:2;b:2", "cin:b;cout:b;f1:b;f3:b", CPUS,
                  {"cin": [4, 2], "f1": [4, 2], "f3": [1, 5]})
DIM6 = {name: mtf.Dimension(name, 6) for name in ("x", "cin", "cout", "f1", "f3")}


@pytest.mark.parametrize("old, new", [
    ("x", "cout"),   # cout is split evenly on the axis that also carries cin [4, 2]
    ("x", "f3"),     # f3 [1, 5] shares its size and axis with f1 [4, 2]
    ("cin", "cout"),
    ("f1", "f3"),    # re-split on one axis: gathered, then each keeps its part
    ("f3", "x"),
])
def test_reshape_creates_the_dimension_it_names(old, new):
    """Vectors of cin, f1 and f3 put those dimensions (whose splits apply only
    if the graph has them) into the graph."""
    x = np.arange(36, dtype=np.float32).reshape(6, 6)

    def build(mesh, t, *split_vectors):
        return [mtf.reshape(t, [BATCH, DIM6[new]])] + [v * 1.0 for v in split_vectors]
    vectors = [(np.ones(6, np.float32), [DIM6[name]]) for name in ("cin", "f1", "f3")]
    out, _, _, _, grad, _, _, _ = assert_like_one_device(
        build, [(x, [BATCH, DIM6[old]])] + vectors, RESHAPE_LAYOUT)
    np.testing.assert_array_equal(out, x)
    np.testing.assert_array_equal(grad.shape, x.shape)


def test_split_written_out_evenly_is_the_even_split():
    """A planner gives equal devices equal sizes ([3, 3] of 6): stock ops run
    as on stock Mesh-TF (they used to refuse such a split as uneven)."""
    impl = hmp.HeteroMeshImpl("a:2;b:2", "batch:a", CPUS, {"batch": [3, 3]})
    shape = mtf.Shape([BATCH, CLASSES])
    assert impl.split_sizes(BATCH) is None and impl.uneven_dims(shape) == []
    stock = mtf.placement_mesh_impl.PlacementMeshImpl("a:2;b:2", "batch:a", CPUS)
    assert impl.slice_shape(shape) == stock.slice_shape(shape) == [3, 8]

    def build(mesh, labels, x):
        encoded = mtf.one_hot(labels, CLASSES) + mtf.zeros(mesh, [BATCH, CLASSES])
        renamed = mtf.rename_dimension(x, "h", "w")
        return [encoded, mtf.reshape(renamed, [BATCH, mtf.Dimension("flat", 24)])]
    assert_like_one_device(build, [LABELS, logits()],
                           ("a:2;b:2", "batch:a", CPUS, {"batch": [3, 3]}))


def test_stock_op_needing_one_slice_shape_is_refused_by_name():
    """Stock conv2d's backprop computes one slice shape for all devices."""
    x = (np.ones((6, 3, 3, 2), np.float32), [BATCH, H, mtf.Dimension("w", 3), CIN2])

    def build(mesh, t):
        return [mtf.layers.conv2d(t, mtf.Dimension("cout", 4), filter_size=(2, 2))]
    with pytest.raises(hmp.UnevenSplitError,
                       match=r"operation '.*' \(Conv2or3dBackprop\w*Operation\) cannot be "
                             r"lowered: .*\['batch'\] are split unevenly \(batch=\[5, 1\]\)"):
        evaluate(build, [x], hmp.HeteroMeshImpl(*LAYOUTS["batch"]))


# ----------------------------------------------------------------------
# Random tensors: reproducible under a graph seed, replicas agree
# ----------------------------------------------------------------------
DROPOUT_SCRIPT = """
import sys
import numpy as np
sys.path[:0] = {paths!r}   # this file's folder, tests/ (conftest, harness), the repository
import conftest  # graph mode, as in the tests
import test_engine_stock_ops as t
np.save(sys.stdout.buffer, t.dropout_slices(seed=7))
"""


def dropout_slices(seed):
    """Every device's slice of a seeded dropout of ones [batch, classes, h],
    batch split [2, 4] on axis a, classes replicated over axis b."""
    tf.reset_default_graph()
    tf.set_random_seed(seed)
    graph = mtf.Graph()
    mesh = mtf.Mesh(graph, "mesh")
    x = mtf.import_tf_tensor(mesh, tf.ones([6, 8, 3]), mtf.Shape([BATCH, CLASSES, H]))
    y = hmp.layers.dropout(hmp.layers.dropout(x, True, 0.5), True, 0.5)
    impl = hmp.HeteroMeshImpl("a:2;b:2", "batch:a", CPUS, {"batch": [2, 4]})
    lowering = hmp.HeteroLowering(graph, {mesh: impl})
    slices = lowering.tensors[y].to_laid_out_tensor().tensor_list
    with tf.Session(config=harness.session_config()) as session:
        values = session.run(slices)
    return np.stack([np.pad(v, [(0, 4 - v.shape[0]), (0, 0), (0, 0)]) for v in values])


def test_seeded_dropout_repeats_bit_for_bit_and_replicas_agree():
    first, again, other = dropout_slices(7), dropout_slices(7), dropout_slices(8)
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)
    # Devices (a, 0) and (a, 1) hold the same part: the same mask.
    np.testing.assert_array_equal(first[0], first[1])
    np.testing.assert_array_equal(first[2], first[3])
    assert set(np.unique(first)) <= {0.0, 4.0}
    assert 0.5 < (first[[0, 2]] == 0).mean() < 0.95   # 2 dropouts of 0.5: 3/4 dropped
    # Another process (string hashes are salted per process) draws the same.
    here = os.path.dirname(os.path.abspath(__file__))
    tests = os.path.dirname(here)
    script = DROPOUT_SCRIPT.format(paths=[here, tests, os.path.dirname(tests)])
    out = subprocess.run([sys.executable, "-c", script], capture_output=True,
                         env=dict(os.environ, PYTHONHASHSEED="random"))
    assert out.returncode == 0, out.stderr.decode()[-2000:]
    np.testing.assert_array_equal(np.load(io.BytesIO(out.stdout)), first)


def test_sequence_mode_copies_masters_one_variable_at_a_time(monkeypatch):
    """MTF_SEQUENCE_MODE=1: each variable's copy to its slices waits for the
    previous one's, and copy_masters_to_slices runs the last (stock behaviour)."""
    monkeypatch.setenv("MTF_SEQUENCE_MODE", "1")
    tf.reset_default_graph()
    graph = mtf.Graph()
    mesh = mtf.Mesh(graph, "mesh")
    starts = [np.arange(8, dtype=np.float32) * (i + 1) for i in range(3)]
    variables = [mtf.get_variable(mesh, "v%d" % i, [CLASSES],
                                  initializer=tf.constant_initializer(start))
                 for i, start in enumerate(starts)]
    impl = hmp.HeteroMeshImpl(*LAYOUTS["classes"])
    lowering = hmp.HeteroLowering(graph, {mesh: impl})
    copies = [lowering.variables[v.operation].copy_master_to_slices for v in variables]
    assert lowering.copy_masters_to_slices() is copies[-1]
    for earlier, later in zip(copies, copies[1:]):
        assert earlier in _ancestors(later)
    slices = [lowering.variables[v.operation].laid_out_tensor.tensor_list for v in variables]
    with tf.Session(config=harness.session_config()) as session:
        session.run(tf.global_variables_initializer())
        session.run(lowering.copy_masters_to_slices())
        values = session.run(slices)
    for start, (part0, part1) in zip(starts, values):
        np.testing.assert_array_equal(part0, start[:6])
        np.testing.assert_array_equal(part1, start[6:])


def test_slices_take_their_values_from_the_master_and_build_no_random_initialiser():
    """A slice variable's initialiser never runs (its values come from the master), so
    it is zeros, not the random default: 4-6 ops fewer a slice to build."""
    tf.reset_default_graph()
    graph = mtf.Graph()
    mesh = mtf.Mesh(graph, "mesh")
    variable = mtf.get_variable(mesh, "w", [CLASSES],
                                initializer=tf.random_uniform_initializer(1.0, 2.0))
    impl = hmp.HeteroMeshImpl(*LAYOUTS["classes"])
    lowering = hmp.HeteroLowering(graph, {mesh: impl})
    laid_out = lowering.variables[variable.operation].laid_out_tensor
    slices = laid_out.tensor_list
    random = {op.name for op in tf.get_default_graph().get_operations()
              if op.type.startswith(("Random", "TruncatedNormal"))}
    assert len(random) == 1 and all("slice" not in name for name in random), random
    assert {v.initial_value.op.type for v in laid_out.all_slices} <= {"Fill", "Const"}
    with tf.Session(config=harness.session_config()) as session:
        session.run(tf.global_variables_initializer())
        session.run(lowering.copy_masters_to_slices())
        master, parts = session.run([variable.operation.get_master(), slices])
    assert np.all((master >= 1.0) & (master < 2.0))
    np.testing.assert_array_equal(np.concatenate(parts), master)


@pytest.mark.parametrize("devices, master_dtype, is_master", [
    (["/cpu:0"], tf.float32, True),                 # the master's device, spelt otherwise
    (["/device:CPU:0"], tf.float32, True),
    (["/cpu:1"], tf.float32, False),                # another device
    (["/job:worker/task:1/device:CPU:0"], tf.float32, False),
    (["/cpu:0"], tf.float64, False),                # another dtype than the slice's
    (["/cpu:0", "/cpu:1"], tf.float32, False),      # several devices
])
def test_one_device_on_the_masters_device_and_dtype_uses_the_master_as_its_slice(
        devices, master_dtype, is_master):
    """Stock Mesh-TF keeps no slice variable when the slice would be the master; it
    compared device strings, so ``/cpu:0`` got a copy of a master on ``/device:CPU:0``.
    Either way a step updates what the master holds."""
    tf.reset_default_graph()
    graph = mtf.Graph()
    mesh = mtf.Mesh(graph, "mesh")
    with tf.device("/device:CPU:0"):
        variable = mtf.get_variable(mesh, "w", [CLASSES], dtype=mtf.VariableDType(
            master_dtype, tf.float32, tf.float32), initializer=tf.ones_initializer())
    updated = mtf.assign(variable, variable * 3.0)
    impl = hmp.HeteroMeshImpl("model:%d" % len(devices), "", devices)
    lowering = hmp.HeteroLowering(graph, {mesh: impl})
    master = variable.operation.get_master()
    laid_out = lowering.variables[variable.operation]
    assert master.device == "/device:CPU:0"
    assert laid_out.slice_is_master == is_master
    assert (laid_out.laid_out_tensor.tensor_list == [master]) == is_master
    if devices[0].startswith("/job:"):
        return   # no such device in this process
    with tf.Session(config=harness.session_config()) as session:
        session.run(tf.global_variables_initializer())
        session.run(lowering.copy_masters_to_slices())
        session.run(lowering.lowered_operation(updated))
        session.run(lowering.copy_slices_to_masters())
        np.testing.assert_array_equal(session.run(master), np.full(8, 3.0))


def _ancestors(op):
    seen, stack = set(), [op]
    while stack:
        op = stack.pop()
        if op not in seen:
            seen.add(op)
            stack.extend(t.op for t in op.inputs)
            stack.extend(op.control_inputs)
    return seen


def _doubling_loop(body_op):
    """A while loop that doubles x three times and applies ``body_op`` to it."""
    def build(mesh, x):
        outputs = mtf.while_loop(
            lambda i, v: mtf.less(i, 3),
            lambda i, v: [i + 1, body_op(v * 2.0)],
            [mtf.constant(mesh, 0, dtype=tf.int32), mtf.stop_gradient(x)])
        return [mtf.stop_gradient(outputs[1])]
    return build


def test_while_loop_runs_on_uneven_splits_unless_its_body_needs_the_registry():
    """Stock while_loop lowers its body with each operation's own ``lower``."""
    def keep(v):
        return mtf.reduce_max(v, reduced_dim=CLASSES) + v
    for layout in ("classes", "both"):
        assert_like_one_device(_doubling_loop(keep), [logits()], LAYOUTS[layout])

    def with_one_hot(v):
        return v + mtf.one_hot(mtf.argmax(v, CLASSES), CLASSES)
    with pytest.raises(hmp.UnevenSplitError,
                       match=r"operation 'while_loop' \(WhileLoopOperation\) cannot be lowered: "
                             r"its body's operation '.*' \(TopKOperation\) .* 'classes'"):
        evaluate(_doubling_loop(with_one_hot), [logits()],
                 hmp.HeteroMeshImpl(*LAYOUTS["classes"]))
