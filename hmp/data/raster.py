"""A cube on disk read a window at a time, and what its file says beyond the values.

Every reader of a cube file (ENVI: ``hmp.data.envi``, GDAL rasters:
``hmp.data.geotiff``, ``.mat``/``.npy``: :class:`ArrayRaster`) is a
:class:`Raster`: its ``shape`` [H, W, B], its :class:`RasterInfo` and
``read(rows, cols)``, which returns a float32 window. Training reads the whole
cube (``read_all``); ``hmp.predict`` reads one tile at a time
(``hmp.data.tiles``), so a scene larger than memory is never held whole. A raw
file (ENVI, ``.npy``) is read through a memory map opened for one window only
(:class:`MappedCube`): the pages a window touched leave the process with it,
where a map kept open would hold every page ever read.

The data-ignore values (ENVI's ``data ignore value``, GDAL's no-data value of
each band) are applied here, once: a value equal to its band's becomes NaN, and
a pixel holding NaN in any band is a no-data pixel downstream
(``hmp.run.experiment.mask_nodata``).
"""

import dataclasses
import math
import mmap

import numpy as np

from hmp.errors import InvalidInput


@dataclasses.dataclass(frozen=True)
class RasterInfo:
    """Where a scene lies and what its bands are, as its file says.

    Attributes:
      format: the file format a class map of the scene is written in:
        ``"envi"``, ``"geotiff"`` (any GDAL raster), or None (``.mat``, ``.npy``,
        the synthetic scene: no georeferenced map).
      transform: the affine pixel-to-map transform (a, b, c, d, e, f) as GDAL and
        rasterio give it (x = a col + b row + c, y = d col + e row + f), or None.
      gcps: GDAL's ground control points (row, col, x, y, z) of a file georeferenced
        by them instead of a transform; empty otherwise.
      crs: the coordinate reference system of the transform or the GCPs as WKT, or
        None.
      map_info: ENVI's ``map info`` items, kept as written, or None.
      projection_info: ENVI's ``projection info`` items, kept as written, or None.
      coordinate_system: ENVI's ``coordinate system string`` (WKT), or None.
      wavelengths: each band's centre wavelength (empty when the file names none).
      wavelength_units: e.g. ``"Nanometers"``, or None.
      ignore_values: each band's data-ignore (no-data) value, None for a band
        without one; empty when the file names none.
      bad_bands: the file's bands (numbered from 1) left out of the cube as bad
        (ENVI's ``bbl``); the other attributes describe the bands kept.
    """

    format: str = None
    transform: tuple = None
    gcps: tuple = ()
    crs: str = None
    map_info: tuple = None
    projection_info: tuple = None
    coordinate_system: str = None
    wavelengths: tuple = ()
    wavelength_units: str = None
    ignore_values: tuple = ()
    bad_bands: tuple = ()


class Raster:
    """A cube file [H, W, B] read a window at a time (see the module's docstring).

    Subclasses set ``path``, ``shape`` and ``info`` and implement ``_read``.
    """

    path = None
    shape = None           # (rows, columns, bands)
    info = RasterInfo()

    def read(self, rows, cols):
        """The float32 window ``[rows, cols, :]`` (two ``slice`` objects with a step of
        1, inside the cube), values equal to their band's data-ignore value as NaN."""
        values = np.asarray(self._read(rows, cols))
        window = values.astype(np.float32)
        if self.info.ignore_values:
            ignored = np.array([np.nan if value is None else value
                                for value in self.info.ignore_values])
            window[values == ignored] = np.nan   # NaN equals nothing: a band without one
        return window

    def read_all(self):
        """The whole cube as float32 [H, W, B] (see ``read``)."""
        return self.read(slice(0, self.shape[0]), slice(0, self.shape[1]))

    def _read(self, rows, cols):
        """The window ``[rows, cols, :]`` in the file's own type."""
        raise NotImplementedError


class MappedCube:
    """A cube stored raw in a file: ``dtype`` values (byte order included) from byte
    ``offset``, laid out as a C-order array of ``file_shape`` whose axes ``axes`` are
    the cube's [H, W, B]. ``cube[rows, cols]`` reads that window (a copy)."""

    def __init__(self, path, offset, dtype, file_shape, axes):
        self.path, self.offset, self.dtype = path, int(offset), np.dtype(dtype)
        self.file_shape, self.axes = tuple(file_shape), tuple(axes)
        self.shape = tuple(self.file_shape[axis] for axis in self.axes)

    def __getitem__(self, window):
        with open(self.path, "rb") as f, \
                mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            whole = np.frombuffer(mapped, self.dtype, math.prod(self.file_shape),
                                  self.offset).reshape(self.file_shape)
            values = np.array(whole.transpose(self.axes)[window])
            del whole   # no view left on the map when it closes
        return values


# Nanometres per unit of a file's wavelength units (ENVI's ``wavelength units``, any
# case): check_wavelengths compares lists in nanometres when both name one of these;
# other units (Wavenumber, GHz, Index, Unknown) as written.
NANOMETRES_PER_UNIT = {
    **dict.fromkeys(("nanometers", "nanometer", "nanometres", "nanometre", "nm"), 1.0),
    **dict.fromkeys(("micrometers", "micrometer", "micrometres", "micrometre", "microns",
                     "micron", "um", "\u00b5m", "\u03bcm"), 1e3),
    **dict.fromkeys(("millimeters", "millimeter", "millimetres", "millimetre", "mm"), 1e6)}


class ArrayRaster(Raster):
    """A cube in memory, or a :class:`MappedCube`, as a Raster."""

    def __init__(self, cube, path=None, info=None):
        if not isinstance(cube, MappedCube):
            cube = np.asarray(cube)
        what = path or "cube"
        if len(cube.shape) != 3:
            raise InvalidInput(f"{what}: a cube must be 3-D [H, W, B], got shape {cube.shape}")
        if not all(cube.shape):
            raise InvalidInput(f"{what}: the cube is empty, shape {tuple(cube.shape)} [H, W, B]; "
                               f"it needs at least one row, column and band")
        check_numeric(cube.dtype, what)
        self.path, self.shape = path, tuple(cube.shape)
        self.info = info or RasterInfo()
        self._cube = cube

    def _read(self, rows, cols):
        return self._cube[rows, cols]


def check_numeric(dtype, what):
    """InvalidInput unless ``dtype`` holds real numbers (integers, floats or booleans):
    complex values, strings and objects are no reflectance."""
    if np.dtype(dtype).kind not in "biuf":
        raise InvalidInput(f"{what}: values of type {np.dtype(dtype)} are not supported; "
                           f"allowed: integers or floating-point numbers")


def check_wavelengths(expected, given, what, expected_units=None, given_units=None):
    """InvalidInput when both wavelength lists are known and a band of ``given`` lies
    further from its band of ``expected`` than half the narrowest spacing of
    ``expected``'s distinct bands: another band set, not a recalibration of the same
    one. Compared in nanometres when both lists' units are lengths
    (``NANOMETRES_PER_UNIT``: one sensor's bands in nm and in micrometres are one band
    set), else as written."""
    if not len(expected) or not len(given) or len(expected) != len(given):
        return
    expected, given = np.asarray(expected, float), np.asarray(given, float)
    scales = [NANOMETRES_PER_UNIT.get((units or "").strip().lower())
              for units in (expected_units, given_units)]
    unit = ""
    if None not in scales:
        expected, given, unit = expected * scales[0], given * scales[1], " nm"
    steps = np.abs(np.diff(expected))
    spacing = np.min(steps[steps > 0]) if np.any(steps > 0) else np.inf
    off = np.flatnonzero(~(np.abs(given - expected) <= spacing / 2))   # NaN is off
    if len(off):
        band = off[0]
        raise InvalidInput(f"{what}: band {band + 1} lies at wavelength {given[band]:g}{unit}, "
                           f"but at {expected[band]:g}{unit} in the scene the run was trained "
                           f"on ({len(off)} of {len(expected)} bands differ); allowed: a cube "
                           f"of the same bands")
