"""The two-level all-reduce equals the flat one and crosses hosts less.

Hosts are labels given to the virtual CPU devices here; on a real cluster
they come from the devices' tasks (tested in ``test_cluster.py``).
"""

import functools

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

import hmp
from hmp.compat import import_mesh_tensorflow
from hmp.mesh.collectives import hierarchical_allreduce, host_of, ring_allreduce
from hmp.hosts import is_hierarchical
from hmp.mesh import optimizers
import harness

CPUS = harness.CPUS
allreduce_ring = import_mesh_tensorflow().placement_mesh_impl.allreduce_ring   # Mesh-TF's
SMALL, LARGE = (3, 5), (96, 64)   # below / above the ring's sharding threshold (1024)


def _run_allreduce(collective, arrays):
    with tf.Graph().as_default():
        xs = []
        for device, array in zip(CPUS, arrays):
            with tf.device(device):
                xs.append(tf.constant(array))
        outputs = collective(xs, CPUS[:len(arrays)])
        devices = [t.device for t in outputs]
        with tf.Session(config=harness.session_config()) as session:
            return session.run(outputs), devices


@pytest.mark.parametrize("hosts", [["a", "a", "b", "b"], ["a", "b", "a", "b"],
                                   ["a", "a", "a", "b"], ["a", "b", "b", "c"]])
@pytest.mark.parametrize("shape", [SMALL, LARGE])
@pytest.mark.parametrize("reduction", ["SUM", "MAX"])
def test_two_level_allreduce_equals_numpy_on_every_device(hosts, shape, reduction):
    rng = np.random.RandomState(len(shape))
    # Small integers: every order of summation gives the same float32 result.
    arrays = [rng.randint(-50, 50, shape).astype(np.float32) for _ in hosts]
    expected = np.sum(arrays, 0) if reduction == "SUM" else np.max(arrays, 0)
    outputs, devices = _run_allreduce(
        functools.partial(hierarchical_allreduce, hosts=hosts, reduction_fn_string=reduction),
        arrays)
    for output in outputs:
        np.testing.assert_array_equal(output, expected)
    assert [tf.DeviceSpec.from_string(d).device_index for d in devices] == [0, 1, 2, 3]


def test_two_level_allreduce_matches_the_flat_ring_on_random_floats():
    rng = np.random.RandomState(1)
    arrays = [rng.randn(*LARGE).astype(np.float32) for _ in range(4)]
    flat, _ = _run_allreduce(allreduce_ring, arrays)
    two_level, _ = _run_allreduce(
        functools.partial(hierarchical_allreduce, hosts=[0, 0, 1, 1]), arrays)
    for a, b in zip(two_level, flat):
        assert harness.max_relative_error(a, b) < 1e-6


@pytest.mark.parametrize("shape", [SMALL, LARGE])
def test_two_devices_exchange_their_whole_tensors_as_mesh_tfs_ring_sums_them(shape):
    """One message each way (Mesh-TF's ring sends a large tensor as two shards), and
    the same bits on both devices as the ring's."""
    rng = np.random.RandomState(2)
    arrays = [rng.randn(*shape).astype(np.float32) for _ in range(2)]
    ours, _ = _run_allreduce(ring_allreduce, arrays)
    theirs, _ = _run_allreduce(allreduce_ring, arrays)
    for a, b in zip(ours, theirs):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(ours[0], ours[1])
    with tf.Graph().as_default():
        xs = []
        for device in CPUS[:2]:
            with tf.device(device):
                xs.append(tf.zeros(shape))
        received = {d: _received(y, d) for d, y in zip(CPUS[:2], ring_allreduce(xs, CPUS[:2]))}
    assert received == {CPUS[0]: 1, CPUS[1]: 1}


def _edges(tensors):
    """Every (input tensor, op) edge of the graph that computes ``tensors``, the devices
    at both ends canonical (``/job:.../device:CPU:0``; "" for an unplaced op)."""
    def canonical(device):
        return tf.DeviceSpec.from_string(device).to_string()
    seen, stack = set(), [t.op for t in tensors]
    while stack:
        op = stack.pop()
        if op in seen:
            continue
        seen.add(op)
        for tensor in op.inputs:
            yield tensor, canonical(tensor.op.device), canonical(op.device)
            stack.append(tensor.op)


def _received(tensor, device):
    """How many tensors of other devices the graph of ``tensor`` hands to ``device``."""
    device = tf.DeviceSpec.from_string(device).to_string()
    return sum(target == device != source for _, source, target in _edges([tensor]))


def _cross_host_traffic(tensors, host_of_device):
    """Bytes handed from a device of one host to an op on another, in the
    graph that computes ``tensors``, and the devices that send or receive them.
    Unplaced ops (the inputs fed in, master variables) are not counted."""
    host = {tf.DeviceSpec.from_string(d).to_string(): h for d, h in host_of_device.items()}
    crossed, endpoints = 0, set()
    for tensor, source, target in _edges(tensors):
        if source in host and target in host and host[source] != host[target]:
            crossed += tensor.shape.num_elements() * tensor.dtype.size
            endpoints |= {source, target}
    return crossed, endpoints


@pytest.mark.parametrize("hosts", [[0, 0, 1, 1], [0, 0, 0, 1, 1, 1], [0, 0, 1, 1, 2, 2],
                                   [0, 1, 0, 1]])
def test_only_leaders_cross_hosts_with_a_ring_of_hosts_worth_of_bytes(hosts):
    """Across hosts, the two-level all-reduce moves what a ring over H hosts
    moves, 2(H-1)/H of the tensor from each leader (the first device of its
    host); the flat ring over all devices moves more."""
    devices = ["/cpu:%d" % i for i in range(len(hosts))]
    nbytes = LARGE[0] * LARGE[1] * 4
    with tf.Graph().as_default():
        xs = []
        for device in devices:
            with tf.device(device):
                xs.append(tf.zeros(LARGE))
        host_of_device = dict(zip(devices, hosts))
        two_level, endpoints = _cross_host_traffic(
            hierarchical_allreduce(xs, devices, hosts), host_of_device)
        flat, _ = _cross_host_traffic(allreduce_ring(xs, devices), host_of_device)
    n_hosts = len(set(hosts))
    assert two_level == 2 * (n_hosts - 1) * nbytes
    leaders = {"/device:CPU:%d" % hosts.index(h) for h in set(hosts)}
    assert endpoints == leaders
    assert flat > two_level


def test_host_of_device_strings():
    assert host_of("/job:worker/task:1/device:CPU:0") == host_of("/job:worker/replica:0/task:1/device:GPU:3")
    assert host_of("/job:worker/task:0/device:CPU:0") != host_of("/job:worker/task:1/device:CPU:0")
    assert host_of("/cpu:0") == host_of("/device:GPU:1") == "localhost"
    assert not is_hierarchical(["a", "a"]) and not is_hierarchical(["a", "b"])
    assert is_hierarchical(["a", "a", "b"])


def test_mesh_refuses_bad_hosts_and_reduction_kinds():
    with pytest.raises(ValueError, match="3 hosts given for 4 devices"):
        hmp.HeteroMeshImpl("batch:4", "batch:batch", CPUS, hosts=[0, 0, 1])
    with pytest.raises(ValueError, match="device /cpu:0 is given two hosts"):
        hmp.HeteroMeshImpl("batch:2", "batch:batch", ["/cpu:0", "/cpu:0"], hosts=[0, 1])
    with pytest.raises(ValueError, match="'ring' is not 'hierarchical' or 'flat'"):
        hmp.HeteroMeshImpl("batch:2", "batch:batch", CPUS[:2], allreduce="ring")


# Devices listed host by host would make the flat ring cross hosts only twice
# for these small (unsharded) gradients, as often as the two-level one;
# listed round-robin (as by device type), it crosses at every hand-over.
TWO_HOSTS = dict(shape="batch:4", layout="batch:batch", devices=CPUS,
                 splits={"batch": [5, 3, 2, 2]}, hosts=["a", "b", "a", "b"])


def test_training_with_two_level_gradient_reduction_equals_flat_and_one_device():
    """Proportional batches on 2 hosts x 2 devices: the gradients are summed
    within each host, then across hosts; 3 momentum steps follow the flat
    ring and the single device."""
    data = harness.data_2d()
    weights = harness.loss_and_gradients(harness.cnn2d, data, harness.SINGLE_DEVICE).weights
    momentum = functools.partial(optimizers.Momentum, 0.05, 0.9)
    runs = {name: harness.train(harness.cnn2d, data, config, momentum, 3, weights)
            for name, config in [
                ("two-level", harness.MeshConfig(**TWO_HOSTS)),
                ("flat", harness.MeshConfig(**dict(TWO_HOSTS, allreduce="flat"))),
                ("one device", harness.SINGLE_DEVICE)]}
    losses, final = runs["two-level"]
    for name in ("flat", "one device"):
        assert harness.max_relative_error(losses, runs[name][0]) < 1e-5
        for variable, value in runs[name][1].items():
            assert harness.max_relative_error(final[variable], value) < 1e-5, (name, variable)


def test_mesh_gradient_allreduce_is_two_level():
    """The lowered weight-gradient sums of a batch split over 2 hosts x 2
    devices cross hosts a third as much as the flat ring's."""
    crossed = {}
    for kind in ("hierarchical", "flat"):
        tf.reset_default_graph()
        graph = harness.mtf.Graph()
        mesh = harness.mtf.Mesh(graph, "mesh")
        loss, _ = harness.cnn2d(mesh, *harness.data_2d())
        variables = graph.trainable_variables
        grads = harness.mtf.gradients([loss], [v.outputs[0] for v in variables])
        config = harness.MeshConfig(**dict(TWO_HOSTS, allreduce=kind))
        impl, lowering = harness.lower(graph, mesh, config)
        reduced = [t for g in grads for t in lowering.tensors[g].to_laid_out_tensor().tensor_list]
        crossed[kind], _ = _cross_host_traffic(reduced, dict(zip(CPUS, TWO_HOSTS["hosts"])))
    assert crossed["hierarchical"] > 0
    assert 3 * crossed["hierarchical"] == crossed["flat"]
