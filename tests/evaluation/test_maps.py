"""Classification-map and confusion-matrix PNGs."""

import matplotlib
import numpy as np
import pytest
from matplotlib import image as mpimg

from hmp.evaluation.maps import (class_colors, label_map_to_rgb, save_classification_map,
                      save_confusion_matrix_plot)

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def colours_in(path):
    pixels = (mpimg.imread(path)[..., :3] * 255).round().astype(np.uint8)
    return {tuple(int(c) for c in rgb) for rgb in pixels.reshape(-1, 3)}


def test_each_class_has_a_fixed_distinct_colour():
    colours = class_colors(20)
    assert colours.shape == (21, 3) and tuple(colours[0]) == (0, 0, 0)
    assert len({tuple(c) for c in colours}) == 21
    np.testing.assert_array_equal(class_colors(9), colours[:10])
    # any number of classes: no two alike (tab20's colours repeated from class 37, and its
    # grey matched class 16's), nor any beyond class 16 grey
    many = class_colors(300)
    np.testing.assert_array_equal(many[:21], colours)
    assert len({tuple(c) for c in many}) == 301
    assert all(len(set(c)) > 1 for c in many[17:].tolist())
    assert len({tuple(c) for c in class_colors(5000).tolist()}) == 5001   # past the walk's


def test_label_map_is_coloured_by_class():
    rgb = label_map_to_rgb(np.array([[0, 1], [2, 2]]), 3)
    colours = class_colors(3)
    np.testing.assert_array_equal(rgb, colours[[[0, 1], [2, 2]]])
    with pytest.raises(ValueError, match=r"labels in \[0, 4\], allowed: 0..3"):
        label_map_to_rgb(np.array([[0, 4]]), 3)


def test_classification_map_png_shows_every_class_colour(tmp_path):
    truth = np.zeros((40, 30), np.int32)
    truth[5:20, 5:25], truth[22:35, 3:15] = 1, 2
    prediction = np.where(np.arange(30)[None, :] < 15, 3, 1).repeat(40, axis=0)
    path = tmp_path / "map.png"
    save_classification_map(path, prediction, truth, ["Asphalt", "Meadows", "Gravel"],
                            title="test map")
    assert path.read_bytes()[:8] == PNG_SIGNATURE
    present = colours_in(path)
    for colour in class_colors(3):
        assert tuple(int(c) for c in colour) in present


def test_classification_map_rejects_mismatched_shapes(tmp_path):
    with pytest.raises(ValueError, match=r"prediction shape \(3, 4\) does not match "
                                         r"ground truth shape \(4, 3\)"):
        save_classification_map(tmp_path / "x.png", np.ones((3, 4), int), np.ones((4, 3), int),
                                ["a"])


def test_confusion_matrix_png(tmp_path):
    path = tmp_path / "confusion.png"
    save_confusion_matrix_plot(path, np.array([[5, 1], [2, 7]]), ["a", "b"])
    assert path.read_bytes()[:8] == PNG_SIGNATURE
    # the cells' colours: row shares [[5/6, 1/6], [2/9, 7/9]] on the Blues map, scaled
    # from the smallest share to the largest
    shares = np.array([5 / 6, 1 / 6, 2 / 9, 7 / 9])
    scaled = (shares - shares.min()) / (shares.max() - shares.min())
    present = np.array(sorted(colours_in(path)))
    for colour in (matplotlib.colormaps["Blues"](scaled)[:, :3] * 255).round():
        assert np.abs(present - colour).max(axis=1).min() <= 1, colour
    with pytest.raises(ValueError, match=r"shape \(2, 2\) does not match 3 class names"):
        save_confusion_matrix_plot(path, np.eye(2, dtype=int), ["a", "b", "c"])
