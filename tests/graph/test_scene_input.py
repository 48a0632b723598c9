"""The scene on the devices: patches cut in the graph equal numpy's, steps feed only indices."""

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

import harness
from hmp import data
from hmp.compat import import_mesh_tensorflow
from hmp.graph.graph import TrainingGraph
from hmp.graph.graph_config import Placement
from hmp.graph.scene_input import SceneCubes, cut_patches
from hmp.mesh.lowering import HeteroLowering
from hmp.mesh.mesh_impl import HeteroMeshImpl
from models import model_config

mtf = import_mesh_tensorflow()

IMAGE = (7, 5)
BANDS = 3
PATCH = 5


def scene_extractor():
    cube = np.random.RandomState(0).randn(*IMAGE, BANDS).astype(np.float32)
    return data.PatchExtractor(cube, PATCH)


def lowered_patches(mesh_shape, layout, devices, splits, indices):
    """Patches of ``indices`` cut by ``cut_patches`` on the given mesh, and the cubes."""
    extractor = scene_extractor()
    with tf.Graph().as_default():
        cubes = SceneCubes(IMAGE, PATCH, BANDS)
        graph = mtf.Graph()
        mesh = mtf.Mesh(graph, "mesh")
        batch = mtf.Dimension("batch", len(indices))
        mtf_indices = mtf.import_tf_tensor(mesh, tf.constant(indices, tf.int32),
                                           mtf.Shape([batch]))
        shape = [batch, mtf.Dimension("h", PATCH), mtf.Dimension("w", PATCH),
                 mtf.Dimension("bands", BANDS)]
        patches = cut_patches(cubes, mtf_indices, shape)
        mesh_impl = HeteroMeshImpl(mesh_shape, layout, devices, splits)
        lowering = HeteroLowering(graph, {mesh: mesh_impl})
        slices = lowering.tensors[patches].to_laid_out_tensor().tensor_list
        whole = lowering.export_to_tf_tensor(patches)
        with tf.Session(config=harness.session_config()) as session:
            cubes.load(session, extractor.padded)
            got_whole, got_slices = session.run([whole, slices])
    return extractor(indices), got_whole, got_slices, cubes


def test_patches_cut_on_uneven_batch_split_equal_numpy_exactly():
    indices = np.array([0, 34, 6, 12, 29, 4, 20, 33, 17, 5, 1])   # corners and edges
    expected, whole, slices, cubes = lowered_patches(
        "batch:3", "batch:batch", harness.CPUS[:3], {"batch": [6, 4, 1]}, indices)
    np.testing.assert_array_equal(whole, expected)
    assert [s.shape for s in slices] == [(6, 5, 5, 3), (4, 5, 5, 3), (1, 5, 5, 3)]
    np.testing.assert_array_equal(np.concatenate(slices), expected)
    assert cubes.copies == 1   # CPU devices of one process share the cube


def test_model_split_row_cuts_the_same_patches_on_every_device():
    indices = np.array([3, 8, 21, 30])
    expected, _, slices, _ = lowered_patches(
        "model:2", "filters:model", harness.CPUS[:2], {}, indices)
    for s in slices:
        np.testing.assert_array_equal(s, expected)


def test_devices_of_other_hosts_or_kinds_get_their_own_cube():
    assert SceneCubes.memory_of("/cpu:0", "h") == SceneCubes.memory_of("/cpu:3", "h")
    assert SceneCubes.memory_of("/cpu:0", "h") != SceneCubes.memory_of("/cpu:0", "other")
    assert SceneCubes.memory_of("/gpu:0", "h") != SceneCubes.memory_of("/gpu:1", "h")
    assert SceneCubes.memory_of("/gpu:0", "h") != SceneCubes.memory_of("/cpu:0", "h")


def test_a_cube_of_another_shape_is_refused():
    with tf.Graph().as_default():
        cubes = SceneCubes(IMAGE, PATCH, BANDS)
    with pytest.raises(ValueError, match=r"shape \(11, 9, 2\); this graph was built for "
                                         r"\(11, 9, 3\)"):
        cubes.load(None, np.zeros((11, 9, 2), np.float32))


def test_a_training_step_feeds_only_pixel_indices_and_labels():
    config = model_config("cnn2d", PATCH, BANDS, n_classes=3, width=4)
    graph = TrainingGraph(config, Placement("batch:2", "batch:batch", tuple(harness.CPUS[:2]),
                                         {"batch": [5, 3]}), 8, IMAGE)
    fed = {op.name: op.outputs[0] for op in graph.tf_graph.get_operations()
           if op.type == "Placeholder"}
    assert set(graph.feed(np.zeros(8), np.zeros(8))) == {fed["pixel_indices"], fed["labels"]}
    assert fed["pixel_indices"].dtype == tf.int32 and fed["pixel_indices"].shape == (8,)
    # a run whose field look yields adds one scalar to a run of one step or several
    yielding = {fed["pixel_indices"], fed["labels"], graph.look_strength}
    assert set(graph.feed(np.zeros(8), np.zeros(8), look_strength=0.5)) == yielding
    assert set(graph.feed_steps([(np.zeros(8), np.zeros(8))], 0.5)[1]) == yielding
    assert graph.look_strength.shape == () and graph.look_strength.op.type == (
        "PlaceholderWithDefault")
    # The only float placeholder is the cube, loaded once; it is not a training variable.
    floats = [name for name, t in fed.items() if t.dtype == tf.float32]
    assert floats == ["scene_cube"]
    with graph.tf_graph.as_default():
        assert not any("scene_cube" in v.name for v in tf.global_variables())
