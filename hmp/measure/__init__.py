"""Measuring the devices before a plan: this machine's devices and their memory
(``devices``), each device's speed alone on the model's own training step
(``speeds``, with the op-size figures of ``calibration``), the link between them
(``linkprobe``) and the speed cache (``speedcache``). A device's measured figures are
the planner's own ``hmp.planning.DeviceSpec``, from the profiler through the cache to
the plan. The model's step is built by the graph room (``hmp.graph.graph``,
``hmp.graph.from_graph``); nothing of ``hmp.run`` (which uses this room) is imported."""
