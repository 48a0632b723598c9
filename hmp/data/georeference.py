"""Whether two rasters lie on one grid: a label file's georeference against its cube's
(what both files name of ``hmp.data.raster.RasterInfo``'s transform, ground control
points, CRS and ENVI map info, projection info and coordinate system), compared by what
they mean: an ENVI map info as the pixel-to-map transform it makes
(``hmp.data.envi.map_info_grid``), held to the one rule of GDAL's transforms
(``_same_transform``), and its projection, zone, datum and units."""

import math

import numpy as np

from hmp.data import envi, geotiff
from hmp.errors import InvalidInput

# what places a raster on the map (hmp.data.raster.RasterInfo's fields), as messages name it
GEOREFERENCE = {"transform": "transform", "gcps": "ground control points", "crs": "CRS",
                "map_info": "map info", "projection_info": "projection info",
                "coordinate_system": "coordinate system string"}
# how far apart two transforms may place a grid's corners, in pixels: a georeference
# written two ways (another reference pixel, float text, rotation) is one grid
TOLERANCE = 0.01


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
    """Whether two values of a RasterInfo georeference ``field`` agree by what they mean:
    transforms (GDAL's, or ENVI's map info made one) by ``_same_transform``, with the
    projection, zone, datum and units of a map info; CRSs (a coordinate system string
    too) as GDAL takes them; others item by item (numbers as numbers, text as words)."""
    if field == "transform":
        return _same_transform(ours, theirs, shape)
    if field == "map_info":
        grids = envi.map_info_grid(ours), envi.map_info_grid(theirs)
        if None not in grids:
            return _same_map(*grids) and _same_transform(grids[0].transform,
                                                         grids[1].transform, shape)
    if field == "crs":
        return geotiff.same_crs(ours, theirs)
    if field == "coordinate_system":
        same = _same_wkt(ours, theirs)
        if same is not None:
            return same
    return _same_items(_comparable(ours), _comparable(theirs))


def _same_transform(ours, theirs, shape):
    """Whether two pixel-to-map transforms (a, b, c, d, e, f) place the four corners of
    a grid of ``shape`` (rows, columns) within ``TOLERANCE`` of a pixel of ours."""
    corners = np.array([[0, shape[1], 0, shape[1]], [0, 0, shape[0], shape[0]],
                        [1, 1, 1, 1]])   # column, row, 1 of each corner
    apart = np.reshape(ours, (2, 3)) @ corners - np.reshape(theirs, (2, 3)) @ corners
    pixel = math.sqrt(abs(ours[0] * ours[4] - ours[1] * ours[3]))
    return np.abs(apart).max() <= TOLERANCE * pixel


def _same_map(ours, theirs):
    """Whether two ENVI map infos (``hmp.data.envi.MapGrid``) name one map: projection,
    then zone, hemisphere, datum... item by item, and the keywords both name (units)."""
    shared = sorted(set(ours.keywords) & set(theirs.keywords))
    return (_comparable(ours.projection) == _comparable(theirs.projection)
            and _same_items(_comparable(ours.place), _comparable(theirs.place))
            and _same_items(_comparable([ours.keywords[key] for key in shared]),
                            _comparable([theirs.keywords[key] for key in shared])))


def _same_wkt(ours, theirs):
    """Whether GDAL takes two WKT texts for one CRS; None when it cannot tell (rasterio
    not installed, or a text GDAL does not read)."""
    try:
        errors = geotiff.rasterio_module().errors
    except InvalidInput:   # an ENVI scene is read without rasterio
        return None
    try:
        return geotiff.same_crs(ours, theirs)
    except errors.CRSError:
        return None


def _same_items(ours, theirs):
    """Whether two lists of ``_comparable`` items agree: text equal, numbers equal to
    nine significant digits (one number written two ways)."""
    return len(ours) == len(theirs) and all(
        math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12) if isinstance(a, float)
        and isinstance(b, float) else a == b for a, b in zip(ours, theirs))


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
