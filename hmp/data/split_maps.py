"""A split given as two label-map files (``--train_set``, ``--test_set``), as DeepHyperX takes.

Each file (``.mat``, ``.npy``, ENVI, GeoTIFF...: ``hmp.data.formats``) holds a
label map of the scene's shape [H, W]: 0 = not in this set,
1..K = the pixel's class. The two sets must not share a pixel, and every pixel
they label must carry the same class in the scene's own ground truth, so that
the training labels are the ones scored; a set file georeferenced on another grid
than the scene's cube is refused (``hmp.data.georeference``).
"""

import numpy as np

from hmp.data.formats import read_label_map
from hmp.data.georeference import check_same_grid
from hmp.data.scene import as_label_map
from hmp.data.splits import Split
from hmp.errors import InvalidInput
from hmp.formatting import counted


def split_from_label_maps(labels, train_path, test_path, raster=None):
    """The :class:`Split` whose training and test pixels are the labelled pixels of the files.

    ``raster``: the scene's ``hmp.data.raster.RasterInfo`` (its georeference), or None.

    Raises:
      FileNotFoundError: a file is missing.
      InvalidInput: a file that is no label map of the scene's shape, or on another grid
        than ``raster``'s, sets that overlap, an empty set, or a class that disagrees
        with ``labels``.
    """
    labels = as_label_map(labels)
    train = _labelled_pixels(train_path, labels, "train_set", raster)
    test = _labelled_pixels(test_path, labels, "test_set", raster)
    shared = np.intersect1d(train, test)
    if len(shared):
        raise InvalidInput(f"{counted(len(shared), 'pixel')} {'is' if len(shared) == 1 else 'are'} "
                           "in both the training and the test set "
                           f"(first: row {shared[0] // labels.shape[1]}, column "
                           f"{shared[0] % labels.shape[1]}); the sets must not overlap")
    return Split(train=train, test=test, image_shape=tuple(labels.shape),
                 description=f"given train_set={train_path} test_set={test_path}")


def _labelled_pixels(path, labels, role, raster):
    """Sorted flat indices of the pixels labelled in the label-map file ``path`` (any type
    of ``hmp.data.formats``)."""
    try:
        read = read_label_map(path, key_name=None)   # no key flag: one array
    except InvalidInput as error:
        raise InvalidInput(f"{role} {error}") from error
    given = read.labels
    if given.shape != labels.shape:
        raise InvalidInput(f"{role} {path} has shape {given.shape}, but the scene is "
                           f"{labels.shape} (H, W)")
    if raster is not None:
        check_same_grid(raster, read.info, labels.shape, f"{role} {path}", "the scene's cube")
    pixels = np.flatnonzero(given.ravel() > 0)
    if len(pixels) == 0:
        raise InvalidInput(f"{role} {path} labels no pixel (every value is 0)")
    wrong = pixels[given.ravel()[pixels] != labels.ravel()[pixels]]
    if len(wrong):
        first = wrong[0]
        raise InvalidInput(
            f"{role} {path}: {len(wrong)} pixels carry another class than the scene's "
            f"ground truth (first: row {first // labels.shape[1]}, column "
            f"{first % labels.shape[1]} is {given.flat[first]} there, "
            f"{labels.flat[first]} in the ground truth)")
    return pixels.astype(np.int64)
