"""Layout planning for hmp: how to split filters and batch over unequal devices.

Pure Python + numpy (no TensorFlow): usable before a graph exists.

* ``apportion``: integer shares proportional to speed (exact, monotone, bounded).
* ``ModelSpec`` / ``LayerSpec`` and the ``*_layer_spec`` helpers: what the planner
  knows about a model.
* ``DeviceSpec`` / ``LinkSpec`` / ``load_platform``: the devices' and link's figures.
* ``predict``: the analytical cost model (step time, busy time, memory).
* ``plan_layout`` -> ``Plan``: the layout for ``hmp.HeteroMeshImpl``, saved as JSON.
"""

from hmp.planning.apportion import apportion, check_speeds
from hmp.planning.costmodel import (Prediction, memory_bytes, predict, ring_allgather_time,
                                    ring_allreduce_time)
from hmp.planning.layout import (Mesh, candidate_meshes, check_mesh_size, layout_rules,
                                 parse_mesh, splits_the_model)
from hmp.planning.model_spec import (LayerSpec, ModelSpec, conv_layer_spec,
                                     conv_output_spatial, dense_layer_spec, pool_layer_spec)
from hmp.planning.plan import Candidate, Plan
from hmp.planning.platform import DeviceSpec, LinkSpec, device_names, load_platform
from hmp.planning.planner import fewest_batch, fewest_samples_a_row, plan_layout

__all__ = [
    "Candidate", "DeviceSpec", "LayerSpec", "LinkSpec", "Mesh", "ModelSpec", "Plan",
    "Prediction", "apportion", "candidate_meshes", "check_mesh_size", "check_speeds",
    "conv_layer_spec", "conv_output_spatial", "dense_layer_spec", "device_names",
    "fewest_batch", "fewest_samples_a_row", "layout_rules",
    "load_platform", "memory_bytes", "parse_mesh", "plan_layout", "pool_layer_spec",
    "predict", "ring_allgather_time", "ring_allreduce_time", "splits_the_model",
]
