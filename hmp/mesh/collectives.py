"""Two-level (hierarchical) all-reduce for meshes that span several hosts.

A flat ring all-reduce passes every shard of the tensor around all devices,
so on a mesh of 2 hosts with k devices each, many of its hand-overs cross the
slow link between hosts, and each crossing is a network round trip. The
hierarchical all-reduce of Wang et al. (see ``../shared/BACKGROUND.md``) first reduces
among the devices of each host, onto one *leader* device per host, then
all-reduces the hosts' partial results among the leaders only (a ring over
hosts), then copies the result from each leader to the other devices of its
host. Only the leaders talk across hosts, once per ring step.

A *host* is whatever shares fast links: by default the TensorFlow task of
the device (``/job:worker/task:1/...``), so every ``hmp.worker`` process
counts as one host and all devices of a single process as one.
"""

import tensorflow.compat.v1 as tf

from hmp.compat import import_mesh_tensorflow
from hmp.hosts import group_by_host, is_hierarchical

mtf = import_mesh_tensorflow()


def ring_allreduce(xs, devices, reduction_fn_string="SUM"):
    """Mesh-TF's ring all-reduce of ``xs`` (one tensor per device of ``devices``), but two
    devices exchange their whole tensors: each sends one message and reduces the two in
    the same order (``x0 + x1`` on both, as the ring does). Mesh-TF's ring cuts a large
    tensor into one shard per device, which for two devices sends the same bytes as two
    messages each way."""
    if len(xs) == 2:
        return mtf.placement_mesh_impl.allreduce_ring_single_shard(
            xs, devices, reduction_fn_string)
    return mtf.placement_mesh_impl.allreduce_ring(xs, devices, reduction_fn_string)


def host_of(device):
    """The host of a TensorFlow device string: its ``(job, replica, task)``.

    Devices without a job (``/cpu:0``, ``/device:GPU:1``) belong to the local
    process: they all share one host.
    """
    spec = tf.DeviceSpec.from_string(device)
    if spec.job is None:
        return "localhost"
    return "/job:%s/replica:%d/task:%d" % (spec.job, spec.replica or 0, spec.task or 0)


def is_cpu(device):
    """Whether a TensorFlow device string names a CPU device (no type: the CPU)."""
    return (tf.DeviceSpec.from_string(device).device_type or "CPU").upper() == "CPU"



def hierarchical_allreduce(xs, devices, hosts, reduction_fn_string="SUM"):
    """Reduces ``xs`` (one tensor per device) and returns the result on every device.

    Args:
      xs: list of n tensors of equal shape.
      devices: the n device strings the tensors live on.
      hosts: the n hosts of those devices (any hashable labels).
      reduction_fn_string: "SUM" or "MAX", as in Mesh-TensorFlow.

    Within a host the partial results are reduced on the host's first device
    (its leader); the leaders then run Mesh-TensorFlow's ring all-reduce,
    and each leader's result is copied to the rest of its host. With one host,
    or one device per host, this is the flat ring all-reduce.
    """
    if not len(xs) == len(devices) == len(hosts):
        raise ValueError("hierarchical_allreduce: %d tensors, %d devices and %d hosts"
                         % (len(xs), len(devices), len(hosts)))
    if not is_hierarchical(hosts):
        return ring_allreduce(xs, devices, reduction_fn_string)
    reduce = mtf.binary_reduction_fn(reduction_fn_string)
    groups = list(group_by_host(hosts).values())
    leaders = [positions[0] for positions in groups]
    host_results = []
    for positions in groups:
        with tf.device(devices[positions[0]]):
            result = xs[positions[0]]
            for position in positions[1:]:
                result = reduce(result, xs[position])
        host_results.append(result)
    totals = ring_allreduce(host_results, [devices[p] for p in leaders], reduction_fn_string)
    outputs = [None] * len(xs)
    for positions, total in zip(groups, totals):
        outputs[positions[0]] = total
        for position in positions[1:]:
            with tf.device(devices[position]):
                outputs[position] = tf.identity(total)
    return outputs
