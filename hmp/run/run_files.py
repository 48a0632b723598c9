"""The names of the files a run writes in its folder (``--model_dir``), and reading its
JSON back: plain Python, so that scripts which start runs and read them need not load
TensorFlow. ``hmp.run.run_folder`` holds the folder's rules: who may use it and what
``--overwrite`` deletes (``OVERWRITTEN``, built from these names and the pictures')."""

import json
import os
import re

from hmp.data.raster_writer import MAP_FILES

FLAGS_FILE = "flags.txt"   # the flags that started the run, for --flagfile
RESULTS = "results.json"   # the run's flags, plan, history and scores
HISTORY = "history.json"
SUMMARY = "summary.json"   # --runs: the runs' mean and standard deviation
BEST_CHECKPOINT = "best_checkpoint"   # the best epoch's checkpoint (its index file) ...
BEST_PREFIX = "best-ckpt"   # ... and its files' prefix (hmp.run.trainer.BestEpoch)
PREDICTION = "prediction"   # hmp.predict's default --out, where it writes ...
PROBABILITIES = "probabilities.npy"   # ... these (written first, a row of tiles at a time),
PREDICTION_MAPS = ("class_map.npy", "class_map.png")   # ... these, and the scene's format's
PREDICTION_FILES = (PROBABILITIES, *PREDICTION_MAPS, *MAP_FILES)   # a prediction replaces all
SEED_PREFIX = "seed-"   # --runs: seed N's run is the series folder's seed-N


def checkpoint_path_step(path):
    """The global step a checkpoint's path names (``.../ckpt-450``: 450), or None."""
    match = re.search(r"-(\d+)$", path or "")
    return int(match.group(1)) if match else None


def read_json(path):
    """The JSON in ``path``, or None when there is none (or it cannot be read)."""
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def read_results(model_dir):
    """The results.json of the run in ``model_dir`` (``read_json``: None when none)."""
    return read_json(os.path.join(model_dir, RESULTS))
