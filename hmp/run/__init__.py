"""A training run: its settings, the epoch loop on the graphs of ``hmp.graph`` (model,
input, recipe), the busy times of traced steps, re-planning, the run folder
(checkpoints, results, events) and reading a run back for inference and export.
The modules that build or run TensorFlow sessions are the trainer, the epoch loop, the
run folder, the profiler, inference, export and ``fit``; the settings, the recipe, the
re-planning rules and the progress lines are plain Python; ``hmp.fit`` (the programs
``hmp.train`` and ``hmp.predict``, or Python code) drives it."""
