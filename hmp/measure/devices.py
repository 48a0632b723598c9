"""This machine's TensorFlow devices: the real ones, the virtual CPUs a list names, and
each one's memory (found, or given as ``--memory_caps``)."""

import os
import re

import tensorflow as tf

from hmp.device_names import check_distinct
from hmp.errors import InvalidInput, is_positive_number

# Units of a byte count (``parse_memory_caps``), in any case: 2GB, 512MiB, 1e9.
BYTE_UNITS = {"B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12,
              "KiB": 2 ** 10, "MiB": 2 ** 20, "GiB": 2 ** 30, "TiB": 2 ** 40}
_BYTES = re.compile(r"\s*((?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:e[+-]?[0-9]+)?)\s*([a-z]*)\s*",
                    re.IGNORECASE)
LOCAL_JOBS = (None, "localhost")   # devices of this process, not of a cluster's task


def gpu_count():
    """The GPUs TensorFlow sees on this machine."""
    return len(tf.config.list_physical_devices("GPU"))


def default_devices():
    """``/cpu:0`` plus ``/gpu:N`` for every GPU TensorFlow sees.

    Virtual CPU devices (``/cpu:1`` ...) share the one CPU, so they are used
    only when named.
    """
    return ["/cpu:0"] + ["/gpu:%d" % i for i in range(gpu_count())]


def virtual_cpus(devices):
    """Local CPU devices a session must create for ``devices``: the highest local
    ``/cpu:N`` index + 1 (0 if none is named)."""
    indices = [spec.device_index or 0 for spec in map(tf.DeviceSpec.from_string, devices)
               if (spec.device_type or "").upper() == "CPU" and spec.job in LOCAL_JOBS]
    return max(indices) + 1 if indices else 0


def device_list(devices, minimum=1):
    """The device names of ``devices``, a comma-separated string (as ``--devices``) or a
    sequence of names; InvalidInput when it names fewer than ``minimum``, or one device
    twice (in one spelling or two: ``/cpu:0,/device:CPU:0``)."""
    names = devices.split(",") if isinstance(devices, str) else list(devices)
    names = [name.strip() for name in names if name.strip()]
    if len(names) < minimum:
        raise InvalidInput("give at least %s, e.g. %s" % (
            "one TensorFlow device" if minimum == 1 else "%d TensorFlow devices" % minimum,
            ",".join("/cpu:%d" % index for index in range(minimum))))
    check_distinct(names)
    return names


def check_local(devices):
    """Raises InvalidInput for a device list (``device_list``'s) naming a string that is
    no TensorFlow device, a device of a cluster's task (this process has none), or a GPU
    this machine does not have."""
    specs = [check_device_string(name) for name in devices]
    for name, spec in zip(devices, specs):
        if spec.job not in LOCAL_JOBS:
            raise InvalidInput("%s is a device of a cluster's task (job %s), not of this "
                               "machine: name this machine's, e.g. /cpu:0 (hmp.train trains "
                               "on a cluster's with --cluster or --local_workers)"
                               % (name, spec.job))
    gpus = gpu_count()
    for name, spec in zip(devices, specs):   # /gpu:N, /device:GPU:N, /job:localhost/...
        if (spec.device_type or "").upper() == "GPU" and (spec.device_index or 0) >= gpus:
            raise InvalidInput(
                "%s is not a device of this machine, which has %d GPU%s; allowed: /cpu:0, "
                "/cpu:N (N >= 1: virtual CPUs)%s" % (name, gpus, "" if gpus == 1 else "s",
                                             " and /gpu:0 to /gpu:%d" % (gpus - 1) if gpus
                                             else ""))


def check_device_string(name):
    """``name``'s ``tf.DeviceSpec``; InvalidInput unless it is a TensorFlow device string
    with a type and an index >= 0 (``/cpu:0``, ``/gpu:1``, ``/job:worker/task:1/device:CPU:0``)."""
    allowed = "allowed: e.g. /cpu:0, /gpu:1, /job:worker/task:1/device:CPU:0"
    try:
        spec = tf.DeviceSpec.from_string(name)
    except ValueError as error:
        raise InvalidInput("%r is not a TensorFlow device string (%s); %s"
                           % (name, error, allowed)) from None
    if spec.device_type is None or spec.device_index is None or spec.device_index < 0:
        raise InvalidInput("%r names no device type and index >= 0; %s" % (name, allowed))
    return spec


def session_config_for(devices):
    """A TF1 session config with enough virtual CPU devices for every /cpu:N named."""
    return tf.compat.v1.ConfigProto(device_count={"CPU": max(virtual_cpus(devices), 1)},
                                    allow_soft_placement=False)


def host_memory_bytes():
    """This machine's physical memory in bytes (what its CPU devices share)."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def memory_bytes(devices):
    """Each device's memory in bytes, or None where it is not known: a local GPU's as
    TensorFlow reports it (``memory_limit``), a local CPU's the machine's memory (virtual
    CPUs share it: each is given all of it, an upper bound), a cluster task's None."""
    specs = [tf.DeviceSpec.from_string(name) for name in devices]
    gpus = {}
    if any((s.device_type or "").upper() == "GPU" and s.job in LOCAL_JOBS for s in specs):
        from tensorflow.python.client import device_lib   # creates the GPU devices
        gpus = {int(d.name.rpartition(":")[2]): float(d.memory_limit)
                for d in device_lib.list_local_devices() if d.device_type == "GPU"}
    found = []
    for spec in specs:
        kind = (spec.device_type or "").upper()
        if spec.job not in LOCAL_JOBS:
            found.append(None)
        elif kind == "GPU":
            found.append(gpus.get(spec.device_index or 0))
        else:
            found.append(float(host_memory_bytes()) if kind == "CPU" else None)
    return found


def parse_memory_caps(text, count):
    """The memory of each of ``count`` devices in bytes from a ``--memory_caps`` value:
    None for an empty one (each device's own memory, ``memory_bytes``), else one size per
    device or one for all, each a number > 0 with an optional unit of ``BYTE_UNITS``
    (``2GB,512MiB,1e9``). InvalidInput (naming the size and what is allowed) otherwise."""
    if not text.strip():
        return None
    allowed = ("allowed: %s (units %s), or empty for each device's own memory"
               % ("one size, such as 2GB, 512MiB or 1e9" if count == 1 else
                  "%d sizes (one per device) or one for all, such as 2GB,512MiB,1e9" % count,
                  ", ".join(BYTE_UNITS)))
    entries = text.split(",")
    if len(entries) not in (1, count):
        raise InvalidInput("%d sizes for %d device%s; %s"
                           % (len(entries), count, "" if count == 1 else "s", allowed))
    units = {unit.lower(): factor for unit, factor in BYTE_UNITS.items()}
    caps = []
    for entry in entries:
        match = _BYTES.fullmatch(entry)
        if not match or match.group(2).lower() not in {"", *units}:
            raise InvalidInput("%r is not a number of bytes; %s" % (entry, allowed))
        cap = float(match.group(1)) * units.get(match.group(2).lower(), 1)
        if not is_positive_number(cap):
            raise InvalidInput("%r is not a finite number of bytes > 0; %s" % (entry, allowed))
        caps.append(cap)
    return caps * count if len(caps) == 1 else caps
