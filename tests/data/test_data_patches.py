"""Patches cut on the fly, deterministic resumable batches, per-replica splits, memory use."""

import tracemalloc

import numpy as np
import pytest

from hmp.data import PatchDataset, PatchExtractor, iterate_scene, patches, split_batch


@pytest.fixture
def cube():
    return np.random.default_rng(0).normal(size=(9, 11, 4)).astype(np.float32)


@pytest.fixture
def labels():
    return np.tile(np.arange(11) % 4, (9, 1)).astype(np.int32)  # classes 1..3, some 0


def naive_patch(cube, row, col, size):
    radius = size // 2
    padded = np.pad(cube, ((radius, radius), (radius, radius), (0, 0)), mode="reflect")
    return padded[row:row + size, col:col + size]


@pytest.mark.parametrize("size", [1, 5, 7])
def test_patches_equal_the_neighbourhood_of_each_pixel(cube, size):
    extractor = PatchExtractor(cube, size)
    indices = np.array([0, 10, 45, 98])
    patches = extractor(indices)
    assert patches.shape == (4, size, size, 4) and patches.dtype == np.float32
    for patch, index in zip(patches, indices):
        row, col = divmod(index, 11)
        np.testing.assert_array_equal(patch, naive_patch(cube, row, col, size))
        np.testing.assert_array_equal(patch[size // 2, size // 2], cube[row, col])


def test_zero_padding_fills_outside_the_image_with_zeros(cube):
    patch = PatchExtractor(cube, 5, pad_mode="zero")(np.array([0]))[0]
    expected = np.zeros((5, 5, 4), np.float32)
    expected[2:, 2:] = cube[:3, :3]
    np.testing.assert_array_equal(patch, expected)


@pytest.mark.parametrize("size", [4, 0, 2.5])
def test_even_or_invalid_patch_size_is_refused(cube, size):
    with pytest.raises(ValueError, match=f"odd positive integer.*got {size}"):
        PatchExtractor(cube, size)


def test_batches_carry_zero_based_labels_and_cover_the_epoch_once(cube, labels):
    indices = np.flatnonzero(labels)
    dataset = PatchDataset(PatchExtractor(cube, 3), labels, indices)
    batches = list(dataset.batches(16, seed=1, epoch=0))
    assert [len(batch) for batch in batches] == [16] * 4 + [len(indices) - 64]
    seen = np.concatenate([batch.indices for batch in batches])
    assert sorted(seen) == sorted(indices)
    for batch in batches:
        assert batch.labels.dtype == np.int32
        np.testing.assert_array_equal(batch.labels, labels.ravel()[batch.indices] - 1)
        np.testing.assert_array_equal(batch.patches[:, 1, 1], cube.reshape(-1, 4)[batch.indices])


def test_order_depends_only_on_seed_and_epoch(cube, labels):
    dataset = PatchDataset(PatchExtractor(cube, 3), labels, np.flatnonzero(labels))

    def order(seed, epoch):
        return np.concatenate([b.indices for b in dataset.batches(10, seed=seed, epoch=epoch)])

    np.testing.assert_array_equal(order(0, 3), order(0, 3))
    assert not np.array_equal(order(0, 3), order(0, 4))
    assert not np.array_equal(order(0, 3), order(1, 3))


def test_resuming_mid_epoch_gives_exactly_the_remaining_batches(cube, labels):
    dataset = PatchDataset(PatchExtractor(cube, 3), labels, np.flatnonzero(labels))
    full = list(dataset.batches(8, seed=5, epoch=2))
    resumed = list(dataset.batches(8, seed=5, epoch=2, start_step=3))
    assert len(resumed) == len(full) - 3
    for expected, got in zip(full[3:], resumed):
        np.testing.assert_array_equal(expected.indices, got.indices)
        np.testing.assert_array_equal(expected.patches, got.patches)


def test_final_partial_batch_can_be_dropped(cube, labels):
    dataset = PatchDataset(PatchExtractor(cube, 3), labels, np.flatnonzero(labels))
    n = len(dataset)
    assert dataset.steps_per_epoch(10) == -(-n // 10)
    assert dataset.steps_per_epoch(10, drop_remainder=True) == n // 10
    kept = list(dataset.batches(10, drop_remainder=True))
    assert len(kept) == n // 10 and all(len(batch) == 10 for batch in kept)
    # the same seeded order: the whole batches of the epoch that keeps its last one
    assert n % 10 and len(list(dataset.batches(10))) == n // 10 + 1
    for whole, got in zip(dataset.batches(10), kept):
        np.testing.assert_array_equal(whole.indices, got.indices)


def test_unlabelled_or_out_of_range_indices_are_refused(cube, labels):
    extractor = PatchExtractor(cube, 3)
    with pytest.raises(ValueError, match="point at unlabelled pixels.*index 0"):
        PatchDataset(extractor, labels, np.array([0, 1]))
    with pytest.raises(ValueError, match=r"must lie in \[0, 99\)"):
        PatchDataset(extractor, labels, np.array([1, 99]))
    with pytest.raises(ValueError, match=r"label map shape \(11, 9\) does not match"):
        PatchDataset(extractor, labels.T, np.array([1]))


def test_split_batch_gives_per_replica_parts_of_the_given_sizes(cube, labels):
    dataset = PatchDataset(PatchExtractor(cube, 3), labels, np.flatnonzero(labels))
    batch = next(dataset.batches(50, seed=0))
    parts = split_batch(batch, [30, 20])
    assert [len(part) for part in parts] == [30, 20]
    np.testing.assert_array_equal(np.concatenate([p.patches for p in parts]), batch.patches)
    np.testing.assert_array_equal(np.concatenate([p.labels for p in parts]), batch.labels)
    with pytest.raises(ValueError, match=r"\[30, 30\] must be non-negative and sum to the "
                                         r"batch size 50"):
        split_batch(batch, [30, 30])
    with pytest.raises(ValueError, match="non-negative"):
        split_batch(batch, [60, -10])


def test_scene_iterator_visits_every_pixel_in_raster_order(cube):
    visited = list(iterate_scene(PatchExtractor(cube, 5), 40))
    assert [len(indices) for indices, _ in visited] == [40, 40, 19]
    np.testing.assert_array_equal(np.concatenate([i for i, _ in visited]), np.arange(99))
    centres = np.concatenate([patches[:, 2, 2] for _, patches in visited])
    np.testing.assert_array_equal(centres, cube.reshape(-1, 4))


def test_epoch_memory_stays_one_padded_cube_plus_a_few_batches():
    """Pavia-University-sized cube with 11x11x103 patches: memory must not grow with the epoch."""
    cube = np.zeros((610, 340, 103), np.float32)
    labels = np.zeros((610, 340), np.int32)
    labels.flat[::5] = 1  # 41480 labelled pixels, like Pavia University's 42776
    tracemalloc.start()
    try:
        dataset = PatchDataset(PatchExtractor(cube, 11), labels, np.flatnonzero(labels))
        batch_bytes = 128 * 11 * 11 * 103 * 4
        batches = dataset.batches(128, seed=0)
        for _ in range(5):
            next(batches)
        early_peak = tracemalloc.get_traced_memory()[1]
        for _ in range(40):
            next(batches)
        late_peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    padded_bytes = 620 * 350 * 103 * 4
    assert late_peak < 1e9
    assert late_peak <= early_peak + batch_bytes
    assert late_peak < padded_bytes + 6 * batch_bytes


def test_padded_batches_cover_the_pixels_in_order_and_fill_the_last_with_pixel_0():
    pixels = np.array([7, 3, 9, 4, 12], np.int64)
    batches = list(patches.padded_batches(pixels, 2))
    assert [(start, count) for start, count, _ in batches] == [(0, 2), (2, 2), (4, 1)]
    assert all(indices.dtype == np.int32 and indices.shape == (2,) for _, _, indices in batches)
    np.testing.assert_array_equal(np.concatenate([i for _, _, i in batches]), [7, 3, 9, 4, 12, 0])
    assert list(patches.padded_batches(pixels[:0], 2)) == []
