"""How the window of ``--smoothing`` scores on finished runs: the test and validation
pixels of each run classified by its best weights, every pixel of its scene (with and
without TTA), then smoothed over each window, as the window's mean and guided
(``--smoothing_guide``: a guided filter with the scene's first principal component as
guide, fitted on the run's training pixels), and with ``--prior_weights``, fused with a
spectral prior first (``hmp.evaluation.spectral_prior``: a shrinkage LDA on each pixel's
mean spectrum over its patch window, all bands as the run scaled them, fitted on the
run's training pixels; the network's weight w, 1: the network alone).

    python scripts/bench_smoothing.py --model_dirs=runs/a,runs/b [--tta] [--windows=1,3,5,7] \
        [--prior_weights=1,0.65]

Per run, prior weight, filter and window: the share of its validation pixels classified
right (what ``--smoothing=auto`` chooses by), the test pixels' OA and AA, and the lowest
recall of a class (in %). The classification's probabilities are kept in each run's
folder (``smoothing_probabilities_<checkpoint>[_tta].npy``) and read again on a second
call. Prints a table and writes every row to ``--json``.
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
from hmp.evaluation.spectral_prior import ShrinkageLDA, fuse, window_means  # noqa: E402
from hmp.run import experiment, scoring  # noqa: E402
from hmp.run.inference import TrainedRun, classify  # noqa: E402

flags.DEFINE_list("model_dirs", None, "Finished runs' folders (hmp.train's --model_dir).")
flags.DEFINE_list("windows", [str(w) for w in WINDOWS], "Window sides (odd).")
flags.DEFINE_bool("tta", False, "Also classify each patch in the 8 symmetries (8 times the "
                  "work).")
flags.DEFINE_list("prior_weights", ["1"], "Weights w of the network's class probabilities "
                  "fused with the spectral prior's as p ** w * prior ** (1 - w), each from 0 "
                  "to 1 (1: the network alone).")
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


def prior_log_probabilities(exp):
    """[H * W, K] the spectral prior's log class probabilities of every pixel of ``exp``'s
    scene: the shrinkage LDA of the training pixels' patch-mean spectra (all bands,
    scaled as the run scaled them)."""
    means = window_means(exp.all_bands.padded, exp.all_bands.patch_size)
    lda = ShrinkageLDA.of_patches(exp.all_bands, exp.train.indices, exp.train.class_ids,
                                  exp.n_classes)
    return lda.log_probabilities(means.reshape(exp.scene.labels.size, -1))


def rows_of(model_dir, windows, tta, prior_weights=(1.0,)):
    """The rows of one run: for each prior weight and window, its validation accuracy and
    test scores."""
    run = TrainedRun.open(model_dir, models.get_model)
    exp = experiment.prepare(*experiment.load_as_trained(model_dir))
    present = np.bincount(exp.test.class_ids, minlength=exp.n_classes) > 0
    prior = prior_log_probabilities(exp) if set(prior_weights) != {1.0} else None
    rows = []
    for variant in (False, True) if tta else (False,):
        probabilities = scene_probabilities(run, exp, variant)
        for weight in prior_weights:
            fused = fuse(probabilities.reshape(-1, exp.n_classes), prior, weight)
            rows += _rows_of_filters(model_dir, exp, fused.reshape(probabilities.shape),
                                     present, windows, variant, weight)
    return rows


def _rows_of_filters(model_dir, exp, probabilities, present, windows, tta, prior_weight):
    """The rows of one classification (with TTA or not, fused with the prior at
    ``prior_weight``): the mean's, then the guided; scored as the run scores
    (``hmp.run.scoring``: the pixels within the widest window's reach of the labelled
    ones, a test or validation pixel's smoothing reading no output of a training pixel)."""
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
                "run": model_dir, "tta": tta, "prior_weight": prior_weight,
                "guided": guided, "window": window,
                "validation": (100 * validation[window] if validation else None),
                "oa": 100 * scores.overall_accuracy, "aa": 100 * scores.average_accuracy,
                "lowest_recall": 100 * float(np.min(scores.per_class_accuracy[present]))})
    return rows


def table(rows):
    lines = ["%-48s %-4s %7s %-6s %6s %10s %7s %7s %13s" % (
        "run", "TTA", "prior w", "filter", "window", "validation", "OA", "AA", "lowest recall")]
    for row in rows:
        lines.append("%-48s %-4s %7g %-6s %6d %10s %7.2f %7.2f %13.1f" % (
            os.path.basename(os.path.normpath(row["run"]))[-48:], "yes" if row["tta"] else "no",
            row["prior_weight"], "guided" if row["guided"] else "mean", row["window"],
            "-" if row["validation"] is None else "%.1f" % row["validation"],
            row["oa"], row["aa"], row["lowest_recall"]))
    return "\n".join(lines)


def given_prior_weights():
    """--prior_weights as numbers from 0 to 1; a UsageError naming the flag otherwise."""
    try:
        weights = [float(w) for w in FLAGS.prior_weights]
    except ValueError:
        weights = []
    if not weights or not all(0 <= w <= 1 for w in weights):
        raise cli.UsageError("--prior_weights=%s: give numbers from 0 to 1 (1: the network "
                             "alone)" % ",".join(FLAGS.prior_weights))
    return weights


def main(argv):
    if len(argv) > 1:
        raise cli.UsageError("unexpected arguments %s (flags start with --)" % argv[1:])
    tf.disable_eager_execution()
    tf.logging.set_verbosity(tf.logging.ERROR)
    windows = [int(w) if w.strip().isdigit() else None for w in FLAGS.windows]
    with cli.blame("windows"):
        for window in windows:
            check_window(window)
    weights = given_prior_weights()
    rows = []
    for model_dir in FLAGS.model_dirs:
        print("%s ..." % model_dir, flush=True)
        with cli.blame("model_dirs", also=(OSError,)):
            rows += rows_of(model_dir, windows, FLAGS.tta, weights)
    print(table(rows))
    files.write_json(FLAGS.json, {"rows": rows})
    print("every row in %s" % FLAGS.json)


if __name__ == "__main__":
    cli.run(main, "bench_smoothing.py")
