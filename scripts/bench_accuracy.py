"""Benchmarks accuracy: test OA of each model with its defaults, mean over seeds.

For every model, scene layout and split it trains ``python -m hmp.train`` once
per seed (each run in its own process and folder, 10% of each class for
training, every other setting the model's default) and prints one table row:
OA per seed, their mean, and the mean training time (seconds of the whole run,
classification included).

    python scripts/bench_accuracy.py --data_dir=/path/to/ground_truths
    python scripts/bench_accuracy.py --models=ssrn,cnn3d --layouts=indian_pines \\
        --splits=disjoint --seeds=0,1,2 --data_dir=data

``--layouts``: ``generated`` (the built-in scene) and/or a real scene name
whose ground-truth map (in ``--data_dir``) lays out the synthetic classes.
"""

import json
import os
import subprocess
import sys
import tempfile

from absl import app, flags

FLAGS = flags.FLAGS
flags.DEFINE_list("models", ["ssrn", "hybridsn", "cnn3d", "cnn2d", "hybrid", "spectral"],
                  "Models to train.")
flags.DEFINE_list("layouts", ["generated", "indian_pines"], "Synthetic scene layouts.")
flags.DEFINE_list("splits", ["random", "disjoint"], "Splits.")
flags.DEFINE_list("seeds", ["0", "1", "2"], "Seeds (split, weights, data order, scene).")
flags.DEFINE_string("data_dir", None, "Folder with the ground truth of a named layout.")
flags.DEFINE_list("train_args", [], "Further hmp.train flags for every run, e.g. "
                  "--train_args=--epochs=20")


def train(model, layout, split, seed, folder):
    """Trains one run; returns (test OA in %, seconds)."""
    model_dir = os.path.join(folder, "%s-%s-%s-%s" % (model, layout, split, seed))
    command = [sys.executable, "-m", "hmp.train", "--model=" + model,
               "--synthetic_layout=" + layout, "--split=" + split, "--seed=" + seed,
               "--train_fraction=0.1", "--devices=/cpu:0", "--model_dir=" + model_dir]
    command += ["--data_dir=" + FLAGS.data_dir] if FLAGS.data_dir else []
    done = subprocess.run(command + FLAGS.train_args, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit("%s failed:\n%s" % (" ".join(command), done.stderr[-3000:]))
    with open(os.path.join(model_dir, "results.json")) as file:
        results = json.load(file)
    return 100 * results["test"]["overall_accuracy"], results["seconds"]


def main(argv):
    del argv
    print("%-9s %-13s %-9s %-24s %7s %8s" % ("model", "layout", "split", "OA per seed",
                                            "mean OA", "seconds"), flush=True)
    with tempfile.TemporaryDirectory() as folder:
        for layout in FLAGS.layouts:
            for split in FLAGS.splits:
                for model in FLAGS.models:
                    runs = [train(model, layout, split, seed, folder) for seed in FLAGS.seeds]
                    scores = [oa for oa, _ in runs]
                    print("%-9s %-13s %-9s %-24s %7.1f %8.0f" % (
                        model, layout, split, " ".join("%.1f" % s for s in scores),
                        sum(scores) / len(scores), sum(t for _, t in runs) / len(runs)),
                        flush=True)


if __name__ == "__main__":
    app.run(main)
