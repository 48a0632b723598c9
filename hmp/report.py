"""What a finished run tells a person: a score table, results.json, pictures."""

import json
import os
import tempfile

import numpy as np

from hmp import maps


def score_table(scores, class_names):
    """OA, AA, kappa and per-class accuracy as aligned text lines."""
    lines = ["%-28s %8s" % ("class", "accuracy")]
    for name, accuracy in zip(class_names, scores.per_class_accuracy):
        lines.append("%-28s %8.2f" % (name[:28], 100 * accuracy))
    lines += ["-" * 37,
              "%-28s %8.2f" % ("overall accuracy (OA)", 100 * scores.overall_accuracy),
              "%-28s %8.2f" % ("average accuracy (AA)", 100 * scores.average_accuracy),
              "%-28s %8.4f" % ("kappa", scores.kappa)]
    return "\n".join(lines)


def scores_dict(scores, class_names):
    return {"overall_accuracy": scores.overall_accuracy,
            "average_accuracy": scores.average_accuracy,
            "kappa": scores.kappa,
            "per_class_accuracy": {name: float(a) for name, a in
                                   zip(class_names, scores.per_class_accuracy)},
            "confusion_matrix": np.asarray(scores.confusion).tolist()}


def write_json(path, payload):
    """Writes JSON atomically: a reader never sees half a file, and writers of the same
    file at once (e.g. two runs sharing the speed cache) never mix their bytes. The
    temporary file ``<name>.<random>.tmp`` beside ``path`` is removed on failure."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, temporary = tempfile.mkstemp(prefix=os.path.basename(path) + ".", suffix=".tmp",
                                     dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(payload, f, indent=2, default=_plain)
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.remove(temporary)
        raise


def prediction_map(shape, indices, predicted):
    """Label map [H, W] with 1-based predicted classes at flat ``indices``, 0 elsewhere."""
    labels = np.zeros(shape, np.int32)
    labels.ravel()[indices] = predicted + 1
    return labels


def save_pictures(model_dir, scene, predicted_map, scores):
    """classification_map.png (prediction beside ground truth) and confusion_matrix.png."""
    map_path = os.path.join(model_dir, "classification_map.png")
    maps.save_classification_map(map_path, predicted_map, scene.labels, scene.class_names,
                                 title="%s: OA %.2f%%" % (scene.name,
                                                          100 * scores.overall_accuracy))
    confusion_path = os.path.join(model_dir, "confusion_matrix.png")
    maps.save_confusion_matrix_plot(confusion_path, scores.confusion, scene.class_names)
    return map_path, confusion_path


def _plain(value):
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    return str(value)
