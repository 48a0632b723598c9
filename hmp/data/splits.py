"""Train/test splits of the labelled pixels, stored as flat pixel indices.

A pixel index is ``row * W + column``. Two kinds of split:

* :func:`stratified_split`: a seeded random share (or count) of every class;
* :func:`disjoint_split`: training pixels taken as a stripe at one end of
  every class's extent, and every labelled pixel within ``patch_size // 2``
  pixels (Chebyshev distance) of a training pixel dropped from the test set.
  No test pixel then lies inside any training patch, so patch-based models
  cannot score well merely by having seen the test pixels during training.

and two ways to hold a validation share out of the training pixels:
:func:`validation_split` (a seeded random share of every class: it mirrors the
random split) and :func:`spatial_validation_split` (a block at one end of every
class's training pixels, the training pixels within the patch radius of it
dropped: it mirrors the disjoint split).

Splits are saved and loaded as ``.npz`` so that runs can share them.
"""

from dataclasses import dataclass

import numpy as np
from scipy import ndimage

from hmp.data.patches import check_patch_size
from hmp.data.scene import as_label_map
from hmp.errors import InvalidInput, whole_number
from hmp.files import atomic_path, read_npz
from hmp.formatting import counted


@dataclass(frozen=True)
class Split:
    """Flat indices of training and test pixels of an image of ``image_shape``."""

    train: np.ndarray
    test: np.ndarray
    image_shape: tuple
    description: str = ""

    @property
    def train_mask(self):
        """Boolean [H, W] mask of the training pixels."""
        return _mask(self.train, self.image_shape)

    @property
    def test_mask(self):
        """Boolean [H, W] mask of the test pixels."""
        return _mask(self.test, self.image_shape)


def stratified_split(labels, *, train_fraction=None, train_per_class=None, seed=0):
    """Draws, from every class, a random share or a fixed count of training pixels.

    Exactly one of ``train_fraction`` (in (0, 1); each class keeps at least one
    training and one test pixel) and ``train_per_class`` (a positive count) must
    be given. All other labelled pixels form the test set.

    Raises:
      ValueError: bad fraction or count, or a class with too few pixels.
    """
    labels = as_label_map(labels)
    if (train_fraction is None) == (train_per_class is None):
        raise InvalidInput("give exactly one of train_fraction and train_per_class")
    if train_fraction is not None:
        check_train_fraction(train_fraction)
        describe = f"stratified train_fraction={train_fraction} seed={seed}"
    else:
        whole_number(train_per_class, "train_per_class")
        describe = f"stratified train_per_class={train_per_class} seed={seed}"
    rng = np.random.default_rng(seed)
    train = []
    for label, pixels in _pixels_by_class(labels):
        if train_fraction is not None:
            _require_pixels(labels, label, len(pixels), 2, f"train_fraction={train_fraction}")
            count = min(max(int(round(train_fraction * len(pixels))), 1), len(pixels) - 1)
        else:
            _require_pixels(labels, label, len(pixels), train_per_class + 1,
                            f"train_per_class={train_per_class}")
            count = int(train_per_class)
        train.append(rng.permutation(pixels)[:count])
    return _split(labels, np.concatenate(train), describe)


def disjoint_split(labels, *, train_fraction, patch_size, seed=0):
    """A spatially disjoint split: no test pixel lies inside any training patch.

    For each class, its pixels are ordered along the longer side of their
    bounding box, from a seeded random end, and the first ``train_fraction``
    of them are the training pixels. Labelled pixels closer
    than ``patch_size // 2 + 1`` pixels (Chebyshev distance) to any training
    pixel are left out of the test set: that guard band is what keeps test
    pixels out of all training patches.

    Raises:
      ValueError: bad fraction or patch size, or a class left without test pixels.
    """
    labels = as_label_map(labels)
    check_train_fraction(train_fraction)
    check_patch_size(patch_size)
    rng = np.random.default_rng(seed)
    width = labels.shape[1]
    train = []
    for label, pixels in _pixels_by_class(labels):
        _require_pixels(labels, label, len(pixels), 2, f"train_fraction={train_fraction}")
        rows, cols = np.divmod(pixels, width)
        along, across = (rows, cols) if np.ptp(rows) >= np.ptp(cols) else (cols, rows)
        order = np.lexsort((across, along * rng.choice([-1, 1])))
        count = min(max(int(round(train_fraction * len(pixels))), 1), len(pixels) - 1)
        train.append(pixels[order[:count]])
    train = np.concatenate(train)
    radius = patch_size // 2
    split = _split(labels, train, f"disjoint train_fraction={train_fraction} "
                                  f"patch_size={patch_size} seed={seed}",
                   excluded=np.flatnonzero(_guard_band(train, labels.shape, radius)))
    present = set(np.unique(labels[labels > 0]).tolist())
    starved = sorted(present - set(labels.flat[split.test].tolist()))
    if starved:
        raise InvalidInput(
            f"classes {starved} have no test pixels outside the {radius}-pixel guard band "
            f"around training pixels (patch_size={patch_size}, train_fraction={train_fraction}); "
            f"use a smaller train_fraction or patch_size")
    return split


def validation_split(labels, train, fraction, seed=0):
    """Carves a stratified validation share out of the training pixels ``train``.

    From every class's training pixels a seeded random ``fraction`` (rounded,
    but always leaving one for training; none from a class with one) goes to
    validation. Returns ``(train, validation)``: sorted flat indices that
    together are ``train``.
    """
    _check_validation_fraction(fraction)
    train = np.asarray(train, np.int64)
    if fraction == 0:
        return np.sort(train), np.zeros(0, np.int64)
    rng = np.random.default_rng(seed)
    held = as_label_map(labels).ravel()[train]
    validation = []
    for label in np.unique(held):
        pixels = np.sort(train[held == label])
        validation.append(rng.permutation(pixels)[:_validation_count(fraction, len(pixels))])
    validation = np.sort(np.concatenate(validation)).astype(np.int64)
    return np.setdiff1d(train, validation), validation


def spatial_validation_split(labels, train, fraction, patch_size):
    """Holds a validation share out of the training pixels ``train`` as the disjoint
    split holds out its test pixels: apart by the patch radius.

    Of every class's training pixels (class by class, in label order), the
    ``fraction`` counted as :func:`validation_split` counts it (rounded, always
    leaving one; at 10%, none from a class of five or fewer) is taken from one end
    of their extent: the first pixels by row, by row from the bottom, by column
    or by column from the right, whichever end's guard band takes the fewest
    training pixels not already taken. Then every training pixel, of any class,
    within ``patch_size // 2`` pixels (Chebyshev distance) of a validation pixel
    is dropped from training (the guard band of :func:`disjoint_split`), so that
    no validation pixel lies inside any training patch: validation then measures
    what the test of a disjoint split measures.

    A class whose remaining training pixels the guard bands would cut by more
    than half (e.g. a compact field of a few dozen pixels, or a class of one or
    two pixels beside another class's block) gives no validation pixels and
    loses none: the validation pixels within the patch radius of its training
    pixels, its own and its neighbours', leave the validation share; each goes back
    to training unless another validation pixel's guard band holds it (then it is
    dropped with that band).

    Returns ``(train, validation)``: sorted flat indices, both within ``train``,
    disjoint; the pixels of ``train`` in neither are the dropped guard band.
    Deterministic: the same pixels give the same share.
    """
    _check_validation_fraction(fraction)
    check_patch_size(patch_size)
    labels = as_label_map(labels)
    train = np.sort(np.asarray(train, np.int64))
    if fraction == 0:
        return train, np.zeros(0, np.int64)
    radius = patch_size // 2
    held = labels.ravel()[train]
    is_train = _mask(train, labels.shape).ravel()
    taken = np.zeros(labels.size, bool)   # the guard bands of the blocks chosen so far
    blocks, remaining = [], {}
    for label in np.unique(held):
        pixels = train[held == label]
        count = _validation_count(fraction, len(pixels))
        remaining[label] = len(pixels) - count
        if count:
            block, band = min(
                ((block, _guard_band(block, labels.shape, radius).ravel())
                 for block in _end_blocks(pixels, labels.shape[1], count)),
                key=lambda pair: np.count_nonzero(pair[1] & is_train & ~taken))
            blocks.append(block)
            taken |= band
    validation = np.concatenate(blocks) if blocks else np.zeros(0, np.int64)
    while True:   # each pass gives back the blocks near a class cut by more than half
        kept = train[~_guard_band(validation, labels.shape, radius).ravel()[train]]
        kept_per_class = dict(zip(*np.unique(labels.ravel()[kept], return_counts=True)))
        cut = [label for label, left in remaining.items()
               if 2 * kept_per_class.get(label, 0) < left]
        if not cut:
            return kept, np.sort(validation).astype(np.int64)
        near = _guard_band(train[np.isin(held, cut)], labels.shape, radius).ravel()
        validation = validation[~near[validation]]


def save_split(path, split):
    """Writes ``split`` to ``path`` (``.npz``), atomically."""
    with atomic_path(path, suffix=".npz") as temporary:
        np.savez(temporary, train=split.train, test=split.test,
                 image_shape=np.asarray(split.image_shape),
                 description=np.asarray(split.description))


def load_split(path):
    """Reads a split written by :func:`save_split`; InvalidInput naming ``path`` when it
    holds none."""
    stored = read_npz(path)
    if stored is None:
        raise InvalidInput(f"{path} is not a saved split: not an .npz file of arrays")
    missing = {"train", "test", "image_shape", "description"} - set(stored)
    if missing:
        raise InvalidInput(f"{path} is not a saved split: missing {sorted(missing)}, "
                           f"has {sorted(stored)}")
    return Split(train=stored["train"], test=stored["test"],
                 image_shape=tuple(int(n) for n in stored["image_shape"]),
                 description=str(stored["description"]))


def _pixels_by_class(labels):
    """Yields (label, sorted flat indices) for every class present in ``labels``;
    InvalidInput when no pixel is labelled."""
    if not np.any(labels > 0):
        raise InvalidInput("the label map has no labelled pixel (every label is 0): "
                           "nothing to split")
    flat = labels.ravel()
    order = np.argsort(flat, kind="stable")
    present, starts = np.unique(flat[order], return_index=True)
    for label, pixels in zip(present, np.split(order, starts[1:])):
        if label > 0:
            yield int(label), pixels


def _split(labels, train, description, excluded=()):
    """Builds a Split whose test set is every other labelled pixel not in ``excluded``."""
    test = np.ones(labels.size, bool)
    test[train] = False
    test[np.asarray(excluded, dtype=np.int64)] = False
    test &= labels.ravel() > 0
    return Split(train=np.sort(train).astype(np.int64), test=np.flatnonzero(test),
                 image_shape=tuple(labels.shape), description=description)


def _end_blocks(pixels, width, count):
    """The ``count`` first of flat indices ``pixels`` (an image ``width`` wide) from each
    end of their extent: by row (ties by column), by row from the bottom, by column
    (ties by row), by column from the right."""
    rows, cols = np.divmod(pixels, width)
    for key, tie in ((rows, cols), (cols, rows)):
        for direction in (1, -1):
            yield pixels[np.lexsort((tie * direction, key * direction))[:count]]


def _guard_band(indices, shape, radius):
    """Boolean [H, W] mask of the pixels within ``radius`` (Chebyshev distance) of any
    pixel in ``indices``, those pixels included: the band that keeps a patch of side
    ``2 * radius + 1`` centred outside it free of them."""
    return ndimage.binary_dilation(_mask(indices, shape),
                                   structure=np.ones((2 * radius + 1, 2 * radius + 1), bool))


def _check_validation_fraction(fraction):
    if not 0 <= fraction < 1:
        raise InvalidInput(f"validation fraction must lie in [0, 1), got {fraction!r}")


def _validation_count(fraction, available):
    """How many of a class's ``available`` training pixels go to validation: the
    rounded ``fraction``, leaving at least one for training."""
    return max(min(int(round(fraction * available)), available - 1), 0)


def _mask(indices, shape):
    mask = np.zeros(shape, bool)
    mask.flat[indices] = True
    return mask


def check_train_fraction(fraction):
    """InvalidInput unless ``fraction`` lies strictly between 0 and 1."""
    if not 0 < fraction < 1:
        raise InvalidInput(f"train_fraction must lie strictly between 0 and 1, got {fraction!r}")


def _require_pixels(labels, label, available, needed, rule):
    """InvalidInput when class ``label`` of the map ``labels`` has fewer than ``needed``
    pixels; a label above a run of empty ones is named as a possible stray."""
    if available < needed:
        below = labels[(labels > 0) & (labels < label)]
        highest = int(below.max()) if below.size else 0
        stray = (f"; labels {highest + 1} to {label - 1} have no pixel: is {label} a stray "
                 "label?" if label - highest > 2 else "")
        raise InvalidInput(
            f"class {label} has {counted(available, 'labelled pixel')}, but {rule} needs "
            f"at least {needed} (at least one must remain for testing){stray}")
