"""hmp: heterogeneous model- and data-parallel CNN training on Mesh-TensorFlow.

Importing hmp makes ``import mesh_tensorflow`` work on current TensorFlow
(see ``hmp.compat``).
"""

from hmp.compat import import_mesh_tensorflow

import_mesh_tensorflow()

from hmp import layers, ops, optimizers  # noqa: E402
from hmp.lowering import HeteroLowering  # noqa: E402
from hmp.mesh_impl import HeteroMeshImpl, UnevenSplitError  # noqa: E402
from hmp.training import train_step  # noqa: E402

__all__ = ["HeteroLowering", "HeteroMeshImpl", "UnevenSplitError", "layers",
           "ops", "optimizers", "train_step"]
