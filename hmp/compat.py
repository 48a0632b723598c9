"""Makes ``import mesh_tensorflow`` work on current TensorFlow.

mesh-tensorflow 0.1.21 (its last release) predates two TensorFlow changes:

* ``tensorflow.compat.v1.estimator`` is gone (TF 2.16 dropped Estimator);
  Mesh-TF only needs its ``SessionRunHook`` and ``CheckpointSaverListener``
  base classes, which still live in ``tf.compat.v1.train``.
* ``ops.register_tensor_conversion_function`` moved to
  ``tensor_conversion_registry``.

Each shim is installed only when the thing it replaces is missing, so older
TensorFlow versions are left exactly as they are. Nothing installed on disk is
edited. This is the only module in hmp that touches TensorFlow internals (also:
TensorFlow's reader of Slurm's task counts, ``slurm_tasks_per_node``).
"""

import importlib
import sys
import types

import tensorflow.compat.v1 as tf


def _install_estimator_shim():
    """Provides ``tensorflow.compat.v1.estimator`` with the two hook classes."""
    try:
        importlib.import_module("tensorflow.compat.v1.estimator")
        return
    except ImportError:
        pass
    shim = types.ModuleType("tensorflow.compat.v1.estimator")
    shim.SessionRunHook = tf.train.SessionRunHook
    shim.CheckpointSaverListener = tf.train.CheckpointSaverListener
    # ``from tensorflow.compat.v1 import estimator`` falls back to sys.modules.
    sys.modules[shim.__name__] = shim


def _install_conversion_registry_shim():
    """Re-exposes ``register_tensor_conversion_function`` where Mesh-TF looks."""
    from tensorflow.python.framework import ops  # pylint: disable=g-direct-tensorflow-import
    if hasattr(ops, "register_tensor_conversion_function"):
        return
    from tensorflow.python.framework import tensor_conversion_registry  # pylint: disable=g-direct-tensorflow-import
    ops.register_tensor_conversion_function = (
        tensor_conversion_registry.register_tensor_conversion_function)


def import_mesh_tensorflow():
    """Installs the shims (idempotent) and returns the ``mesh_tensorflow`` module."""
    _install_estimator_shim()
    _install_conversion_registry_shim()
    return importlib.import_module("mesh_tensorflow")


def slurm_tasks_per_node():
    """TensorFlow's own reader of Slurm's compressed task counts, as
    ``SlurmClusterResolver`` reads them: ``expand_tasks_per_node("2(x2),1")`` ->
    ``[2, 2, 1]``. The resolver reads only its own job step's variables; this lets hmp
    read the job's too (a trainer started in the batch script, outside the step that
    runs the workers). It is not exported under ``tf.distribute``; TensorFlow has had
    it since 2.4. (Node lists are read by ``hmp.cluster.sources.expand_hostlist``:
    TensorFlow's reader refuses a suffix after a bracket, ``node[1-2]-ib``.)"""
    from tensorflow.python.distribute.cluster_resolver import (  # pylint: disable=g-direct-tensorflow-import
        slurm_cluster_resolver as slurm)
    return slurm.expand_tasks_per_node
