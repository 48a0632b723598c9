"""Spatial smoothing of a class-probability map: each pixel's probabilities replaced by
their mean over a square window around it (spectral-spatial post-processing).

Neighbouring pixels mostly belong to one field, so the mean of their probabilities
corrects a pixel that the network got wrong on its own. Only *valid* pixels count
(classified, with data; pixels outside the scene are left out, not mirrored), so a
pixel's smoothed probabilities depend on the classified pixels within the window
alone: the pixels within the window's radius of the ones to score
(:func:`neighbourhood`) are all a run must classify. The window is a recipe setting
(``hmp.train --smoothing``): a side in pixels (1: off), or chosen on the validation
pixels (:func:`choose_window`).
"""

import numpy as np
from scipy import ndimage

from hmp.errors import InvalidInput

# The windows --smoothing=auto chooses from: none, then squares of 3 to 11 pixels.
WINDOWS = (1, 3, 5, 7, 9, 11)
# hmp.train's --smoothing, and the window of auto without validation pixels to choose on
DEFAULT_WINDOW = 7


def check_window(window):
    """InvalidInput unless ``window`` is an odd number of pixels >= 1 (an even one would
    centre the square half a pixel off)."""
    if isinstance(window, bool) or not isinstance(window, (int, np.integer)) \
            or window < 1 or window % 2 == 0:
        raise InvalidInput("give an odd number of pixels (1: no smoothing)")


def smooth(probabilities, window, valid=None):
    """[H, W, K] float32 class probabilities, each valid pixel's the mean over the
    ``window`` x ``window`` square around it of the ``valid`` ([H, W] bool; default all)
    pixels' ``probabilities`` [H, W, K]; zeros for the pixels not valid. ``window`` 1
    returns the probabilities of the valid pixels as they are."""
    check_window(window)
    probabilities = np.asarray(probabilities, np.float32)
    weights = (np.ones(probabilities.shape[:2], np.float32) if valid is None
               else np.asarray(valid, np.float32))
    weighted = probabilities * weights[..., None]
    if window == 1:
        return weighted
    sums = ndimage.uniform_filter(weighted, (window, window, 1), mode="constant")
    counts = ndimage.uniform_filter(weights, window, mode="constant")[..., None]
    return np.divide(sums, counts, out=np.zeros_like(sums),
                     where=(weights[..., None] > 0) & (counts > 0.5 / window**2))


def neighbourhood(indices, image_shape, radius):
    """Sorted flat indices of every pixel of an ``image_shape`` image within ``radius``
    rows and columns of one of the pixels ``indices`` (flat)."""
    mask = np.zeros(image_shape, bool)
    mask.flat[np.asarray(indices, np.int64)] = True
    if radius > 0:
        mask = ndimage.binary_dilation(mask, np.ones((2 * radius + 1,) * 2, bool))
    return np.flatnonzero(mask)


def choose_window(probabilities, valid, indices, class_ids, windows=WINDOWS):
    """(the window of ``windows`` whose smoothed map classifies the pixels ``indices``
    (flat) as ``class_ids`` (0-based) most often, the share right with each): the
    smallest of equals. ``probabilities`` [H, W, K] and ``valid`` as :func:`smooth`'s;
    every pixel within the largest window's radius of ``indices`` must be classified."""
    accuracy = {}
    for window in windows:
        smoothed = smooth(probabilities, window, valid).reshape(-1, probabilities.shape[-1])
        accuracy[window] = float(np.mean(smoothed[indices].argmax(axis=1) == class_ids))
    return max(windows, key=lambda w: (accuracy[w], -w)), accuracy


def smooth_rows(blocks, window):
    """Yields (rows, probabilities, nodata) for each block of consecutive map rows that
    ``blocks`` yields top to bottom (``rows``: a slice of the map's rows, ``probabilities``
    [rows, W, K], ``nodata`` [rows, W] bool), the probabilities smoothed as :func:`smooth`
    smooths the whole map (the valid pixels: those with data): a block's rows as soon as
    the rows within the window's radius below them have come, so it may yield blocks of
    other sizes."""
    radius = window // 2
    above = None   # (probabilities, valid) of up to ``radius`` rows before the pending ones
    pending = None   # (first row, probabilities, nodata) not yielded yet
    for rows, probabilities, nodata in blocks:
        if pending is None:
            pending = (rows.start, probabilities, nodata)
        else:
            pending = (pending[0], np.concatenate([pending[1], probabilities]),
                       np.concatenate([pending[2], nodata]))
        ready = len(pending[1]) - radius   # rows whose window lies within what has come
        if ready > 0:
            above, out = _yield_rows(above, pending, ready, window, radius)
            yield out
            pending = (pending[0] + ready, pending[1][ready:], pending[2][ready:])
    if pending is not None and len(pending[1]):
        yield _yield_rows(above, pending, len(pending[1]), window, radius)[1]


def _yield_rows(above, pending, ready, window, radius):
    """(the ``radius`` rows before the rest of ``pending``, the first ``ready`` pending rows
    smoothed with ``above`` over them)."""
    first, probabilities, nodata = pending
    if above is None:
        above = (probabilities[:0], np.zeros((0, probabilities.shape[1]), bool))
    stack = np.concatenate([above[0], probabilities])
    valid = np.concatenate([above[1], ~nodata])
    smoothed = smooth(stack, window, valid)[len(above[0]):len(above[0]) + ready]
    last = len(above[0]) + ready
    return ((stack[max(0, last - radius):last], valid[max(0, last - radius):last]),
            (slice(first, first + ready), smoothed, nodata[:ready]))
