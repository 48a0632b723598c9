"""ENVI rasters: a text header (``.hdr``) beside a raw data file, read through ``spectral``.

The data file is found as ENVI and ``spectral`` find it: the header's name
without ``.hdr`` (``scene.img.hdr`` -> ``scene.img``), or with one of
``DATA_SUFFIXES`` (``scene.hdr`` -> ``scene.img``, ``scene.dat``, ...). Any
interleave (BSQ, BIL, BIP), either byte order and every real data type are read;
the header is checked against the data file before anything is read, so a
truncated file, a header that disagrees with its data, complex data or an
unknown data type is refused in one line naming the file. Bands the header's
``bbl`` (bad band list) marks 0 are left out, as ENVI leaves them out of its
displays and tools: the cube holds the good bands only.

Written here: an ENVI classification file (the class map with its class names,
colours and the input's map info, projection info and coordinate system), which
ENVI and QGIS open on the map.
"""

import codecs
import dataclasses
import math
import pathlib
import tempfile
import warnings

import numpy as np
import spectral.io.envi as envi

from hmp.data.raster import MappedCube, Raster, RasterInfo
from hmp.errors import InvalidInput

HEADER_SUFFIX = ".hdr"
DATA_SUFFIXES = (".img", ".dat", ".raw", ".bsq", ".bil", ".bip")
# the cube's axes (0 lines, 1 samples, 2 bands) in the data file's order, by interleave
INTERLEAVES = {"bsq": (2, 0, 1), "bil": (0, 2, 1), "bip": (0, 1, 2)}
# ENVI's data type codes of real numbers; 6 and 9 are complex, refused.
DATA_TYPES = {1: np.uint8, 2: np.int16, 3: np.int32, 4: np.float32, 5: np.float64,
              12: np.uint16, 13: np.uint32, 14: np.int64, 15: np.uint64}
COMPLEX_TYPES = {6: "complex64", 9: "complex128"}
REQUIRED_FIELDS = ("samples", "lines", "bands", "data type", "interleave", "byte order")
UNCLASSIFIED = "Unclassified"   # class 0 of an ENVI classification file


def header_of(path):
    """The ENVI header of the file ``path`` (the header itself or its data file), or
    None when there is none beside it."""
    path = pathlib.Path(path)
    if path.suffix.lower() == HEADER_SUFFIX:
        return path
    for candidate in (path.parent / (path.name + HEADER_SUFFIX),
                      path.parent / (path.name + HEADER_SUFFIX.upper()),
                      path.with_suffix(HEADER_SUFFIX), path.with_suffix(HEADER_SUFFIX.upper())):
        if candidate.is_file():
            return candidate
    return None


class EnviRaster(Raster):
    """An ENVI image; ``class_names`` holds a classification file's names of classes
    1..K (None for other files)."""

    def __init__(self, path):
        path = pathlib.Path(path)
        header = header_of(path)
        if header is None:
            raise InvalidInput(f"{path}: no ENVI header ({path.stem}{HEADER_SUFFIX} or "
                               f"{path.name}{HEADER_SUFFIX}) beside it")
        if not header.is_file():
            raise FileNotFoundError(f"no such file: {header}")
        self.path = header
        fields = read_header(header)
        rows, cols, bands = (_whole(fields, name, header) for name in ("lines", "samples", "bands"))
        dtype = _data_type(fields, header)
        interleave = str(fields["interleave"]).strip().lower()
        if interleave not in INTERLEAVES:
            raise InvalidInput(f"{header}: interleave {fields['interleave']!r} is not known; "
                               f"allowed: {', '.join(INTERLEAVES)}")
        if str(fields["byte order"]).strip() not in ("0", "1"):
            raise InvalidInput(f"{header}: byte order {fields['byte order']!r}; allowed: 0 "
                               f"(little-endian) or 1 (big-endian)")
        if str(fields.get("file type", "")).strip().lower() == "envi spectral library":
            raise InvalidInput(f"{header}: a spectral library, not an image")
        offset = _whole(fields, "header offset", header, default=0, minimum=0)
        data = path if path != header else _data_file(header)
        expected = offset + rows * cols * bands * np.dtype(dtype).itemsize
        actual = data.stat().st_size
        if actual != expected:
            raise InvalidInput(
                f"{data}: holds {actual} bytes, but its header {header.name} describes "
                f"{expected} ({rows} lines x {cols} samples x {bands} bands of "
                f"{np.dtype(dtype).name}{f' + {offset} header bytes' if offset else ''})"
                + ("; the file is truncated" if actual < expected else
                   "; header and data disagree"))
        try:   # what spectral's envi.open checks, and its type of the values
            envi.check_compatibility(fields)
            params = envi.gen_params(fields)   # the data type in the file's byte order
        except envi.EnviException as error:
            raise InvalidInput(f"{header}: {_one_line(error)}") from error
        order = INTERLEAVES[interleave]
        self._cube = MappedCube(data, offset, params.dtype,
                                [(rows, cols, bands)[axis] for axis in order], np.argsort(order))
        self._bands = _good_bands(fields, bands, header)
        self.shape = (rows, cols, len(self._bands))
        self.scale = _number(fields, "reflectance scale factor", header, default=1.0)
        if not self.scale:
            raise InvalidInput(f"{header}: reflectance scale factor 0")
        wavelengths = _wavelengths(fields, bands, header)
        ignore_value = _number(fields, "data ignore value", header, default=None)
        self.info = RasterInfo(
            format="envi", map_info=_items(fields.get("map info")),
            projection_info=_items(fields.get("projection info")),
            coordinate_system=_text(fields.get("coordinate system string")),
            wavelengths=tuple(wavelengths[band] for band in self._bands) if wavelengths else (),
            wavelength_units=_text(fields.get("wavelength units")),
            ignore_values=(ignore_value,) * self.shape[2] if ignore_value is not None else (),
            bad_bands=tuple(band + 1 for band in range(bands) if band not in self._bands))
        self.class_names = _class_names(fields, header)

    def read(self, rows, cols):
        """The window as float32, divided by the header's ``reflectance scale factor``."""
        window = super().read(rows, cols)
        return window if self.scale == 1.0 else window / np.float32(self.scale)

    def _read(self, rows, cols):
        window = self._cube[rows, cols]
        # the good bands only when the header leaves some out: no copy of every read else
        return window if len(self._bands) == window.shape[-1] else window[..., self._bands]


def read_header(header):
    """The header's fields (lower-case names; lists for ``{...}`` values); InvalidInput
    for an empty file or one that is no ENVI header."""
    if header.stat().st_size == 0:
        raise InvalidInput(f"{header}: empty file (0 bytes)")
    try:
        with warnings.catch_warnings():   # names not in lower case: read as lower case
            warnings.simplefilter("ignore")
            fields = _read_header_fields(header)
    except envi.FileNotAnEnviHeader:
        raise InvalidInput(f"{header}: not an ENVI header (its first line is not 'ENVI')") \
            from None
    except (envi.EnviHeaderParsingError, UnicodeDecodeError):
        raise InvalidInput(f"{header}: cannot be parsed as an ENVI header (truncated, or a "
                           f"'{{' not closed?)") from None
    missing = [name for name in REQUIRED_FIELDS if name not in fields]
    if missing:
        raise InvalidInput(f"{header}: the ENVI header lacks {', '.join(missing)}")
    return fields


def _read_header_fields(header):
    """spectral's reading of ``header``; a header that starts with a UTF-8 byte-order
    mark (as Windows editors save it) is read from a copy without it."""
    text = header.read_bytes()
    if not text.startswith(codecs.BOM_UTF8):
        return envi.read_envi_header(str(header))
    with tempfile.TemporaryDirectory() as folder:
        copy = pathlib.Path(folder) / header.name
        copy.write_bytes(text[len(codecs.BOM_UTF8):])
        return envi.read_envi_header(str(copy))


def _data_file(header):
    """The data file beside ``header``, as ENVI finds it."""
    stem = header.with_suffix("")
    candidates = [stem] + [stem.with_name(stem.name + suffix) for suffix in
                           DATA_SUFFIXES + tuple(s.upper() for s in DATA_SUFFIXES)]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"{header}: no data file beside it (looked for {stem.name} with "
                            f"no suffix or one of {', '.join(DATA_SUFFIXES)})")


def _whole(fields, name, header, default=None, minimum=1):
    text = fields.get(name)
    if text is None:
        return default
    try:
        value = int(str(text).strip())
    except ValueError:
        raise InvalidInput(f"{header}: {name} = {text!r} is not a whole number") from None
    if value < minimum:
        raise InvalidInput(f"{header}: {name} = {value}; must be at least {minimum}")
    return value


def _number(fields, name, header, default):
    text = fields.get(name)
    if text is None:
        return default
    try:
        return float(str(text).strip())
    except ValueError:
        raise InvalidInput(f"{header}: {name} = {text!r} is not a number") from None


def _data_type(fields, header):
    code = _whole(fields, "data type", header)
    if code in COMPLEX_TYPES:
        raise InvalidInput(f"{header}: data type {code} ({COMPLEX_TYPES[code]}) is not "
                           f"supported; allowed: real numbers (ENVI data types "
                           f"{', '.join(map(str, sorted(DATA_TYPES)))})")
    if code not in DATA_TYPES:
        raise InvalidInput(f"{header}: data type {code} is not an ENVI data type; allowed: "
                           f"{', '.join(map(str, sorted(DATA_TYPES)))}")
    return DATA_TYPES[code]


def _wavelengths(fields, bands, header):
    """The bands' wavelengths (empty when the header gives none)."""
    given = fields.get("wavelength")
    if given is None:
        return ()
    items = given if isinstance(given, list) else [given]
    try:
        values = tuple(float(item) for item in items)
    except ValueError:
        raise InvalidInput(f"{header}: wavelength holds a value that is not a number") from None
    if len(values) != bands:
        raise InvalidInput(f"{header}: {len(values)} wavelengths for {bands} bands")
    for band, value in enumerate(values):
        if not math.isfinite(value):
            raise InvalidInput(f"{header}: wavelength of band {band + 1} is {items[band]}; "
                               f"allowed: finite numbers")
    return values


def _good_bands(fields, bands, header):
    """The indices of the bands the header's ``bbl`` (bad band list: 1 good, 0 bad)
    keeps; every band when it has none."""
    given = fields.get("bbl")
    if given is None:
        return list(range(bands))
    items = given if isinstance(given, list) else [given]
    try:
        flags = [float(item) for item in items]
    except ValueError:
        flags = []
    if len(flags) != bands or not set(flags) <= {0.0, 1.0}:
        raise InvalidInput(f"{header}: bbl = {{{', '.join(items)}}}; allowed: {bands} values "
                           f"(one a band) of 1 (a good band) or 0 (a bad band)")
    if 1.0 not in flags:
        raise InvalidInput(f"{header}: bbl marks every band bad (0); allowed: at least one 1")
    return [band for band, flag in enumerate(flags) if flag]


def _class_names(fields, header):
    """Names of classes 1..K of a classification file (``classes`` counts class 0,
    'Unclassified', too), or None."""
    classes = _whole(fields, "classes", header, minimum=1)
    if classes is None:
        return None
    names = fields.get("class names")
    names = names if isinstance(names, list) else None
    if names is not None and len(names) != classes:
        raise InvalidInput(f"{header}: classes = {classes}, but {len(names)} class names")
    return tuple(names[1:]) if names else tuple(f"class {k}" for k in range(1, classes))


def _items(value):
    if value is None:
        return None
    return tuple(value) if isinstance(value, list) else (str(value),)


@dataclasses.dataclass(frozen=True)
class MapGrid:
    """ENVI's ``map info`` as what it means (``map_info_grid``).

    Attributes:
      transform: the affine pixel-to-map transform (a, b, c, d, e, f) of
        ``hmp.data.raster.RasterInfo.transform`` (x = a col + b row + c,
        y = d col + e row + f; the first pixel's upper-left corner at col = row = 0).
      projection: the projection's name (``UTM``, ``Geographic Lat/Lon``...).
      place: the items after the pixel sizes that are no keyword, as written (a UTM
        zone and hemisphere, the datum).
      keywords: the keyword items but rotation (which the transform holds), by
        lower-case name: e.g. ``{"units": "Meters"}``.
    """

    transform: tuple
    projection: str
    place: tuple
    keywords: dict


def map_info_grid(map_info):
    """What ENVI's ``map info`` items (``RasterInfo.map_info``, as written) mean: a
    ``MapGrid``, or None for items that place no grid (fewer than seven, or a reference
    pixel, map coordinate, pixel size or rotation that is no finite number).

    The items: projection name; reference pixel x, y (1-based: the first pixel's
    upper-left corner is at 1.0, 1.0); its easting and northing (or longitude and
    latitude); pixel size in x and y (positive y for rows running south, as ENVI
    writes a north-up image); then what places the map (a UTM zone and North/South, a
    datum...) and keyword items (``units=Meters``, ``rotation=<degrees>``: the grid
    turned counter-clockwise about the reference pixel, in GDAL's sense)."""
    if not map_info or len(map_info) < 7:
        return None
    try:
        x_ref, y_ref, easting, northing, x_size, y_size = (float(item) for item in map_info[1:7])
    except ValueError:
        return None
    extras, keywords = [], {}
    for item in map_info[7:]:
        key, equals, value = str(item).partition("=")
        if equals:
            keywords[" ".join(key.lower().split())] = value.strip()
        else:
            extras.append(item)
    try:
        rotation = math.radians(float(keywords.pop("rotation", 0.0)))
    except ValueError:
        return None
    if not all(map(math.isfinite, (x_ref, y_ref, easting, northing, x_size, y_size, rotation))):
        return None
    cos, sin = math.cos(rotation), math.sin(rotation)
    # the unrotated grid (x = col * x_size, y = -row * y_size) turned by the rotation
    a, b, d, e = x_size * cos, y_size * sin, x_size * sin, -y_size * cos
    col, row = x_ref - 1.0, y_ref - 1.0   # the reference pixel from the first's corner
    return MapGrid(transform=(a, b, easting - (a * col + b * row),
                              d, e, northing - (d * col + e * row)),
                   projection=str(map_info[0]), place=tuple(extras), keywords=keywords)


def _text(value):
    if value is None:
        return None
    return ", ".join(value) if isinstance(value, list) else str(value)


def _one_line(error):
    return " ".join(str(error).split())


# -- writing --------------------------------------------------------------------------------

def _class_type(class_count):
    """(numpy type, ENVI data type) of a classification file of ``class_count`` classes
    (with class 0)."""
    return (np.uint8, 1) if class_count <= 256 else (np.uint16, 12)


def write_classification_data(path, class_map, class_names):
    """Writes ``class_map`` [H, W] (0 unclassified, 1..K) as the raw data of an ENVI
    classification file (BSQ, little-endian; uint8, or uint16 beyond 255 classes)."""
    dtype, _ = _class_type(len(class_names) + 1)
    np.ascontiguousarray(class_map, dtype=np.dtype(dtype).newbyteorder("<")).tofile(path)


def write_classification_header(path, shape, class_names, colors, info):
    """Writes the header of an ENVI classification file of an image of ``shape`` (rows,
    columns): its classes (0 'Unclassified', then ``class_names``), their colours
    (``colors``: uint8 RGB [K + 1, 3]) and the map info, projection info and coordinate
    system of ``info`` (the input's ``hmp.data.raster.RasterInfo``)."""
    classes = len(class_names) + 1
    _, code = _class_type(classes)
    names = [UNCLASSIFIED] + [_list_item(name) for name in class_names]
    lines = ["ENVI",
             "description = {hmp class map}",
             f"samples = {shape[1]}",
             f"lines = {shape[0]}",
             "bands = 1",
             "header offset = 0",
             "file type = ENVI Classification",
             f"data type = {code}",
             "interleave = bsq",
             "byte order = 0",
             f"classes = {classes}",
             "class lookup = {%s}" % ", ".join(str(int(v)) for v in
                                                np.asarray(colors)[:classes].ravel()),
             "class names = {%s}" % ", ".join(names),
             "band names = {class map}"]
    if info.map_info:
        lines.append("map info = {%s}" % ", ".join(info.map_info))
    if info.projection_info:
        lines.append("projection info = {%s}" % ", ".join(info.projection_info))
    if info.coordinate_system:
        lines.append("coordinate system string = {%s}" % info.coordinate_system)
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


def _list_item(name):
    """A class name as an item of an ENVI ``{...}`` list: no comma, no brace."""
    return " ".join(str(name).replace(",", ";").replace("{", "(").replace("}", ")").split())
