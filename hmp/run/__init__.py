"""A training run: the graph (model, input, recipe), the epoch loop, profiling,
re-planning, the run folder (checkpoints, results, events) and reading a run
back for inference and export. Everything here builds or runs TensorFlow
sessions; the programs ``hmp.train`` and ``hmp.predict`` drive it."""
