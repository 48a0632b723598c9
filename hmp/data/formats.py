"""Which reader opens a scene's file, by its name: one place for the file types hmp reads.

- ``.mat`` (MATLAB v5 or v7.3; read whole) and ``.npy`` (read a window at a time):
  ``hmp.data.matfile``.
- ``.hdr``, or a data file (``.img``, ``.dat``, ``.raw``, ...) with an ENVI header
  beside it: ``hmp.data.envi``.
- ``.tif``, ``.tiff``, ``.vrt``, ``.jp2``, ``.img`` without an ENVI header: GDAL,
  through ``hmp.data.geotiff`` (needs the ``formats`` extra).

``open_raster`` gives a cube file as a :class:`hmp.data.raster.Raster`;
``read_label_map`` reads a label-map file of any of these types.
"""

import dataclasses
import pathlib

import numpy as np

from hmp.data import envi, geotiff
from hmp.data.matfile import read_array
from hmp.data.raster import ArrayRaster, MappedCube, RasterInfo
from hmp.data.scene import as_label_map
from hmp.errors import InvalidInput

ARRAY_SUFFIXES = (".mat", ".npy")
SUPPORTED_SUFFIXES = tuple(dict.fromkeys(
    ARRAY_SUFFIXES + (envi.HEADER_SUFFIX,) + envi.DATA_SUFFIXES + geotiff.SUFFIXES))


def is_raster_path(path):
    """Whether ``path`` names a file of a type hmp reads (by its suffix)."""
    return pathlib.Path(path).suffix.lower() in SUPPORTED_SUFFIXES


def open_raster(path, key=None, key_name="a key"):
    """The cube file ``path`` as a Raster (``key``: the MATLAB variable of a ``.mat``
    file; ``key_name``: what the errors call it).

    Raises:
      FileNotFoundError: the file (or an ENVI file's data file) is missing.
      InvalidInput: a type hmp does not read, or a file that is empty, truncated,
        inconsistent or of values that are no numbers; the message names the file.
    """
    path = pathlib.Path(path)
    kind = _kind(path)
    if kind != "array" and key is not None:
        raise InvalidInput(f"{path}: a {key_name} names a variable of a .mat file; "
                           f"this file holds one cube")
    if kind == "envi":
        return envi.EnviRaster(path)
    if kind == "gdal":
        return geotiff.GdalRaster(path)
    return ArrayRaster(_windowed(read_array(path, key, key_name=key_name, memory_map=True)),
                       path=path)


@dataclasses.dataclass(frozen=True)
class LabelFile:
    """A label map [H, W] int32 (0 unlabelled, 1..K) read from a file, the class names
    the file gives (an ENVI classification file's; None when it gives none) and what
    else the file says (its georeference: a RasterInfo)."""

    labels: np.ndarray
    class_names: tuple = None
    info: RasterInfo = RasterInfo()


def read_label_map(path, key=None, key_name="a key"):
    """The label map of the file ``path`` (any type ``open_raster`` reads, one band).

    A GeoTIFF's no-data value and an ENVI file's data-ignore value read as 0
    (unlabelled). An ENVI classification file's class names come with it; a
    label beyond its classes is refused, naming the file.
    """
    path = pathlib.Path(path)
    kind = _kind(path)
    if kind == "array":
        return LabelFile(as_label_map(read_array(path, key, key_name=key_name),
                                      what=f"{path}: label map"))
    raster = open_raster(path, key, key_name)
    if raster.shape[2] != 1:
        raise InvalidInput(f"{raster.path}: {raster.shape[2]} bands; a label map has one")
    values = raster.read_all()[..., 0]
    labels = as_label_map(np.nan_to_num(values, nan=0.0), what=f"{raster.path}: label map")
    names = getattr(raster, "class_names", None)
    if names is not None and labels.max(initial=0) > len(names):
        raise InvalidInput(f"{raster.path}: holds label {labels.max()}, but its header names "
                           f"{len(names)} classes (1..{len(names)}; 0 unclassified)")
    return LabelFile(labels, names, raster.info)


def _windowed(array):
    """A 3-D ``.npy`` file's memory map as a :class:`MappedCube` (read a window at a
    time); any other array as it is."""
    if not isinstance(array, np.memmap) or array.ndim != 3:
        return array
    if array.flags.c_contiguous:
        return MappedCube(array.filename, array.offset, array.dtype, array.shape, (0, 1, 2))
    return MappedCube(array.filename, array.offset, array.dtype, array.shape[::-1], (2, 1, 0))


def _kind(path):
    """'array', 'envi' or 'gdal': the reader of ``path``; InvalidInput for other types."""
    suffix = path.suffix.lower()
    if suffix in ARRAY_SUFFIXES:
        return "array"
    if suffix == envi.HEADER_SUFFIX or (suffix in envi.DATA_SUFFIXES and envi.header_of(path)):
        return "envi"
    if suffix in geotiff.SUFFIXES:
        return "gdal"
    if suffix in envi.DATA_SUFFIXES:
        return "envi"   # no header beside it: EnviRaster says so
    raise InvalidInput(f"{path}: unsupported file type {path.suffix!r}; allowed: "
                       f"{', '.join(SUPPORTED_SUFFIXES)}")
