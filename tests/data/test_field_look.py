"""The field-look strength measured on the training pixels (hmp.data.field_look), and the
synthetic generator's radiance kind it must hold on."""

import numpy as np
import pytest

from hmp.data import field_look
from hmp.data.field_look import FieldLook, fit_shift_and_gain, gain_basis, measure_field_look
from hmp.data.splits import stratified_split
from hmp.data.synthetic import WATER_VAPOUR_NM, synthetic_scene
from hmp.errors import InvalidInput

BANDS = 40
CELL = field_look.CELL_PIXELS


def base_spectrum(seed=0):
    """A smooth positive spectrum with a few absorption dips."""
    rng = np.random.default_rng(seed)
    x = np.linspace(0.0, 1.0, BANDS)
    dips = sum(rng.uniform(0.2, 0.5) * np.exp(-0.5 * ((x - c) / 0.04) ** 2)
               for c in rng.uniform(0.1, 0.9, 4))
    return (0.3 + 0.2 * x) * (1.0 - dips)


def test_a_shifted_spectrum_with_a_smooth_gain_is_fitted_exactly():
    reference = base_spectrum()
    coefficients = np.array([1.2, -0.1, 0.05])
    gain = coefficients @ gain_basis(BANDS)
    shift, fitted_gain = fit_shift_and_gain(gain * field_look.shifted(reference, 2.5),
                                            reference)
    assert shift == 2.5
    np.testing.assert_allclose(fitted_gain, gain, rtol=1e-9)


def test_shifted_reads_the_band_shift_bands_before_holding_the_ends():
    spectrum = np.arange(5, dtype=float) ** 2
    np.testing.assert_array_equal(field_look.shifted(spectrum, 1.5),
                                  [0.0, 0.0, 0.5 * (0 + 1), 0.5 * (1 + 4), 0.5 * (4 + 9)])


def scene_of_cells(factors):
    """A 2-class scene of 16-pixel cells, one class per cell row, each cell's spectra its
    class's base spectrum times that cell's factor; every pixel a training pixel."""
    rows, cols = factors.shape
    labels = np.repeat(np.repeat(np.arange(rows)[:, None] % 2 + 1, cols, 1), CELL, 0)
    labels = np.repeat(labels, CELL, 1)
    cube = np.empty(labels.shape + (BANDS,))
    for r in range(rows):
        for c in range(cols):
            cube[r * CELL:(r + 1) * CELL, c * CELL:(c + 1) * CELL] = (
                factors[r, c] * base_spectrum(r % 2))
    return cube, labels, np.arange(labels.size)


def test_cells_that_differ_in_brightness_only_give_their_median_deviation():
    factors = np.array([[0.8, 1.0, 1.3], [1.0, 0.9, 1.1], [1.2, 1.0, 0.7]])
    cube, labels, train = scene_of_cells(factors)
    measured = measure_field_look(cube, labels, train)
    deviations = []
    for label in (1, 2):   # each class's cells against the class's mean spectrum
        mine = factors[(np.arange(3) % 2 + 1) == label].ravel()
        deviations += list(np.abs(mine / mine.mean() - 1.0))
    assert measured.spectral_shift == 0.0
    assert measured.spectral_gain == pytest.approx(np.median(deviations), rel=1e-9)
    assert (measured.cells, measured.classes) == (9, 2)


def test_identical_fields_give_no_field_look():
    cube, labels, train = scene_of_cells(np.ones((2, 3)))
    measured = measure_field_look(cube, labels, train)
    assert (measured.spectral_shift, measured.cells, measured.classes) == (0.0, 6, 2)
    assert measured.spectral_gain == pytest.approx(0.0, abs=1e-12)


def test_too_few_training_pixels_measure_nothing():
    cube, labels, _ = scene_of_cells(np.ones((2, 3)))
    few = np.arange(0, labels.size, labels.size // 3)   # fewer than 5 pixels in any cell
    measured = measure_field_look(cube, labels, few)
    assert measured == FieldLook(0.0, 0.0, 0, 0)
    assert "field look off" in measured.describe()


@pytest.fixture(scope="module")
def scenes():
    options = dict(height=96, width=96, n_classes=4, seed=3)
    return {kind: synthetic_scene(kind=kind, **options) for kind in ("reflectance", "radiance")}


def test_the_radiance_kind_is_quantised_counts_without_water_vapour_bands(scenes):
    from hmp.data.synthetic import band_centres
    cube = scenes["radiance"].cube
    assert (scenes["radiance"].units, scenes["reflectance"].units) == ("radiance",
                                                                       "reflectance")
    assert cube.shape == (96, 96, 100)
    assert np.array_equal(cube, np.round(cube)) and 0 <= cube.min() and cube.max() <= 65535
    assert cube.mean() > 1000   # above the dark offset: counts, not reflectance
    # the dark offset lies above the noise: no count clipped at 0 (it held 10% of them)
    assert (cube == 0).sum() == 0 and np.percentile(cube, 0.1) > 1000
    centres = band_centres("radiance", 100)
    assert not any(((centres >= low) & (centres <= high)).any()
                   for low, high in WATER_VAPOUR_NM)
    np.testing.assert_array_equal(scenes["radiance"].labels, scenes["reflectance"].labels)


def test_the_measure_follows_the_scene_kind(scenes):
    """Reflectance scenes shift fields by up to 4.7 bands (100 nm over 21 nm bands);
    radiance scenes do not shift them. (On 55 cells the measure is rough: 3.0 to 5.5
    bands over seeds 0-3 of this size.)"""
    looks = {}
    for kind, scene in scenes.items():
        split = stratified_split(scene.labels, train_fraction=0.2, seed=0)
        looks[kind] = measure_field_look(scene.cube, scene.labels, split.train)
    assert looks["reflectance"].spectral_shift >= 2.0
    assert looks["radiance"].spectral_shift <= 0.5


def test_an_unknown_kind_is_refused():
    with pytest.raises(InvalidInput, match="unknown synthetic scene kind 'raw'"):
        synthetic_scene(kind="raw", height=8, width=8)
