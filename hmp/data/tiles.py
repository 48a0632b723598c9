"""A scene cut into tiles whose patches are exactly the whole scene's.

``hmp.predict`` classifies a scene of any size a tile at a time: each tile is
read from its file with the ``margin`` (the patch radius) of pixels around it,
preprocessed, and padded by reflection only where the scene itself ends. Every
patch of a tile's pixel is then the one the whole scene's padded cube
(``hmp.data.PatchExtractor``) gives, because preprocessing works pixel by pixel
and a tile's window holds at least ``margin + 1`` rows and columns towards any
side where the scene ends (so one reflection suffices there, as for the scene).

Memory: a tile's window and the row of tiles' results it belongs to, so the
tile shape follows from a memory budget (:func:`tile_shape`).
"""

import dataclasses

from hmp.data.preprocess import pad_cube
from hmp.errors import InvalidInput, whole_number


@dataclasses.dataclass(frozen=True)
class Tile:
    """The scene's pixels ``[rows, cols]`` (two slices) that one tile classifies."""

    rows: slice
    cols: slice

    @property
    def shape(self):
        return (self.rows.stop - self.rows.start, self.cols.stop - self.cols.start)


def tile_rows(image_shape, shape):
    """The tiles of ``shape`` (rows, columns; the last ones of a row or column smaller)
    covering an ``image_shape`` scene, as rows of tiles: a list (top to bottom) of
    lists (left to right)."""
    height, width = image_shape
    rows, cols = (whole_number(n, "tile size") for n in shape)
    return [[Tile(slice(top, min(top + rows, height)), slice(left, min(left + cols, width)))
             for left in range(0, width, cols)]
            for top in range(0, height, rows)]


def padded_tile(raster, tile, margin, prepare):
    """The model input around ``tile`` padded by ``margin`` pixels on every side
    ([rows + 2 margin, cols + 2 margin, bands]) and the tile's no-data mask [rows, cols].

    ``raster``: a :class:`hmp.data.raster.Raster` of the scene; ``prepare(window)``
    turns a float32 window into (model input, no-data mask), pixel by pixel.
    """
    height, width = raster.shape[:2]
    top, left = max(tile.rows.start - margin, 0), max(tile.cols.start - margin, 0)
    bottom, right = min(tile.rows.stop + margin, height), min(tile.cols.stop + margin, width)
    cube, nodata = prepare(raster.read(slice(top, bottom), slice(left, right)))
    sides = ((margin - (tile.rows.start - top), margin - (bottom - tile.rows.stop)),
             (margin - (tile.cols.start - left), margin - (right - tile.cols.stop)))
    inner = nodata[tile.rows.start - top:tile.rows.stop - top,
                   tile.cols.start - left:tile.cols.stop - left]
    return pad_cube(cube, sides), inner


def tile_shape(budget_bytes, image_shape, margin, bytes_per_pixel, bytes_per_result,
               held_rows=0):
    """The largest square-ish tile (rows, columns) whose padded window costs at most
    ``budget_bytes`` together with the results of its row of tiles.

    ``bytes_per_pixel``: what a pixel of a padded window costs while it is read,
    preprocessed and classified; ``bytes_per_result``: what a pixel's results cost
    until its row of tiles is written (class probabilities, no-data flag, the
    smoothing's copies); ``held_rows``: rows of results held beside a row of tiles'
    own (the smoothing's context above and below it, within the scene).

    Raises:
      InvalidInput: not even a tile of one row fits the budget (the message says
        how much it needs).
    """
    height, width = image_shape

    def cost(side):
        rows, cols = min(side, height), min(side, width)
        return (rows + 2 * margin) * (cols + 2 * margin) * bytes_per_pixel \
            + min(rows + held_rows, height) * width * bytes_per_result

    if cost(1) > budget_bytes:
        raise InvalidInput(f"{budget_bytes / 2**20:.0f} MB is too little for one tile of "
                           f"this scene: a 1-pixel tile needs {cost(1) / 2**20:.1f} MB")
    low, high = 1, max(height, width)
    while low < high:   # the largest side that fits
        middle = (low + high + 1) // 2
        low, high = (middle, high) if cost(middle) <= budget_bytes else (low, middle - 1)
    return min(low, height), min(low, width)
