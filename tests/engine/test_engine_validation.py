"""Bad splits are refused with errors that name the dimension and the problem."""

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

import harness
import hmp
from hmp.mesh import ops
from hmp.compat import import_mesh_tensorflow

mtf = import_mesh_tensorflow()
CPUS = harness.CPUS


def mesh_impl(splits, shape="batch:2;model:2", layout="batch:batch;filters1:model"):
    return hmp.HeteroMeshImpl(shape, layout, CPUS, splits)


@pytest.mark.parametrize("splits, message", [
    ({"filters1": [7, 4, 1]}, r"'filters1' has 3 sizes \[7, 4, 1\] but mesh axis 'model' has 2"),
    ({"filters1": [9, -1]}, r"'filters1' has negative size -1 at model coordinate 1"),
    ({"filters1": [10, 0]}, r"'filters1' has size 0 at model coordinate 1; zero shares"),
    ({"filters1": [2.5, 3]}, r"'filters1' size 2.5 .* not an integer"),
    ({"filters1": ["6", 6]}, r"'filters1' size '6' at model coordinate 0 is not an integer"),
    ({"filters2": [4, 4]}, r"'filters2' is not laid out on any mesh axis; .*'batch', 'filters1'"),
])
def test_bad_split_refused_at_construction(splits, message):
    with pytest.raises(ValueError, match=message):
        mesh_impl(splits)


def test_device_count_must_match_mesh():
    with pytest.raises(ValueError, match=r"3 devices given for mesh .* of 4 positions"):
        hmp.HeteroMeshImpl("batch:2;model:2", "batch:batch", CPUS[:3], {})


def _lower(splits, build, layout="batch:batch;filters1:model"):
    tf.reset_default_graph()
    graph = mtf.Graph()
    mesh = mtf.Mesh(graph, "mesh")
    build(mesh)
    return hmp.HeteroLowering(graph, {mesh: mesh_impl(splits, layout=layout)})


def _filters(mesh, size=12):
    return ops.constant(mesh, 1.0, [mtf.Dimension("batch", 6), mtf.Dimension("filters1", size)])


def test_split_that_does_not_add_up_is_refused_before_lowering():
    with pytest.raises(ValueError, match=r"sizes \[9, 4\] for dimension 'filters1' add up "
                                         r"to 13, but the dimension has size 12"):
        _lower({"filters1": [9, 4]}, _filters)


def test_split_of_a_dimension_the_graph_does_not_have_is_refused():
    with pytest.raises(ValueError, match=r"\['batch'\] do not occur in the graph"):
        _lower({"batch": [4, 2]}, lambda mesh: ops.constant(
            mesh, 1.0, [mtf.Dimension("filters1", 12)]))


class _PadsDevice1(ops.LocalOperation):
    """A buggy op whose slice on every device but 0 has one extra row."""

    def __init__(self, x):
        def local_fn(t):
            return t
        super().__init__([x], x.shape, local_fn, name="buggy")

    def lower(self, lowering):
        mesh_impl = lowering.mesh_impl(self)
        def pad_all_but_first(pnum, t):
            return t if pnum == 0 else tf.pad(t, [[0, 1], [0, 0]])
        lowering.set_tensor_lowering(self.outputs[0], mesh_impl.slicewise(
            pad_all_but_first, mesh_impl.laid_out_pnum(), lowering.tensors[self.inputs[0]]))


def test_lowering_checks_every_slice_not_only_the_first():
    def build(mesh):
        _PadsDevice1(_filters(mesh))
    # Stock Mesh-TF checks slice 0 only and lets the bug through.
    tf.reset_default_graph()
    graph = mtf.Graph()
    mesh = mtf.Mesh(graph, "mesh")
    build(mesh)
    mtf.Lowering(graph, {mesh: mtf.placement_mesh_impl.PlacementMeshImpl(
        "batch:2;model:2", "batch:batch;filters1:model", CPUS)})
    with pytest.raises(ValueError, match=r"Wrong slice shape for .*buggy.* on device 1 "
                                         r"\(/cpu:1\): expected \[4, 3\], got \[5, 3\]"):
        _lower({"filters1": [9, 3], "batch": [4, 2]}, build)


def test_even_split_needs_no_splits_entry_and_matches_stock_shapes():
    impl = hmp.HeteroMeshImpl("batch:2;model:2", "batch:batch;filters1:model", CPUS)
    shape = mtf.Shape([mtf.Dimension("batch", 6), mtf.Dimension("filters1", 12)])
    stock = mtf.placement_mesh_impl.PlacementMeshImpl(
        "batch:2;model:2", "batch:batch;filters1:model", CPUS)
    assert impl.slice_shapes(shape) == [stock.slice_shape(shape)] * 4
    assert [impl.slice_begin(shape, p) for p in range(4)] == [
        stock.slice_begin(shape, p) for p in range(4)]
    with pytest.raises(ValueError, match=r"'filters1' of size 12 cannot be split evenly"):
        hmp.HeteroMeshImpl("model:5", "filters1:model", CPUS + ["/cpu:0"]).slice_shape(
            mtf.Shape([mtf.Dimension("filters1", 12)]), 0)


def test_uneven_slice_geometry():
    impl = mesh_impl({"batch": [4, 2], "filters1": [9, 3]})
    shape = mtf.Shape([mtf.Dimension("batch", 6), mtf.Dimension("h", 5),
                       mtf.Dimension("filters1", 12)])
    assert impl.slice_shapes(shape) == [[4, 5, 9], [4, 5, 3], [2, 5, 9], [2, 5, 3]]
    assert [impl.slice_begin(shape, p) for p in range(4)] == [
        [0, 0, 0], [0, 0, 9], [4, 0, 0], [4, 0, 9]]
    assert impl.laid_out_size(shape) == 6 * 5 * 12
    assert impl.slice_size(shape) == 4 * 5 * 9
    whole = np.arange(6 * 5 * 12, dtype=np.float32).reshape(6, 5, 12)
    tf.reset_default_graph()
    slices = impl.make_slices(tf.constant(whole), shape)
    combined = impl.combine_slices(slices, shape)
    with tf.Session(config=harness.session_config()) as session:
        values, back = session.run([slices, combined])
    np.testing.assert_array_equal(values[3], whole[4:, :, 9:])
    np.testing.assert_array_equal(back, whole)
