"""A built-in, seeded, physically plausible synthetic hyperspectral scene.

Real benchmark cubes cannot be shipped, so tests and examples need a scene
whose difficulty resembles theirs: classes that a single pixel's spectrum
identifies only unreliably, but that a small spatial neighbourhood identifies
well. The generator builds it from the usual ingredients of a linear mixing
model:

* endmember spectra: a smooth continuum times Gaussian absorption features
  (vegetation also gets a red edge). Classes come in pairs derived from a
  shared prototype, so some class pairs are spectrally similar;
* each class is a mixture of a few endmember variants whose abundances vary
  smoothly over space (Gaussian-filtered random fields);
* pixels at region boundaries mix neighbouring materials;
* each pixel is scaled by a smooth illumination field times a per-pixel jitter;
* strong per-pixel sensor noise. Illumination jitter and noise are independent
  between pixels, so they average out over a neighbourhood: that is where a
  patch-based classifier gets its advantage over a per-pixel one.

The classes can be laid out on the generator's own map of smooth regions or on
any label map, e.g. a real ground-truth map (``layout="indian_pines"``).

Two kinds of scene (``kind``):

* ``"reflectance"`` (the default): float32 surface reflectance over 400-2500 nm, whose
  fields also differ by shifts of the spectra along the wavelengths (standing in for
  crop conditions that move absorption features);
* ``"radiance"``: what the real Indian Pines and Salinas files hold, at-sensor
  radiance counts (whole numbers of uint16's range, held as float32 as every scene's
  cube): the reflectance lit by the sun (a 5778 K black body), through an atmosphere
  (Rayleigh scattering, oxygen, water vapour and carbon dioxide absorption, path
  radiance), times a smooth per-band sensor gain over a dark offset (``DARK_COUNTS``,
  raised to ``DARK_NOISE_SIGMAS`` noise deviations where the noise is stronger), with
  the sensor's noise in counts (relatively stronger where little light arrives) and
  quantised; the water-vapour bands are left out, as in the corrected
  files. Fields differ in brightness and condition but not in wavelength (a sensor's
  band centres are fixed over a flight line): ``field_shift_nm`` defaults to 0.
"""

import numpy as np
from scipy import ndimage, spatial

from hmp.data.catalog import SCENES, load_ground_truth, scene_spec
from hmp.data.scene import Scene, as_label_map
from hmp.errors import InvalidInput

WAVELENGTH_RANGE_NM = (400.0, 2500.0)
GENERATED_LAYOUT = "generated"
LAYOUTS = (GENERATED_LAYOUT, *SCENES)   # the named layouts (a label map may be given too)
UNLABELLED_MATERIALS = 3
MAX_PROTOTYPE_DRAWS = 10000
FIELD_SCALE_RANGE = (0.4, 1.6)   # a field's spectra are at most this much darker / brighter
KINDS = ("reflectance", "radiance")
FIELD_SHIFT_NM = {"reflectance": 100.0, "radiance": 0.0}   # field_shift_nm when not given
# Wavelengths (nm) whose bands the corrected AVIRIS files leave out: water vapour absorbs
# nearly all light there (the radiance kind has no bands in them).
WATER_VAPOUR_NM = ((1340.0, 1450.0), (1790.0, 1960.0), (2450.0, 2500.0))
DARK_COUNTS = 1000.0   # the sensor's dark offset, when its noise allows it
# ... at least this many standard deviations of its noise above 0, as a sensor sets its
# offset above its read noise: fewer than one count in a million is clipped at 0 (at
# 1000 with the default noise, 10% of the counts were)
DARK_NOISE_SIGMAS = 5.0
PEAK_COUNTS = 9000.0   # mean counts of the brightest band, above the dark offset


def synthetic_scene(layout=GENERATED_LAYOUT, data_dir=None, *, kind="reflectance", seed=0,
                    n_bands=100,
                    height=145, width=145, n_classes=10, noise_std=0.25,
                    illumination_jitter=0.05, variants_per_class=3, region_smoothness=12.0,
                    abundance_smoothness=6.0, boundary_mixing=0.7, shading=0.03,
                    variant_spread=0.02, pair_difference=0.08, min_separation=0.12,
                    field_size=15.0, field_brightness=0.35, field_shift_nm=None,
                    field_variability=0.4, noise_band_correlation=0.5):
    """Generates a labelled synthetic scene.

    Args:
      layout: ``"generated"`` (smooth random regions of ``n_classes`` classes
        on a ``height`` x ``width`` grid, boundaries left unlabelled like in real
        ground truth), the name of a benchmark scene whose ground-truth map is
        read from ``data_dir`` (``"indian_pines"``, ``"paviau"``, ``"salinas"``), or
        a label map array [H, W] with labels 0..K.
      data_dir: folder with the ground-truth ``.mat`` file for a named layout.
      kind: ``"reflectance"`` or ``"radiance"`` (module docstring).
      seed: everything is drawn from this seed; equal arguments give equal scenes.
      n_bands: number of spectral bands, spread over 400-2500 nm (the radiance kind:
        over the wavelengths outside ``WATER_VAPOUR_NM``).
      height, width, n_classes: size of a generated layout (ignored otherwise).
      noise_std: per-pixel, per-band Gaussian noise (reflectance units; the
        noise-free spectra lie roughly in 0.01-0.9). The default is heavy on
        purpose: a single pixel is often misclassified. The radiance kind adds it in
        counts, as much as ``noise_std`` reflectance is worth in the mean band.
      illumination_jitter: standard deviation of the per-pixel log brightness.
      variants_per_class: endmember variants mixed within each class.
      region_smoothness: Gaussian sigma (pixels) of a generated layout's regions.
      abundance_smoothness: Gaussian sigma (pixels) of within-class abundance fields.
      boundary_mixing: Gaussian sigma (pixels) over which neighbouring
        materials mix at region boundaries.
      shading: relative standard deviation of the smooth brightness field.
      variant_spread: relative amplitude by which a class's variants differ.
      pair_difference: RMS reflectance difference within a similar class pair.
      min_separation: least RMS reflectance difference between pair prototypes.
      field_size: typical side (pixels) of a *field*: the scene is cut into
        cells of about this size, and each class gets, in each cell, its own
        version of its spectra (the three settings below), as crops differ
        from field to field. A field's look is shared by all its pixels, so it
        does not average out over a neighbourhood.
      field_brightness: standard deviation of a field's log brightness (a field's
        overall factor stays within 0.4-1.6).
      field_shift_nm: a field's spectra are shifted along the wavelengths by up
        to this many nanometres (uniform, either way); None: ``FIELD_SHIFT_NM`` of
        the kind.
      field_variability: relative amplitude of a smooth curve multiplying a
        field's spectra (endmember variability).
      noise_band_correlation: share of the noise variance that is smooth along
        the bands (correlated between neighbouring bands) rather than white.

    The defaults are calibrated for about 100 bands: with more bands each
    pixel carries more evidence and single pixels become easier to classify.

    Returns:
      A :class:`Scene` with a cube [H, W, n_bands]: float32 reflectance, or for the
      radiance kind whole-number counts within uint16's range (float32, as a Scene
      holds every cube).
    """
    if kind not in KINDS:
        raise InvalidInput(f"unknown synthetic scene kind {kind!r}; allowed: "
                           f"{', '.join(KINDS)}")
    if field_shift_nm is None:
        field_shift_nm = FIELD_SHIFT_NM[kind]
    rng = np.random.default_rng(seed)
    labels, materials, class_names, name = _layout(
        layout, data_dir, rng, height, width, n_classes, region_smoothness)
    n_materials = int(materials.max()) + 1
    wavelengths = band_centres(kind, n_bands)
    fine = _fine_grid(wavelengths, field_shift_nm)
    spectra = _material_spectra(rng, n_materials, fine, variants_per_class, variant_spread,
                               pair_difference, min_separation)
    weights = _mixing_weights(rng, materials, n_materials, variants_per_class,
                              boundary_mixing, abundance_smoothness)
    fields = _fields(rng, labels.shape, field_size)
    looks = _field_spectra(rng, spectra, fine, wavelengths, int(fields.max()) + 1,
                           field_brightness, field_shift_nm, field_variability)
    cube = np.empty((labels.size, n_bands), np.float32)
    for field, pixels in enumerate(_pixels_by_field(fields)):
        cube[pixels] = weights[pixels] @ looks[field].astype(np.float32)
    cube *= _illumination(rng, labels.shape, shading, illumination_jitter).reshape(-1, 1)
    noise = _noise(rng, cube.shape, noise_std, noise_band_correlation)
    if kind == "radiance":
        cube = _at_sensor_counts(rng, cube, noise, wavelengths)
        name += "_radiance"
    else:
        cube += noise
    cube = cube.reshape(*labels.shape, n_bands)
    return Scene(name=name, cube=cube, labels=labels, class_names=class_names, units=kind)


def band_centres(kind, n_bands):
    """The ``n_bands`` band centres (nm) of a scene of ``kind``: evenly over 400-2500 nm,
    the radiance kind's evenly over the wavelengths outside ``WATER_VAPOUR_NM``."""
    if kind != "radiance":
        return np.linspace(*WAVELENGTH_RANGE_NM, n_bands)
    fine = np.linspace(*WAVELENGTH_RANGE_NM, 20 * n_bands)
    kept = fine[~np.any([(fine >= low) & (fine <= high) for low, high in WATER_VAPOUR_NM],
                        axis=0)]
    return kept[np.round(np.linspace(0, len(kept) - 1, n_bands)).astype(int)]


def _at_sensor_counts(rng, reflectance, noise, wavelengths):
    """Reflectance [pixels, bands] as uint16 counts at the sensor (module docstring), with
    ``noise`` (reflectance units) added in counts at the mean band's worth."""
    sun = _solar_irradiance(wavelengths)
    transmittance = _transmittance(wavelengths)
    path = 0.05 * sun * transmittance * (550.0 / wavelengths) ** 4 / np.pi
    per_reflectance = sun * transmittance ** 2 / np.pi   # radiance of reflectance 1
    radiance = reflectance * per_reflectance + path
    gain = 1.0 + 0.1 * _smooth_unit_curves(rng, wavelengths)
    gain *= PEAK_COUNTS / np.max(gain * radiance.mean(axis=0))
    noise_counts = np.mean(gain * per_reflectance) * noise
    dark = max(DARK_COUNTS, DARK_NOISE_SIGMAS * float(np.std(noise_counts)))
    counts = dark + gain * radiance + noise_counts
    return np.clip(np.round(counts), 0, np.iinfo(np.uint16).max).astype(np.uint16)


def _solar_irradiance(wavelengths):
    """The sun's spectral irradiance at the top of the atmosphere (a 5778 K black body),
    relative to its peak."""
    metres = wavelengths * 1e-9
    planck = 1.0 / (metres ** 5 * np.expm1(1.4388e-2 / (metres * 5778.0)))
    return planck / planck.max()


def _transmittance(wavelengths):
    """One-way transmittance of the atmosphere: Rayleigh scattering, and absorption by
    oxygen (760 nm), water vapour (940, 1140, 1380, 1870 nm) and CO2 (2010, 2060 nm)."""
    depth = 0.1 * (550.0 / wavelengths) ** 4
    for centre, width, strength in ((760, 5, 1.0), (940, 25, 0.6), (1140, 30, 0.7),
                                    (1380, 50, 4.0), (1870, 70, 4.0), (2010, 15, 0.4),
                                    (2060, 15, 0.4)):
        depth = depth + strength * _gaussian(wavelengths, centre, width)
    return np.exp(-depth)


def _layout(layout, data_dir, rng, height, width, n_classes, region_smoothness):
    """Returns (labels, material map, class names, scene name) for ``layout``.

    The material map assigns every pixel, labelled or not, a material index:
    classes 1..K keep their label minus one; unlabelled pixels of a given map
    get one of a few background materials, so the whole image has spectra.
    """
    if isinstance(layout, str) and layout == GENERATED_LAYOUT:
        materials, labels = _generated_regions(rng, height, width, n_classes, region_smoothness)
        return labels, materials, [f"material {k}" for k in range(1, n_classes + 1)], "synthetic"
    if isinstance(layout, str):
        if layout not in LAYOUTS:
            raise InvalidInput(f"unknown synthetic layout {layout!r}; allowed: "
                               f"{', '.join(LAYOUTS)}, or a label map")
        spec = scene_spec(layout)
        labels = load_ground_truth(spec.name, data_dir)
        class_names, name = list(spec.class_names), f"synthetic_{spec.name}"
    else:
        labels = as_label_map(layout, what="synthetic layout")
        class_names, name = [], "synthetic"
    n_classes = max(int(labels.max(initial=0)), len(class_names))
    background, _ = _generated_regions(rng, *labels.shape, UNLABELLED_MATERIALS, region_smoothness)
    materials = np.where(labels > 0, labels - 1, n_classes + background)
    return labels, materials, class_names, name


def _generated_regions(rng, height, width, n_regions, smoothness):
    """Smooth random regions: the argmax of ``n_regions`` Gaussian-filtered noise fields.

    Returns the region index of every pixel and a label map in which pixels
    close to a region boundary (small margin between the two strongest fields)
    are unlabelled, as in real ground truth.
    """
    fields = ndimage.gaussian_filter(rng.standard_normal((n_regions, height, width)),
                                     sigma=(0, smoothness, smoothness), mode="wrap")
    fields /= fields.std(axis=(1, 2), keepdims=True)
    top_two = np.sort(fields, axis=0)[-2:]
    regions = fields.argmax(axis=0)
    labels = np.where(top_two[1] - top_two[0] > 0.15, regions + 1, 0)
    return regions, labels.astype(np.int32)


def _material_spectra(rng, n_materials, wavelengths, n_variants, variant_spread,
                      pair_difference, min_separation):
    """Endmember variants, shape [n_materials, n_variants, n_bands].

    Materials come in pairs (2k, 2k+1) built on one prototype: 2k is the
    prototype, 2k+1 adds a smooth curve of RMS ``pair_difference``, which makes
    such pairs hard to tell apart. Prototypes are redrawn until every two
    differ by at least ``min_separation`` RMS, so no seed produces an
    accidental look-alike. Variants of a material differ by a smooth
    modulation of relative amplitude ``variant_spread``.
    """
    prototypes = []
    for _ in range(MAX_PROTOTYPE_DRAWS):
        candidate = _random_reflectance(rng, wavelengths)
        if all(_rms(candidate - other) >= min_separation for other in prototypes):
            prototypes.append(candidate)
        if len(prototypes) == (n_materials + 1) // 2:
            break
    else:
        raise InvalidInput(
            f"could not draw {(n_materials + 1) // 2} prototype spectra at least "
            f"min_separation={min_separation} apart; use a smaller min_separation")
    base = np.stack([
        prototypes[m // 2] + (m % 2) * pair_difference * _smooth_unit_curves(rng, wavelengths)
        for m in range(n_materials)])
    modulation = 1 + variant_spread * _smooth_unit_curves(rng, wavelengths,
                                                          (n_materials, n_variants))
    return np.clip(base, 0.01, None)[:, None, :] * modulation


def _random_reflectance(rng, wavelengths):
    """One smooth spectrum: continuum times Gaussian absorption bands, in about 0.01-0.9."""
    x = _unit_axis(wavelengths)
    continuum = rng.uniform(0.1, 0.3) + rng.uniform(-0.15, 0.25) * x
    for _ in range(3):
        continuum += rng.uniform(0.0, 0.15) * _gaussian(x, rng.uniform(0, 1), rng.uniform(0.1, 0.3))
    if rng.random() < 0.5:  # vegetation-like red edge near 720 nm
        continuum += rng.uniform(0.1, 0.3) / (1 + np.exp(-(wavelengths - 720.0) / 15.0))
    absorption = np.zeros_like(x)
    for _ in range(rng.integers(3, 7)):
        absorption += rng.uniform(0.05, 0.4) * _gaussian(
            wavelengths, rng.uniform(*WAVELENGTH_RANGE_NM), rng.uniform(10.0, 60.0))
    return np.clip(continuum, 0.03, None) * np.clip(1 - absorption, 0.1, None)


def _mixing_weights(rng, materials, n_materials, n_variants, boundary_mixing, smoothness):
    """Per-pixel weights of every endmember variant, shape [H*W, n_materials*n_variants].

    Material weights are the one-hot material map blurred over
    ``boundary_mixing`` pixels (mixed pixels at boundaries); within a material,
    variant abundances come from smooth random fields (softmax-normalised).
    """
    height, width = materials.shape
    one_hot = (materials[None] == np.arange(n_materials)[:, None, None]).astype(np.float32)
    material_weight = ndimage.gaussian_filter(one_hot, sigma=(0, boundary_mixing, boundary_mixing))
    fields = ndimage.gaussian_filter(
        rng.standard_normal((n_materials, n_variants, height, width)).astype(np.float32),
        sigma=(0, 0, smoothness, smoothness), mode="wrap")
    fields /= fields.std(axis=(2, 3), keepdims=True)
    abundance = np.exp(fields)
    abundance /= abundance.sum(axis=1, keepdims=True)
    weights = material_weight[:, None] * abundance
    return weights.reshape(n_materials * n_variants, height * width).T


def _fine_grid(wavelengths, margin_nm):
    """Wavelengths 4 times denser than the bands, reaching ``margin_nm`` beyond both ends,
    on which spectra are built so that shifted copies can be read off by interpolation."""
    step = (wavelengths[-1] - wavelengths[0]) / max(len(wavelengths) - 1, 1) / 4
    low, high = wavelengths[0] - margin_nm - step, wavelengths[-1] + margin_nm + step
    return np.linspace(low, high, int(np.ceil((high - low) / step)) + 1)


def _fields(rng, shape, field_size):
    """Field index of every pixel [H, W]: the Voronoi cells of random centres about
    ``field_size`` pixels apart."""
    height, width = shape
    count = max(1, int(round(height * width / float(field_size) ** 2)))
    centres = rng.uniform((0, 0), (height, width), size=(count, 2))
    rows, cols = np.mgrid[:height, :width]
    return spatial.cKDTree(centres).query(np.stack([rows.ravel(), cols.ravel()], 1))[1] \
        .reshape(shape)


def _pixels_by_field(fields):
    """The flat pixel indices of every field, in field order."""
    order = np.argsort(fields.ravel(), kind="stable")
    starts = np.searchsorted(fields.ravel()[order], np.arange(1, int(fields.max()) + 1))
    return np.split(order, starts)


def _field_spectra(rng, spectra, fine, wavelengths, n_fields, brightness, shift_nm,
                   variability):
    """Every field's version of every endmember variant [n_fields, M * V, n_bands].

    In each field each material is shifted along the wavelengths, scaled in
    brightness and multiplied by a smooth curve, all drawn for that field and
    material. The shifted spectra are read off the fine grid by linear
    interpolation.
    """
    n_materials, n_variants, _ = spectra.shape
    shifts = rng.uniform(-shift_nm, shift_nm, (n_fields, n_materials, 1))
    position = (wavelengths - shifts - fine[0]) / (fine[1] - fine[0])   # [F, M, B]
    below = np.floor(position).astype(np.int64)
    weight = (position - below)[:, :, None]
    material = np.arange(n_materials)[None, :, None, None]
    variant = np.arange(n_variants)[None, None, :, None]
    shifted = ((1 - weight) * spectra[material, variant, below[:, :, None]]
               + weight * spectra[material, variant, below[:, :, None] + 1])
    scale = np.exp(rng.normal(0.0, brightness, (n_fields, n_materials, 1))) * (
        1 + variability * _smooth_unit_curves(rng, wavelengths, (n_fields, n_materials)))
    scale = np.clip(scale, *FIELD_SCALE_RANGE)   # reflectances stay plausible (below ~1.5)
    return (shifted * scale[:, :, None]).reshape(n_fields, n_materials * n_variants, -1)


def _noise(rng, shape, std, band_correlation):
    """Gaussian noise [pixels, bands] of standard deviation ``std``; the share
    ``band_correlation`` of its variance is smooth along the bands."""
    white = rng.standard_normal(shape, dtype=np.float32)
    smooth = ndimage.gaussian_filter1d(rng.standard_normal(shape, dtype=np.float32), sigma=3.0,
                                       axis=1)
    smooth /= smooth.std()
    return std * (np.sqrt(1 - band_correlation) * white + np.sqrt(band_correlation) * smooth)


def _illumination(rng, shape, shading_std, jitter):
    """Brightness factor per pixel: smooth topographic shading times log-normal jitter."""
    shading = ndimage.gaussian_filter(rng.standard_normal(shape), sigma=20.0, mode="wrap")
    shading = 1 + shading_std * shading / (shading.std() + 1e-12)
    return shading * np.exp(rng.normal(0.0, jitter, shape))


def _smooth_unit_curves(rng, wavelengths, shape=()):
    """Smooth random curves over the bands, shape ``shape + [bands]``, each with RMS 1
    (a few broad bumps)."""
    x = _unit_axis(wavelengths)
    bumps = shape + (4, 1)
    curves = (rng.normal(size=bumps) * _gaussian(x, rng.uniform(0, 1, bumps),
                                                 rng.uniform(0.05, 0.2, bumps))).sum(axis=-2)
    curves -= curves.mean(axis=-1, keepdims=True)
    return curves / np.sqrt(np.mean(np.square(curves), axis=-1, keepdims=True))


def _rms(values):
    return float(np.sqrt(np.mean(np.square(values))))


def _unit_axis(wavelengths):
    """Wavelengths rescaled to [0, 1]."""
    low, high = WAVELENGTH_RANGE_NM
    return (wavelengths - low) / (high - low)


def _gaussian(x, centre, width):
    return np.exp(-0.5 * ((x - centre) / width) ** 2)
