"""How much of a split's test set a patch classifier has already seen in training.

A patch model sees the whole ``patch_size`` x ``patch_size`` window around a
pixel. When a test pixel's window holds a training pixel, the training patch
of that pixel covers the test pixel (and much of its window), so the model has
been trained on what it is tested on. The *leakage* of a split is the share of
its test pixels for which this happens: about 1 for a random 10% split with
9 x 9 patches, 0 for :func:`hmp.data.disjoint_split` with the same patch size.

Only pixels inside the image count. Reflect padding adds no others: a pixel
mirrored into a border window comes from inside that same window.
"""

import numpy as np

from hmp.data.patches import check_patch_size


def window_counts(mask, patch_size):
    """Number of true pixels of ``mask`` [H, W] in each pixel's patch window (int [H, W]).

    A summed-area table: each count is four lookups, whatever the patch size.
    """
    check_patch_size(patch_size)
    mask = np.asarray(mask, dtype=bool)
    radius = patch_size // 2
    height, width = mask.shape
    table = np.zeros((height + 1, width + 1), np.int64)
    table[1:, 1:] = mask.cumsum(axis=0).cumsum(axis=1)
    top = np.clip(np.arange(height) - radius, 0, height)
    bottom = np.clip(np.arange(height) + radius + 1, 0, height)
    left = np.clip(np.arange(width) - radius, 0, width)
    right = np.clip(np.arange(width) + radius + 1, 0, width)
    return (table[bottom[:, None], right[None, :]] - table[top[:, None], right[None, :]]
            - table[bottom[:, None], left[None, :]] + table[top[:, None], left[None, :]])


def split_leakage(split, patch_size):
    """Share of ``split``'s test pixels whose ``patch_size`` window holds a training pixel.

    0.0 for a split without test pixels.
    """
    if len(split.test) == 0:
        return 0.0
    counts = window_counts(split.train_mask, patch_size)
    return float(np.mean(counts.ravel()[split.test] > 0))
