"""A training run: its settings, the epoch loop on the graphs of ``hmp.graph`` (model,
input, recipe), the busy times of traced steps, re-planning, the run folder
(checkpoints, results, events) and reading a run back for inference and export.
Everything here but ``settings`` (plain values, no TensorFlow) builds or runs
TensorFlow sessions; ``hmp.fit`` (the programs ``hmp.train`` and ``hmp.predict``, or
Python code) drives it."""
