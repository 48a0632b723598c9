"""Benchmarks accuracy: every model against the baselines, on exactly the same splits.

For every model, scene layout, split and seed it trains ``python -m hmp.train``
once (its own process and folder, 10% of each class for training, one CPU
device, every other setting the model's default), scores the baselines of
``scripts/baselines.py`` on the split each (layout, split, seed) saved, and
prints per (layout, split): each model's OA per seed, mean and std, its margin
over the best spectral baseline and over the best baseline of all (the
coordinates-only 1-NN included), and whether a run collapsed (over 90% of the
test pixels in one class, or OA below twice chance); then the baselines.

    python scripts/bench_accuracy.py --data_dir=/path/to/ground_truths
    python scripts/bench_accuracy.py --models=cnn3d --layouts=indian_pines \\
        --splits=disjoint --seeds=0,1 --data_dir=data --train_args=--epochs=20
    python scripts/bench_accuracy.py --jobs=8 --json=accuracy.json ...  # 16 cores

``--layouts``: ``generated`` (the built-in scene) and/or a real scene name
whose ground-truth map (in ``--data_dir``) lays out the synthetic classes, each
with ``:radiance`` for the scene as radiance counts (``--synthetic_kind``), e.g.
``--layouts=generated,generated:radiance,indian_pines:radiance``.
``--jobs=N`` runs N runs at once, each pinned to its own ``--cores_per_job``
cores with TensorFlow's threads set to that number. Without scikit-learn it
says so in one line and prints the models only.
"""

import os
import tempfile

from absl import flags

from accuracy_grid import Run, check_train, core_groups, run_grid, table
from baseline_scores import window_sides
from hmp import cli, files
from hmp.data.catalog import ground_truth_file
from hmp.data.synthetic import GENERATED_LAYOUT, KINDS, LAYOUTS
from hmp.run.experiment import SPLITS
from models import get_model

FLAGS = flags.FLAGS
flags.DEFINE_list("models", ["ssrn", "hybridsn", "cnn3d", "cnn2d", "hybrid", "spectral"],
                  "Models to train.")
flags.DEFINE_list("layouts", ["generated", "indian_pines"], "Synthetic scene layouts.")
flags.DEFINE_list("splits", ["random", "disjoint"], "Splits.")
flags.DEFINE_list("seeds", ["0", "1", "2"], "Seeds (split, weights, data order, scene).")
flags.DEFINE_string("data_dir", None, "Folder with the ground truth of a named layout.")
flags.DEFINE_list("train_args", [], "Further hmp.train flags for every run, e.g. "
                  "--train_args=--epochs=20")
flags.DEFINE_integer("jobs", 1, "Runs at once.")
flags.DEFINE_integer("cores_per_job", 0, "CPU cores each run is pinned to (0: an equal "
                     "share of the cores this process may use).")
flags.DEFINE_string("keep_runs", None, "Keep the run folders (and logs, baselines) here, "
                    "a new or empty folder (hmp.train refuses to reuse a run's); default: a "
                    "temporary folder, deleted at the end.")
flags.DEFINE_string("json", None, "Write every row (runs, baselines, summary) to this file.")
flags.DEFINE_list("windows", ["5", "9"], "Window sides of the baselines' mean spectra.")


def _known(value, allowed, kinds):
    """Whether ``value`` is one of ``allowed``, or ``ALLOWED:KIND`` with a KIND of ``kinds``."""
    name, colon, kind = value.partition(":")
    return name in allowed and (not colon or kind in kinds)


def _grid():
    """The runs the flags ask for, and the windows of the baselines, checked; loads no
    TensorFlow."""
    for name in ("models", "layouts", "splits", "seeds"):
        if not FLAGS[name].value:
            raise cli.UsageError("--%s is empty: give at least one" % name)
    for name, allowed in (("splits", SPLITS), ("layouts", LAYOUTS)):
        unknown = [value for value in FLAGS[name].value
                   if not _known(value, allowed, KINDS if name == "layouts" else ())]
        if unknown:
            raise cli.UsageError("--%s=%s: %r is not a %s; choose from %s%s"
                                 % (name, ",".join(FLAGS[name].value), unknown[0], name[:-1],
                                    ", ".join(allowed), ", each with an optional :%s"
                                    % " or :".join(KINDS) if name == "layouts" else ""))
    seeds = cli.whole_numbers("seeds", minimum=0)
    windows = window_sides()
    grid = [Run(model, layout, split, seed) for layout in FLAGS.layouts
            for split in FLAGS.splits for model in FLAGS.models for seed in seeds]
    return grid, windows


def _check_files():
    """UsageError unless each named layout's ground truth is in --data_dir, --keep_runs
    is a new or empty folder and --json a file that can be written."""
    with cli.blame("layouts", "data_dir", also=(FileNotFoundError,)):
        for name in {layout.partition(":")[0] for layout in FLAGS.layouts}:
            if name != GENERATED_LAYOUT:
                ground_truth_file(name, FLAGS.data_dir)
    if FLAGS.keep_runs:
        if os.path.isdir(FLAGS.keep_runs) and os.listdir(FLAGS.keep_runs):
            raise cli.UsageError("--keep_runs=%s: the folder holds files; give a new or "
                                 "empty folder" % FLAGS.keep_runs)
        with cli.blame("keep_runs"):
            files.check_folder_can_be_made(FLAGS.keep_runs)
    if FLAGS.json:
        with cli.blame("json"):
            files.check_file_can_be_written(FLAGS.json)


def _check_train_args(grid, root):
    """UsageError unless hmp.train takes --train_args with the flags each model's first
    run of ``grid`` trains with (a flag may act for one model and not another), checked
    by hmp.train itself (a process that loads TensorFlow, a model at a time): its one
    line."""
    if not FLAGS.train_args:
        return
    for model in FLAGS.models:
        run = next(run for run in grid if run.model == model)
        refused = check_train(run, os.path.join(root, run.name), FLAGS.data_dir,
                              FLAGS.train_args)
        if refused:
            raise cli.UsageError("--train_args=%s: %s" % (",".join(FLAGS.train_args), refused))


def main(argv):
    if len(argv) > 1:
        raise cli.UsageError("unexpected arguments %s (flags start with --)" % argv[1:])
    grid, windows = _grid()
    with cli.blame("jobs", "cores_per_job"):
        groups = core_groups(FLAGS.jobs, FLAGS.cores_per_job)
    _check_files()
    cli.import_tensorflow_quietly()   # a model's module loads it
    with cli.blame("models"):
        for model in FLAGS.models:
            get_model(model)
    with tempfile.TemporaryDirectory() as scratch:
        root = FLAGS.keep_runs or scratch
        _check_train_args(grid, root)
        print("%d runs, %d at a time on %d cores each" % (len(grid), len(groups),
                                                          len(groups[0])), flush=True)
        rows, summary = run_grid(grid, root, groups, FLAGS.data_dir, FLAGS.train_args,
                                 windows, FLAGS.json, say=lambda line: print(line, flush=True))
    print(table(rows, summary))
    if FLAGS.json:
        print("every row in %s" % FLAGS.json)
    failed = [row for row in rows if "error" in row]
    if failed:
        raise SystemExit("%d of %d runs failed (see the table)" % (len(failed), len(grid)))


if __name__ == "__main__":
    cli.run(main, "bench_accuracy")
