"""A class map written in its scene's file format, on the scene's map.

A scene read from an ENVI file gets an ENVI classification file
(``class_map.hdr`` and ``class_map.img``: class names, colours, the input's map
info); one read through GDAL (a GeoTIFF...) gets a GeoTIFF (``class_map.tif``:
the input's transform and CRS, a colour table). A scene of a ``.mat`` or
``.npy`` file, or the synthetic one, has no map to be laid on: nothing is
written here. Each file is written atomically (``hmp.files``).
"""

import os

from hmp import files
from hmp.data import envi, geotiff

STEM = "class_map"
MAP_FILES = (STEM + ".hdr", STEM + ".img", STEM + ".tif")   # what any format may write


def _file_names(info):
    """The names of the files :func:`write_class_map` writes for a scene of ``info``
    (an ``hmp.data.raster.RasterInfo``); empty when its format has no map."""
    if info.format == "envi":
        return [STEM + ".hdr", STEM + ".img"]
    if info.format == "geotiff":
        return [STEM + ".tif"]
    return []


def write_class_map(folder, class_map, class_names, colors, info):
    """Writes ``class_map`` [H, W] (0 no-data, 1..K) into ``folder`` in the format and
    georeference of ``info``; returns the names of the files written.

    ``colors``: uint8 RGB [K + 1, 3], row 0 for no-data (the PNG's colours).
    """
    names = _file_names(info)
    paths = [os.path.join(folder, name) for name in names]
    if info.format == "envi":
        header, data = paths
        with files.atomic_path(data) as temporary:   # the data before its header
            envi.write_classification_data(temporary, class_map, class_names)
        with files.atomic_path(header) as temporary:
            envi.write_classification_header(temporary, class_map.shape, class_names, colors,
                                             info)
    elif info.format == "geotiff":
        with files.atomic_path(paths[0]) as temporary:
            geotiff.write_classification(temporary, class_map, colors, info)
    return names
