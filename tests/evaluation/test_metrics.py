"""OA, AA, kappa, per-class accuracy (recall), precision and F1 against hand-computed
values and independent formulas."""

import numpy as np
import pytest

from hmp.evaluation.metrics import (average_accuracy, cohen_kappa, confusion_matrix, evaluate,
                         overall_accuracy, per_class_accuracy)


def labels_from_counts(confusion):
    """(y_true, y_pred) pairs realising a given confusion matrix."""
    pairs = [(i, j) for (i, j), count in np.ndenumerate(np.asarray(confusion))
             for _ in range(count)]
    y_true, y_pred = zip(*pairs)
    return np.array(y_true), np.array(y_pred)


def kappa_from_definition(y_true, y_pred):
    """Kappa from the raw label arrays: observed agreement vs. agreement of independent raters."""
    observed = np.mean(y_true == y_pred)
    classes = np.union1d(y_true, y_pred)
    chance = sum(np.mean(y_true == k) * np.mean(y_pred == k) for k in classes)
    return (observed - chance) / (1 - chance)


def test_confusion_matrix_counts_true_rows_and_predicted_columns():
    confusion = confusion_matrix([0, 0, 1, 2, 2, 2], [0, 1, 1, 2, 0, 2], 3)
    np.testing.assert_array_equal(confusion, [[1, 1, 0], [0, 1, 0], [1, 0, 2]])


def test_two_rater_textbook_example():
    # 50 items: both "yes" 20, yes/no 5, no/yes 10, both "no" 15.
    # p_o = 35/50 = 0.7; p_e = 0.5*0.6 + 0.5*0.4 = 0.5; kappa = 0.2/0.5 = 0.4.
    confusion = np.array([[20, 5], [10, 15]])
    assert overall_accuracy(confusion) == pytest.approx(0.7)
    assert cohen_kappa(confusion) == pytest.approx(0.4)
    np.testing.assert_allclose(per_class_accuracy(confusion), [0.8, 0.6])
    assert average_accuracy(confusion) == pytest.approx(0.7)


def test_hand_computed_three_class_example():
    confusion = np.array([[8, 2, 0], [1, 3, 0], [0, 3, 3]])
    # OA = 14/20; per class 8/10, 3/4, 3/6; AA = (0.8 + 0.75 + 0.5) / 3
    # p_e = (10*9 + 4*8 + 6*3) / 400 = 140/400; kappa = (0.7 - 0.35) / 0.65
    assert overall_accuracy(confusion) == pytest.approx(0.7)
    np.testing.assert_allclose(per_class_accuracy(confusion), [0.8, 0.75, 0.5])
    assert average_accuracy(confusion) == pytest.approx(2.05 / 3)
    assert cohen_kappa(confusion) == pytest.approx(0.35 / 0.65)


def test_kappa_matches_its_definition_on_random_labels():
    rng = np.random.default_rng(0)
    y_true = rng.integers(0, 6, 500)
    y_pred = np.where(rng.random(500) < 0.6, y_true, rng.integers(0, 6, 500))
    scores = evaluate(y_true, y_pred, 6)
    assert scores.kappa == pytest.approx(kappa_from_definition(y_true, y_pred))
    assert scores.overall_accuracy == pytest.approx(np.mean(y_true == y_pred))
    recalls = [np.mean(y_pred[y_true == k] == k) for k in range(6)]
    np.testing.assert_allclose(scores.per_class_accuracy, recalls)
    assert scores.average_accuracy == pytest.approx(np.mean(recalls))


def test_confusion_matrix_round_trips_through_labels():
    confusion = np.array([[5, 0, 2], [1, 7, 0], [0, 4, 9]])
    np.testing.assert_array_equal(confusion_matrix(*labels_from_counts(confusion), 3), confusion)


def test_perfect_and_chance_level_predictions():
    assert cohen_kappa(np.diag([3, 4, 5])) == pytest.approx(1.0)
    assert cohen_kappa(np.array([[7]])) == 1.0
    assert cohen_kappa(np.array([[25, 25], [25, 25]])) == pytest.approx(0.0)


def test_absent_class_is_left_out_of_the_average():
    confusion = np.array([[3, 1, 0], [0, 0, 0], [0, 1, 1]])
    accuracy = per_class_accuracy(confusion)
    assert np.isnan(accuracy[1])
    assert average_accuracy(confusion) == pytest.approx((0.75 + 0.5) / 2)


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match=r"y_pred holds class ids in \[0, 3\], allowed: 0..2"):
        confusion_matrix([0, 1], [0, 3], 3)
    with pytest.raises(ValueError, match="y_true has 2 entries but y_pred has 3"):
        confusion_matrix([0, 1], [0, 1, 1], 3)
    with pytest.raises(ValueError, match="no pixels"):
        evaluate([], [], 3)


def precision_recall_f1_by_counting(y_true, y_pred, n_classes):
    """Per class, from the counts of true positives, false positives and false negatives."""
    rows = []
    for k in range(n_classes):
        tp = np.sum((y_true == k) & (y_pred == k))
        fp = np.sum((y_true != k) & (y_pred == k))
        fn = np.sum((y_true == k) & (y_pred != k))
        rows.append((tp / (tp + fp) if tp + fp else np.nan,
                     tp / (tp + fn) if tp + fn else np.nan,
                     2 * tp / (2 * tp + fp + fn) if tp + fp + fn else np.nan))
    return np.array(rows).T


def test_per_class_precision_recall_f1_match_their_definitions():
    rng = np.random.default_rng(1)
    y_true = rng.integers(0, 5, 400)
    y_pred = np.where(rng.random(400) < 0.5, y_true, rng.integers(0, 5, 400))
    y_pred[y_pred == 4] = 0                                                     # 4 never guessed
    y_true[y_true == 3] = 2                                                     # 3 never occurs
    scores = evaluate(y_true, y_pred, 6)                                        # 5: neither
    precision, recall, f1 = precision_recall_f1_by_counting(y_true, y_pred, 6)
    np.testing.assert_allclose(scores.per_class_precision, precision)
    np.testing.assert_allclose(scores.per_class_accuracy, recall)
    np.testing.assert_allclose(scores.per_class_f1, f1)
    assert np.isnan(scores.per_class_precision[4]) and scores.per_class_f1[4] == 0.0
    assert np.isnan(scores.per_class_accuracy[3]) and scores.per_class_f1[3] == 0.0
    assert np.isnan(scores.per_class_f1[5])


def test_per_class_scores_match_scikit_learn():
    metrics_module = pytest.importorskip(
        "sklearn.metrics", reason="scikit-learn is an optional extra (pip install -e .[baselines])")
    rng = np.random.default_rng(2)
    y_true = rng.integers(0, 4, 300)
    y_pred = np.where(rng.random(300) < 0.6, y_true, rng.integers(0, 4, 300))
    scores = evaluate(y_true, y_pred, 4)
    precision, recall, f1, _ = metrics_module.precision_recall_fscore_support(
        y_true, y_pred, labels=range(4))
    np.testing.assert_allclose(scores.per_class_precision, precision)
    np.testing.assert_allclose(scores.per_class_accuracy, recall)
    np.testing.assert_allclose(scores.per_class_f1, f1)
    assert scores.kappa == pytest.approx(metrics_module.cohen_kappa_score(y_true, y_pred))
