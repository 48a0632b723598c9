"""hmp: heterogeneous model- and data-parallel CNN training on Mesh-TensorFlow.

The package's face is lazy: ``import hmp.data`` or ``import hmp.planning``
loads no TensorFlow. The engine's names below, training from Python
(``hmp.fit``, ``hmp.Settings``: ``hmp.run.fit``, ``hmp.run.settings``) and
submodules such as ``hmp.layers`` load on first use; any of them makes ``import
mesh_tensorflow`` work on current TensorFlow (``hmp.compat``).
"""

import importlib

# Speeds measured by another version are not reused (hmp.measure.speedcache); setup.py
# reads it from here.
__version__ = "0.2.0"

_NAMES = {"HeteroLowering": "hmp.mesh.lowering", "HeteroMeshImpl": "hmp.mesh.mesh_impl",
          "UnevenSplitError": "hmp.mesh.mesh_impl", "train_step": "hmp.mesh.train_step",
          # training from Python: hmp.fit(hmp.Settings.of(...), models.get_model)
          "fit": "hmp.run.fit", "Fitted": "hmp.run.fit", "Settings": "hmp.run.settings"}

# Engine modules models use as ``from hmp import layers, ops`` (they live in hmp.mesh).
_SUBMODULES = {"ops": "hmp.mesh.ops", "optimizers": "hmp.mesh.optimizers"}

__all__ = ["Fitted", "HeteroLowering", "HeteroMeshImpl", "Settings", "UnevenSplitError",
           "fit", "layers", "ops", "optimizers", "train_step"]


# The names that train load TensorFlow as the programs do (hmp.cli.import_tensorflow_quietly:
# without its C++ start-up lines, nor one per traced step, unless TF_CPP_MIN_LOG_LEVEL is set).
_TRAINING = {"fit", "Fitted"}


def __getattr__(name):
    if name in _NAMES:
        if name in _TRAINING:
            importlib.import_module("hmp.cli").import_tensorflow_quietly()
        return getattr(importlib.import_module(_NAMES[name]), name)
    if name in _SUBMODULES:
        return importlib.import_module(_SUBMODULES[name])
    try:
        return importlib.import_module("%s.%s" % (__name__, name))
    except ModuleNotFoundError as error:
        if error.name != "%s.%s" % (__name__, name):
            raise
        raise AttributeError("module %r has no attribute %r" % (__name__, name)) from None
