"""The scene on the devices: patches cut in the graph equal numpy's, steps feed only indices."""

import re

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

import harness
from hmp import data
from hmp.compat import import_mesh_tensorflow
from hmp.graph.graph import TrainingGraph
from hmp.graph.graph_config import Placement
from hmp.graph.scene_input import SceneCubes, cut_patches
from hmp.mesh.device_inputs import host_of
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


def dependencies(op):
    """Every op ``op`` waits for (its inputs' and control inputs', transitively)."""
    seen, pending = set(), [op]
    while pending:
        current = pending.pop()
        for before in [t.op for t in current.inputs] + list(current.control_inputs):
            if before not in seen:
                seen.add(before)
                pending.append(before)
    return seen


def global_step_reads(graph):
    """The reads of the global step that ``graph``'s training step waits for."""
    return [op for op in dependencies(graph.train_op.op) if op.type == "ReadVariableOp"
            and op.inputs[0].op is graph.global_step.handle.op]


@pytest.fixture(scope="module")
def split_graph():
    """A cnn2d TrainingGraph on a batch split [5, 3] of two devices, and the devices."""
    config = model_config("cnn2d", PATCH, BANDS, n_classes=3, width=4)
    devices = tuple(harness.CPUS[:2])
    return TrainingGraph(config, Placement("batch:2", "batch:batch", devices,
                                           {"batch": [5, 3]}), 8, IMAGE), devices


def test_a_training_step_feeds_only_pixel_indices_and_labels_each_device_its_own(
        split_graph):
    graph, devices = split_graph
    fed = {op.name: op.outputs[0] for op in graph.tf_graph.get_operations()
           if op.type == "Placeholder"}
    assert fed["pixel_indices"].dtype == tf.int32 and fed["pixel_indices"].shape == (8,)
    indices, labels = np.arange(8, dtype=np.int32), np.arange(8, dtype=np.int32) % 3
    feed = graph.feed(indices, labels)
    # each device's slice of the batch, on that device (nothing crosses to it)
    own = {(re.sub(r"_\d+$", "", t.op.name.split("/")[-1]),
            tf.DeviceSpec.from_string(t.device).to_string()): value for t, value in feed.items()}
    cpu = [tf.DeviceSpec.from_string(d).to_string() for d in devices]
    assert sorted(own) == sorted((name, d) for name in ("pixel_indices", "labels") for d in cpu)
    np.testing.assert_array_equal(own["pixel_indices", cpu[0]], indices[:5])
    np.testing.assert_array_equal(own["pixel_indices", cpu[1]], indices[5:])
    np.testing.assert_array_equal(own["labels", cpu[1]], labels[5:])
    # classifying: each device is fed the inference switch and the patches' symmetry
    inference = graph.feed(indices, labels, training=False, symmetry=3)
    switches = sorted((re.sub(r"_\d+$", "", t.op.name.split("/")[-1]),
                       tf.DeviceSpec.from_string(t.device).to_string(), value)
                      for t, value in inference.items() if t not in feed)
    assert [(name, d, float(v)) for name, d, v in switches] == sorted(
        [("symmetry", d, 3.0) for d in cpu] + [("training", d, 0.0) for d in cpu])
    # a run whose field look yields adds one scalar to a run of one step or several (this
    # recipe has no field look: the graph's own, which nothing reads)
    yielding = set(feed) | {graph._look_strength}   # pylint: disable=protected-access
    assert set(graph.feed(indices, labels, look_strength=0.5)) == yielding
    assert set(graph.feed_steps([(indices, labels)], 0.5)[1]) == yielding
    # The only float placeholder is the cube, loaded once; it is not a training variable.
    floats = [name for name, t in fed.items() if t.dtype == tf.float32]
    assert floats == ["scene_cube"]
    with graph.tf_graph.as_default():
        assert not any("scene_cube" in v.name for v in tf.global_variables())


def test_each_device_keys_its_draws_and_learning_rate_by_a_step_counter_of_its_own(
        split_graph):
    graph, devices = split_graph
    step = dependencies(graph.train_op.op)
    # the step reads no global step (on task 0 of a cluster: a hand-over to every other
    # task before it could draw its augmentation); each device reads its own counter
    assert not global_step_reads(graph)
    reads = [op for op in step if op.type == "ReadVariableOp"]
    counters = {op.inputs[0].op for op in reads if "step_counter" in op.inputs[0].op.name}
    cpu = sorted(tf.DeviceSpec.from_string(d).to_string() for d in devices)
    assert sorted(tf.DeviceSpec.from_string(c.device).to_string() for c in counters) == cpu
    assert all(op.device == op.inputs[0].op.device for op in reads
               if op.inputs[0].op in counters)
    # the counters follow the global step: set at the start, and after a restore (here
    # the step assigned), by copy_masters_to_slices, and counted by every step
    with graph.tf_graph.as_default():
        counter_values = [tf.identity(v) for v in tf.local_variables()
                          if "step_counter" in v.name]
        set_step = graph.global_step.assign(41)
    session = graph.session(scene_extractor().padded, harness.session_config())
    with session:
        assert session.run(counter_values) == [0, 0]
        indices, labels = np.arange(8, dtype=np.int32), np.arange(8, dtype=np.int32) % 3
        assert session.run(*graph.feed_steps([(indices, labels)])) == 1
        assert session.run(counter_values) == [1, 1]
        session.run(set_step)
        session.run(graph.copy_masters_to_slices)
        assert session.run(counter_values) == [41, 41]


@pytest.mark.parametrize("device, host", [
    ("/cpu:1", "/cpu:1"), ("", ""), ("/gpu:0", "/device:CPU:0"),
    ("/job:worker/task:1/device:GPU:2", "/job:worker/task:1/device:CPU:0"),
    ("/job:worker/task:1/device:CPU:0", "/job:worker/task:1/device:CPU:0")])
def test_a_gpus_step_inputs_lie_on_the_cpu_of_its_task(device, host):
    assert host_of(device) == host


def test_adafactors_decay_is_computed_from_each_devices_own_step():
    """Mesh-TF's Adafactor reads the global step for its decay: hmp gives it each
    device's step instead."""
    config = model_config("cnn2d", PATCH, BANDS, n_classes=3, width=4)
    graph = TrainingGraph(config, Placement("batch:2", "batch:batch", tuple(harness.CPUS[:2]),
                                            {"batch": [5, 3]}), 8, IMAGE, optimizer="adafactor")
    assert not global_step_reads(graph)


def test_a_step_run_without_a_feed_takes_its_batch_from_the_rows_kept_on_its_device():
    """``load_batches`` then ``kept_steps`` trains exactly as feeding each batch does, in
    blocks of several steps a run, cyclically, and from the global step at the load; no
    step feeds anything, and each device reads its rows on its own host."""
    config = model_config("cnn2d", PATCH, BANDS, n_classes=3, width=4)
    devices = tuple(harness.CPUS[:2])
    graph = TrainingGraph(config, Placement("batch:2", "batch:batch", devices,
                                            {"batch": [5, 3]}), 8, IMAGE, steps_per_run=2)
    rng = np.random.RandomState(1)
    batches = [(rng.permutation(35)[:8].astype(np.int32), rng.randint(0, 3, 8).astype(np.int32))
               for _ in range(4)]
    with graph.tf_graph.as_default():
        weights = tf.trainable_variables()
        rows = [v for v in tf.local_variables() if "_rows" in v.name]
    cpu = sorted(tf.DeviceSpec.from_string(d).to_string() for d in devices)
    assert sorted(tf.DeviceSpec.from_string(v.device).to_string() for v in rows) == sorted(
        cpu * 2)   # pixel indices and labels, one of each per device
    fed = graph.session(scene_extractor().padded, harness.session_config())
    kept = graph.session(scene_extractor().padded, harness.session_config())
    ops = len(graph.tf_graph.get_operations())
    with fed, kept:
        graph.load_batches(kept, batches[:3])
        for block in ([0, 1], [2], [0]):   # the fourth step starts the rows over
            op, feed = graph.kept_steps(len(block))
            assert feed == {}
            assert kept.run(op) == fed.run(*graph.feed_steps([batches[i] for i in block]))
        graph.load_batches(kept, batches[3:])   # read from the step now (4)
        assert len(graph.tf_graph.get_operations()) == ops   # a load adds no op
        assert kept.run(graph.kept_steps(1)[0]) == fed.run(*graph.feed_steps(batches[3:])) == 5
        for mine, theirs in zip(kept.run(weights), fed.run(weights)):
            np.testing.assert_array_equal(mine, theirs)
        # a fed batch still wins over the kept one
        assert kept.run(*graph.feed_steps(batches[:1])) == fed.run(
            *graph.feed_steps(batches[:1])) == 6
        for mine, theirs in zip(kept.run(weights), fed.run(weights)):
            np.testing.assert_array_equal(mine, theirs)
    with pytest.raises(ValueError, match="every role needs the same number of steps"):
        graph.device_inputs.load({"pixel_indices": [batches[0][0]], "labels": []})
    with pytest.raises(ValueError, match="the roles kept on the devices are labels, "
                                         "pixel_indices, got symmetry"):
        graph.device_inputs.load({"symmetry": [0]})
