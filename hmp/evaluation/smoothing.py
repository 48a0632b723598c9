"""Spatial smoothing of a class-probability map (spectral-spatial post-processing):
each pixel's probabilities replaced by their mean over a square window around it, or,
following the scene's edges, by a guided filter of them.

Neighbouring pixels mostly belong to one field, so the mean of their probabilities
corrects a pixel that the network got wrong on its own. Only *valid* pixels count
(classified, with data; pixels outside the scene are left out, not mirrored).

The guided filter (He, Sun and Tang, "Guided image filtering", 2013), as Kang, Li
and Benediktsson filter HSI probability maps ("Spectral-spatial hyperspectral image
classification with edge-preserving filtering", 2014): within each window the
probabilities are fitted as an affine function of a *guide* image, the scene's first
principal component (``hmp.data.Guide``), and each pixel takes the mean of the fits of the
windows over it. Where the guide is flat the result is the window's mean; across an
edge of the guide (a field's border) the fit follows the edge, so a small field is not
swallowed by its neighbours. A pixel's result depends on the pixels within twice the
radius (:func:`context`): those are what a run must classify around the pixels it
scores (:func:`neighbourhood`). The window is a recipe setting (``hmp.train
--smoothing``): a side in pixels (1: off), or chosen on the validation pixels
(:func:`choose_window`); ``--smoothing_guide`` chooses the guided filter (default) or
the plain mean.
"""

import numpy as np
from scipy import ndimage

from hmp.errors import InvalidInput

# The windows --smoothing=auto chooses from: none, then squares of 3 to 11 pixels.
WINDOWS = (1, 3, 5, 7, 9, 11)
# hmp.train's --smoothing, and the window of auto without validation pixels to choose on
DEFAULT_WINDOW = 7
# The guided filter's regularisation, added to each window's variance of the guide
# (whose training pixels span 0 to 1): a window whose guide varies by much less than
# its square root (about 0.03) is taken as flat; see docs/benchmarks.md, "Smoothing
# the class probabilities": 1e-4 and 1e-3 follow the guide's edges alike.
GUIDE_EPSILON = 1e-3


def context(window, guided):
    """Pixels on each side of a pixel that its smoothed probabilities depend on: the
    window's radius for the mean, twice it for the guided filter (the fits of the
    windows over the pixel use their own windows)."""
    return window // 2 * (2 if guided else 1)


def check_window(window):
    """InvalidInput unless ``window`` is an odd number of pixels >= 1 (an even one would
    centre the square half a pixel off)."""
    if isinstance(window, bool) or not isinstance(window, (int, np.integer)) \
            or window < 1 or window % 2 == 0:
        raise InvalidInput("give an odd number of pixels (1: no smoothing)")


def smooth(probabilities, window, valid=None, guide=None):
    """[H, W, K] float32 class probabilities, each valid pixel's the mean over the
    ``window`` x ``window`` square around it of the ``valid`` ([H, W] bool; default all)
    pixels' ``probabilities`` [H, W, K], or with a ``guide`` image [H, W] (from
    ``hmp.data.Guide.image``) their guided filter, clipped at 0 and summing to 1; zeros
    for the pixels not valid. ``window`` 1 returns the probabilities of the valid pixels
    as they are."""
    check_window(window)
    probabilities = np.asarray(probabilities, np.float32)
    weights = (np.ones(probabilities.shape[:2], np.float32) if valid is None
               else np.asarray(valid, np.float32))
    if window == 1:
        return probabilities * weights[..., None]
    mean = _window_mean(weights, window)
    if guide is None:
        return mean(probabilities) * weights[..., None]
    guide = np.asarray(guide, np.float64)   # its moments in float64: one value a pixel
    guide_mean = mean(guide)
    guide_variance = np.maximum(mean(guide * guide) - guide_mean**2, 0.0)
    guide = guide.astype(np.float32)[..., None]
    guide_mean = guide_mean.astype(np.float32)[..., None]
    probability_mean = mean(probabilities)
    covariance = mean(guide * probabilities) - guide_mean * probability_mean
    slope = covariance / (guide_variance + GUIDE_EPSILON).astype(np.float32)[..., None]
    intercept = probability_mean - slope * guide_mean
    # each pixel: the mean over the windows around valid pixels that cover it of their fits
    filtered = np.maximum(mean(slope) * guide + mean(intercept), 0.0) * weights[..., None]
    # a fit may overshoot 0 or 1 across an edge: clipped at 0, divided by the sum (which
    # keeps each pixel's order of the classes, its largest value being at least 1 / K)
    totals = filtered.sum(axis=2, keepdims=True)
    return np.divide(filtered, totals, out=filtered, where=totals > 0)


def _window_mean(weights, window):
    """A function of an [H, W] or [H, W, K] map: each pixel's mean of the map over the
    pixels of its ``window`` x ``window`` square with ``weights`` [H, W] 1 (0 where the
    square holds none)."""
    counts = ndimage.uniform_filter(weights, window, mode="constant")
    covered = counts > 0.5 / window**2

    def mean(values):
        extra = (1,) * (values.ndim - 2)
        weighted = values * weights.reshape(weights.shape + extra)
        sums = ndimage.uniform_filter(weighted, (window, window) + extra, mode="constant")
        return np.divide(sums, counts.reshape(counts.shape + extra),
                         out=np.zeros_like(sums), where=covered.reshape(covered.shape + extra))
    return mean


def neighbourhood(indices, image_shape, radius):
    """Sorted flat indices of every pixel of an ``image_shape`` image within ``radius``
    rows and columns of one of the pixels ``indices`` (flat)."""
    mask = np.zeros(image_shape, bool)
    mask.flat[np.asarray(indices, np.int64)] = True
    if radius > 0:
        mask = ndimage.binary_dilation(mask, np.ones((2 * radius + 1,) * 2, bool))
    return np.flatnonzero(mask)


def apart_from(valid, trained):
    """``valid`` ([H, W] bool) without the pixels ``trained`` (flat indices): what a scored
    pixel's smoothing may read. A network fits its training pixels, so their outputs are
    their labels: a test or validation pixel smoothed with them would be scored partly on
    those labels (on a disjoint split a test pixel lies beyond a patch of every training
    pixel, but may lie within the smoothing's reach, :func:`context`)."""
    apart = np.array(valid, bool)
    apart.flat[np.asarray(trained, np.int64)] = False
    return apart


def choose_window(probabilities, valid, indices, class_ids, windows=WINDOWS, guide=None):
    """(the window of ``windows`` whose smoothed map classifies the pixels ``indices``
    (flat) as ``class_ids`` (0-based) most often, the share right with each): the
    smallest of equals. ``probabilities`` [H, W, K], ``valid`` and ``guide`` as
    :func:`smooth`'s; every pixel within the largest window's :func:`context` of
    ``indices`` must be classified."""
    accuracy = {}
    for window in windows:
        smoothed = smooth(probabilities, window, valid, guide).reshape(
            -1, probabilities.shape[-1])
        accuracy[window] = float(np.mean(smoothed[indices].argmax(axis=1) == class_ids))
    return max(windows, key=lambda w: (accuracy[w], -w)), accuracy


def smooth_rows(blocks, window):
    """Yields (rows, probabilities, nodata) for each block of consecutive map rows that
    ``blocks`` yields top to bottom as (``rows``: a slice of the map's rows,
    ``probabilities`` [rows, W, K], ``nodata`` [rows, W] bool, ``guide`` [rows, W] or
    None), the probabilities smoothed as :func:`smooth` smooths the whole map (the valid
    pixels: those with data; guided when the blocks bring a guide): a block's rows as
    soon as the rows within the :func:`context` below them have come, so it may yield
    blocks of other sizes."""
    margin = None   # the context: known with the first block (guided or not)
    above = None   # (probabilities, valid, guide) of up to ``margin`` rows before the pending
    pending = None   # (first row, probabilities, nodata, guide) not yielded yet
    for rows, probabilities, nodata, guide in blocks:
        if pending is None:
            margin = context(window, guide is not None)
            pending = (rows.start, probabilities, nodata, guide)
        else:
            pending = (pending[0], *(None if part is None else np.concatenate([old, part])
                                     for old, part in zip(pending[1:],
                                                          (probabilities, nodata, guide))))
        ready = len(pending[1]) - margin   # rows whose context lies within what has come
        if ready > 0:
            above, out = _yield_rows(above, pending, ready, window, margin)
            yield out
            pending = (pending[0] + ready, *(None if part is None else part[ready:]
                                             for part in pending[1:]))
    if pending is not None and len(pending[1]):
        yield _yield_rows(above, pending, len(pending[1]), window, margin)[1]


def _yield_rows(above, pending, ready, window, margin):
    """(the ``margin`` rows before the rest of ``pending``, the first ``ready`` pending
    rows smoothed with ``above`` over them)."""
    first, probabilities, nodata, guide = pending
    if above is None:
        above = (probabilities[:0], np.zeros((0, probabilities.shape[1]), bool),
                 None if guide is None else guide[:0])
    stack = np.concatenate([above[0], probabilities])
    valid = np.concatenate([above[1], ~nodata])
    guides = None if guide is None else np.concatenate([above[2], guide])
    smoothed = smooth(stack, window, valid, guides)[len(above[0]):len(above[0]) + ready]
    kept = slice(max(0, len(above[0]) + ready - margin), len(above[0]) + ready)
    return ((stack[kept], valid[kept], None if guides is None else guides[kept]),
            (slice(first, first + ready), smoothed, nodata[:ready]))
