"""Stratified and spatially disjoint splits, saved and reloaded, and the spatial
validation share of a disjoint split (against numpy distances and hand-worked maps)."""

import numpy as np
import pytest
from scipy import ndimage

from hmp.data import (disjoint_split, load_split, save_split, spatial_validation_split,
                      stratified_split, synthetic_scene)
from hmp.errors import InvalidInput


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
    with pytest.raises(ValueError, match="class 2 has 1 labelled pixel, "
                                         "but train_fraction=0.5 needs at least 2"):
        stratified_split(labels, train_fraction=0.5)
    with pytest.raises(ValueError, match="class 1 has 3 labelled pixels, "
                                         "but train_per_class=3 needs at least 4"):
        stratified_split(labels, train_per_class=3)
    # a label far above the others, with empty ones below it: named as a possible stray
    strayed = np.array([[1, 1, 1, 0, 2, 2, 40]])
    for split in (lambda: stratified_split(strayed, train_fraction=0.5),
                  lambda: disjoint_split(strayed, train_fraction=0.5, patch_size=1)):
        with pytest.raises(ValueError) as refused:
            split()
        assert str(refused.value) == (
            "class 40 has 1 labelled pixel, but train_fraction=0.5 needs at least 2 (at least "
            "one must remain for testing); labels 3 to 39 have no pixel: is 40 a stray label?")


def test_a_map_without_labelled_pixels_is_refused():
    unlabelled = np.zeros((6, 5), np.int32)
    for split in (lambda: stratified_split(unlabelled, train_fraction=0.5),
                  lambda: stratified_split(unlabelled, train_per_class=1),
                  lambda: disjoint_split(unlabelled, train_fraction=0.5, patch_size=3)):
        with pytest.raises(InvalidInput) as refused:
            split()
        assert str(refused.value) == ("the label map has no labelled pixel (every label is "
                                      "0): nothing to split")


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
    # a float, even a whole one: refused in one line (the guard band's window failed on it)
    with pytest.raises(ValueError, match=r"patch_size must be an odd positive integer.*got 9\.0"):
        disjoint_split(labels, train_fraction=0.2, patch_size=9.0)
    assert disjoint_split(labels, train_fraction=0.2, patch_size=np.int64(9)).train.size


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


def chebyshev(first, second, width):
    """Chebyshev distances [len(first), len(second)] between flat pixel indices."""
    (rows_a, cols_a), (rows_b, cols_b) = np.divmod(first, width), np.divmod(second, width)
    return np.maximum(np.abs(rows_a[:, None] - rows_b[None]),
                      np.abs(cols_a[:, None] - cols_b[None]))


def end_blocks_by_python(pixels, width, count):
    """The ``count`` first pixels from each end of their extent, by Python's sort: by
    row (then column), by row from the bottom, by column (then row), by column from
    the right."""
    def position(index):
        return divmod(int(index), width)
    keys = (lambda p: position(p), lambda p: tuple(-v for v in position(p)),
            lambda p: position(p)[::-1], lambda p: tuple(-v for v in position(p)[::-1]))
    return [{int(p) for p in sorted(pixels, key=key)[:count]} for key in keys]


@pytest.mark.parametrize("patch_size, seed", [(5, 1), (9, 0), (9, 3)])
def test_spatial_validation_share_lies_outside_every_training_patch(labels, patch_size,
                                                                     seed):
    split = disjoint_split(labels, train_fraction=0.2, patch_size=patch_size, seed=seed)
    train, validation = spatial_validation_split(labels, split.train, 0.1, patch_size)
    radius, width, flat = patch_size // 2, labels.shape[1], labels.ravel()
    # a partition of the split's training pixels: training, validation, dropped guard band
    assert np.all(np.diff(train) > 0) and np.all(np.diff(validation) > 0)
    assert np.intersect1d(train, validation).size == 0
    dropped = np.setdiff1d(split.train, np.union1d(train, validation))
    np.testing.assert_array_equal(np.union1d(np.union1d(train, validation), dropped),
                                  split.train)
    # no validation pixel within the patch radius of a training pixel; every dropped
    # pixel within it of a validation pixel (so none was dropped needlessly)
    assert chebyshev(validation, train, width).min() > radius
    assert chebyshev(dropped, validation, width).min(axis=1).max() <= radius
    total, kept = class_counts(labels, split.train), class_counts(labels, train)
    held = class_counts(labels, validation)
    share = np.maximum(np.minimum(np.round(0.1 * total), total - 1), 0).astype(int)
    for k in range(len(total)):
        # each class's validation pixels: its share as a block at one end of its
        # training pixels, less those given back near a class the guard bands would cut
        # by more than half; a class that gives none of its share keeps every pixel
        pixels = split.train[flat[split.train] == k + 1]
        block = set(validation[flat[validation] == k + 1].tolist())
        assert any(block <= end for end in end_blocks_by_python(pixels, width, share[k]))
        if share[k] and not held[k]:
            assert kept[k] == total[k]
        assert 2 * kept[k] >= total[k] - share[k]
    assert held.sum() > 0.5 * share.sum()
    again = spatial_validation_split(labels, split.train, 0.1, patch_size)
    np.testing.assert_array_equal(again[0], train)
    np.testing.assert_array_equal(again[1], validation)


def test_spatial_validation_takes_the_end_whose_guard_band_costs_least():
    """Class 1 trains on a 3 x 40 band, class 2 on the 3 x 4 block left of it (patch 5,
    radius 2). Class 1's 12 validation pixels: at its right end (4 columns) the band
    of 2 columns beside them is dropped (6 pixels); at its left end 6 of its own and
    6 of class 2's would be; at a row's end, 30. Class 2's one pixel: its guard band
    would take 8 of its other 11, so it gives none and keeps all 12."""
    labels = np.zeros((6, 44), np.int32)
    labels[:3, 4:] = 1
    labels[:3, :4] = 2
    train = np.flatnonzero(labels.ravel())
    kept, validation = spatial_validation_split(labels, train, 0.1, 5)
    expected_validation = np.zeros_like(labels, bool)
    expected_validation[:3, 40:] = True
    np.testing.assert_array_equal(validation, np.flatnonzero(expected_validation))
    dropped = np.zeros_like(labels, bool)
    dropped[:3, 38:40] = True
    np.testing.assert_array_equal(
        kept, np.flatnonzero((labels > 0) & ~expected_validation & ~dropped))


def test_a_class_of_one_pixel_keeps_it_and_what_threatens_it_goes_back_to_training():
    """Class 1 trains on a 3 x 40 band; classes 2 and 3 on one pixel each, two rows below
    its ends (within a 5 x 5 patch's radius of its bottom row). Class 1's cheapest end
    is its left one (cols 0-3; its right one costs as much, and comes later), whose
    guard band would take class 2's only pixel: the
    validation pixels within the radius of it (row 2) go back to training, the rest
    (rows 0-1) stay, with their band (rows 0-2, cols 0-5) dropped."""
    labels = np.zeros((6, 40), np.int32)
    labels[:3] = 1
    labels[4, 1], labels[4, 38] = 2, 3
    train = np.flatnonzero(labels.ravel())
    kept, validation = spatial_validation_split(labels, train, 0.1, 5)
    expected_validation = np.zeros_like(labels, bool)
    expected_validation[:2, :4] = True
    np.testing.assert_array_equal(validation, np.flatnonzero(expected_validation))
    band = np.zeros_like(labels, bool)
    band[:3, :6] = True
    np.testing.assert_array_equal(kept, np.flatnonzero((labels > 0) & ~band))
    assert class_counts(labels, kept).tolist() == [120 - 18, 1, 1]


@pytest.mark.parametrize("pixels", [1, 2])
def test_classes_of_one_or_two_adjacent_training_pixels_give_no_validation(pixels):
    """Even at half: a class of one pixel has none to give, and one of two adjacent
    pixels would lose the other to the guard band."""
    labels = np.zeros((20, 20), np.int32)
    labels[:10, :10] = 1
    labels[15, 15:15 + pixels] = 2
    train = np.flatnonzero(labels.ravel())
    kept, validation = spatial_validation_split(labels, train, 0.5, 3)
    assert class_counts(labels, validation).tolist() == [50, 0]
    assert class_counts(labels, kept)[1] == pixels


def test_no_validation_share_leaves_the_training_pixels_whole(labels):
    split = disjoint_split(labels, train_fraction=0.2, patch_size=5, seed=1)
    kept, validation = spatial_validation_split(labels, split.train[::-1], 0.0, 5)
    np.testing.assert_array_equal(kept, split.train)
    assert validation.size == 0
    for fraction in (1.0, -0.1):
        with pytest.raises(ValueError, match="validation fraction must lie in"):
            spatial_validation_split(labels, split.train, fraction, 5)


@pytest.mark.parametrize("damage", ["text", "empty", "cut short", "a lone .npy", "objects"])
def test_a_damaged_split_file_is_refused_naming_it(labels, tmp_path, damage):
    path = tmp_path / "split.npz"
    save_split(path, stratified_split(labels, train_per_class=2, seed=0))
    whole = path.read_bytes()
    if damage == "a lone .npy":
        np.save(tmp_path / "array.npy", np.arange(3))
        (tmp_path / "array.npy").rename(path)
    elif damage == "objects":
        np.savez(path, train=np.array([{}], dtype=object))
    else:
        path.write_bytes({"text": b"not a split", "empty": b"",
                          "cut short": whole[:len(whole) // 2]}[damage])
    with pytest.raises(InvalidInput) as refused:
        load_split(path)
    assert str(refused.value) == f"{path} is not a saved split: not an .npz file of arrays"


def test_a_disjoint_split_trains_each_class_from_one_end_and_tests_beyond_the_guard_band():
    """By hand: class 1 fills 6 rows x 5 columns (longer along the rows), class 2 3 rows
    x 6 columns (longer along the columns); 30% of each (9 and 5 pixels) trains, taken
    from one end of its longer side (row by row, or column by column), the end chosen
    by the seed; the test pixels are the labelled ones farther than patch_size // 2
    (Chebyshev) from every training pixel."""
    labels = np.zeros((8, 13), np.int32)
    labels[1:7, 0:5] = 1
    labels[0:3, 7:13] = 2
    width = labels.shape[1]
    rows_first = [r * width + c for r in range(1, 7) for c in range(5)]   # class 1's order
    cols_first = [r * width + c for c in range(7, 13) for r in range(3)]   # class 2's

    def ends(order, line, count):
        """The first ``count`` of ``order`` from either end, by lines of ``line`` pixels
        (each line's pixels in their order either way)."""
        lines = [order[start:start + line] for start in range(0, len(order), line)]
        backwards = [p for pixels in reversed(lines) for p in pixels]
        return {tuple(sorted(order[:count])), tuple(sorted(backwards[:count]))}

    seen = set()
    for seed in range(6):
        split = disjoint_split(labels, train_fraction=0.3, patch_size=3, seed=seed)
        train = set(split.train.tolist())
        ones = tuple(sorted(p for p in train if labels.flat[p] == 1))
        twos = tuple(sorted(p for p in train if labels.flat[p] == 2))
        assert ones in ends(rows_first, 5, 9) and twos in ends(cols_first, 3, 5), seed
        seen.add((ones, twos))
        labelled = np.flatnonzero(labels)
        expected_test = [p for p in labelled if p not in train and all(
            max(abs(p // width - t // width), abs(p % width - t % width)) > 1 for t in train)]
        np.testing.assert_array_equal(np.sort(split.test), expected_test)
    assert len(seen) > 1   # the seed chooses the ends
