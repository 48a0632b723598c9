"""The synthetic scene: deterministic, plausible, hard per pixel, and (because every field
has its own look) not solved by a linear classifier on neighbourhood means either."""

import os
import pathlib

import numpy as np
import pytest
from scipy import ndimage

from hmp.data import load_scene, stratified_split, synthetic_scene

SHARED_DATA = pathlib.Path(os.environ.get(
    "HMP_SHARED_DATA", pathlib.Path(__file__).resolve().parents[3] / "shared" / "data"))


def linear_discriminant_accuracy(features, labels, split):
    """Test accuracy of a per-pixel Gaussian classifier with shared covariance (shrunk LDA)."""
    x_train, y_train = features[split.train], labels[split.train]
    classes = np.unique(y_train)
    means = np.stack([x_train[y_train == k].mean(axis=0) for k in classes])
    residuals = x_train - means[np.searchsorted(classes, y_train)]
    covariance = residuals.T @ residuals / len(residuals)
    bands = len(covariance)
    covariance = 0.9 * covariance + 0.1 * np.trace(covariance) / bands * np.eye(bands)
    weights = np.linalg.solve(covariance, means.T)
    scores = features[split.test] @ weights - 0.5 * np.sum(means.T * weights, axis=0)
    return float(np.mean(classes[scores.argmax(axis=1)] == labels[split.test]))


def per_pixel_and_averaged_accuracy(scene, window):
    split = stratified_split(scene.labels, train_fraction=0.1, seed=0)
    labels = scene.labels.ravel()
    pixels = scene.cube.reshape(-1, scene.n_bands).astype(np.float64)
    averaged = ndimage.uniform_filter(scene.cube, size=(window, window, 1), mode="reflect")
    return (linear_discriminant_accuracy(pixels, labels, split),
            linear_discriminant_accuracy(averaged.reshape(pixels.shape).astype(np.float64),
                                         labels, split))


NO_FIELDS = {"field_brightness": 0.0, "field_shift_nm": 0.0, "field_variability": 0.0}


def test_default_scene_shape_and_types():
    scene = synthetic_scene()
    assert scene.cube.shape == (145, 145, 100) and scene.cube.dtype == np.float32
    assert scene.labels.dtype == np.int32 and scene.n_classes == 10
    assert scene.units == "reflectance"
    assert set(np.unique(scene.labels)) == set(range(11))  # 0 = unlabelled boundaries
    assert 0.5 < np.count_nonzero(scene.labels) / scene.labels.size < 0.95


def test_same_seed_same_scene_other_seed_other_scene():
    first, again, other = synthetic_scene(seed=3), synthetic_scene(seed=3), synthetic_scene(seed=4)
    np.testing.assert_array_equal(first.cube, again.cube)
    np.testing.assert_array_equal(first.labels, again.labels)
    assert not np.array_equal(first.labels, other.labels)


def test_noise_free_spectra_are_plausible_reflectances():
    scene = synthetic_scene(noise_std=0.0, illumination_jitter=0.0)
    assert 0.0 < scene.cube.min() and scene.cube.max() < 1.5
    band_steps = np.abs(np.diff(scene.cube, axis=2)).mean()
    assert band_steps < 0.05 * scene.cube.mean(), "spectra should be smooth along the bands"


def test_pixels_at_region_boundaries_are_mixtures():
    scene = synthetic_scene(noise_std=0.0, illumination_jitter=0.0, shading=0.0,
                            variant_spread=0.0, layout=np.repeat([[1] * 10 + [2] * 10], 20, axis=0),
                            **NO_FIELDS)
    row = scene.cube[10]
    pure_1, pure_2 = row[2], row[17]
    np.testing.assert_allclose(row[0], pure_1, rtol=1e-5)
    blend = row[9]  # next to the boundary between columns 9 and 10
    share = np.dot(blend - pure_2, pure_1 - pure_2) / np.dot(pure_1 - pure_2, pure_1 - pure_2)
    assert 0.55 < share < 0.95


def test_field_looks_keep_neighbourhood_means_from_solving_the_scene():
    """With every field's own brightness, wavelength shift and endmember variability, a
    linear classifier on 9 x 9 mean spectra stays well short of what it reaches on the
    same scene without them (the old scene: 99.5%)."""
    per_pixel, averaged = per_pixel_and_averaged_accuracy(synthetic_scene(), window=9)
    _, averaged_without_fields = per_pixel_and_averaged_accuracy(
        synthetic_scene(**NO_FIELDS), window=9)
    assert per_pixel <= 0.5
    assert averaged <= 0.88
    assert averaged_without_fields >= 0.97


def test_each_field_is_one_connected_cell_with_a_look_of_its_own():
    scene = synthetic_scene(noise_std=0.0, illumination_jitter=0.0, shading=0.0,
                            variant_spread=0.0, layout=np.ones((30, 45), np.int32), seed=1)
    # One material, no noise: pixels differ only by their field (30 * 45 / 15**2 = 6 fields).
    looks, field_of = [], []
    for spectrum in scene.cube.reshape(30 * 45, -1):
        same = [i for i, look in enumerate(looks) if np.allclose(spectrum, look, rtol=1e-4)]
        if not same:
            looks.append(spectrum)
        field_of.append(same[0] if same else len(looks) - 1)
    looks, field_of = np.array(looks), np.array(field_of)
    assert len(looks) == 6
    for field in range(6):
        _, pieces = ndimage.label(field_of.reshape(30, 45) == field)
        assert pieces == 1
    relative_spread = looks.std(axis=0) / looks.mean(axis=0)
    assert relative_spread.mean() > 0.1   # the looks differ visibly, band by band


def test_layout_on_indian_pines_ground_truth():
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real ground-truth folder {SHARED_DATA} is absent (set HMP_SHARED_DATA)")
    scene = load_scene("synthetic", SHARED_DATA, layout="indian_pines")
    assert scene.name == "synthetic_indian_pines" and scene.class_names[0] == "Alfalfa"
    assert np.count_nonzero(scene.labels) == 10249
    per_pixel, averaged = per_pixel_and_averaged_accuracy(scene, window=9)
    assert per_pixel <= 0.5 and averaged <= 0.93


def test_layout_given_as_label_map_is_kept():
    layout = np.zeros((30, 40), np.int32)
    layout[5:15, 5:30], layout[18:28, 10:35] = 1, 2
    scene = synthetic_scene(layout=layout, n_bands=20)
    np.testing.assert_array_equal(scene.labels, layout)
    assert scene.cube.shape == (30, 40, 20) and scene.class_names == ["class 1", "class 2"]


def test_options_of_the_synthetic_scene_are_refused_for_real_scenes(tmp_path):
    with pytest.raises(ValueError, match=r"options \['noise_std'\] only apply to the synthetic"):
        load_scene("paviau", tmp_path, noise_std=0.1)


def test_an_unknown_layout_lists_the_named_ones():
    with pytest.raises(ValueError, match="^unknown synthetic layout 'nope'; allowed: generated, "
                                         "indian_pines, paviau, salinas, pavia_centre, ksc, "
                                         "botswana, or a label map$"):
        synthetic_scene("nope")
