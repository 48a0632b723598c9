"""Cube and label files as users hold them (issue 32): ENVI (every interleave, both byte
orders, integer and float types), GeoTIFF (transform, CRS, no-data), class maps written
back on the map, and bad files refused in one line naming the file.

References: the files are written here byte by byte with numpy (ENVI) or by rasterio
(GeoTIFF), and what hmp reads is compared with the numpy arrays they were made from;
the class maps hmp writes are read back with spectral and rasterio.
"""

import json
import logging
import pathlib
import sys

import numpy as np
import pytest
import rasterio
import scipy.io
import spectral.io.envi as spectral_envi

from cli_batch import run_batch
from hmp.data import (load_scene, open_raster, read_label_map, split_from_label_maps,
                      synthetic_scene)
from hmp.data.raster import RasterInfo, check_wavelengths
from hmp.data.raster_writer import write_class_map
from hmp.errors import InvalidInput
from hmp.run import experiment
from hmp.evaluation.maps import class_colors

ENVI_TYPES = {np.dtype(np.uint8): 1, np.dtype(np.int16): 2, np.dtype(np.int32): 3,
              np.dtype(np.float32): 4, np.dtype(np.float64): 5, np.dtype(np.uint16): 12}
AXES = {"bsq": (2, 0, 1), "bil": (0, 2, 1), "bip": (0, 1, 2)}   # file order of [H, W, B]
MAP_INFO = "{UTM, 1, 1, 500000.0, 4000000.0, 30.0, 30.0, 33, North, WGS-84, units=Meters}"
TRANSFORM = rasterio.Affine(30.0, 0.0, 500000.0, 0.0, -30.0, 4000000.0)
pytestmark = pytest.mark.filterwarnings(   # rasterio's, for the test's own plain TIFFs
    "ignore::rasterio.errors.NotGeoreferencedWarning")


def write_envi(stem, cube, interleave="bsq", byte_order=0, suffix=".img", fields=None,
               data_type=None):
    """An ENVI file written with numpy: ``cube`` [H, W, B] as raw bytes in ``interleave``
    and ``byte_order`` (1: big-endian) to ``<stem><suffix>``, its header to
    ``<stem>.hdr`` (with ``fields``, a dict of further header lines); returns the
    header's path."""
    stem = pathlib.Path(stem)
    data = np.ascontiguousarray(np.transpose(cube, AXES[interleave]))
    data.astype(data.dtype.newbyteorder(">" if byte_order else "<")).tofile(
        stem.with_name(stem.name + suffix))
    lines = ["ENVI", f"samples = {cube.shape[1]}", f"lines = {cube.shape[0]}",
             f"bands = {cube.shape[2]}", "header offset = 0",
             f"data type = {data_type or ENVI_TYPES[cube.dtype]}",
             f"interleave = {interleave}", f"byte order = {byte_order}"]
    lines += [f"{name} = {value}" for name, value in (fields or {}).items()]
    header = stem.with_name(stem.name + ".hdr")
    header.write_text("\n".join(lines) + "\n")
    return header


def write_classification(stem, labels, names):
    """An ENVI classification file (uint8, BSQ) of ``labels`` [H, W] with classes
    'Unclassified' and ``names``."""
    return write_envi(stem, labels.astype(np.uint8)[..., None], fields={
        "file type": "ENVI Classification", "classes": len(names) + 1,
        "class names": "{Unclassified, %s}" % ", ".join(names)})


def write_geotiff(path, cube, **profile):
    """A GeoTIFF of ``cube`` [H, W, B] written by rasterio (``profile``: transform, crs,
    nodata...)."""
    with rasterio.open(path, "w", driver="GTiff", height=cube.shape[0], width=cube.shape[1],
                       count=cube.shape[2], dtype=cube.dtype.name, **profile) as dataset:
        dataset.write(np.transpose(cube, (2, 0, 1)))
    return path


def random_cube(dtype, shape=(5, 7, 3), seed=0):
    rng = np.random.default_rng(seed)
    info = np.iinfo(dtype) if np.dtype(dtype).kind in "iu" else None
    if info is None:
        return rng.normal(0, 1000, shape).astype(dtype)
    return rng.integers(info.min, info.max, shape, endpoint=True).astype(dtype)


# -- ENVI ----------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", sorted(ENVI_TYPES, key=str))
@pytest.mark.parametrize("byte_order", [0, 1])
@pytest.mark.parametrize("interleave", sorted(AXES))
def test_envi_cube_reads_as_numpy_wrote_it(tmp_path, interleave, byte_order, dtype):
    cube = random_cube(dtype)
    raster = open_raster(write_envi(tmp_path / "scene", cube, interleave, byte_order))
    assert raster.shape == (5, 7, 3) and raster.info.format == "envi"
    whole = raster.read_all()
    assert whole.dtype == np.float32
    np.testing.assert_array_equal(whole, cube.astype(np.float32))
    np.testing.assert_array_equal(raster.read(slice(1, 4), slice(2, 7)),
                                  cube[1:4, 2:7].astype(np.float32))


@pytest.mark.parametrize("written", ["BIL", "Bil"])
def test_envi_interleave_is_read_in_any_letter_case(tmp_path, written):
    cube = random_cube(np.int16)
    header = write_envi(tmp_path / "scene", cube, "bil")
    header.write_text(header.read_text().replace("interleave = bil", "interleave = " + written))
    np.testing.assert_array_equal(open_raster(header).read_all(), cube.astype(np.float32))


def test_envi_header_brings_wavelengths_ignore_value_scale_and_map_info(tmp_path):
    cube = random_cube(np.int16, (4, 6, 3))
    cube[1, 2, 0] = cube[3, 5, 2] = -9999
    fields = {"wavelength": "{450.5, 550, 650.25}", "wavelength units": "Nanometers",
              "data ignore value": "-9999", "reflectance scale factor": "10000",
              "map info": MAP_INFO, "coordinate system string": "{PROJCS[\"WGS 84\"]}"}
    write_envi(tmp_path / "scene", cube, "bil", 1, suffix=".dat", fields=fields)
    expected = cube.astype(np.float32) / np.float32(10000)
    expected[1, 2, 0] = expected[3, 5, 2] = np.nan
    for given in ("scene.hdr", "scene.dat"):   # the header or its data file
        raster = open_raster(tmp_path / given)
        np.testing.assert_array_equal(raster.read_all(), expected)
        info = raster.info
        assert info.wavelengths == (450.5, 550.0, 650.25)
        assert info.wavelength_units == "Nanometers" and info.ignore_values == (-9999,) * 3
        assert info.map_info == tuple(item.strip() for item in MAP_INFO[1:-1].split(","))
        assert info.coordinate_system == 'PROJCS["WGS 84"]'


def test_envi_bad_bands_are_left_out_as_envi_leaves_them_out(tmp_path):
    """bbl = 0 marks a bad band (here filled with the ignore value, which would make
    every pixel no-data): the cube, its wavelengths and ignore values hold the good ones."""
    cube = random_cube(np.int16, (4, 5, 4))
    cube[..., 1] = -9999
    header = write_envi(tmp_path / "scene", cube, "bip", fields={
        "bbl": "{1, 0, 1.0, 1}", "data ignore value": "-9999",
        "wavelength": "{400, 1400, 500, 600}"})
    raster = open_raster(header)
    assert raster.shape == (4, 5, 3) and raster.info.bad_bands == (2,)
    assert raster.info.wavelengths == (400.0, 500.0, 600.0)
    assert raster.info.ignore_values == (-9999.0,) * 3
    np.testing.assert_array_equal(raster.read_all(), cube[..., [0, 2, 3]].astype(np.float32))
    np.testing.assert_array_equal(raster.read(slice(1, 3), slice(2, 5)),
                                  cube[1:3, 2:5][..., [0, 2, 3]].astype(np.float32))


def test_an_envi_header_saved_with_a_byte_order_mark_is_read(tmp_path):
    cube = random_cube(np.float32)
    header = write_envi(tmp_path / "scene", cube, fields={"wavelength": "{1, 2, 3}"})
    header.write_bytes(b"\xef\xbb\xbf" + header.read_bytes())   # UTF-8 BOM, as Notepad saves
    raster = open_raster(header)
    np.testing.assert_array_equal(raster.read_all(), cube)
    assert raster.info.wavelengths == (1.0, 2.0, 3.0)


def test_a_cube_of_other_wavelengths_is_refused_a_recalibrated_one_is_not():
    bands = (400.0, 410.0, 420.0)
    for given in ((401.0, 414.9, 420.0), ()):   # within half the 10 nm spacing; unknown
        check_wavelengths(bands, given, "cube.hdr")
    check_wavelengths((), bands, "cube.hdr")
    with pytest.raises(InvalidInput, match=r"^cube.hdr: band 2 lies at wavelength 415.5, but "
                                           r"at 410 in the scene the run was trained on \(1 "
                                           r"of 3 bands differ\); allowed: a cube of the "
                                           r"same bands$"):
        check_wavelengths(bands, (400.0, 415.5, 420.0), "cube.hdr")
    with pytest.raises(InvalidInput, match=r"band 3 lies at wavelength nan, "):
        check_wavelengths(bands, (400.0, 410.0, float("nan")), "cube.hdr")


def test_wavelengths_in_other_length_units_are_compared_in_nanometres():
    bands, units = (400.0, 410.0, 420.0), "Nanometers"
    for given, given_units in (((0.401, 0.4149, 0.42), "Micrometers"),
                               ((0.401, 0.4149, 0.42), "microns"),
                               ((4.01e-4, 4.149e-4, 4.2e-4), "MM"), (bands, " nm ")):
        check_wavelengths(bands, given, "cube.hdr", units, given_units)
    check_wavelengths((0.4, 0.41, 0.42), bands, "cube.hdr", "Micrometers", units)
    with pytest.raises(InvalidInput, match=r"^cube.hdr: band 2 lies at wavelength 415.5 nm, "
                                           r"but at 410 nm in the scene"):
        check_wavelengths(bands, (0.4, 0.4155, 0.42), "cube.hdr", units, "Micrometers")
    # units that are no length, or not named on both sides: as written
    for given_units in ("Wavenumber", None):
        with pytest.raises(InvalidInput, match=r"band 1 lies at wavelength 0.4, but at 400 "
                                               r"in the scene"):
            check_wavelengths(bands, (0.4, 0.41, 0.42), "cube.hdr", units, given_units)


def test_a_band_listed_twice_does_not_make_the_spacing_zero():
    bands = (400.0, 400.0, 410.0)   # a band repeated: the spacing is 10 nm, not 0
    check_wavelengths(bands, (400.1, 399.9, 410.2), "cube.hdr")
    with pytest.raises(InvalidInput, match="band 2 lies at wavelength 406"):
        check_wavelengths(bands, (400.0, 406.0, 410.0), "cube.hdr")


def test_envi_header_named_after_its_data_file(tmp_path):
    cube = random_cube(np.float32)
    write_envi(tmp_path / "scene.img", cube, suffix="")   # scene.img and scene.img.hdr
    for given in ("scene.img.hdr", "scene.img"):
        np.testing.assert_array_equal(open_raster(tmp_path / given).read_all(), cube)


def test_envi_scene_with_a_classification_file_takes_its_class_names(tmp_path):
    cube = random_cube(np.uint16, (6, 5, 4))
    cube[0, 0, 1] = 0
    labels = np.random.default_rng(1).integers(0, 4, (6, 5))
    write_envi(tmp_path / "scene", cube, "bip", fields={"data ignore value": "0"})
    write_classification(tmp_path / "gt", labels, ["water", "trees", "road"])
    scene = load_scene(tmp_path / "scene.hdr", labels_path=tmp_path / "gt.hdr")
    assert scene.class_names == ["water", "trees", "road"]
    np.testing.assert_array_equal(scene.labels, labels)
    expected = cube.astype(np.float32)
    expected[cube == 0] = np.nan
    np.testing.assert_array_equal(scene.cube, expected)
    assert set(scene.raster.ignore_values) == {0} and scene.raster.format == "envi"
    named = read_label_map(tmp_path / "gt.hdr")
    assert named.class_names == ("water", "trees", "road")


# -- .npy ----------------------------------------------------------------------------------

@pytest.mark.parametrize("order", ["C", "F"])
def test_npy_cube_reads_a_window_at_a_time_in_either_order(tmp_path, order):
    cube = random_cube(np.float64, (6, 5, 4)).astype(">f8")
    np.save(tmp_path / "cube.npy", np.asarray(cube, order=order))
    raster = open_raster(tmp_path / "cube.npy")
    assert raster.shape == (6, 5, 4) and raster.info.format is None
    np.testing.assert_array_equal(raster.read_all(), cube.astype(np.float32))
    np.testing.assert_array_equal(raster.read(slice(2, 6), slice(1, 3)),
                                  cube[2:6, 1:3].astype(np.float32))


# -- GeoTIFF -------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.uint16, np.int16, np.float32])
def test_geotiff_scene_keeps_transform_crs_and_no_data(tmp_path, dtype):
    cube = random_cube(dtype, (6, 8, 3))
    cube[2, 3, 1] = 7
    labels = np.random.default_rng(2).integers(1, 4, (6, 8)).astype(np.uint8)
    labels[0, :2] = 255
    write_geotiff(tmp_path / "scene.tif", cube, transform=TRANSFORM, crs="EPSG:32633",
                  nodata=7)
    write_geotiff(tmp_path / "gt.tif", labels[..., None], nodata=255)
    scene = load_scene(tmp_path / "scene.tif", labels_path=tmp_path / "gt.tif")
    expected = cube.astype(np.float32)
    expected[cube == 7] = np.nan
    np.testing.assert_array_equal(scene.cube, expected)
    np.testing.assert_array_equal(scene.labels, np.where(labels == 255, 0, labels))
    assert scene.raster.format == "geotiff" and set(scene.raster.ignore_values) == {7}
    assert scene.raster.transform == tuple(TRANSFORM)[:6]
    assert rasterio.crs.CRS.from_wkt(scene.raster.crs) == rasterio.crs.CRS.from_epsg(32633)
    np.testing.assert_array_equal(open_raster(tmp_path / "scene.tif").read(
        slice(1, 5), slice(3, 8)), expected[1:5, 3:8])


def test_geotiff_band_scale_and_offset_apply_after_no_data(tmp_path):
    """GDAL's value = stored x scale + offset, as ENVI's reflectance scale factor divides;
    the no-data value is the stored one."""
    cube = np.full((4, 3, 2), 2500, np.int16)
    cube[1, 2] = -9999
    path = _rescaled(write_geotiff(tmp_path / "scene.tif", cube, nodata=-9999),
                     (0.0001, 0.001))
    with rasterio.open(path, "r+") as dataset:
        dataset.offsets = (0.0, 1.0)
    expected = np.stack([np.full((4, 3), 0.25, np.float32), np.full((4, 3), 3.5, np.float32)],
                        axis=2)
    expected[1, 2] = np.nan
    np.testing.assert_allclose(open_raster(path).read_all(), expected, rtol=1e-6)


def test_each_band_keeps_its_own_no_data_value(tmp_path):
    """A VRT of two bands whose no-data values differ (-1 and -9999): each band's own."""
    for band, nodata in ((1, -1.0), (2, -9999.0)):
        values = np.full((3, 3, 1), 0.5, np.float32)
        values[band, band] = nodata
        values[0, 0] = -9999.0 if band == 1 else -1.0   # the other band's: a value here
        write_geotiff(tmp_path / f"b{band}.tif", values, nodata=nodata)
    (tmp_path / "stack.vrt").write_text(
        '<VRTDataset rasterXSize="3" rasterYSize="3">' + "".join(
            f'<VRTRasterBand dataType="Float32" band="{band}"><NoDataValue>{nodata}'
            f'</NoDataValue><SimpleSource><SourceFilename relativeToVRT="1">b{band}.tif'
            f'</SourceFilename><SourceBand>1</SourceBand></SimpleSource></VRTRasterBand>'
            for band, nodata in ((1, -1), (2, -9999))) + "</VRTDataset>")
    raster = open_raster(tmp_path / "stack.vrt")
    assert raster.info.ignore_values == (-1.0, -9999.0)
    cube = raster.read_all()
    assert np.isnan(cube[1, 1, 0]) and np.isnan(cube[2, 2, 1])
    assert cube[0, 0].tolist() == [-9999.0, -1.0]
    assert np.isfinite(cube).sum() == 3 * 3 * 2 - 2
    assert experiment.nodata_summary(2, raster.info) == (
        "2 pixels hold NaN or infinite values or their band's data-ignore value (-9999, -1): "
        "masked as no-data (label 0)")
    nan = float("nan")   # a float raster's usual no-data, one NaN object a band: said once
    assert experiment.nodata_summary(1, RasterInfo(ignore_values=(nan, float("nan")))) == (
        "1 pixel holds NaN or infinite values: masked as no-data (label 0)")


def test_labels_on_another_grid_than_the_cube_are_refused(tmp_path):
    """Both files georeferenced and their CRS or transform differ: refused, naming what
    differs; a label file without georeference, or on the same grid, is taken."""
    cube = random_cube(np.uint16, (6, 8, 2))
    labels = np.ones((6, 8, 1), np.uint8)
    write_geotiff(tmp_path / "scene.tif", cube, transform=TRANSFORM, crs="EPSG:32633")
    write_geotiff(tmp_path / "plain.tif", labels)
    write_geotiff(tmp_path / "same.tif", labels, transform=TRANSFORM, crs="EPSG:32633")
    write_geotiff(tmp_path / "other.tif", labels, crs="EPSG:4326",
                  transform=rasterio.Affine(0.001, 0, 10, 0, -0.001, 50))
    for taken in ("plain.tif", "same.tif"):
        load_scene(tmp_path / "scene.tif", labels_path=tmp_path / taken)
    with pytest.raises(InvalidInput, match=(
            r"^labels file .*other.tif: lies on another grid than the cube .*scene.tif: "
            r"transform \(0.001, 0, 10, 0, -0.001, 50\) in the labels, \(30, 0, 500000, 0, "
            r"-30, 4000000\) in the cube; CRS EPSG:4326 in the labels, EPSG:32633 in the "
            r"cube; allowed: a label map on the cube's grid, or one without georeference$")):
        load_scene(tmp_path / "scene.tif", labels_path=tmp_path / "other.tif")
    # a split's set files too (--train_set, --test_set): the top rows to train, the
    # bottom ones to test, on the cube's grid, on none, or on another
    scene = load_scene(tmp_path / "scene.tif", labels_path=tmp_path / "plain.tif")
    top, bottom = labels.copy(), labels.copy()
    top[3:], bottom[:3] = 0, 0
    write_geotiff(tmp_path / "train.tif", top, transform=TRANSFORM, crs="EPSG:32633")
    write_geotiff(tmp_path / "test_plain.tif", bottom)
    write_geotiff(tmp_path / "test_other.tif", bottom, crs="EPSG:4326",
                  transform=rasterio.Affine(0.001, 0, 10, 0, -0.001, 50))
    split = split_from_label_maps(scene.labels, tmp_path / "train.tif",
                                  tmp_path / "test_plain.tif", scene.raster)
    assert (split.train.tolist(), split.test.tolist()) == (list(range(24)), list(range(24, 48)))
    with pytest.raises(InvalidInput, match=(
            r"^test_set .*test_other.tif: lies on another grid than the scene's cube: "
            r"transform \(0.001, 0, 10, 0, -0.001, 50\) in the labels")):
        split_from_label_maps(scene.labels, tmp_path / "train.tif", tmp_path / "test_other.tif",
                              scene.raster)

    write_envi(tmp_path / "cube", cube, fields={"map info": MAP_INFO})
    for name, map_info in (("written_otherwise", MAP_INFO.replace("30.0", "30")),
                           ("shifted", MAP_INFO.replace("500000.0", "500030.0"))):
        write_classification(tmp_path / name, labels[..., 0], ["a"])
        with open(tmp_path / f"{name}.hdr", "a", encoding="utf-8") as header:
            header.write(f"map info = {map_info}\n")
    load_scene(tmp_path / "cube.hdr", labels_path=tmp_path / "written_otherwise.hdr")
    with pytest.raises(InvalidInput, match=r"shifted.hdr: lies on another grid than the cube "
                                           r".*cube.hdr: map info \{UTM, 1, 1, 500030.0, "):
        load_scene(tmp_path / "cube.hdr", labels_path=tmp_path / "shifted.hdr")


# -- class maps on the map -----------------------------------------------------------------

def test_class_map_of_a_geotiff_scene_is_a_geotiff_on_its_map(tmp_path):
    write_geotiff(tmp_path / "scene.tif", random_cube(np.uint16, (5, 6, 2)),
                  transform=TRANSFORM, crs="EPSG:32633")
    class_map = np.random.default_rng(3).integers(0, 4, (5, 6)).astype(np.int32)
    colors = class_colors(3)
    written = write_class_map(tmp_path / "out", class_map, ["a", "b", "c"], colors,
                              open_raster(tmp_path / "scene.tif").info)
    assert written == ["class_map.tif"]
    with rasterio.open(tmp_path / "out" / "class_map.tif") as dataset:
        np.testing.assert_array_equal(dataset.read(1), class_map)
        assert dataset.transform == TRANSFORM and dataset.crs == rasterio.crs.CRS.from_epsg(32633)
        assert dataset.nodata == 0 and dataset.dtypes == ("uint8",)
        table = dataset.colormap(1)
    assert [table[k][:3] for k in range(4)] == [tuple(c) for c in colors.tolist()]


def test_class_map_of_a_geotiff_placed_by_ground_control_points_keeps_them(tmp_path):
    points = [rasterio.control.GroundControlPoint(row, col, 500000 + 2 * col,
                                                  4000000 - 2 * row, 0.0)
              for row, col in ((0, 0), (0, 6), (5, 0), (5, 6))]
    write_geotiff(tmp_path / "scene.tif", random_cube(np.uint16, (5, 6, 2)), gcps=points,
                  crs="EPSG:32633")
    info = open_raster(tmp_path / "scene.tif").info
    assert info.transform is None and len(info.gcps) == 4
    write_class_map(tmp_path / "out", np.ones((5, 6), np.int32), ["a"], class_colors(1), info)
    with rasterio.open(tmp_path / "out" / "class_map.tif") as dataset:
        written, crs = dataset.gcps
    assert crs == rasterio.crs.CRS.from_epsg(32633)
    assert [(p.row, p.col, p.x, p.y) for p in written] == \
        [(p.row, p.col, p.x, p.y) for p in points]


def test_class_map_of_an_envi_scene_is_an_envi_classification_on_its_map(tmp_path):
    projection = "{9, 6378137.0, 6356752.314245179, 23.0, -96.0, 0.0, 0.0, 29.5, 45.5, " \
                 "WGS-84, Albers Conical Equal Area, units=Meters}"
    write_envi(tmp_path / "scene", random_cube(np.float32, (5, 6, 2)),
               fields={"map info": MAP_INFO, "coordinate system string": "{PROJCS[\"x\"]}",
                       "projection info": projection})
    class_map = np.random.default_rng(4).integers(0, 4, (5, 6)).astype(np.int32)
    colors = class_colors(3)
    written = write_class_map(tmp_path / "out", class_map, ["a", "b, c", "d"], colors,
                              open_raster(tmp_path / "scene.hdr").info)
    assert written == ["class_map.hdr", "class_map.img"]
    image = spectral_envi.open(str(tmp_path / "out" / "class_map.hdr"))
    np.testing.assert_array_equal(image.open_memmap()[..., 0], class_map)
    meta = image.metadata
    assert meta["file type"] == "ENVI Classification" and meta["classes"] == "4"
    assert meta["class names"] == ["Unclassified", "a", "b; c", "d"]
    assert [int(v) for v in meta["class lookup"]] == colors.ravel().tolist()
    assert "{%s}" % ", ".join(meta["map info"]) == MAP_INFO
    assert "{%s}" % ", ".join(meta["projection info"]) == projection
    assert meta["coordinate system string"] == ['PROJCS["x"]']
    again = read_label_map(tmp_path / "out" / "class_map.hdr")   # hmp reads its own map
    np.testing.assert_array_equal(again.labels, class_map)
    assert again.class_names == ("a", "b; c", "d")


def test_a_scene_of_an_array_file_has_no_map_to_write(tmp_path):
    np.save(tmp_path / "cube.npy", np.ones((3, 4, 2), np.float32))
    assert write_class_map(tmp_path / "out", np.ones((3, 4), np.int32), ["a"], class_colors(1),
                           open_raster(tmp_path / "cube.npy").info) == []
    assert not (tmp_path / "out").exists()


# -- bad files -----------------------------------------------------------------------------

def _cut(path, size):
    path.write_bytes(path.read_bytes()[:size])
    return path


def _mat_gt(folder):
    scipy.io.savemat(folder / "gt.mat", {"gt": np.arange(200, dtype=np.uint8).reshape(10, 20)})
    return folder / "gt.mat"


def _envi(folder, **options):
    return write_envi(folder / "scene", random_cube(np.int16, (4, 5, 3)), **options)


def _tif(folder, dtype=np.uint16):
    return write_geotiff(folder / "scene.tif", random_cube(dtype, (40, 50, 3)))


def _rescaled(path, scales):
    """The GDAL raster ``path`` given the bands' ``scales``."""
    with rasterio.open(path, "r+") as dataset:
        dataset.scales = scales
    return path


def _cube_and(folder, labels_file):
    """A 5 x 7 .npy cube beside the label file ``labels_file`` makes: load_scene of both."""
    np.save(folder / "cube.npy", np.ones((5, 7, 2), np.float32))
    labels = labels_file(folder)
    return lambda: load_scene(folder / "cube.npy", labels_path=labels)


BAD_FILES = {   # name: (file made in a folder -> what reads it, the file named, what is wrong)
    "mat cut to 100 bytes": (lambda d: lambda: read_label_map(_cut(_mat_gt(d), 100)),
                             "gt.mat", "cannot be read as a .mat file (truncated"),
    "mat cut to its header": (lambda d: lambda: read_label_map(_cut(_mat_gt(d), 128)),
                              "gt.mat", "holds no array (truncated"),
    "empty mat": (lambda d: lambda: read_label_map(_cut(_mat_gt(d), 0)),
                  "gt.mat", "empty file (0 bytes)"),
    "npy cut short": (lambda d: (np.save(d / "c.npy", np.ones((9, 9, 9))),
                                 lambda: open_raster(_cut(d / "c.npy", 300)))[1],
                      "c.npy", "cannot be read as a .npy file (truncated"),
    "npy of no rows": (lambda d: (np.save(d / "c.npy", np.ones((0, 4, 3), np.uint16)),
                                  lambda: open_raster(d / "c.npy"))[1],
                       "c.npy", "the cube is empty, shape (0, 4, 3) [H, W, B]"),
    "npy of complex values": (lambda d: (np.save(d / "c.npy", np.ones((2, 2, 2), complex)),
                                         lambda: open_raster(d / "c.npy"))[1],
                              "c.npy", "values of type complex128 are not supported"),
    "envi data cut short": (lambda d: lambda: open_raster(_cut(_envi(d).with_suffix(".img"),
                                                               100)),
                            "scene.img", "holds 100 bytes, but its header scene.hdr "
                            "describes 120 (4 lines x 5 samples x 3 bands of int16); "
                            "the file is truncated"),
    "envi data longer than its header says": (
        lambda d: (_envi(d), d.joinpath("scene.img").open("ab").write(b"\0\0"),
                   lambda: open_raster(d / "scene.hdr"))[2],
        "scene.img", "holds 122 bytes, but its header scene.hdr describes 120"),
    "empty envi data": (lambda d: lambda: open_raster(_cut(_envi(d).with_suffix(".img"), 0)),
                        "scene.img", "holds 0 bytes"),
    "empty envi header": (lambda d: lambda: open_raster(_cut(_envi(d), 0)),
                          "scene.hdr", "empty file (0 bytes)"),
    "envi header cut inside a list": (
        lambda d: lambda: open_raster(_cut(_envi(d, fields={"wavelength": "{1, 2, 3}"}),
                                           -len(" 3}\n"))),   # ends in "{1, 2,"
        "scene.hdr", "cannot be parsed as an ENVI header"),
    "not an envi header": (lambda d: (d.joinpath("scene.hdr").write_text("samples = 3\n"),
                                      lambda: open_raster(d / "scene.hdr"))[1],
                           "scene.hdr", "not an ENVI header (its first line is not 'ENVI')"),
    "envi complex data": (lambda d: lambda: open_raster(_envi(d, data_type=6)),
                          "scene.hdr", "data type 6 (complex64) is not supported"),
    "envi unknown data type": (lambda d: lambda: open_raster(_envi(d, data_type=7)),
                               "scene.hdr", "data type 7 is not an ENVI data type"),
    "envi unknown interleave": (
        lambda d: (d.joinpath("scene.hdr").write_text(_envi(d).read_text().replace(
            "interleave = bsq", "interleave = bxq")), lambda: open_raster(d / "scene.hdr"))[1],
        "scene.hdr", "interleave 'bxq' is not known; allowed: bsq, bil, bip"),
    "envi wavelengths of other bands": (
        lambda d: lambda: open_raster(_envi(d, fields={"wavelength": "{1, 2}"})),
        "scene.hdr", "2 wavelengths for 3 bands"),
    "envi wavelength not finite": (
        lambda d: lambda: open_raster(_envi(d, fields={"wavelength": "{1, nan, 3}"})),
        "scene.hdr", "wavelength of band 2 is nan; allowed: finite numbers"),
    "envi bad band list of other bands": (
        lambda d: lambda: open_raster(_envi(d, fields={"bbl": "{1, 0}"})),
        "scene.hdr", "bbl = {1, 0}; allowed: 3 values (one a band) of 1 (a good band) or 0"),
    "envi bad band list of every band": (
        lambda d: lambda: open_raster(_envi(d, fields={"bbl": "{0, 0, 0}"})),
        "scene.hdr", "bbl marks every band bad (0); allowed: at least one 1"),
    "envi data file without header": (
        lambda d: (d.joinpath("scene.raw").write_bytes(b"\0" * 8),
                   lambda: open_raster(d / "scene.raw"))[1],
        "scene.raw", "no ENVI header (scene.hdr or scene.raw.hdr) beside it"),
    "empty tif": (lambda d: lambda: open_raster(_cut(_tif(d), 0)), "scene.tif",
                  "empty file (0 bytes)"),
    "tif cut to 100 bytes": (lambda d: lambda: open_raster(_cut(_tif(d), 100)), "scene.tif",
                             "cannot be read as a GDAL raster (truncated"),
    "tif cut in half": (lambda d: lambda: open_raster(
        _cut(_tif(d), _tif(d).stat().st_size // 2)), "scene.tif", "cannot read rows 39..39"),
    "tif of band scale 0": (
        lambda d: lambda: open_raster(_rescaled(_tif(d), (1, 0, 1))),
        "scene.tif", "band 2 has scale 0; allowed: a scale other than 0"),
    "tif of complex values": (lambda d: lambda: open_raster(_tif(d, np.complex64)),
                              "scene.tif", "values of type complex64 are not supported"),
    "labels of another shape": (
        lambda d: _cube_and(d, lambda d: write_geotiff(d / "gt.tif", np.ones((4, 7, 1),
                                                                            np.uint8))),
        "gt.tif", "the label map is 4 x 7 (rows x columns), but the cube"),
    "labels beyond the classes": (
        lambda d: _cube_and(d, lambda d: write_classification(
            d / "gt", np.full((5, 7), 3), ["a", "b"])),
        "gt.hdr", "holds label 3, but its header names 2 classes (1..2; 0 unclassified)"),
    "labels in two bands": (
        lambda d: _cube_and(d, lambda d: write_geotiff(d / "gt.tif", np.ones((5, 7, 2),
                                                                            np.uint8))),
        "gt.tif", "2 bands; a label map has one"),
    "labels of fractions": (
        lambda d: _cube_and(d, lambda d: write_geotiff(d / "gt.tif", np.full((5, 7, 1), 1.5,
                                                                           np.float32))),
        "gt.tif", "must hold whole numbers"),
    "unknown file type": (lambda d: (d.joinpath("scene.xyz").write_text("x"),
                                     lambda: open_raster(d / "scene.xyz"))[1],
                          "scene.xyz", "unsupported file type '.xyz'; allowed: .mat, .npy, "
                          ".hdr, .img"),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_a_bad_file_is_refused_in_one_line_naming_it(tmp_path, case):
    make, name, wrong = BAD_FILES[case]
    read = make(tmp_path)
    with pytest.raises(InvalidInput) as refused:
        read()
    message = str(refused.value)
    assert "\n" not in message and wrong in message, message
    assert str(tmp_path / name) in message, message


def test_a_cut_geotiff_leaves_no_gdal_log_lines_beside_its_refusal(tmp_path, caplog):
    """GDAL's errors and warnings, which rasterio logs (a program's absl log would print
    them), say nothing the refusal does not: its one line holds GDAL's reason."""
    tif = _tif(tmp_path)
    cut = _cut(tif, tif.stat().st_size // 2)
    caplog.set_level(logging.DEBUG)
    with pytest.raises(InvalidInput, match="cannot read rows 39..39"):
        open_raster(cut).read_all()
    assert [r.getMessage() for r in caplog.records if r.name.startswith("rasterio")] == []


def test_without_rasterio_a_geotiff_says_how_to_install_it(tmp_path, monkeypatch):
    write_geotiff(tmp_path / "scene.tif", random_cube(np.uint8))
    monkeypatch.setitem(sys.modules, "rasterio", None)   # import rasterio fails
    with pytest.raises(InvalidInput, match=r'^GeoTIFF and other GDAL rasters need rasterio, '
                                           r'which is not installed: '
                                           r'pip install rasterio \(in hmp\'s checkout: '
                                           r'pip install -e "\.\[formats\]"\)$'):
        open_raster(tmp_path / "scene.tif")


def test_an_envi_header_without_its_data_file_names_what_was_looked_for(tmp_path):
    _envi(tmp_path).with_suffix(".img").unlink()
    with pytest.raises(FileNotFoundError, match=r"scene.hdr: no data file beside it \(looked "
                                                r"for scene with no suffix or one of .img"):
        open_raster(tmp_path / "scene.hdr")


# -- hmp.train and hmp.predict on these files ----------------------------------------------

TRAIN = ["--model=cnn2d", "--width=4", "--patch_size=5", "--batch_size=32",
         "--train_fraction=0.5", "--epochs=1", "--notta", "--devices=/cpu:0"]
CLASS_NAMES = ["alpha", "beta", "gamma"]


@pytest.fixture(scope="module")
def cli(tmp_path_factory):
    """({name: Run} of hmp.train and hmp.predict runs, the folder): an ENVI scene (int16,
    BIL, big-endian, map info, one pixel of its data-ignore value) with an ENVI
    classification file, a GeoTIFF scene with a GeoTIFF label map (transform, CRS), each
    trained on and predicted; and bad files given to both programs."""
    folder = tmp_path_factory.mktemp("formats_cli")
    scene = synthetic_scene(height=48, width=40, n_classes=3, n_bands=12, seed=0,
                            field_size=10, region_smoothness=2)
    cube = np.round(scene.cube * 1000).astype(np.int16)
    cube[3, 4, 5] = -9999
    wavelengths = lambda first: "{%s}" % ", ".join(   # noqa: E731
        str(first + 10 * band) for band in range(12))
    bbl = "{%s}" % ", ".join(["1"] * 11 + ["0"])   # the last band bad: left out
    write_envi(folder / "scene", cube, "bil", 1, fields={
        "map info": MAP_INFO, "data ignore value": "-9999", "wavelength": wavelengths(400),
        "bbl": bbl})
    write_envi(folder / "other_bands", cube, fields={"wavelength": wavelengths(1400),
                                                      "bbl": bbl})
    write_classification(folder / "gt", scene.labels, CLASS_NAMES)
    georeference = {"transform": TRANSFORM, "crs": "EPSG:32633"}
    write_geotiff(folder / "scene.tif", scene.cube, **georeference)
    write_geotiff(folder / "gt.tif", scene.labels.astype(np.uint8)[..., None], **georeference)
    scipy.io.savemat(folder / "gt.mat", {"gt": scene.labels.astype(np.uint8)})
    _cut(folder / "gt.mat", 100)   # the label file cut to its first 100 bytes
    write_envi(folder / "short", cube[:, :, :3])
    _cut(folder / "short.img", 50)
    write_geotiff(folder / "small_gt.tif", scene.labels[:20, :, None].astype(np.uint8))
    write_classification(folder / "few_gt", scene.labels, CLASS_NAMES[:2])
    _cut(write_geotiff(folder / "cut.tif", scene.cube), 3000)
    envi, tif = ["--dataset=%s" % (folder / "scene.hdr"), "--labels=%s" % (folder / "gt.hdr")], \
        ["--dataset=%s" % (folder / "scene.tif"), "--labels=%s" % (folder / "gt.tif")]
    bad = {"truncated_mat": [envi[0], "--labels=%s" % (folder / "gt.mat")],
           "truncated_envi": ["--dataset=%s" % (folder / "short.hdr"), envi[1]],
           "labels_of_another_shape": [tif[0], "--labels=%s" % (folder / "small_gt.tif")],
           "labels_beyond_the_classes": [envi[0], "--labels=%s" % (folder / "few_gt.hdr")]}
    # the ENVI scene named relative to the folder it trains in, which hmp.predict is not;
    # its model is incidental to what its tests read (the files, the map, the folder):
    # spectral's graph is a third of cnn2d's (the GeoTIFF run's cnn2d reads each pixel's
    # neighbours, as the tiles' seams need)
    trainings = {"envi": ["--dataset=scene.hdr", "--labels=gt.hdr", "--model=spectral"],
                 "tif": tif, **bad}
    names = list(trainings)
    runs = dict(zip(names, run_batch("hmp.train", [
        {"args": [*TRAIN, *trainings[name], "--model_dir=%s" % (folder / name)],
         **({"cwd": str(folder)} if name == "envi" else {})} for name in names])))
    predictions = {"predict_envi": ["--model_dir=%s" % (folder / "envi")],
                   "predict_tif": ["--model_dir=%s" % (folder / "tif")],
                   "predict_tif_tiles": ["--model_dir=%s" % (folder / "tif"), "--memory_mb=1",
                                         "--out=%s" % (folder / "tiles")],
                   "predict_cut": ["--model_dir=%s" % (folder / "tif"),
                                   "--dataset=%s" % (folder / "cut.tif"),
                                   "--out=%s" % (folder / "cut_prediction")],
                   "predict_even_window": ["--model_dir=%s" % (folder / "tif"),
                                           "--smoothing=4",
                                           "--out=%s" % (folder / "cut_prediction")],
                   "predict_other_bands": ["--model_dir=%s" % (folder / "envi"),
                                           "--dataset=%s" % (folder / "other_bands.hdr"),
                                           "--out=%s" % (folder / "cut_prediction")]}
    runs.update(zip(predictions, run_batch("hmp.predict", [
        {"args": args} for args in predictions.values()])))
    return runs, folder


def test_envi_and_geotiff_scenes_train_and_their_class_maps_open_on_their_map(cli):
    """The ENVI run also from another folder than its training's, whose relative --dataset
    and --labels hmp.predict reads from there (results.json's working_dir)."""
    runs, folder = cli
    for name in ("envi", "tif", "predict_envi", "predict_tif"):
        assert runs[name].returncode == 0, runs[name].stderr[-2000:]
    results = json.loads((folder / "envi" / "results.json").read_text())
    assert list(results["test"]["per_class_accuracy"]) == CLASS_NAMES   # the file's names
    ignored = "1 pixel holds NaN or infinite values or the data-ignore value -9999: masked " \
              "as no-data (label 0)"
    assert ignored in runs["envi"].stdout and ignored in runs["predict_envi"].stdout
    assert "48x40 pixels, 11 bands (band 12 left out: the header's bad band list)" in runs[
        "envi"].stdout

    envi_out = folder / "envi" / "prediction"
    class_map = np.load(envi_out / "class_map.npy")
    assert class_map[3, 4] == 0 and (np.delete(class_map.ravel(), 3 * 40 + 4) > 0).all()
    image = spectral_envi.open(str(envi_out / "class_map.hdr"))
    np.testing.assert_array_equal(image.open_memmap()[..., 0], class_map)
    assert image.metadata["class names"] == ["Unclassified", *CLASS_NAMES]
    assert "{%s}" % ", ".join(image.metadata["map info"]) == MAP_INFO

    tif_out = folder / "tif" / "prediction"
    with rasterio.open(tif_out / "class_map.tif") as dataset:
        np.testing.assert_array_equal(dataset.read(1), np.load(tif_out / "class_map.npy"))
        assert dataset.transform == TRANSFORM and dataset.crs == rasterio.crs.CRS.from_epsg(32633)
    assert "probabilities.npy, class_map.npy, class_map.png, class_map.tif of 1920 pixels" \
        in runs["predict_tif"].stdout


def test_a_prediction_in_tiles_writes_what_the_whole_scene_at_once_does(cli):
    """--memory_mb=1: 4 tiles (their results smoothed, guided: the run's window is 7), their
    probabilities written a row of tiles at a time."""
    runs, folder = cli
    assert runs["predict_tif_tiles"].returncode == 0, runs["predict_tif_tiles"].stderr[-2000:]
    whole, tiled = folder / "tif" / "prediction", folder / "tiles"
    assert "scene.tif: 48x40 pixels in 1 tile of up to 48x40; " in runs["predict_tif"].stdout
    assert "scene.tif: 48x40 pixels in 4 tiles of up to 31x31; " in \
        runs["predict_tif_tiles"].stdout
    # 961 pixels a tile, fewer than a batch of 1024: slow, said; the whole scene's is not
    assert "\nnote: --memory_mb=1 gives tiles of 31x31 pixels, fewer than a batch " \
        "(--batch_size=1024)" in runs["predict_tif_tiles"].stdout
    assert "note:" not in runs["predict_tif"].stdout
    probabilities = np.load(tiled / "probabilities.npy")
    assert probabilities.shape == (48, 40, 3) and probabilities.dtype == np.float32
    np.testing.assert_allclose(probabilities, np.load(whole / "probabilities.npy"), atol=1e-6)
    for name in ("class_map.npy", "class_map.png", "class_map.tif"):
        assert (tiled / name).read_bytes() == (whole / name).read_bytes(), name


BAD_CLI = {
    "truncated_mat": ("gt.mat", "labels file {}: cannot be read as a .mat file (truncated or "
                                "not of this type?)"),
    "truncated_envi": ("short.img", "cube file {}: holds 50 bytes, but its header short.hdr "
                                    "describes 11520 (48 lines x 40 samples x 3 bands of "
                                    "int16); the file is truncated"),
    "labels_of_another_shape": ("small_gt.tif", "labels file {}: the label map is 20 x 40 "
                                                "(rows x columns), but the cube"),
    "labels_beyond_the_classes": ("few_gt.hdr", "labels file {}: holds label 3, but its "
                                                "header names 2 classes"),
    "predict_cut": ("cut.tif", "--dataset={0}: {0}: cannot"),
    "predict_even_window": ("tif", "--smoothing=4: give an odd number of pixels (1: no "
                                   "smoothing)"),
    "predict_other_bands": ("other_bands.hdr", "--dataset={}: the cube: band 1 lies at "
                                               "wavelength 1400, but at 400 in the scene the "
                                               "run was trained on (11 of 11 bands differ)"),
}


@pytest.mark.parametrize("name", sorted(BAD_CLI))
def test_a_bad_file_stops_the_programs_in_one_line_before_anything_is_written(cli, name):
    runs, folder = cli
    file_name, wrong = BAD_CLI[name]
    run = runs[name]
    assert run.returncode == 2, run.stderr[-2000:]
    lines = run.stderr.splitlines()
    program = "hmp.predict" if name.startswith("predict") else "hmp.train"
    assert len(lines) == 1 and lines[0].startswith(program + ": error: "), run.stderr[-2000:]
    assert wrong.format(folder / file_name) in lines[0], lines[0]
    assert not (folder / name).exists() and not (folder / "cut_prediction").exists()
