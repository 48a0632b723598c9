"""The engine: uneven splits of a Mesh-TensorFlow mesh, and training on them.

``mesh_impl`` (``HeteroMeshImpl``: slice geometry and collectives per device),
``lowering`` (``HeteroLowering``: checks every slice against the plan),
``ops`` (hmp's per-device convolutions and pooling; ``conv3d_gradient``: a 3-D
convolution's gradient from a CPU's fast kernels), ``stock_ops`` (stock
Mesh-TF ops on uneven splits), ``collectives`` (hand-overs and all-reduces),
``bucketing`` (one gradient all-reduce per step), ``optimizers`` and
``train_step`` (the ordered training step), ``numerics`` (float32 in full on
GPUs, op determinism). It knows nothing of data, models
or runs; ``hmp.layers`` is its public face for models.
"""
