"""Spectral preprocessing whose statistics come from training pixels only.

Fitting normalisation or PCA on all pixels would let test pixels influence
the features the model is trained on (a quiet form of leakage), so every
``fit`` here takes the training pixels explicitly, as a boolean mask [H, W]
or an array of flat pixel indices (row-major, ``row * W + column``), and
ignores all other pixels.
"""

import numpy as np

from hmp.errors import InvalidInput, whole_number

SCALINGS = ("standard", "minmax")
PAD_MODES = ("reflect", "zero")


def training_pixels(cube, train):
    """Spectra of the training pixels, float64 [n, B].

    Args:
      cube: [H, W, B] array.
      train: boolean mask [H, W] or 1-D integer array of flat pixel indices.
    """
    height, width, bands = cube.shape
    train = np.asarray(train)
    if train.dtype == bool:
        if train.shape != (height, width):
            raise InvalidInput(
                f"train mask shape {train.shape} does not match the cube's spatial "
                f"shape {(height, width)}")
        indices = np.flatnonzero(train)
    elif train.ndim == 1 and train.dtype.kind in "iu":
        indices = train
        if indices.size and (indices.min() < 0 or indices.max() >= height * width):
            raise InvalidInput(
                f"train indices must lie in [0, {height * width}), "
                f"got range [{indices.min()}, {indices.max()}]")
    else:
        raise InvalidInput(
            f"train must be a boolean mask [H, W] or 1-D integer pixel indices, "
            f"got dtype {train.dtype} and shape {train.shape}")
    if indices.size == 0:
        raise InvalidInput("no training pixels given: statistics need at least one")
    return cube.reshape(-1, bands)[indices].astype(np.float64)


class BandScaler:
    """Per-band standardisation (``"standard"``) or min-max scaling to [0, 1] (``"minmax"``)."""

    def __init__(self, method="standard"):
        if method not in SCALINGS:
            raise InvalidInput(f"unknown scaling {method!r}; allowed: {', '.join(SCALINGS)}")
        self.method = method
        self.offset = None
        self.scale = None

    def fit(self, cube, train):
        """Learns per-band offset and scale from the training pixels of ``cube``."""
        pixels = training_pixels(cube, train)
        if self.method == "standard":
            self.offset, spread = pixels.mean(axis=0), pixels.std(axis=0)
        else:
            self.offset = pixels.min(axis=0)
            spread = pixels.max(axis=0) - self.offset
        self.scale = np.where(spread > 0, spread, 1.0)  # constant bands stay constant
        return self

    def transform(self, cube):
        """Returns the scaled cube as float32."""
        _require_fitted(self.scale, "BandScaler")
        return ((cube - self.offset) / self.scale).astype(np.float32)


# A pixel darker than this share of the training pixels' median brightness is divided by
# that floor instead of its own brightness: a dark pixel's brightness (near 0, or below it
# with noise) is mostly noise, and dividing by it would blow its spectrum up.
BRIGHTNESS_FLOOR_SHARE = 0.25


class BrightnessNormaliser:
    """Divides each pixel's spectrum by its brightness, the mean of its bands, so that
    what is left is the spectrum's shape: the same under brighter or dimmer light and
    across fields of one crop in better or worse condition. Brightness below
    ``BRIGHTNESS_FLOOR_SHARE`` of the training pixels' median is floored there."""

    def __init__(self, floor=None):
        self.floor = floor

    def fit(self, cube, train):
        """Learns the floor from the brightness of the training pixels of ``cube``."""
        median = float(np.median(training_pixels(cube, train).mean(axis=1)))
        if not median > 0:
            raise InvalidInput(
                "dividing spectra by their brightness needs spectra of positive brightness, "
                f"but the training pixels' median brightness is {median:g}")
        self.floor = BRIGHTNESS_FLOOR_SHARE * median
        return self

    def transform(self, cube):
        """Returns the normalised cube as float32."""
        _require_fitted(self.floor, "BrightnessNormaliser")
        brightness = np.mean(cube, axis=-1, keepdims=True, dtype=np.float64)
        return (cube / np.maximum(brightness, self.floor)).astype(np.float32)


class TooFewBands(InvalidInput):
    """More PCA components asked for than the scene has bands."""


class PCA:
    """Projects each pixel's spectrum onto the training pixels' top principal components."""

    def __init__(self, n_components):
        self.n_components = whole_number(n_components, "n_components")
        self.mean = None
        self.components = None
        self.explained_variance_ratio = None

    def fit(self, cube, train):
        """Learns the mean and principal axes [B, k] from the training pixels of ``cube``."""
        bands = cube.shape[2]
        if self.n_components > bands:
            raise TooFewBands(
                f"{self.n_components} PCA components asked for, but the scene has only "
                f"{bands} bands")
        pixels = training_pixels(cube, train)
        self.mean = pixels.mean(axis=0)
        centred = pixels - self.mean
        variances, axes = np.linalg.eigh(centred.T @ centred / len(pixels))
        order = np.argsort(variances)[::-1][:self.n_components]
        axes = axes[:, order]
        # Fix each axis' sign (eigh may return either): largest entry positive.
        largest = axes[np.abs(axes).argmax(axis=0), np.arange(axes.shape[1])]
        self.components = axes * np.sign(largest)
        self.explained_variance_ratio = variances[order] / max(variances.sum(), 1e-300)
        return self

    def transform(self, cube):
        """Returns the projected cube [H, W, k] as float32."""
        _require_fitted(self.components, "PCA")
        return ((cube - self.mean) @ self.components).astype(np.float32)


# The guide's values: its training pixels span 0 to 1.
GUIDE_RANGE = (-1.0, 2.0)


class Guide:
    """The guide image of a scene for smoothing its class probabilities
    (``hmp.evaluation.smoothing``): its pixels projected onto the first principal
    component of the training pixels of the model's input cube, scaled so that the
    training pixels span 0 to 1. Fitted once on the run's training pixels and kept
    with its preprocessing, so that any scene or tile classified later gets the same
    guide, as the model gets the same inputs."""

    def __init__(self, mean, direction, low, span):
        self.mean, self.direction = np.asarray(mean), np.asarray(direction)
        self.low, self.span = float(low), float(span)

    @classmethod
    def fit(cls, cube, train):
        """The guide of ``cube`` [H, W, B] (the model's input) from its ``train`` pixels
        (flat indices or a mask, as ``hmp.data.preprocess.training_pixels`` takes)."""
        pca = PCA(1).fit(cube, train)   # projects the training pixels only, not the cube
        projected = (training_pixels(cube, train) - pca.mean) @ pca.components[:, 0]
        low, high = float(projected.min()), float(projected.max())
        return cls(pca.mean, pca.components[:, 0], low, high - low if high > low else 1.0)

    def image(self, cube):
        """float32 [H, W]: the guide of the pixels of ``cube`` [H, W, B], within
        ``GUIDE_RANGE``: a pixel far beyond the training pixels' range (an outlier,
        another scene's) is an edge all the same, and a bounded guide keeps the
        filter's float32 arithmetic exact enough."""
        direction = self.direction.astype(np.float32)   # no float64 copy of the cube
        offset = float(self.mean @ self.direction) + self.low
        return np.clip((np.asarray(cube, np.float32) @ direction - offset) / self.span,
                       *GUIDE_RANGE).astype(np.float32)


class Preprocessor:
    """Optional brightness normalisation, band scaling, then optional PCA, all fitted on
    the same training pixels."""

    def __init__(self, scaling="standard", pca_components=None, brightness_norm=False):
        self.brightness_norm = BrightnessNormaliser() if brightness_norm else None
        self.scaler = BandScaler(scaling) if scaling is not None else None
        self.pca = PCA(pca_components) if pca_components is not None else None

    def fit(self, cube, train):
        """Fits each step on the training pixels of what the steps before it make."""
        scaled = self._fit_scaling(cube, train)
        if self.pca is not None:
            self.pca.fit(scaled, train)
        return self

    def _fit_scaling(self, cube, train):
        """Fits the steps before the PCA; returns what they make of ``cube`` (float32)."""
        if self.brightness_norm is not None:
            self.brightness_norm.fit(cube, train)
        cube = self.divided(cube)
        if self.scaler is not None:
            cube = self.scaler.fit(cube, train).transform(cube)
        return np.asarray(cube, dtype=np.float32)

    def divided(self, cube):
        """``cube`` (spectra along its last axis) divided by brightness when that step
        is on, else as given: the spectra the band scaling reads (and the field-look
        augmentation works on)."""
        if self.brightness_norm is not None:
            return self.brightness_norm.transform(cube)
        return cube

    def scale(self, cube):
        """The fitted steps before the PCA (all bands); returns float32 [H, W, B]."""
        cube = self.divided(cube)
        if self.scaler is not None:
            cube = self.scaler.transform(cube)
        return np.asarray(cube, dtype=np.float32)

    def transform(self, cube):
        """Applies the fitted steps; returns float32 [H, W, B or k]."""
        cube = self.scale(cube)
        if self.pca is not None:
            cube = self.pca.transform(cube)
        return np.asarray(cube, dtype=np.float32)

    def fit_transform(self, cube, train):
        """``fit`` then ``transform`` of the same cube (its scaling done once)."""
        scaled = self._fit_scaling(cube, train)
        if self.pca is None:
            return scaled
        return self.pca.fit(scaled, train).transform(scaled)


def pad_cube(cube, margin, mode="reflect"):
    """Pads the two spatial axes of ``cube`` by ``margin`` pixels on every side, or by
    ``((top, bottom), (left, right))`` pixels (a tile pads only the sides where the
    scene ends: ``hmp.data.tiles``).

    ``"reflect"`` mirrors the image at its border (without repeating the edge
    pixel), ``"zero"`` fills with zeros. Patches centred on border pixels then
    have the full size.
    """
    if mode not in PAD_MODES:
        raise InvalidInput(f"unknown pad mode {mode!r}; allowed: {', '.join(PAD_MODES)}")
    sides = ((margin, margin), (margin, margin)) if np.ndim(margin) == 0 else margin
    if np.min(sides) < 0:
        raise InvalidInput(f"margin must be >= 0, got {margin}")
    widths = (*(tuple(map(int, pair)) for pair in sides), (0, 0))
    if mode == "zero":
        return np.pad(cube, widths, mode="constant")
    return np.pad(cube, widths, mode="reflect")


def _require_fitted(attribute, what):
    if attribute is None:
        raise InvalidInput(f"{what} is not fitted: call fit(cube, train) first")
