"""Classification accuracy measures used for HSI benchmarks: OA, AA, kappa, per-class
accuracy (recall), precision and F1.

All measures are computed from the confusion matrix, whose rows are true
classes and columns predicted classes (0-based class ids).
"""

from dataclasses import dataclass

import numpy as np


def confusion_matrix(y_true, y_pred, n_classes):
    """Counts [n_classes, n_classes]: entry (i, j) = pixels of class i predicted as j."""
    y_true = np.asarray(y_true, dtype=np.int64).ravel()
    y_pred = np.asarray(y_pred, dtype=np.int64).ravel()
    if y_true.shape != y_pred.shape:
        raise ValueError(f"y_true has {y_true.size} entries but y_pred has {y_pred.size}")
    for name, values in (("y_true", y_true), ("y_pred", y_pred)):
        if values.size and (values.min() < 0 or values.max() >= n_classes):
            raise ValueError(f"{name} holds class ids in [{values.min()}, {values.max()}], "
                             f"allowed: 0..{n_classes - 1}")
    return np.bincount(y_true * n_classes + y_pred,
                       minlength=n_classes * n_classes).reshape(n_classes, n_classes)


def overall_accuracy(confusion):
    """Share of all pixels classified correctly (OA)."""
    confusion = np.asarray(confusion, dtype=np.float64)
    return float(np.trace(confusion) / confusion.sum())


def per_class_accuracy(confusion):
    """Recall of every class; NaN for a class with no true pixels."""
    confusion = np.asarray(confusion, dtype=np.float64)
    totals = confusion.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(totals > 0, np.diag(confusion) / totals, np.nan)


def per_class_precision(confusion):
    """Share of the pixels predicted as each class that are of it; NaN for a class never
    predicted."""
    confusion = np.asarray(confusion, dtype=np.float64)
    predicted = confusion.sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(predicted > 0, np.diag(confusion) / predicted, np.nan)


def per_class_f1(confusion):
    """Harmonic mean of precision and recall per class: 2 TP / (2 TP + FP + FN).

    NaN for a class that neither occurs nor is predicted; 0 for one that
    occurs or is predicted but is never right.
    """
    confusion = np.asarray(confusion, dtype=np.float64)
    true_positives = np.diag(confusion)
    denominator = confusion.sum(axis=0) + confusion.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(denominator > 0, 2 * true_positives / denominator, np.nan)


def average_accuracy(confusion):
    """Mean of the per-class accuracies (AA), over the classes that occur."""
    return float(np.nanmean(per_class_accuracy(confusion)))


def cohen_kappa(confusion):
    """Cohen's kappa: agreement beyond chance, (p_o - p_e) / (1 - p_e).

    p_o is the overall accuracy, p_e the agreement expected if predictions
    were drawn independently of the truth with the same class frequencies.
    When p_e = 1 (one class, always predicted) agreement is perfect: 1.
    """
    confusion = np.asarray(confusion, dtype=np.float64)
    total = confusion.sum()
    observed = np.trace(confusion) / total
    expected = float(confusion.sum(axis=1) @ confusion.sum(axis=0)) / total ** 2
    if expected == 1.0:
        return 1.0
    return float((observed - expected) / (1.0 - expected))


@dataclass(frozen=True)
class Scores:
    """OA, AA, kappa, per-class accuracy (recall), precision and F1, and the confusion
    matrix of one evaluation."""

    overall_accuracy: float
    average_accuracy: float
    kappa: float
    per_class_accuracy: np.ndarray
    confusion: np.ndarray
    per_class_precision: np.ndarray
    per_class_f1: np.ndarray


def evaluate(y_true, y_pred, n_classes):
    """All measures for 0-based true and predicted class ids."""
    confusion = confusion_matrix(y_true, y_pred, n_classes)
    if confusion.sum() == 0:
        raise ValueError("no pixels to evaluate: y_true and y_pred are empty")
    return Scores(overall_accuracy=overall_accuracy(confusion),
                  average_accuracy=average_accuracy(confusion),
                  kappa=cohen_kappa(confusion),
                  per_class_accuracy=per_class_accuracy(confusion),
                  confusion=confusion,
                  per_class_precision=per_class_precision(confusion),
                  per_class_f1=per_class_f1(confusion))
