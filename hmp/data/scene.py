"""The in-memory form of a labelled hyperspectral scene.

Every loader in :mod:`hmp.data` (real benchmark files, arbitrary files, the
synthetic generator) returns a :class:`Scene`, so the rest of the pipeline
(splits, preprocessing, patches, maps) never needs to know where a scene came
from.
"""

from dataclasses import dataclass, field

import numpy as np

from hmp.data.raster import RasterInfo
from hmp.errors import InvalidInput

UNITS = ("radiance", "reflectance", None)   # Scene.units


@dataclass
class Scene:
    """A hyperspectral cube with its per-pixel label map.

    Attributes:
      name: short identifier, e.g. ``"indian_pines"``.
      cube: float32 array [H, W, B] (rows, columns, spectral bands).
      labels: int32 array [H, W]; 0 means unlabelled, 1..K are classes.
      class_names: K names, ``class_names[k - 1]`` names label ``k``. When
        empty, generic names ``"class 1"``..``"class K"`` are filled in; a name that
        repeats gets its label after it (``"grass (class 2)"``): reports and a run's
        results key their rows by name.
      raster: what the cube's file says beyond its values (georeference,
        wavelengths, each band's data-ignore value, bad bands left out;
        :class:`hmp.data.raster.RasterInfo`).
      units: what the cube's values measure, when known: ``"radiance"`` (at-sensor
        radiance, e.g. a sensor's counts) or ``"reflectance"``; None: not known.
    """

    name: str
    cube: np.ndarray
    labels: np.ndarray
    class_names: list = field(default_factory=list)
    raster: RasterInfo = field(default_factory=RasterInfo)
    units: str = None

    def __post_init__(self):
        self.cube = np.asarray(self.cube, dtype=np.float32)
        if self.cube.ndim != 3:
            raise InvalidInput(
                f"scene {self.name!r}: cube must be 3-D [H, W, B], got shape {self.cube.shape}")
        if self.units not in UNITS:
            raise InvalidInput(f"scene {self.name!r}: units {self.units!r} are not known; "
                               f"allowed: {', '.join(map(str, UNITS))}")
        self.labels = as_label_map(self.labels, what=f"scene {self.name!r}: label map")
        if self.labels.shape != self.cube.shape[:2]:
            raise InvalidInput(
                f"scene {self.name!r}: label map shape {self.labels.shape} does not match "
                f"the cube's spatial shape {self.cube.shape[:2]} (cube is {self.cube.shape})")
        highest = int(self.labels.max(initial=0))
        if not self.class_names:
            self.class_names = [f"class {k}" for k in range(1, highest + 1)]
        self.class_names = _distinct([str(name) for name in self.class_names])
        if highest > len(self.class_names):
            raise InvalidInput(
                f"scene {self.name!r}: label map uses label {highest} but only "
                f"{len(self.class_names)} class names were given (labels must be 0..K)")

    @property
    def n_classes(self):
        """Number of classes K (labels run 1..K)."""
        return len(self.class_names)

    @property
    def n_bands(self):
        """Number of spectral bands B."""
        return self.cube.shape[2]

    @property
    def image_shape(self):
        """Spatial shape (H, W)."""
        return self.labels.shape


def as_label_map(values, what="label map"):
    """Returns ``values`` as an int32 [H, W] label map, refusing what is not one.

    MATLAB files store labels as uint8 or double; both are accepted as long as
    every value is a non-negative whole number.
    """
    array = np.asarray(values)
    if array.ndim != 2:
        raise InvalidInput(f"{what} must be 2-D [H, W], got shape {array.shape}")
    if array.dtype.kind == "f":
        if not np.all(np.isfinite(array)) or np.any(array != np.round(array)):
            raise InvalidInput(f"{what} must hold whole numbers 0..K, found non-integer values")
    elif array.dtype.kind not in "iub":
        raise InvalidInput(f"{what} must be numeric, got dtype {array.dtype}")
    if array.size and array.min() < 0:
        raise InvalidInput(
            f"{what} must hold labels 0..K (0 = unlabelled), found {array.min()}")
    if array.size and array.max() > np.iinfo(np.int32).max:   # not wrapped round
        raise InvalidInput(f"{what} must hold labels 0..K (0 = unlabelled) up to "
                           f"{np.iinfo(np.int32).max}, found {array.max():.0f}")
    return array.astype(np.int32)


def _distinct(names):
    """``names`` (label k's at k - 1) with each name that repeats followed by its label."""
    repeated = {name for name in names if names.count(name) > 1}
    return [f"{name} (class {k})" if name in repeated else name
            for k, name in enumerate(names, 1)]
