"""How the window of ``--smoothing`` scores on finished runs: the test and validation
pixels of each run classified by its best weights, every pixel of its scene (with and
without TTA), then smoothed over each window, as the window's mean and guided
(``--smoothing_guide``: a guided filter with the scene's first principal component as
guide, fitted on the run's training pixels).

    python scripts/bench_smoothing.py --model_dirs=runs/a,runs/b [--tta] [--windows=1,3,5,7]

Per run, filter and window: the share of its validation pixels classified right (what
``--smoothing=auto`` chooses by), the test pixels' OA and AA, and the lowest recall of a
class (in %). The classification's probabilities are kept in each run's folder
(``smoothing_probabilities_<checkpoint>[_tta].npy``) and read again on a second call. Prints a table
and writes every row to ``--json``.
"""

import os

from hmp import cli

cli.import_tensorflow_quietly()   # before anything imports TensorFlow

import numpy as np  # noqa: E402
import tensorflow.compat.v1 as tf  # noqa: E402
from absl import flags  # noqa: E402

import models  # noqa: E402
from hmp import files  # noqa: E402
from hmp.evaluation.smoothing import WINDOWS, check_window, context, neighbourhood  # noqa: E402
from hmp.run import experiment, scoring  # noqa: E402
from hmp.run.inference import TrainedRun, classify  # noqa: E402

flags.DEFINE_list("model_dirs", None, "Finished runs' folders (hmp.train's --model_dir).")
flags.DEFINE_list("windows", [str(w) for w in WINDOWS], "Window sides (odd).")
flags.DEFINE_bool("tta", False, "Also classify each patch in the 8 symmetries (8 times the "
                  "work).")
flags.DEFINE_string("json", "smoothing.json", "Where to write the rows.")
flags.mark_flag_as_required("model_dirs")
FLAGS = flags.FLAGS


def scene_probabilities(run, exp, tta):
    """[H, W, K] class probabilities of every pixel of the run's scene (no-data pixels
    0), cached in the run's folder under its checkpoint's name."""
    path = os.path.join(run.model_dir, "smoothing_probabilities_%s%s.npy" % (
        os.path.basename(run.checkpoint), "_tta" if tta else ""))
    if os.path.isfile(path):
        return np.load(path)
    cube, nodata = run.prepare_scene(exp.scene)
    probabilities = classify(run, cube, ["/cpu:0"], 512, tta=tta,
                             progress=lambda text: text and print("  " + text, flush=True))
    probabilities[nodata] = 0.0
    with files.atomic_path(path) as temporary, open(temporary, "wb") as f:
        np.save(f, probabilities)
    return probabilities


def rows_of(model_dir, windows, tta):
    """The rows of one run: for each window, its validation accuracy and test scores."""
    run = TrainedRun.open(model_dir, models.get_model)
    exp = experiment.prepare(*experiment.load_as_trained(model_dir))
    present = np.bincount(exp.test.class_ids, minlength=exp.n_classes) > 0
    rows = []
    for variant in (False, True) if tta else (False,):
        probabilities = scene_probabilities(run, exp, variant)
        rows += _rows_of_filters(model_dir, exp, probabilities, present, windows, variant)
    return rows


def _rows_of_filters(model_dir, exp, probabilities, present, windows, tta):
    """The rows of one classification (with TTA or not): the mean's, then the guided;
    scored as the run scores (``hmp.run.scoring``: the pixels within the widest window's
    reach of the labelled ones, a test or validation pixel's smoothing reading no output
    of a training pixel)."""
    rows = []
    for guided in (False, True):
        pixels = neighbourhood(exp.labelled.indices, exp.scene.labels.shape,
                               context(max(windows), guided))
        classified = scoring.Classified.of(
            exp, pixels, probabilities.reshape(-1, exp.n_classes)[pixels][None], guided)
        validation = classified.choose_window(exp, windows)[1] if exp.val else {}
        for window in windows:
            scores = scoring.test_scores(exp, classified.smoothed(exp, window))[1]
            rows.append({
                "run": model_dir, "tta": tta, "guided": guided, "window": window,
                "validation": (100 * validation[window] if validation else None),
                "oa": 100 * scores.overall_accuracy, "aa": 100 * scores.average_accuracy,
                "lowest_recall": 100 * float(np.min(scores.per_class_accuracy[present]))})
    return rows


def table(rows):
    lines = ["%-48s %-4s %-6s %6s %10s %7s %7s %13s" % (
        "run", "TTA", "filter", "window", "validation", "OA", "AA", "lowest recall")]
    for row in rows:
        lines.append("%-48s %-4s %-6s %6d %10s %7.2f %7.2f %13.1f" % (
            os.path.basename(os.path.normpath(row["run"]))[-48:], "yes" if row["tta"] else "no",
            "guided" if row["guided"] else "mean", row["window"],
            "-" if row["validation"] is None else "%.1f" % row["validation"],
            row["oa"], row["aa"], row["lowest_recall"]))
    return "\n".join(lines)


def main(argv):
    if len(argv) > 1:
        raise cli.UsageError("unexpected arguments %s (flags start with --)" % argv[1:])
    tf.disable_eager_execution()
    tf.logging.set_verbosity(tf.logging.ERROR)
    windows = [int(w) if w.strip().isdigit() else None for w in FLAGS.windows]
    with cli.blame("windows"):
        for window in windows:
            check_window(window)
    rows = []
    for model_dir in FLAGS.model_dirs:
        print("%s ..." % model_dir, flush=True)
        with cli.blame("model_dirs", also=(OSError,)):
            rows += rows_of(model_dir, windows, FLAGS.tta)
    print(table(rows))
    files.write_json(FLAGS.json, {"rows": rows})
    print("every row in %s" % FLAGS.json)


if __name__ == "__main__":
    cli.run(main, "bench_smoothing.py")
