"""This machine's TensorFlow devices: the real ones, and the virtual CPUs a list names."""

import tensorflow as tf

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
