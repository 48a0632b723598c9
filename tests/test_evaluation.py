"""Evaluation a reviewer can trust: a split's leakage, splits given as label maps, the
split saved in the run folder, and the mean/std summary of several runs."""

import numpy as np
import pytest

from hmp import data
from hmp.data import (disjoint_split, split_from_label_maps, split_leakage, stratified_split,
                      synthetic_scene, window_counts)
from hmp.evaluation import report
from hmp.run import experiment


@pytest.fixture(scope="module")
def labels():
    return synthetic_scene(height=37, width=43, n_classes=4, n_bands=6, seed=3).labels


def brute_force_leakage(split, patch_size):
    """Looks at every test pixel's window, pixel by pixel."""
    train = split.train_mask
    height, width = train.shape
    radius = patch_size // 2
    leaked = 0
    for index in split.test:
        row, col = divmod(int(index), width)
        window = train[max(row - radius, 0):row + radius + 1, max(col - radius, 0):col + radius + 1]
        leaked += bool(window.any())
    return leaked / len(split.test)


@pytest.mark.parametrize("patch_size", [1, 5, 9])
def test_window_counts_match_counting_each_window(patch_size):
    mask = np.random.default_rng(patch_size).random((11, 14)) < 0.2
    radius = patch_size // 2
    expected = np.array([[mask[max(r - radius, 0):r + radius + 1,
                               max(c - radius, 0):c + radius + 1].sum()
                          for c in range(14)] for r in range(11)])
    np.testing.assert_array_equal(window_counts(mask, patch_size), expected)


def test_leakage_matches_brute_force_and_is_zero_for_the_disjoint_split(labels):
    random_split = stratified_split(labels, train_fraction=0.05, seed=1)
    for patch_size in (1, 3, 9):
        assert split_leakage(random_split, patch_size) == pytest.approx(
            brute_force_leakage(random_split, patch_size), abs=1e-12)
    assert split_leakage(random_split, 1) == 0.0                 # a pixel is train or test
    assert 0.3 < split_leakage(random_split, 9) < 1.0
    disjoint = disjoint_split(labels, train_fraction=0.1, patch_size=7, seed=0)
    assert split_leakage(disjoint, 7) == 0.0
    assert split_leakage(disjoint, 9) == pytest.approx(brute_force_leakage(disjoint, 9))


def test_split_given_as_label_maps_round_trips(labels, tmp_path):
    split = stratified_split(labels, train_fraction=0.2, seed=4)
    for name, mask in (("train.npy", split.train_mask), ("test.npy", split.test_mask)):
        np.save(tmp_path / name, np.where(mask, labels, 0).astype(np.uint8))
    given = split_from_label_maps(labels, tmp_path / "train.npy", tmp_path / "test.npy")
    np.testing.assert_array_equal(given.train, split.train)
    np.testing.assert_array_equal(given.test, split.test)
    assert given.image_shape == labels.shape


def test_split_label_maps_that_do_not_fit_are_refused(labels, tmp_path):
    train = np.where(stratified_split(labels, train_fraction=0.2, seed=4).train_mask, labels, 0)
    np.save(tmp_path / "train.npy", train)
    np.save(tmp_path / "small.npy", train[:-1])
    np.save(tmp_path / "empty.npy", np.zeros_like(train))
    wrong = train.copy()
    wrong[wrong == 1] = 2
    np.save(tmp_path / "wrong.npy", wrong)
    cases = {"small.npy": r"test_set .*small.npy has shape \(36, 43\), but the scene is \(37, 43\)",
             "empty.npy": "test_set .*empty.npy labels no pixel",
             "train.npy": r"pixels are in both the training and the test set",
             "wrong.npy": r"test_set .*wrong.npy: \d+ pixels carry another class than the "
                          r"scene's ground truth .* is 2 there, 1 in the ground truth"}
    for name, message in cases.items():
        with pytest.raises(ValueError, match=message):
            split_from_label_maps(labels, tmp_path / "train.npy", tmp_path / name)
    with pytest.raises(FileNotFoundError, match="no such file: .*missing.npy"):
        split_from_label_maps(labels, tmp_path / "missing.npy", tmp_path / "train.npy")


def test_run_folder_keeps_its_split_and_settings(labels, tmp_path):
    scene = synthetic_scene(layout=labels, n_bands=6, seed=3)
    np.save(tmp_path / "cube.npy", scene.cube)
    np.save(tmp_path / "labels.npy", scene.labels)
    config = experiment.DataConfig(dataset=str(tmp_path / "cube.npy"),
                                   labels_path=str(tmp_path / "labels.npy"), split="disjoint",
                                   patch_size=5, seed=2)
    prepared = experiment.prepare(config)
    experiment.save(tmp_path / "run", config, prepared.split)
    loaded_config, loaded_split = experiment.load(tmp_path / "run")
    assert loaded_config == config
    np.testing.assert_array_equal(loaded_split.train, prepared.split.train)
    np.testing.assert_array_equal(loaded_split.test, prepared.split.test)
    other = stratified_split(prepared.scene.labels, train_fraction=0.3, seed=9)
    reused = experiment.prepare(config, other)   # a saved split wins over the settings'
    np.testing.assert_array_equal(reused.test.indices, other.test)
    with pytest.raises(ValueError, match=r"saved split is for a 4x4 image, but scene"):
        experiment.prepare(config, data.Split(np.array([0]), np.array([1]), (4, 4)))
    with pytest.raises(ValueError, match="holds no saved split"):
        experiment.load(tmp_path / "nothing")


def test_summary_of_runs_is_the_mean_and_sample_std():
    runs = [{"overall_accuracy": oa, "average_accuracy": aa, "kappa": k}
            for oa, aa, k in ((0.9, 0.8, 0.85), (0.7, 0.6, 0.65), (0.8, 0.9, 0.75))]
    summary = report.summarise_runs(runs)
    for measure in report.SUMMARY_MEASURES:
        values = [run[measure] for run in runs]
        assert summary[measure]["mean"] == pytest.approx(sum(values) / 3)
        assert summary[measure]["std"] == pytest.approx(
            (sum((v - sum(values) / 3) ** 2 for v in values) / 2) ** 0.5)
    table = report.summary_table(summary, ["seed 0", "seed 1", "seed 2"]).splitlines()
    assert table[-2].split() == ["mean", "80.00", "76.67", "75.00"]
    assert table[-1].split() == ["std", "10.00", "15.28", "10.00"]
    assert report.summarise_runs(runs[:1])["kappa"]["std"] == 0.0
