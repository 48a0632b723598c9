"""Each device's channel block (``DeviceSpec.channel_block``): how many output channels
of a convolution it computes at once.

On a CPU, TensorFlow's oneDNN kernels lay a convolution's channels out in blocks of the
vector width in float32 lanes: 16 with AVX-512, 8 with AVX2 (and AVX). A share of an
output-split convolution then costs its whole blocks: on this project's AVX-512 VM a
3x3 convolution's training step took 31 ms for 20 or 23 filters and 35 ms for 32, and
47 ms for 41 filters against 50 ms for 48 (``docs/costmodel.md``). The width is read
from ``/proc/cpuinfo`` by an op on the device's own task, so a worker on another machine
reports its own processor. A GPU, or a host whose flags cannot be read, gets 1 (no
blocks: the cost follows the filters, as without this figure).
"""

import dataclasses

import tensorflow.compat.v1 as tf

from hmp.cluster.sessions import session_on
from hmp.mesh.collectives import host_of, is_cpu

# The widest instruction set a CPU's flags name, and its float32 lanes, widest first.
VECTOR_LANES = (("avx512f", 16), ("avx2", 8), ("avx", 8))
CPU_FLAGS_FILE = "/proc/cpuinfo"


def lanes_of(cpuinfo):
    """The float32 lanes of the widest vector set a ``/proc/cpuinfo`` text's flags name,
    or 1 when it names none of ``VECTOR_LANES`` (or has no flags line)."""
    flags = set()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            flags.update(value.split())
    return next((lanes for flag, lanes in VECTOR_LANES if flag in flags), 1)


def channel_blocks(devices, target=None, session_config=None):
    """Each of ``devices``' channel block: its host's lanes for a CPU, 1 for others
    (and for a host without the flags file). One session reads the flags of every host
    with a CPU device among them, a run per host."""
    hosts = {}
    for device in devices:
        if is_cpu(device):
            hosts.setdefault(host_of(device), device)
    lanes = {}
    if hosts:
        graph = tf.Graph()
        with graph.as_default():
            reads = {}
            for host, device in hosts.items():
                with tf.device(device):
                    reads[host] = tf.io.read_file(CPU_FLAGS_FILE)
        with session_on(target or "", graph=graph, config=session_config) as session:
            for host, read in reads.items():
                try:
                    lanes[host] = lanes_of(session.run(read).decode("utf-8", "replace"))
                except tf.errors.NotFoundError:   # no such file: not Linux
                    lanes[host] = 1
    return [lanes[host_of(d)] if is_cpu(d) else 1 for d in devices]


def with_channel_blocks(specs, target=None, session_config=None):
    """``specs`` (DeviceSpecs of measured devices) with their ``channel_block``."""
    blocks = channel_blocks([s.name for s in specs], target, session_config)
    return [dataclasses.replace(s, channel_block=b) for s, b in zip(specs, blocks)]
