"""A scene classified in tiles (issue 32): every tile's padded window is the whole scene's,
the tiles fit their memory budget, and the class probabilities of a tiled prediction
equal those of the whole scene in one graph (``inference.classify``) on conftest's tiny run.

References: numpy's reflect padding of the whole cube, the budget's own arithmetic, and
the whole-scene graph.
"""

import numpy as np
import pytest

import harness
from hmp.data import ArrayRaster, Scene
from hmp.data.tiles import Tile, padded_tile, tile_rows, tile_shape
from hmp.errors import InvalidInput
from hmp.graph.scene_input import check_cube_fits
from hmp.run import experiment, inference
from models import get_model


def _doubled(window):
    """A pixel-by-pixel 'preprocessing' (x 2), its no-data the pixels holding NaN."""
    nodata = np.isnan(window).any(axis=2)
    return np.where(nodata[..., None], 0.0, 2 * window).astype(np.float32), nodata


@pytest.mark.parametrize("margin", [0, 1, 2, 4, 6])
@pytest.mark.parametrize("shape", [(1, 1), (2, 3), (4, 4), (5, 7), (9, 7), (20, 20)])
def test_every_tile_pads_as_the_whole_scene(shape, margin):
    cube = np.random.default_rng(0).normal(size=(9, 7, 3)).astype(np.float32)
    cube[4, 2, 1] = np.nan
    prepared, nodata = _doubled(cube)
    whole = np.pad(prepared, ((margin, margin), (margin, margin), (0, 0)), mode="reflect")
    rows = tile_rows((9, 7), shape)
    tiles = [tile for row in rows for tile in row]
    covered = np.zeros((9, 7), int)
    for tile in tiles:
        covered[tile.rows, tile.cols] += 1
        padded, tile_nodata = padded_tile(ArrayRaster(cube), tile, margin, _doubled)
        h, w = tile.shape
        assert h <= shape[0] and w <= shape[1]
        np.testing.assert_array_equal(padded, whole[tile.rows.start:tile.rows.stop + 2 * margin,
                                                    tile.cols.start:tile.cols.stop + 2 * margin])
        np.testing.assert_array_equal(tile_nodata, nodata[tile.rows, tile.cols])
    assert (covered == 1).all()   # every pixel in exactly one tile
    assert all(len({(t.rows.start, t.rows.stop) for t in row}) == 1 for row in rows)


def test_tiles_are_the_largest_that_fit_the_budget():
    per_pixel, per_result, margin, image = 100, 9, 2, (300, 200)

    def cost(rows, cols):
        return (rows + 2 * margin) * (cols + 2 * margin) * per_pixel + rows * 200 * per_result

    for budget in (10_000, 1_000_000, 3_000_000, 10**9):
        # by brute force: the largest square side that fits, clipped to the image
        side = max(side for side in range(1, 301)
                   if cost(min(side, 300), min(side, 200)) <= budget)
        assert tile_shape(budget, image, margin, per_pixel, per_result) == (
            min(side, 300), min(side, 200)), budget
    assert tile_shape(10**9, image, margin, per_pixel, per_result) == image
    with pytest.raises(InvalidInput, match=r"^0 MB is too little for one tile of this scene: "
                                           r"a 1-pixel tile needs 0.0 MB$"):
        tile_shape(1000, image, margin, per_pixel, per_result)


def test_a_cube_that_fits_no_device_is_refused_naming_the_memory():
    check_cube_fits((100, 50), 5, 10, ["/cpu:0", "/gpu:0"], [None, 104 * 54 * 10 * 4])
    with pytest.raises(InvalidInput) as refused:
        check_cube_fits((2000, 2000), 9, 200, ["/cpu:0", "/gpu:0", "/gpu:1"],
                        [64e9, 2e9, None])
    assert str(refused.value) == (
        "the scene's padded cube (2008 x 2008 pixels x 200 bands, float32) needs 3.23 GB on "
        "every device, more than /gpu:0 has (2 GB); allowed: fewer bands (--pca), a smaller "
        "scene, or devices with more memory")


@pytest.fixture(scope="module")
def trained(tiny_run):
    process, model_dir = tiny_run
    assert process.returncode == 0, process.stderr[-2000:]
    run = inference.TrainedRun.open(str(model_dir), get_model)
    scene = experiment.load_scene(run.data_config())
    return run, scene.cube[:23, :19].copy()   # raw bands, as a file holds them


@pytest.mark.parametrize("devices", [["/cpu:0"], ["/cpu:0", "/cpu:1"]])
def test_tiled_prediction_equals_the_whole_scenes(trained, devices):
    run, cube = trained
    cube[5, 6, 3] = np.nan   # a no-data pixel inside the tiles' overlap
    prepared = run.prepare_scene(Scene("crop", cube, np.zeros((23, 19))))[0]
    whole = inference.classify(run, prepared, devices, 50, harness.session_config())
    rows_of_tiles = tile_rows((23, 19), (7, 5))   # 4 x 4 tiles, the last ones smaller
    with inference.Classifier(run, devices, 50, (7, 5), harness.session_config()) as model:
        strips = list(inference.classify_tiles(run, ArrayRaster(cube), rows_of_tiles, model,
                                               guide=run.guide))
    assert [rows for rows, _, _, _ in strips] == [slice(0, 7), slice(7, 14), slice(14, 21),
                                                  slice(21, 23)]
    tiled = np.concatenate([probabilities for _, probabilities, _, _ in strips])
    nodata = np.concatenate([mask for _, _, mask, _ in strips])
    # the smoothing's guide (the run smooths guided), tile by tile as of the whole crop
    np.testing.assert_allclose(np.concatenate([guide for *_, guide in strips]),
                               run.guide.image(prepared), rtol=0, atol=1e-6)
    assert tiled.shape == whole.shape == (23, 19, 10)
    np.testing.assert_array_equal(np.argwhere(nodata), [[5, 6]])
    np.testing.assert_allclose(tiled, whole, rtol=0, atol=1e-6)
    np.testing.assert_array_equal(tiled.argmax(axis=2), whole.argmax(axis=2))


def test_the_memory_budget_sets_the_tiles(trained):
    run, cube = trained
    raster = ArrayRaster(cube)
    one = inference.tiling(run, raster, 2**30)
    assert [[(t.rows, t.cols) for t in row] for row in one] == [[(slice(0, 23), slice(0, 19))]]
    rows_of_tiles = inference.tiling(run, raster, 200_000)
    rows, cols = rows_of_tiles[0][0].shape
    assert 1 < rows < 23 and cols < 19 and len(rows_of_tiles) == -(-23 // rows)
    # a padded window's pixel: its 100 bands of the file and 100 of the model's input (the
    # run keeps all bands); a result's pixel: its 10 classes, no-data flag and class
    per_pixel = (inference.WINDOW_BYTES_PER_INPUT_BAND * 100
                 + inference.WINDOW_BYTES_PER_MODEL_BAND * 100)
    per_result = inference.RESULT_BYTES_PER_CLASS * 10 + inference.RESULT_BYTES_PER_PIXEL
    assert (rows + 4) * (cols + 4) * per_pixel + rows * 19 * per_result <= 200_000
    assert rows_of_tiles[0][0] == Tile(slice(0, rows), slice(0, cols))
    # smoothed as the run (guided, window 5): per class the filter's copies, and the
    # context's 4 rows above and below a row of tiles held with it
    smoothed = inference.tiling(run, raster, 400_000, window=5, guide=run.guide)
    rows_5, cols_5 = smoothed[0][0].shape
    assert 1 < rows_5 < 23 and cols_5 < 19
    guided = per_result + inference.GUIDED_SMOOTHING_BYTES_PER_CLASS * 10
    assert ((rows_5 + 4) * (cols_5 + 4) * per_pixel + (rows_5 + 8) * 19 * guided) <= 400_000
    assert ((rows_5 + 5) * (cols_5 + 5) * per_pixel   # the largest that fits
            + (rows_5 + 9) * 19 * guided) > 400_000
