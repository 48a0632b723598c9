"""hmp.evaluation.smoothing against loops over each pixel's window in numpy."""

import numpy as np
import pytest

from hmp.errors import InvalidInput
from hmp.evaluation.smoothing import choose_window, neighbourhood, smooth, smooth_rows


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


@pytest.fixture
def scene_map():
    """(probabilities [13, 11, 4], valid [13, 11]: about a fifth of the pixels not)."""
    rng = np.random.default_rng(3)
    probabilities = rng.dirichlet(np.ones(4), size=(13, 11)).astype(np.float32)
    return probabilities, rng.random((13, 11)) > 0.2


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


def test_the_neighbourhood_suffices_to_smooth_its_centre_pixels(scene_map):
    """Classifying the pixels within the radius gives the centres the whole map's values."""
    probabilities, valid = scene_map
    centres = np.array([5, 60, 142])
    near = np.zeros(13 * 11, bool)
    near[neighbourhood(centres, (13, 11), 2)] = True
    partial = smooth(probabilities, 5, valid & near.reshape(13, 11)).reshape(-1, 4)
    whole = smooth(probabilities, 5, valid).reshape(-1, 4)
    np.testing.assert_allclose(partial[centres], whole[centres], atol=1e-6)


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


@pytest.mark.parametrize("window", [1, 3, 7])
@pytest.mark.parametrize("sizes", [[13], [4, 4, 5], [1] * 13, [2, 9, 2]])
def test_rows_smoothed_block_by_block_equal_the_whole_map_smoothed(scene_map, window, sizes):
    probabilities, valid = scene_map
    edges = np.cumsum([0, *sizes])
    blocks = [(slice(a, b), probabilities[a:b], ~valid[a:b])
              for a, b in zip(edges[:-1], edges[1:])]
    out = list(smooth_rows(iter(blocks), window))
    assert [o[0].start for o in out] == [0, *[o[0].stop for o in out[:-1]]]
    assert out[-1][0].stop == 13
    np.testing.assert_allclose(np.concatenate([o[1] for o in out]),
                               smooth(probabilities, window, valid), atol=1e-6)
    np.testing.assert_array_equal(np.concatenate([o[2] for o in out]), ~valid)
