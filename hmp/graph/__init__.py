"""Building a model's graph and reading one: the values a graph is built from
(``graph_config``: the model's config, the precisions, placement, recipe, augmentation and
projection; no TensorFlow), the graph of those (``graph``: model, input, recipe, the
devices' metrics), its input (``scene_input``: the scene on the devices), in-graph
augmentation and PCA (``augment``, ``projection``), and a graph read back into the
planner's model spec and per-device work (``from_graph``, ``workload``). The run
(``hmp.run``) trains these graphs and ``hmp.measure`` times their steps, in sessions of
their own: nothing here opens a session or imports either room."""
