"""Scores and pictures of a classification: ``metrics`` (OA, AA, kappa,
per-class precision, recall and F1), ``maps`` (class maps as PNG) and
``report`` (the run's summary). numpy and matplotlib only: no TensorFlow."""
