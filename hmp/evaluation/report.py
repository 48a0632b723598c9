"""What a finished run tells a person: a score table, results.json, pictures."""

import os

import numpy as np

from hmp.evaluation import maps


def score_table(scores, class_names, leakage=None, train_counts=None):
    """Per-class test pixels, precision, recall (the class's accuracy) and F1, then OA, AA,
    kappa and, when given, the split's leakage (see :func:`hmp.data.split_leakage`), as
    text lines. ``train_counts``: each class's training pixels, shown in a column of
    their own (a class of a few pixels stands out), and a last line naming the classes
    trained on of which no test pixel was classified right (recall 0). A figure with
    nothing to divide by (the precision of a class never predicted) is "-"."""
    tested = np.asarray(scores.confusion).sum(axis=1)
    counts = [tested] if train_counts is None else [train_counts, tested]
    columns = "%-28s" + " %6s" * len(counts)
    lines = [(columns + " %9s %9s %9s") % (
        "class", *("train", "test")[-len(counts):], "precision", "recall", "F1")]
    for k, (name, precision, recall, f1) in enumerate(zip(
            class_names, scores.per_class_precision, scores.per_class_accuracy,
            scores.per_class_f1)):
        lines.append((columns + " %9s %9s %9s") % (
            name[:28], *(int(count[k]) for count in counts),
            *(_percent(value) for value in (precision, recall, f1))))
    lines += ["-" * len(lines[0]),
              "%-28s %9.2f" % ("overall accuracy (OA)", 100 * scores.overall_accuracy),
              "%-28s %9.2f" % ("average accuracy (AA)", 100 * scores.average_accuracy),
              "%-28s %9.4f" % ("kappa", scores.kappa)]
    if leakage is not None:
        lines.append("%-28s %9.2f  (test pixels with a training pixel in their patch)"
                     % ("leakage (%)", 100 * leakage))
    missed = [] if train_counts is None else [
        k for k, recall in enumerate(scores.per_class_accuracy) if train_counts[k] and recall == 0]
    if missed:
        lines.append("recall 0 (no test pixel of the class classified right): " + ", ".join(
            "%s (%d training, %d test pixels)" % (class_names[k], train_counts[k], tested[k])
            for k in missed))
    return "\n".join(lines)


def _percent(share):
    return "%.2f" % (100 * share) if np.isfinite(share) else "-"


def scores_dict(scores, class_names, train_counts=None):
    """The scores as results.json holds them, by class name; ``train_counts``: each class's
    training pixels, kept as ``per_class_train_pixels``. A per-class score that is not
    defined (a class without test pixels, or never predicted: NaN) is None, JSON's null
    (NaN is no JSON: strict readers refuse the file)."""
    def per_class(values):
        return {name: float(v) if np.isfinite(v) else None
                for name, v in zip(class_names, values)}
    trained = {} if train_counts is None else {"per_class_train_pixels": {
        name: int(n) for name, n in zip(class_names, train_counts)}}
    return {"overall_accuracy": scores.overall_accuracy,
            "average_accuracy": scores.average_accuracy,
            "kappa": scores.kappa,
            "per_class_accuracy": per_class(scores.per_class_accuracy),
            "per_class_precision": per_class(scores.per_class_precision),
            "per_class_recall": per_class(scores.per_class_accuracy),
            "per_class_f1": per_class(scores.per_class_f1),
            **trained,
            "confusion_matrix": np.asarray(scores.confusion).tolist()}


SUMMARY_MEASURES = ("overall_accuracy", "average_accuracy", "kappa")


def summarise_runs(test_scores):
    """Mean and (sample, ddof=1) standard deviation of OA, AA and kappa over runs.

    ``test_scores``: one ``scores_dict`` per run. With a single run the standard
    deviation is 0.
    """
    summary = {}
    for measure in SUMMARY_MEASURES:
        values = np.array([scores[measure] for scores in test_scores], np.float64)
        summary[measure] = {"mean": float(values.mean()),
                            "std": float(values.std(ddof=1)) if len(values) > 1 else 0.0,
                            "runs": values.tolist()}
    return summary


def summary_table(summary, names):
    """One line per run (``names``), then mean and standard deviation, in percent (kappa x100)."""
    lines = ["%-20s %8s %8s %8s" % ("run", "OA %", "AA %", "kappa%")]   # kappa x100
    for i, name in enumerate(names):
        lines.append("%-20s %8.2f %8.2f %8.2f" % (
            name[:20], *(100 * summary[m]["runs"][i] for m in SUMMARY_MEASURES)))
    lines += ["-" * 47,
              "%-20s %8.2f %8.2f %8.2f" % ("mean", *(100 * summary[m]["mean"]
                                                    for m in SUMMARY_MEASURES)),
              "%-20s %8.2f %8.2f %8.2f" % ("std", *(100 * summary[m]["std"]
                                                   for m in SUMMARY_MEASURES))]
    return "\n".join(lines)


def prediction_map(shape, indices, predicted):
    """Label map [H, W] with 1-based predicted classes at flat ``indices``, 0 elsewhere."""
    labels = np.zeros(shape, np.int32)
    labels.ravel()[indices] = predicted + 1
    return labels


MAP_FILE, CONFUSION_FILE = "classification_map.png", "confusion_matrix.png"


def save_pictures(model_dir, scene, predicted_map, scores):
    """MAP_FILE (prediction beside ground truth) and CONFUSION_FILE in ``model_dir``."""
    map_path = os.path.join(model_dir, MAP_FILE)
    maps.save_classification_map(map_path, predicted_map, scene.labels, scene.class_names,
                                 title="%s: OA %.2f%%" % (scene.name,
                                                          100 * scores.overall_accuracy))
    confusion_path = os.path.join(model_dir, CONFUSION_FILE)
    maps.save_confusion_matrix_plot(confusion_path, scores.confusion, scene.class_names)
    return map_path, confusion_path
