"""Patches cut on the fly around pixels, batched for training and for whole-scene inference.

The padded cube is kept once; a batch is its pixel indices and labels, and
its patches [n, p, p, B] are gathered from the cube by index only when asked
for, so memory stays at one cube plus one batch no matter how many pixels an
epoch covers. (Training does not ask: the devices take the indices and each
cuts its own patches from its copy of ``PatchExtractor.padded``; see
``hmp.graph.scene_input``.)

Batch order is a pure function of (seed, epoch): a trainer that stops at step
``s`` of an epoch resumes with exactly the same remaining batches by passing
``start_step=s``.
"""

import numbers
from dataclasses import dataclass

import numpy as np

from hmp.data.preprocess import pad_cube
from hmp.errors import InvalidInput, whole_number


def check_patch_size(patch_size):
    """Raises ValueError unless ``patch_size`` is an odd positive integer (an int or a
    numpy integer: 9.0 is refused, as the splits' guard bands would fail on it)."""
    if (isinstance(patch_size, bool) or not isinstance(patch_size, numbers.Integral)
            or patch_size < 1 or patch_size % 2 == 0):
        raise InvalidInput(
            f"patch_size must be an odd positive integer (e.g. 5, 7, 9), got {patch_size!r}")


class PatchExtractor:
    """Cuts [p, p, B] patches centred on given pixels out of a border-padded cube."""

    def __init__(self, cube, patch_size, pad_mode="reflect"):
        check_patch_size(patch_size)
        cube = np.asarray(cube, dtype=np.float32)
        if cube.ndim != 3:
            raise InvalidInput(f"cube must be 3-D [H, W, B], got shape {cube.shape}")
        self.patch_size = int(patch_size)
        self.image_shape = cube.shape[:2]
        self.n_bands = cube.shape[2]
        self.padded = pad_cube(cube, self.patch_size // 2, pad_mode)
        self._offsets = np.arange(self.patch_size)

    @property
    def n_pixels(self):
        return self.image_shape[0] * self.image_shape[1]

    def __call__(self, indices):
        """Patches around flat pixel indices ``indices``: float32 [n, p, p, B]."""
        indices = _checked_indices(indices, self.image_shape)
        rows, cols = np.divmod(indices, self.image_shape[1])
        return self.padded[rows[:, None, None] + self._offsets[None, :, None],
                            cols[:, None, None] + self._offsets[None, None, :]]


@dataclass
class Batch:
    """Pixel indices [n], their 0-based class ids [n] int32, and the extractor of their patches."""

    indices: np.ndarray
    labels: np.ndarray
    extractor: PatchExtractor

    def __len__(self):
        return len(self.indices)

    @property
    def patches(self):
        """The batch's patches [n, p, p, B] float32, cut when asked for."""
        return self.extractor(self.indices)


class PatchDataset:
    """The labelled pixels ``indices`` of a scene, served as shuffled batches of patches."""

    def __init__(self, extractor, labels, indices):
        """
        Args:
          extractor: a :class:`PatchExtractor` of the (preprocessed) cube.
          labels: label map [H, W], 0 = unlabelled, 1..K = classes.
          indices: flat indices of the pixels to serve (e.g. ``split.train``);
            all must be labelled.
        """
        labels = np.asarray(labels)
        if labels.shape != tuple(extractor.image_shape):
            raise InvalidInput(f"label map shape {labels.shape} does not match the cube's "
                             f"spatial shape {tuple(extractor.image_shape)}")
        self.extractor = extractor
        self.indices = _checked_indices(indices, extractor.image_shape)
        self.class_ids = labels.ravel()[self.indices].astype(np.int32) - 1
        unlabelled = self.indices[self.class_ids < 0]
        if unlabelled.size:
            raise InvalidInput(f"{unlabelled.size} of the pixel indices point at unlabelled "
                             f"pixels (label 0), e.g. index {unlabelled[0]}")

    def __len__(self):
        return len(self.indices)

    def steps_per_epoch(self, batch_size, drop_remainder=False):
        """Number of batches one epoch yields."""
        whole_number(batch_size, "batch_size")
        full, rest = divmod(len(self), batch_size)
        return full if drop_remainder or rest == 0 else full + 1

    def epoch_order(self, seed, epoch, shuffle=True):
        """Positions into ``indices`` in the order epoch ``epoch`` visits them."""
        if not shuffle:
            return np.arange(len(self))
        return np.random.default_rng([seed, epoch]).permutation(len(self))

    def batches(self, batch_size, *, seed=0, epoch=0, shuffle=True, drop_remainder=False,
                start_step=0):
        """Yields the :class:`Batch` es of one epoch, from step ``start_step`` on.

        Args:
          batch_size: examples per batch.
          seed, epoch: determine the shuffled order (same pair, same order).
          shuffle: False keeps the order of ``indices``.
          drop_remainder: drop the final partial batch instead of yielding it.
          start_step: first batch to yield, to resume an interrupted epoch.
        """
        steps = self.steps_per_epoch(batch_size, drop_remainder)
        if not 0 <= start_step <= steps:
            raise InvalidInput(f"start_step must lie in [0, {steps}], got {start_step}")
        order = self.epoch_order(seed, epoch, shuffle)
        for step in range(start_step, steps):
            chosen = order[step * batch_size:(step + 1) * batch_size]
            yield Batch(self.indices[chosen], self.class_ids[chosen], self.extractor)


def split_batch(batch, sizes):
    """Splits ``batch`` into consecutive parts of the given sizes, one per replica.

    E.g. ``split_batch(batch_of_100, [60, 40])`` for two replicas whose
    speeds are 3:2. Sizes must be non-negative integers summing to ``len(batch)``.
    """
    sizes = [int(size) for size in sizes]
    if any(size < 0 for size in sizes) or sum(sizes) != len(batch):
        raise InvalidInput(f"replica batch sizes {sizes} must be non-negative and sum to the "
                         f"batch size {len(batch)} (they sum to {sum(sizes)})")
    bounds = np.cumsum([0, *sizes])
    return [Batch(batch.indices[start:stop], batch.labels[start:stop], batch.extractor)
            for start, stop in zip(bounds[:-1], bounds[1:])]


def iterate_scene(extractor, batch_size):
    """Yields (flat pixel indices, patches) over every pixel of the image, in raster order.

    For inference over the whole scene (classification maps); the last batch
    may be smaller.
    """
    whole_number(batch_size, "batch_size")
    for start in range(0, extractor.n_pixels, batch_size):
        indices = np.arange(start, min(start + batch_size, extractor.n_pixels))
        yield indices, extractor(indices)


def padded_batches(pixels, batch_size):
    """Yields ``(start, count, indices)`` over ``pixels`` (flat indices) in order: the
    ``count`` pixels from ``start`` as ``batch_size`` int32 indices, pixel 0 filling a last
    short batch (a graph's batch has a fixed size; the caller keeps the first ``count``)."""
    for start in range(0, len(pixels), batch_size):
        chunk = pixels[start:start + batch_size]
        indices = np.zeros(batch_size, np.int32)
        indices[:len(chunk)] = chunk
        yield start, len(chunk), indices


def _checked_indices(indices, image_shape):
    """``indices`` as int64, refusing any outside an image of ``image_shape``."""
    indices = np.asarray(indices, dtype=np.int64)
    n_pixels = image_shape[0] * image_shape[1]
    if indices.size and (indices.min() < 0 or indices.max() >= n_pixels):
        raise InvalidInput(
            f"pixel indices must lie in [0, {n_pixels}) for an image of shape "
            f"{tuple(image_shape)}, got range [{indices.min()}, {indices.max()}]")
    return indices
