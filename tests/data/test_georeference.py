"""A label file on the cube's grid, told by what the georeference means (issue: ENVI map
info compared item by item refused one grid written from another reference pixel).

References: ENVI's map info (the reference pixel is 1-based, the first pixel's upper-left
corner at 1.0, 1.0) is read by GDAL (through rasterio) into the transform hmp compares;
the grids below are built by hand from that rule, and GDAL's own reading of the headers
checks the rule where GDAL and ENVI agree (a rotation about reference pixel 1, 1 of square
pixels, or any reference pixel without rotation).
"""

import math

import numpy as np
import pytest
import rasterio

from hmp.data import geotiff, load_scene, split_from_label_maps
from hmp.data.envi import map_info_grid
from hmp.data.georeference import check_same_grid
from hmp.data.raster import RasterInfo
from hmp.errors import InvalidInput

SHAPE = (6, 8)   # rows, columns
E, N, DX, DY = 500000.0, 4000000.0, 30.0, 30.0
UTM = ("33", "North", "WGS-84", "units=Meters")
pytestmark = pytest.mark.filterwarnings("ignore::rasterio.errors.NotGeoreferencedWarning")


def map_info(x_ref=1, y_ref=1, easting=E, northing=N, dx=DX, dy=DY, rest=UTM, name="UTM",
             rotation=None):
    """ENVI map info items as the header reader keeps them (text)."""
    items = [name, str(x_ref), str(y_ref), str(easting), str(northing), str(dx), str(dy),
             *rest]
    return tuple(items + ([f"rotation={rotation}"] if rotation is not None else []))


def rotated_reference(x_ref, y_ref, degrees, dx=DX, dy=DY):
    """Map coordinates of ENVI reference pixel (x_ref, y_ref) on the grid whose pixel 1, 1
    lies at (E, N), turned ``degrees`` counter-clockwise about that pixel's corner."""
    turn = math.radians(degrees)
    col, row = x_ref - 1, y_ref - 1
    x, y = col * dx, -row * dy   # unturned offsets from the first pixel's corner
    return (E + x * math.cos(turn) - y * math.sin(turn),
            N + x * math.sin(turn) + y * math.cos(turn))


def refusal(cube_map_info, labels_map_info, **more):
    """The message check_same_grid gives for two ENVI files, or None when it takes them."""
    try:
        check_same_grid(RasterInfo(format="envi", map_info=cube_map_info, **more.get("cube", {})),
                        RasterInfo(format="envi", map_info=labels_map_info,
                                   **more.get("labels", {})),
                        SHAPE, "labels file gt.hdr", "the cube cube.hdr")
    except InvalidInput as error:
        return str(error)
    return None


def write_envi(path, map_info_items, dtype=np.uint8, fields=None):
    """An ENVI file of zeros of SHAPE (one band) with ``map_info_items``; its header."""
    np.zeros(SHAPE, dtype).tofile(path.with_suffix(".img"))
    lines = ["ENVI", f"samples = {SHAPE[1]}", f"lines = {SHAPE[0]}", "bands = 1",
             "header offset = 0", "data type = 1", "interleave = bsq", "byte order = 0",
             "map info = {%s}" % ", ".join(map_info_items)]
    lines += [f"{key} = {value}" for key, value in (fields or {}).items()]
    header = path.with_suffix(".hdr")
    header.write_text("\n".join(lines) + "\n")
    return header


# -- the same grid written two ways: taken --------------------------------------------------

def test_the_same_grid_from_two_reference_pixels_is_one_grid():
    assert refusal(map_info(), map_info(11, 21, E + 10 * DX, N - 20 * DY)) is None
    # the centre of the first pixel, and a reference pixel left of and above the image
    assert refusal(map_info(), map_info(1.5, 1.5, E + DX / 2, N - DY / 2)) is None
    assert refusal(map_info(), map_info(-4, -2, E - 5 * DX, N + 3 * DY)) is None


def test_pixel_sizes_and_numbers_in_other_float_text_are_one_grid():
    assert refusal(map_info(), map_info(dx="3.0000000000e+01", dy="30")) is None
    assert refusal(map_info(), map_info(easting="5.0e5", northing="4000000.000001",
                                        x_ref="1.000", y_ref="1.0",
                                        rest=("33.0", "north", "WGS-84", "units=meters"))) is None


def test_a_rotated_grid_is_one_grid_whatever_its_rotation_is_written_as():
    reference = rotated_reference(11, 21, 30)
    cube = map_info(rotation=30)
    for labels in (map_info(rotation="30.0"), map_info(rotation=390),
                   map_info(rotation=-330), map_info(11, 21, *reference, rotation=30),
                   map_info(11, 21, *reference, rotation="-3.3e2")):
        assert refusal(cube, labels) is None, labels
    # turned half a turn = pixel sizes of the other sign; no rotation = rotation=0
    assert refusal(map_info(dx=-DX, dy=-DY), map_info(rotation=180)) is None
    assert refusal(map_info(), map_info(rotation=0)) is None
    assert refusal(map_info(), map_info(rotation=360.0)) is None


def test_units_named_by_one_file_only_and_a_coordinate_system_written_two_ways_are_taken():
    assert refusal(map_info(), map_info(rest=UTM[:3])) is None
    wkt = rasterio.crs.CRS.from_epsg(32633).to_wkt()
    for version in ("WKT2_2019", "WKT1_ESRI"):   # ENVI writes ESRI's
        other = rasterio.crs.CRS.from_epsg(32633).to_wkt(version=version)
        assert refusal(map_info(), map_info(), cube={"coordinate_system": wkt},
                       labels={"coordinate_system": other}) is None, version


# -- another grid: refused, naming what differs ---------------------------------------------

@pytest.mark.parametrize("shift", [(0.5, 0), (0, 0.5), (1, 0), (0, -1), (0.02, 0)])
def test_a_grid_shifted_by_a_fraction_of_a_pixel_or_more_is_refused(shift):
    shifted = map_info(easting=E + shift[0] * DX, northing=N + shift[1] * DY)
    assert refusal(map_info(), shifted) == (
        "labels file gt.hdr: lies on another grid than the cube cube.hdr: map info "
        "{%s} in the labels, {%s} in the cube; allowed: a label map on the cube's grid, or "
        "one without georeference" % (", ".join(shifted), ", ".join(map_info())))
    # the same shift written from another reference pixel
    moved = map_info(11, 21, E + (10 + shift[0]) * DX, N + (shift[1] - 20) * DY)
    assert "map info {UTM, 11, 21, " in refusal(map_info(), moved)
    # a thousandth of a pixel is the same grid
    assert refusal(map_info(), map_info(easting=E + DX / 1000)) is None


def test_another_pixel_size_or_rotation_is_refused():
    for other in (map_info(dx=15.0, dy=15.0), map_info(dy=31.0), map_info(dx=30.1),
                  map_info(rotation=30), map_info(rotation=0.5), map_info(rotation=180),
                  map_info(dy=-DY)):
        assert refusal(map_info(), other).startswith(
            "labels file gt.hdr: lies on another grid than the cube cube.hdr: map info {"), other
    assert refusal(map_info(rotation=30), map_info(rotation=-30)) is not None


@pytest.mark.parametrize("rest", [("34", "North", "WGS-84", "units=Meters"),
                                  ("33", "South", "WGS-84", "units=Meters"),
                                  ("33", "North", "NAD-83", "units=Meters"),
                                  ("33", "North", "WGS-84", "units=Feet"),
                                  ("33", "North", "WGS-84", "extra", "units=Meters")])
def test_another_zone_hemisphere_datum_or_units_is_refused(rest):
    assert refusal(map_info(), map_info(rest=rest)) is not None
    assert refusal(map_info(), map_info(name="Geographic Lat/Lon", rest=UTM[2:])) is not None


def test_another_coordinate_system_or_projection_info_is_refused():
    utm = rasterio.crs.CRS.from_epsg(32633).to_wkt()
    other = rasterio.crs.CRS.from_epsg(32634).to_wkt()
    assert "coordinate system string PROJCS[\"WGS 84 / UTM zone 34N\"" in refusal(
        map_info(), map_info(), cube={"coordinate_system": utm},
        labels={"coordinate_system": other})
    # text GDAL does not read: compared as words
    assert refusal(map_info(), map_info(), cube={"coordinate_system": "PROJCS[\"x\"]"},
                   labels={"coordinate_system": "projcs[\"X\"]"}) is None
    projection = ("9", "6378137.0", "6356752.314245179", "23.0", "-96.0")
    assert refusal(map_info(), map_info(), cube={"projection_info": projection},
                   labels={"projection_info": projection[:2] + ("6356752.31424518",)
                           + projection[3:]}) is None
    assert "projection info {9, 6378137.0, 6356752.314245179, 24.0, -96.0} in the labels" in \
        refusal(map_info(), map_info(), cube={"projection_info": projection},
                labels={"projection_info": projection[:3] + ("24.0", "-96.0")})


def test_without_rasterio_coordinate_systems_are_compared_word_by_word(monkeypatch):
    def missing():
        raise InvalidInput("GeoTIFF and other GDAL rasters need rasterio")
    monkeypatch.setattr(geotiff, "rasterio_module", missing)
    wkt = 'PROJCS["WGS 84 / UTM zone 33N", GEOGCS["WGS 84"]]'
    assert refusal(map_info(), map_info(), cube={"coordinate_system": wkt},
                   labels={"coordinate_system": "  ".join(wkt.upper().split(" "))}) is None
    assert refusal(map_info(), map_info(), cube={"coordinate_system": wkt},
                   labels={"coordinate_system": wkt.replace("33N", "34N")}) is not None


def test_a_map_info_that_places_no_grid_is_compared_item_by_item():
    assert map_info_grid(("UTM", "1", "1", "500000")) is None
    assert map_info_grid(map_info(dx="thirty")) is None
    assert map_info_grid(map_info(rotation="nan")) is None
    assert refusal(map_info(dx="thirty"), map_info(dx="Thirty")) is None
    assert refusal(map_info(dx="thirty"), map_info(dx="forty")) is not None


# -- the rule against GDAL's reading of the same headers ------------------------------------

@pytest.mark.parametrize("items", [
    map_info(), map_info(11, 21, E + 10 * DX, N - 20 * DY), map_info(1.5, 2.5, 10.0, 20.0),
    map_info(rotation=30), map_info(rotation=-75.5), map_info(dx=-DX, dy=-DY),
    map_info(name="Geographic Lat/Lon", easting=10.0, northing=50.0, dx=0.001, dy=0.002,
             rest=("WGS-84", "units=Degrees"))])
def test_map_info_becomes_the_transform_gdal_reads(tmp_path, items):
    header = write_envi(tmp_path / "scene", items)
    with rasterio.open(header.with_suffix(".img")) as dataset:
        expected = tuple(dataset.transform)[:6]
    np.testing.assert_allclose(map_info_grid(items).transform, expected, rtol=1e-12,
                               atol=1e-9)


# -- through the readers: a label file and a split's set files ------------------------------

def test_envi_label_and_set_files_on_the_cube_grid_from_another_reference_pixel(tmp_path):
    cube = write_envi(tmp_path / "cube", map_info(rotation=12.5))
    x, y = rotated_reference(11, 21, 12.5)
    same = map_info(11, 21, x, y, rotation=12.5)
    classes = {"file type": "ENVI Classification", "classes": 2,
               "class names": "{Unclassified, a}"}
    labels = write_envi(tmp_path / "gt", same, fields=classes)
    labels.with_suffix(".img").write_bytes(np.ones(SHAPE, np.uint8).tobytes())
    scene = load_scene(cube, labels_path=labels)
    top, bottom = np.ones(SHAPE, np.uint8), np.ones(SHAPE, np.uint8)
    top[3:], bottom[:3] = 0, 0
    for name, values in (("train", top), ("test", bottom)):
        write_envi(tmp_path / name, same, fields=classes)
        (tmp_path / f"{name}.img").write_bytes(values.tobytes())
    split = split_from_label_maps(scene.labels, tmp_path / "train.hdr", tmp_path / "test.hdr",
                                  scene.raster)
    assert (len(split.train), len(split.test)) == (24, 24)
    # half a pixel along the turned rows: refused, naming the file
    x, y = rotated_reference(11, 21.5, 12.5)
    write_envi(tmp_path / "test", map_info(11, 21, x, y, rotation=12.5), fields=classes)
    (tmp_path / "test.img").write_bytes(bottom.tobytes())
    with pytest.raises(InvalidInput, match=r"^test_set .*test.hdr: lies on another grid than "
                                           r"the scene's cube: map info \{UTM, 11, 21, "):
        split_from_label_maps(scene.labels, tmp_path / "train.hdr", tmp_path / "test.hdr",
                              scene.raster)
