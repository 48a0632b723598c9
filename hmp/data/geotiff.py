"""GeoTIFF and any other raster GDAL reads, through ``rasterio`` (the ``formats`` extra).

rasterio brings GDAL's wheels, so it is optional: without it, reading or
writing such a file is refused in one line that says how to install it.
Each band's no-data value reads as NaN, then its scale and offset (GDAL's
``scale``/``offset``) apply: value x scale + offset, as GDAL gives the value.
A class map of such a scene is written as a GeoTIFF with the input's transform
(or ground control points) and CRS, one colour per class and 0 (unclassified)
as no-data, so QGIS and ENVI lay it on the map.
"""

import contextlib
import logging
import pathlib
import warnings

import numpy as np

from hmp.data.raster import Raster, RasterInfo, check_numeric
from hmp.errors import InvalidInput

SUFFIXES = (".tif", ".tiff", ".vrt", ".img", ".jp2")
INSTALL = 'pip install rasterio (in hmp\'s checkout: pip install -e ".[formats]")'
# GDAL's cache of the blocks it read (by default 5% of the machine's memory), bounded
# so that reading a large raster a tile at a time keeps its memory bounded too
CACHE_BYTES = 64 * 2**20


def rasterio_module():
    """rasterio, or InvalidInput saying how to install it."""
    try:
        import rasterio   # pylint: disable=import-outside-toplevel
    except ImportError:
        raise InvalidInput(f"GeoTIFF and other GDAL rasters need rasterio, which is not "
                           f"installed: {INSTALL}") from None
    return rasterio


@contextlib.contextmanager
def _reading(rasterio):
    """GDAL's block cache bounded (``CACHE_BYTES``), and no rasterio warning on stderr
    (e.g. NotGeoreferencedWarning for a plain TIFF) nor its log lines of GDAL's errors and
    warnings ("GDAL signalled an error", "CPLE_AppDefined ...", which a program's absl log
    would show before the one line that says what is wrong: GDAL's reason is in it)."""
    logger = logging.getLogger("rasterio")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with rasterio.Env(GDAL_CACHEMAX=CACHE_BYTES), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.setLevel(level)


class GdalRaster(Raster):
    """A raster file GDAL opens; its bands are the cube's bands. The file stays open."""

    def __init__(self, path):
        rasterio = rasterio_module()
        self.path = pathlib.Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(f"no such file: {self.path}")
        if self.path.stat().st_size == 0:
            raise InvalidInput(f"{self.path}: empty file (0 bytes)")
        self._rasterio = rasterio
        try:
            with _reading(rasterio):
                self._dataset = rasterio.open(self.path)
        except rasterio.errors.RasterioError as error:
            raise InvalidInput(f"{self.path}: cannot be read as a GDAL raster (truncated, "
                               f"or not of this type?): {_one_line(error)}") from None
        dataset = self._dataset
        if len(set(dataset.dtypes)) != 1:
            raise InvalidInput(f"{self.path}: bands of different types {dataset.dtypes}")
        check_numeric(dataset.dtypes[0], str(self.path))
        self.shape = (dataset.height, dataset.width, dataset.count)
        georeferenced = dataset.crs is not None or not dataset.transform.is_identity
        gcps, gcps_crs = dataset.gcps if not georeferenced else ([], None)
        crs = dataset.crs if georeferenced else gcps_crs
        self.info = RasterInfo(
            format="geotiff",
            transform=tuple(dataset.transform)[:6] if georeferenced else None,
            gcps=tuple((p.row, p.col, p.x, p.y, p.z) for p in gcps),
            crs=crs.to_wkt() if crs is not None else None,
            wavelengths=_wavelengths(dataset),
            wavelength_units=dataset.tags(1).get("wavelength_units"),
            ignore_values=tuple(dataset.nodatavals) if any(
                value is not None for value in dataset.nodatavals) else ())
        if 0 in dataset.scales:
            raise InvalidInput(f"{self.path}: band {dataset.scales.index(0) + 1} has scale "
                               f"0; allowed: a scale other than 0")
        self._scales = np.array(dataset.scales, np.float32)
        self._offsets = np.array(dataset.offsets, np.float32)
        self._scaled = bool((self._scales != 1).any() or self._offsets.any())
        # a file cut short reads its header but not its last pixels: fail now, not mid-way
        self.read(slice(self.shape[0] - 1, self.shape[0]), slice(0, self.shape[1]))

    def read(self, rows, cols):
        """The window as float32, each band times its scale plus its offset."""
        window = super().read(rows, cols)
        return window * self._scales + self._offsets if self._scaled else window

    def _read(self, rows, cols):
        window = ((rows.start, rows.stop), (cols.start, cols.stop))
        try:
            with _reading(self._rasterio):
                values = self._dataset.read(window=window)   # [bands, rows, cols]
        except self._rasterio.errors.RasterioError as error:
            raise InvalidInput(f"{self.path}: cannot read rows {rows.start}..{rows.stop - 1}, "
                               f"columns {cols.start}..{cols.stop - 1} (truncated?): "
                               f"{_one_line(error)}") from None
        return values.transpose(1, 2, 0)


def _wavelengths(dataset):
    """Band centres from GDAL's per-band ``wavelength`` metadata (ENVI-style), if every
    band has one; else empty."""
    found = [dataset.tags(band).get("wavelength") for band in range(1, dataset.count + 1)]
    try:
        return tuple(float(value) for value in found) if all(found) else ()
    except ValueError:
        return ()


def same_crs(wkt, other):
    """Whether GDAL takes two CRSs (WKT) for one."""
    crs = rasterio_module().crs.CRS
    return crs.from_wkt(wkt) == crs.from_wkt(other)


def crs_name(wkt):
    """A CRS (WKT) as GDAL names it shortest: ``EPSG:32633``, else its WKT."""
    return rasterio_module().crs.CRS.from_wkt(wkt).to_string()


def _one_line(error):
    """The error's text on one line; GDAL's own reason when rasterio only points to it."""
    cause = error.__cause__
    if cause is not None and "previous exception" in str(error):
        error = cause
    return " ".join(str(error).split())


def write_classification(path, class_map, colors, info):
    """Writes ``class_map`` [H, W] (0 unclassified, 1..K) to ``path`` as a GeoTIFF: the
    transform or ground control points and the CRS of ``info`` (a RasterInfo), a colour
    table (``colors``: uint8 RGB [K + 1, 3], row 0 for unclassified) and 0 as no-data."""
    rasterio = rasterio_module()
    classes = len(colors)
    dtype = np.uint8 if classes <= 256 else np.uint16
    profile = {"driver": "GTiff", "height": class_map.shape[0], "width": class_map.shape[1],
               "count": 1, "dtype": np.dtype(dtype).name, "nodata": 0, "compress": "deflate"}
    if info is not None and info.transform is not None:
        profile["transform"] = rasterio.Affine(*info.transform)
    if info is not None and info.gcps:
        profile["gcps"] = [rasterio.control.GroundControlPoint(*point) for point in info.gcps]
    if info is not None and info.crs is not None:
        profile["crs"] = rasterio.crs.CRS.from_wkt(info.crs)
    with _reading(rasterio), rasterio.open(path, "w", **profile) as dataset:
        dataset.write(np.asarray(class_map, dtype=dtype), 1)
        dataset.write_colormap(1, {k: (*map(int, colors[k]), 255) for k in range(classes)})
