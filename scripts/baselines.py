r"""Simple baselines on exactly the split of an hmp training run: is the CNN worth it?

    python scripts/baselines.py                                  # hmp.train's defaults
    python scripts/baselines.py --synthetic_layout=indian_pines --data_dir=data \
        --split=disjoint --runs=3                                # seeds 0, 1, 2: mean, std
    python scripts/baselines.py --model_dir=runs/synthetic-hybridsn # the split that run saved

It takes hmp.train's scene and split flags (``--dataset``, ``--synthetic_layout``,
``--split``, ``--train_fraction``, ``--train_set``/``--test_set``, ``--seed``, ...)
and builds the data with the same code (``hmp.run.experiment.prepare``: scene,
split, each pixel divided by its brightness on a scene of radiance as hmp.train's
``--brightness_norm=auto`` does, per-band standardisation fitted on the training
pixels, ``--pca``),
or, with ``--model_dir``, reads the split and data settings a run saved
(``split.npz``, ``data.json``; for a ``--runs`` folder, those of every
``seed-*`` run), and then refuses those flags and ``--runs``. The baselines
(``baseline_scores.py``): shrinkage LDA and an RBF SVM on the pixel's spectrum and
on the mean spectrum of its 5 x 5 and 9 x 9 window, and 1-NN on the pixel's (row,
column) alone.

Prints OA, AA and kappa per baseline (mean and std over runs) and writes them,
with every run's per-class scores, to ``--json``. Needs scikit-learn: ``pip
install -e ".[baselines]"``.
"""

import dataclasses
import os

from hmp import cli

cli.import_tensorflow_quietly()   # before anything imports TensorFlow

from absl import flags  # noqa: E402

from baseline_scores import score_run, sklearn_classifiers, window_sides  # noqa: E402
from hmp import data, files, scene_flags  # noqa: E402
from hmp.evaluation import report  # noqa: E402
from hmp.run import experiment, run_folder  # noqa: E402
from hmp.run.settings import Settings  # noqa: E402

flags.adopt_module_key_flags(scene_flags)
flags.DEFINE_string("model_dir", None, "A training run's folder: use the split and data "
                    "settings it saved (so no scene or split flag, nor --runs, with it).")
flags.DEFINE_integer("runs", 1, "Without --model_dir: seeds --seed, --seed+1, ... (each its "
                     "own split and, for the synthetic scene, its own scene).")
flags.DEFINE_list("windows", ["5", "9"], "Sides of the windows whose mean spectrum is a "
                  "feature (odd).")
flags.DEFINE_string("json", "baselines.json", "Where to write the results.")
FLAGS = flags.FLAGS

SAVED_BY_A_RUN = (*scene_flags.NAMES, "runs")   # what --model_dir's folder gives


def _saved_runs(model_dir):
    """[(DataConfig, Split)] saved in a run's folder, or in each seed-* folder of a --runs one."""
    if os.path.isfile(os.path.join(model_dir, experiment.CONFIG_FILE)):
        return [experiment.load_as_trained(model_dir)]
    folders = run_folder.seed_folders(model_dir)
    if not folders:
        return [experiment.load_as_trained(model_dir)]   # the error names the missing files
    return [experiment.load_as_trained(folder) for folder in folders]


def _planned_runs():
    """[(DataConfig, saved Split or None)] that the flags ask for."""
    if FLAGS.model_dir:
        given = ["--%s=%s" % (name, FLAGS[name].value) for name in SAVED_BY_A_RUN
                 if FLAGS[name].present]
        if given:
            raise cli.UsageError("%s: not with --model_dir, whose run folder gives the scene "
                                 "and split (data.json, split.npz)" % ", ".join(given))
        with cli.blame("model_dir"):
            return _saved_runs(FLAGS.model_dir)
    if FLAGS.runs < 1:
        raise cli.UsageError("--runs=%d: must be at least 1" % FLAGS.runs)
    scene = _scene()
    scene.check_data()
    # --pca as the flag holds it; no pixels held out to validate
    data_config = dataclasses.replace(scene.data, pca=scene.flag_value("pca"),
                                      val_fraction=experiment.DataConfig.val_fraction)
    return [(dataclasses.replace(data_config, seed=FLAGS.seed + i), None)
            for i in range(FLAGS.runs)]


def _scene():
    """The scene and split flags given, as a :class:`hmp.run.settings.Settings`."""
    return Settings.of(**{name: FLAGS[name].value for name in scene_flags.NAMES
                          if FLAGS[name].present})


def table(summary):
    """One line per baseline: OA, AA, kappa as mean +- std in percent (kappa x100)."""
    lines = ["%-18s %15s %15s %15s" % ("baseline", "OA", "AA", "kappa")]
    for name, measures in summary.items():
        lines.append("%-18s %s" % (name, " ".join(
            "%8.2f +-%5.2f" % (100 * measures[m]["mean"], 100 * measures[m]["std"])
            for m in report.SUMMARY_MEASURES)))
    return "\n".join(lines)


def main(argv):
    if len(argv) > 1:
        raise cli.UsageError("unexpected arguments %s (flags start with --)" % argv[1:])
    with cli.blame("json"):
        files.check_file_can_be_written(FLAGS.json)
    windows = window_sides()
    planned = _planned_runs()   # the input first: its errors whether or not scikit-learn is here
    sklearn_classifiers()
    runs = []
    scene = _scene()
    for number, (config, split) in enumerate(planned, 1):
        print("run %d/%d: seed %d ..." % (number, len(planned), config.seed), flush=True)
        with (cli.blame("model_dir", also=(OSError,)) if FLAGS.model_dir else
              scene.blame(*scene.scene_flags(), also=(OSError,))):
            exp = experiment.prepare(config, split)
        leakage = data.split_leakage(exp.split, config.patch_size)
        held = ("" if not exp.val else " (hmp.train fits %d of the training pixels and "
                "validates on %d)" % (len(exp.train), len(exp.val)))
        print("  %s, %s: %d training / %d test pixels%s; leakage %.1f%%"
              % (exp.scene.name, exp.split.description, len(exp.split.train),
                 len(exp.split.test), held, 100 * leakage), flush=True)
        runs.append({"data": dataclasses.asdict(config), "split": exp.split.description,
                     "leakage": leakage, "scores": score_run(exp, windows)})
    names = list(runs[0]["scores"])
    summary = {name: report.summarise_runs([run["scores"][name] for run in runs])
               for name in names}
    print(table(summary))
    files.write_json(FLAGS.json, {"runs": runs, "summary": summary})
    print("results in %s" % FLAGS.json)
    return summary


if __name__ == "__main__":
    cli.run(main, "baselines")
