"""How exactly TensorFlow computes on a mesh's devices: hmp's GPU rules for exact results.

hmp promises that every split computes what one device computes (within 1e-5,
docs/engine.md) and that ``--resume`` goes on exactly. Two TensorFlow defaults break
that on GPUs, and this module is the one place that sets them (docs/gpu.md):

* **TensorFloat-32.** On NVIDIA Ampere and newer GPUs, TensorFlow rounds the inputs of
  float32 matrix multiplications and convolutions to 10 bits of mantissa by default
  (``tf.config.experimental.enable_tensor_float_32_execution``; TPUs likewise round
  to bfloat16): about 1e-3 relative, so a split over a CPU and a GPU would differ from
  one device by far more than 1e-5. ``exact_float32`` turns it off for any device
  list that may hold a device other than a CPU (``rounds_float32``); the engine's
  ``HeteroMeshImpl`` calls it for every graph, before anything is built. CPUs compute
  float32 in full.
* **Op determinism.** GPU kernels may add in another order at every run (atomics), so a
  resumed run drifts from an uninterrupted one. ``require_determinism`` (``hmp.train
  --deterministic``) turns on TensorFlow's op determinism
  (``tf.config.experimental.enable_op_determinism``): an op without a deterministic
  kernel then raises ``UnimplementedError``, and a random op without a seed a
  ``RuntimeError`` (hmp seeds its graphs).

Both are switches of the whole process and hold for the kernels it runs: an
``hmp.worker`` sets its own. Neither is ever turned back: once exact, a process stays so.
"""

import tensorflow as tf


def rounds_float32(devices):
    """Whether TensorFlow may compute float32 work on ``devices`` (device strings) with
    fewer bits by default: True when one of them is not a CPU (a GPU, a TPU) or names no
    device type (TensorFlow then places ops on a GPU where there is one)."""
    return any((tf.DeviceSpec.from_string(device).device_type or "").upper() != "CPU"
               for device in devices)


def exact_float32(devices):
    """Turns TensorFloat-32 off in this process when ``rounds_float32(devices)``, so that
    a graph on them computes float32 in full, as one CPU does. Returns whether it is off."""
    if rounds_float32(devices):
        tf.config.experimental.enable_tensor_float_32_execution(False)
    return not tf.config.experimental.tensor_float_32_execution_enabled()


def require_determinism():
    """Turns on TensorFlow's op determinism in this process (``--deterministic``): the
    same inputs give the same outputs bit for bit, on GPUs too, so a resumed run equals
    an uninterrupted one. Call it before any graph runs."""
    tf.config.experimental.enable_op_determinism()
