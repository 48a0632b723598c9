"""Stratified and spatially disjoint splits, saved and reloaded."""

import numpy as np
import pytest
from scipy import ndimage

from hmp.data import (disjoint_split, load_split, save_split, stratified_split,
                      synthetic_scene)


@pytest.fixture(scope="module")
def labels():
    return synthetic_scene(height=80, width=90, n_classes=6, n_bands=8, seed=5).labels


def class_counts(labels, indices):
    return np.bincount(labels.ravel()[indices], minlength=labels.max() + 1)[1:]


def test_fraction_split_is_stratified_disjoint_and_covers_all_labelled(labels):
    split = stratified_split(labels, train_fraction=0.1, seed=0)
    totals = class_counts(labels, np.flatnonzero(labels))
    np.testing.assert_array_equal(class_counts(labels, split.train), np.round(0.1 * totals))
    assert np.intersect1d(split.train, split.test).size == 0
    np.testing.assert_array_equal(np.union1d(split.train, split.test), np.flatnonzero(labels))


def test_count_split_takes_that_many_per_class(labels):
    split = stratified_split(labels, train_per_class=15, seed=0)
    assert class_counts(labels, split.train).tolist() == [15] * 6


def test_split_depends_on_seed_only(labels):
    first = stratified_split(labels, train_fraction=0.2, seed=7)
    again = stratified_split(labels, train_fraction=0.2, seed=7)
    other = stratified_split(labels, train_fraction=0.2, seed=8)
    np.testing.assert_array_equal(first.train, again.train)
    assert not np.array_equal(first.train, other.train)


def test_tiny_class_keeps_one_training_and_one_test_pixel():
    labels = np.array([[1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2]])
    split = stratified_split(labels, train_fraction=0.05, seed=0)
    assert class_counts(labels, split.train).tolist() == [1, 1]
    assert class_counts(labels, split.test).tolist() == [1, 9]


@pytest.mark.parametrize("fraction", [0.0, 1.0, -0.2, 1.5])
def test_fraction_outside_the_open_unit_interval_is_refused(labels, fraction):
    with pytest.raises(ValueError, match=f"strictly between 0 and 1, got {fraction}"):
        stratified_split(labels, train_fraction=fraction)
    with pytest.raises(ValueError, match=f"strictly between 0 and 1, got {fraction}"):
        disjoint_split(labels, train_fraction=fraction, patch_size=5)


def test_class_with_too_few_pixels_is_refused():
    labels = np.array([[1, 1, 1, 0, 2]])
    with pytest.raises(ValueError, match="class 2 has 1 labelled pixels, "
                                         "but train_fraction=0.5 needs at least 2"):
        stratified_split(labels, train_fraction=0.5)
    with pytest.raises(ValueError, match="class 1 has 3 labelled pixels, "
                                         "but train_per_class=3 needs at least 4"):
        stratified_split(labels, train_per_class=3)


def test_fraction_and_count_are_exclusive(labels):
    with pytest.raises(ValueError, match="exactly one"):
        stratified_split(labels, train_fraction=0.1, train_per_class=5)


@pytest.mark.parametrize("patch_size", [5, 9])
def test_disjoint_split_puts_no_test_pixel_inside_any_training_patch(labels, patch_size):
    split = disjoint_split(labels, train_fraction=0.2, patch_size=patch_size, seed=1)
    radius = patch_size // 2
    train_rows, train_cols = np.divmod(split.train, labels.shape[1])
    test_rows, test_cols = np.divmod(split.test, labels.shape[1])
    chebyshev = np.maximum(np.abs(test_rows[:, None] - train_rows[None]),
                           np.abs(test_cols[:, None] - train_cols[None]))
    assert chebyshev.min() > radius
    assert np.all(class_counts(labels, split.test) > 0)
    assert np.all(class_counts(labels, split.train) > 0)


def test_disjoint_training_pixels_form_compact_stripes(labels):
    split = disjoint_split(labels, train_fraction=0.2, patch_size=5, seed=1)
    random = stratified_split(labels, train_fraction=0.2, seed=1)
    components = ndimage.label(split.train_mask)[1]
    assert components < ndimage.label(random.train_mask)[1] / 10


def test_disjoint_split_reports_classes_starved_by_the_guard_band():
    labels = np.zeros((5, 30), np.int32)
    labels[2, :] = 1
    labels[0, 10:14] = 2
    with pytest.raises(ValueError, match=r"classes \[2\] have no test pixels outside the "
                                         r"4-pixel guard band .*use a smaller"):
        disjoint_split(labels, train_fraction=0.5, patch_size=9, seed=0)


def test_even_patch_size_is_refused(labels):
    with pytest.raises(ValueError, match="patch_size must be an odd positive integer.*got 8"):
        disjoint_split(labels, train_fraction=0.2, patch_size=8)


def test_saved_split_loads_identically(labels, tmp_path):
    split = disjoint_split(labels, train_fraction=0.1, patch_size=7, seed=2)
    save_split(tmp_path / "split.npz", split)
    loaded = load_split(tmp_path / "split.npz")
    np.testing.assert_array_equal(loaded.train, split.train)
    np.testing.assert_array_equal(loaded.test, split.test)
    assert loaded.image_shape == labels.shape and loaded.description == split.description
    np.savez(tmp_path / "other.npz", train=split.train)
    with pytest.raises(ValueError, match=r"missing \['description', 'image_shape', 'test'\]"):
        load_split(tmp_path / "other.npz")
