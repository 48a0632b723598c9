"""Whether two rasters lie on one grid: a label file's georeference against its cube's
(what both files name of ``hmp.data.raster.RasterInfo``'s transform, ground control
points, CRS and ENVI map info, projection info and coordinate system)."""

import math

import numpy as np

from hmp.data import geotiff
from hmp.errors import InvalidInput

# what places a raster on the map (hmp.data.raster.RasterInfo's fields), as messages name it
GEOREFERENCE = {"transform": "transform", "gcps": "ground control points", "crs": "CRS",
                "map_info": "map info", "projection_info": "projection info",
                "coordinate_system": "coordinate system string"}


def check_same_grid(cube, labels, shape, what, cube_what):
    """InvalidInput, "<what>: lies on another grid than <cube_what>: ...", when the
    georeference of a label file (``labels``, a RasterInfo) differs from the cube's
    (``cube``, of ``shape`` rows and columns) in what both files name
    (``GEOREFERENCE``); a label file that names none lies on the cube's grid."""
    differ = [f"{name} {_shown(field, getattr(labels, field))} in the labels, "
              f"{_shown(field, getattr(cube, field))} in the cube"
              for field, name in GEOREFERENCE.items()
              if getattr(cube, field) and getattr(labels, field)
              and not _same(field, getattr(cube, field), getattr(labels, field), shape)]
    if differ:
        raise InvalidInput(f"{what}: lies on another grid than {cube_what}: "
                           f"{'; '.join(differ)}; allowed: a label map on the cube's grid, "
                           f"or one without georeference")


def _same(field, ours, theirs, shape):
    """Whether two values of a RasterInfo georeference ``field`` agree: transforms that
    place the corners of a grid of ``shape`` within a hundredth of a pixel, CRSs GDAL
    takes as equal, others item by item (numbers as numbers, text as words)."""
    if field == "transform":
        corners = np.array([[0, shape[1], 0, shape[1]], [0, 0, shape[0], shape[0]],
                            [1, 1, 1, 1]])   # column, row, 1 of each corner
        apart = np.reshape(ours, (2, 3)) @ corners - np.reshape(theirs, (2, 3)) @ corners
        pixel = math.sqrt(abs(ours[0] * ours[4] - ours[1] * ours[3]))
        return np.abs(apart).max() <= 0.01 * pixel
    if field == "crs":
        return geotiff.same_crs(ours, theirs)
    return _comparable(ours) == _comparable(theirs)


def _shown(field, value):
    """A georeference ``field``'s value on one line: a CRS by its name, ENVI's items
    in braces, numbers in parentheses."""
    if field == "crs":
        return geotiff.crs_name(value)
    if isinstance(value, str):
        return value
    if field in ("map_info", "projection_info"):
        return "{%s}" % ", ".join(value)
    return "(%s)" % ", ".join(_shown(field, item) if isinstance(item, tuple) else
                              f"{item:.10g}" for item in value)


def _comparable(value):
    """The items of ``value``, numbers as numbers and text as lower-case words: one
    georeference written two ways ("1" and "1.0") compares equal."""
    items = [value] if isinstance(value, str) else np.ravel(value).tolist()
    return [_number_or_words(item) for item in items]


def _number_or_words(item):
    try:
        return float(item)
    except ValueError:
        return " ".join(str(item).lower().split())
