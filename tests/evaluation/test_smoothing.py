"""hmp.evaluation.smoothing against loops over each pixel's window in numpy, and the
guide image (hmp.data.Guide) against numpy's principal axes."""

import numpy as np
import pytest

from hmp.errors import InvalidInput
from hmp.data import Guide
from hmp.evaluation.smoothing import (GUIDE_EPSILON, choose_window, context, neighbourhood,
                                      smooth, smooth_rows)


def window_means(probabilities, window, valid):
    """Each valid pixel's mean of the valid pixels' probabilities in its window, pixel by
    pixel; zeros for the others."""
    height, width, classes = probabilities.shape
    radius, out = window // 2, np.zeros((height, width, classes))
    for row in range(height):
        for col in range(width):
            rows = slice(max(0, row - radius), row + radius + 1)
            cols = slice(max(0, col - radius), col + radius + 1)
            if valid[row, col]:
                out[row, col] = probabilities[rows, cols][valid[rows, cols]].mean(axis=0)
    return out


def guided_filter(probabilities, guide, window, valid):
    """He et al.'s guided filter pixel by pixel: each valid pixel's window of valid pixels
    fits the probabilities as slope * guide + intercept; each valid pixel takes the mean of
    the fits of the valid pixels' windows that hold it, negatives set to 0, divided by
    their sum; zeros for the others."""
    height, width, classes = probabilities.shape
    radius = window // 2
    slope, intercept = np.zeros((height, width, classes)), np.zeros((height, width, classes))

    def window_of(row, col):
        rows = slice(max(0, row - radius), row + radius + 1)
        cols = slice(max(0, col - radius), col + radius + 1)
        return rows, cols

    for row in range(height):
        for col in range(width):
            rows, cols = window_of(row, col)
            inside = valid[rows, cols]
            g, p = guide[rows, cols][inside].astype(np.float64), probabilities[rows, cols][inside]
            if valid[row, col]:
                covariance = (g[:, None] * p).mean(axis=0) - g.mean() * p.mean(axis=0)
                slope[row, col] = covariance / (g.var() + GUIDE_EPSILON)
                intercept[row, col] = p.mean(axis=0) - slope[row, col] * g.mean()
    out = np.zeros((height, width, classes))
    for row in range(height):
        for col in range(width):
            if valid[row, col]:
                rows, cols = window_of(row, col)
                inside = valid[rows, cols]
                fit = (slope[rows, cols][inside].mean(axis=0) * guide[row, col]
                       + intercept[rows, cols][inside].mean(axis=0))
                out[row, col] = np.maximum(fit, 0) / np.maximum(fit, 0).sum()
    return out


@pytest.fixture
def scene_map():
    """(probabilities [13, 11, 4], valid [13, 11]: about a fifth of the pixels not)."""
    rng = np.random.default_rng(3)
    probabilities = rng.dirichlet(np.ones(4), size=(13, 11)).astype(np.float32)
    return probabilities, rng.random((13, 11)) > 0.2


@pytest.fixture
def guide():
    """A guide image [13, 11]: two regions (values near 0.2 and 0.8) and some noise."""
    rng = np.random.default_rng(5)
    image = np.where(np.add.outer(np.arange(13), np.arange(11)) < 10, 0.2, 0.8)
    return (image + 0.05 * rng.standard_normal((13, 11))).astype(np.float32)


@pytest.mark.parametrize("window", [3, 5, 9])
def test_the_guided_filter_fits_each_window_on_the_guide(scene_map, guide, window):
    probabilities, valid = scene_map
    smoothed = smooth(probabilities, window, valid, guide)
    assert smoothed.shape == (13, 11, 4) and smoothed.dtype == np.float32
    np.testing.assert_allclose(smoothed, guided_filter(probabilities, guide, window, valid),
                               atol=1e-5)
    assert smoothed.min() >= 0   # probabilities: at least 0, summing to 1
    np.testing.assert_allclose(smoothed.sum(axis=2), valid.astype(float), atol=1e-5)


def test_the_guided_filter_keeps_a_small_field_that_the_mean_swallows():
    """A 3 x 3 field of class 1 (its own guide value) inside a field of class 0: the
    network is right on both but unsure (0.6); a 7 x 7 mean gives the small field to its
    neighbour, the guided filter keeps it."""
    probabilities = np.tile(np.float32([0.6, 0.4]), (15, 15, 1))
    guide = np.full((15, 15), 0.2, np.float32)
    probabilities[6:9, 6:9] = [0.4, 0.6]
    guide[6:9, 6:9] = 0.9
    field = np.zeros((15, 15), bool)
    field[6:9, 6:9] = True
    assert (smooth(probabilities, 7)[field].argmax(axis=1) == 0).all()
    guided = smooth(probabilities, 7, guide=guide).argmax(axis=2)
    np.testing.assert_array_equal(guided, field.astype(int))


def test_the_guide_is_the_first_principal_component_scaled_to_the_training_pixels():
    rng = np.random.default_rng(0)
    cube = rng.standard_normal((6, 7, 5)) @ np.diag([3.0, 1.0, 0.5, 0.2, 0.1])
    cube = cube @ np.linalg.qr(rng.standard_normal((5, 5)))[0]   # axes not the bands
    train = np.array([0, 3, 8, 11, 20, 25, 31, 40])
    image = Guide.fit(cube, train).image(cube)
    assert image.shape == (6, 7) and image.dtype == np.float32
    pixels = cube.reshape(-1, 5)[train]
    centred = pixels - pixels.mean(axis=0)
    axis = np.linalg.svd(centred, full_matrices=False)[2][0]
    projected = (cube.reshape(-1, 5) - pixels.mean(axis=0)) @ axis
    scaled = (projected - projected[train].min()) / np.ptp(projected[train])
    flipped = abs(image.ravel()[train[0]] - scaled[train[0]]) > 1e-6   # either sign
    scaled = 1 - scaled if flipped else scaled
    np.testing.assert_allclose(image.ravel(), np.clip(scaled, -1, 2), atol=1e-5)
    assert (image.ravel()[train].min(), image.ravel()[train].max()) == (
        pytest.approx(0, abs=1e-6), pytest.approx(1))
    far = cube.copy()   # an outlier: as far from the training pixels as the guide goes
    far[5, 6] = pixels.mean(axis=0) + 1e6 * axis * (-1 if flipped else 1)
    assert Guide.fit(cube, train).image(far)[5, 6] == 2.0


@pytest.mark.parametrize("window", [1, 3, 5, 9, 31])
def test_smoothing_is_the_mean_of_the_valid_pixels_in_each_window(scene_map, window):
    probabilities, valid = scene_map
    smoothed = smooth(probabilities, window, valid)
    assert smoothed.shape == (13, 11, 4) and smoothed.dtype == np.float32
    np.testing.assert_allclose(smoothed, window_means(probabilities, window, valid),
                               atol=1e-6)
    np.testing.assert_allclose(smooth(probabilities, window),
                               window_means(probabilities, window, np.ones((13, 11), bool)),
                               atol=1e-6)


def test_pixels_not_valid_get_zeros_and_count_for_no_other(scene_map):
    probabilities, _ = scene_map
    valid = np.zeros((13, 11), bool)
    valid[0, 0] = valid[12, 10] = True
    for window in (1, 3, 31):
        smoothed = smooth(probabilities, window, valid)
        expected = np.zeros_like(probabilities)
        both = probabilities[[0, 12], [0, 10]].mean(axis=0)   # a window over the scene
        expected[0, 0] = probabilities[0, 0] if window < 31 else both
        expected[12, 10] = probabilities[12, 10] if window < 31 else both
        np.testing.assert_allclose(smoothed, expected, atol=1e-6)


@pytest.mark.parametrize("window", [0, 2, -3, 4.0, "5", True])
def test_a_window_must_be_an_odd_number_of_pixels(scene_map, window):
    with pytest.raises(InvalidInput, match=r"^give an odd number of pixels \(1: no smoothing\)$"):
        smooth(scene_map[0], window)


def test_the_neighbourhood_holds_every_pixel_within_the_radius():
    shape, indices = (9, 12), np.array([0, 40, 107])
    rows, cols = np.divmod(np.arange(9 * 12), 12)
    for radius in (0, 1, 2):
        near = [p for p in range(9 * 12) if any(
            abs(rows[p] - rows[i]) <= radius and abs(cols[p] - cols[i]) <= radius
            for i in indices)]
        np.testing.assert_array_equal(neighbourhood(indices, shape, radius), near)


@pytest.mark.parametrize("guided", [False, True])
def test_the_neighbourhood_within_the_context_suffices_to_smooth_its_centres(
        scene_map, guide, guided):
    """Classifying the pixels within the context gives the centres the whole map's values;
    the guided filter needs twice the radius, the mean no more than the radius."""
    probabilities, valid = scene_map
    guide = guide if guided else None
    centres = np.array([5, 60, 142])
    assert context(5, guided) == (4 if guided else 2)

    def near(radius):
        mask = np.zeros(13 * 11, bool)
        mask[neighbourhood(centres, (13, 11), radius)] = True
        return valid & mask.reshape(13, 11)

    whole = smooth(probabilities, 5, valid, guide).reshape(-1, 4)
    partial = smooth(probabilities, 5, near(context(5, guided)), guide).reshape(-1, 4)
    np.testing.assert_allclose(partial[centres], whole[centres], atol=1e-6)
    short = smooth(probabilities, 5, near(context(5, guided) - 1), guide).reshape(-1, 4)
    assert not np.allclose(short[centres], whole[centres], atol=1e-6)


def test_the_window_chosen_classifies_the_given_pixels_best_the_smallest_of_equals():
    # a field of class 0 with a few pixels the network got wrong (class 1), one of them
    # a validation pixel: a 3 x 3 window already corrects it, so does every larger one
    probabilities = np.zeros((12, 12, 2), np.float32)
    probabilities[..., 0] = 1.0
    wrong = [(5, 5), (2, 9)]
    for row, col in wrong:
        probabilities[row, col] = [0.1, 0.9]
    valid = np.ones((12, 12), bool)
    window, accuracy = choose_window(probabilities, valid, np.array([5 * 12 + 5]),
                                     np.array([0]), windows=(1, 3, 5))
    assert (window, accuracy) == (3, {1: 0.0, 3: 1.0, 5: 1.0})
    # a field of class 1 beside it and below (columns 8-11, rows 7-11): the larger
    # window reaches across and loses a pixel
    probabilities[:, 8:] = probabilities[7:] = [0.0, 1.0]
    pixels, classes = np.array([5 * 12 + 7, 5 * 12 + 6]), np.array([0, 0])
    window, accuracy = choose_window(probabilities, valid, pixels, classes, windows=(1, 3, 5))
    assert accuracy == {1: 1.0, 3: 1.0, 5: 0.5} and window == 1


@pytest.mark.parametrize("guided", [False, True])
@pytest.mark.parametrize("window", [1, 3, 7])
@pytest.mark.parametrize("sizes", [[13], [4, 4, 5], [1] * 13, [2, 9, 2]])
def test_rows_smoothed_block_by_block_equal_the_whole_map_smoothed(
        scene_map, guide, guided, window, sizes):
    probabilities, valid = scene_map
    guide = guide if guided else None
    edges = np.cumsum([0, *sizes])
    blocks = [(slice(a, b), probabilities[a:b], ~valid[a:b],
               None if guide is None else guide[a:b]) for a, b in zip(edges[:-1], edges[1:])]
    out = list(smooth_rows(iter(blocks), window))
    assert [o[0].start for o in out] == [0, *[o[0].stop for o in out[:-1]]]
    assert out[-1][0].stop == 13
    np.testing.assert_allclose(np.concatenate([o[1] for o in out]),
                               smooth(probabilities, window, valid, guide), atol=1e-6)
    np.testing.assert_array_equal(np.concatenate([o[2] for o in out]), ~valid)
