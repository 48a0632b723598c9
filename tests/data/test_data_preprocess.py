"""Brightness, scaling and PCA fitted on training pixels only; border padding."""

import numpy as np
import pytest

from hmp.data import (PCA, BandScaler, BrightnessNormaliser, Preprocessor, pad_cube,
                      training_pixels)


@pytest.fixture
def cube():
    rng = np.random.default_rng(0)
    mixing = rng.normal(size=(3, 8))
    return (rng.normal(size=(12, 10, 3)) @ mixing + rng.uniform(0, 5, 8)).astype(np.float32)


@pytest.fixture
def train_mask():
    mask = np.zeros((12, 10), bool)
    mask[:6] = True
    return mask


def test_standard_scaling_gives_zero_mean_unit_variance_on_training_pixels(cube, train_mask):
    scaled = BandScaler("standard").fit(cube, train_mask).transform(cube)
    assert scaled.dtype == np.float32
    np.testing.assert_allclose(scaled[train_mask].mean(axis=0), 0, atol=1e-5)
    np.testing.assert_allclose(scaled[train_mask].std(axis=0), 1, atol=1e-5)


def test_minmax_scaling_maps_training_pixels_to_unit_range(cube, train_mask):
    scaled = BandScaler("minmax").fit(cube, train_mask).transform(cube)
    np.testing.assert_allclose(scaled[train_mask].min(axis=0), 0, atol=1e-6)
    np.testing.assert_allclose(scaled[train_mask].max(axis=0), 1, atol=1e-6)


@pytest.mark.parametrize("make", [lambda: BandScaler("standard"), lambda: BandScaler("minmax"),
                                  lambda: PCA(3), lambda: Preprocessor("standard", 4),
                                  BrightnessNormaliser,
                                  lambda: Preprocessor("standard", 4, brightness_norm=True)])
def test_fit_ignores_test_pixels(cube, train_mask, make):
    changed = cube.copy()
    changed[~train_mask] = np.random.default_rng(1).normal(100, 50, changed[~train_mask].shape)
    original, altered = make().fit(cube, train_mask), make().fit(changed, train_mask)
    probe = cube[:2]
    np.testing.assert_array_equal(original.transform(probe), altered.transform(probe))
    moved = make().fit(changed, ~train_mask)
    assert not np.allclose(original.transform(probe), moved.transform(probe))


def test_index_array_and_mask_select_the_same_training_pixels(cube, train_mask):
    np.testing.assert_array_equal(training_pixels(cube, train_mask),
                                  training_pixels(cube, np.flatnonzero(train_mask)))


def test_pca_finds_the_principal_subspace(cube, train_mask):
    pca = PCA(3).fit(cube, train_mask)
    assert pca.explained_variance_ratio.sum() > 0.999  # the data are rank 3 plus an offset
    projected = pca.transform(cube)
    assert projected.shape == (12, 10, 3) and projected.dtype == np.float32
    reconstructed = projected @ pca.components.T + pca.mean
    np.testing.assert_allclose(reconstructed, cube, atol=1e-3)
    np.testing.assert_allclose(pca.components.T @ pca.components, np.eye(3), atol=1e-10)


def test_pca_axes_take_one_sign_each_fit_their_largest_entry_positive(cube, train_mask):
    """eigh may return an axis or its negation; the fit fixes it, so that a refit (a
    resumed run, hmp.predict's check of the saved preprocessing) projects alike."""
    pca = PCA(3).fit(cube, train_mask)
    largest = pca.components[np.abs(pca.components).argmax(axis=0), np.arange(3)]
    assert (largest > 0).all()
    # the same pixels in another order: the same axes, signs included (not their negations)
    np.testing.assert_allclose(PCA(3).fit(cube[::-1], train_mask[::-1]).components,
                               pca.components, atol=1e-12)


@pytest.mark.parametrize("scaling", ["standard", "minmax"])
def test_a_constant_band_is_scaled_to_zero_not_divided_by_its_zero_spread(cube, train_mask,
                                                                          scaling):
    flat = cube.copy()
    flat[..., 1] = 7.0
    scaled = BandScaler(scaling).fit(flat, train_mask).transform(flat)
    assert np.isfinite(scaled).all()
    np.testing.assert_array_equal(scaled[..., 1], 0.0)


def test_preprocessor_chains_scaling_and_pca(cube, train_mask):
    output = Preprocessor("minmax", pca_components=2).fit_transform(cube, train_mask)
    assert output.shape == (12, 10, 2)
    # numpy reference: min-max scaling on the training pixels, then their two leading
    # principal components (each up to its sign)
    pixels = cube[train_mask].astype(np.float64)
    low, high = pixels.min(axis=0), pixels.max(axis=0)
    scaled = (cube - low) / (high - low)
    centred = scaled[train_mask] - scaled[train_mask].mean(axis=0)
    _, _, rows = np.linalg.svd(centred, full_matrices=False)
    expected = (scaled - scaled[train_mask].mean(axis=0)) @ rows[:2].T
    signs = np.sign(np.sum(output * expected, axis=(0, 1)))
    np.testing.assert_allclose(output * signs, expected, atol=1e-4)
    np.testing.assert_array_equal(Preprocessor(None).fit_transform(cube, train_mask), cube)


def test_brightness_is_divided_out_and_floored_at_a_quarter_of_the_training_median(
        cube, train_mask):
    """Each pixel over the mean of its bands; a pixel darker than a quarter of the
    training pixels' median brightness over that floor (numpy reference)."""
    cube = cube.copy()
    cube[7, 3] *= 0.01   # a dark test pixel, below the floor
    normaliser = BrightnessNormaliser().fit(cube, train_mask)
    brightness = cube.astype(np.float64).mean(axis=2)
    floor = 0.25 * np.median(brightness[train_mask])
    assert normaliser.floor == pytest.approx(floor, rel=1e-12)
    assert brightness[7, 3] < floor < np.median(brightness)
    normalised = normaliser.transform(cube)
    assert normalised.dtype == np.float32 and normalised.shape == cube.shape
    expected = cube / np.maximum(brightness, floor)[..., None]
    np.testing.assert_allclose(normalised, expected, rtol=1e-6)
    np.testing.assert_allclose(normalised[0, 0].mean(), 1.0, rtol=1e-6)
    # the same spectrum twice as bright gives the same shape; the dark one stays dark
    np.testing.assert_allclose(normaliser.transform(2 * cube[:2]), normalised[:2], rtol=1e-6)
    assert normalised[7, 3].mean() == pytest.approx(brightness[7, 3] / floor, rel=1e-6)
    chained = Preprocessor("standard", 3, brightness_norm=True).fit(cube, train_mask)
    scaled = BandScaler("standard").fit(normalised, train_mask).transform(normalised)
    np.testing.assert_allclose(chained.scale(cube), scaled, atol=1e-5)
    np.testing.assert_allclose(chained.transform(cube),
                               PCA(3).fit(scaled, train_mask).transform(scaled), atol=1e-4)
    with pytest.raises(ValueError, match="^dividing spectra by their brightness needs spectra "
                                         "of positive brightness, but the training pixels' "
                                         "median brightness is -"):
        BrightnessNormaliser().fit(cube - 100, train_mask)


def test_bad_arguments_are_refused(cube, train_mask):
    with pytest.raises(ValueError, match="unknown scaling 'zscore'; allowed: standard, minmax"):
        BandScaler("zscore")
    with pytest.raises(ValueError,
                       match="^9 PCA components asked for, but the scene has only 8 bands$"):
        PCA(9).fit(cube, train_mask)
    with pytest.raises(ValueError, match=r"train mask shape \(10, 12\) does not match"):
        BandScaler().fit(cube, train_mask.T)
    with pytest.raises(ValueError, match="no training pixels"):
        BandScaler().fit(cube, np.zeros_like(train_mask))
    with pytest.raises(ValueError, match="not fitted"):
        PCA(2).transform(cube)
    with pytest.raises(ValueError, match=r"must lie in \[0, 120\)"):
        BandScaler().fit(cube, np.array([0, 120]))


def test_padding_reflects_or_zeros_the_border():
    cube = np.arange(12, dtype=np.float32).reshape(3, 4, 1)
    reflected = pad_cube(cube, 2, "reflect")
    assert reflected.shape == (7, 8, 1)
    np.testing.assert_array_equal(reflected[2:5, 2:6], cube)
    np.testing.assert_array_equal(reflected[2, :2, 0], [2, 1])  # mirror without the edge pixel
    zeros = pad_cube(cube, 1, "zero")
    expected = np.zeros((5, 6, 1), np.float32)
    expected[1:4, 1:5] = cube
    np.testing.assert_array_equal(zeros, expected)
    with pytest.raises(ValueError, match="unknown pad mode 'wrap'; allowed: reflect, zero"):
        pad_cube(cube, 1, "wrap")
