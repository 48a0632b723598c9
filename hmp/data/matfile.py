"""Reads one named array from a MATLAB ``.mat`` file (v5 or v7.3) or a ``.npy`` file.

MATLAB v7.3 files are HDF5 files; MATLAB writes arrays column-major, so an
array MATLAB sees as [H, W, B] is stored as an HDF5 dataset of shape
[B, W, H]. :func:`read_array` transposes it back, so both versions give the
same array. It knows MATLAB's file by the 512-byte userblock MATLAB writes
before the HDF5 part (its text starts "MATLAB 7.3 MAT-file"); any other HDF5
file (h5py's, written from numpy) is read as written, not transposed.
"""

import pathlib

import h5py
import numpy as np
import scipy.io
from scipy.io.matlab import MatReadError

from hmp.errors import InvalidInput

SUPPORTED_SUFFIXES = (".mat", ".npy")
MATLAB_V73_HEADER = b"MATLAB 7.3 MAT-file"   # how MATLAB's userblock starts


def read_array(path, key=None, key_name="a key", memory_map=False):
    """Returns the array stored under ``key`` in ``path`` as a numpy array.

    Args:
      path: a ``.mat`` (MATLAB v5 or v7.3) or ``.npy`` file.
      key: the MATLAB variable name. When None, the file must hold exactly one
        array, which is returned. Not allowed for ``.npy`` files.
      key_name: how the error for a file with several arrays calls the key
        (e.g. ``"--labels_key"``); None: there is none to give, the file must hold
        a single array.
      memory_map: a ``.npy`` file is memory-mapped (read when its values are
        used) instead of read; ``.mat`` files are always read whole.

    Raises:
      FileNotFoundError: ``path`` does not exist.
      InvalidInput (a ValueError): unsupported suffix, an empty file, a file
        that cannot be read (truncated, or not of its type: a ``.npy`` file without
        numpy's header is not read at all), unknown key (the
        message lists the keys that exist) or no key given for a file with
        several arrays.
    """
    path = pathlib.Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no such file: {path}")
    suffix = path.suffix.lower()
    if suffix not in SUPPORTED_SUFFIXES:
        raise InvalidInput(
            f"{path}: unsupported file type {path.suffix!r}; "
            f"allowed: {', '.join(SUPPORTED_SUFFIXES)}")
    if path.stat().st_size == 0:
        raise InvalidInput(f"{path}: empty file (0 bytes)")
    if suffix == ".npy":
        if key is not None:
            raise InvalidInput(f"{path}: a .npy file holds one unnamed array; got key {key!r}")
        _check_npy_header(path)
        return _readable(path, lambda: np.load(path, mmap_mode="r" if memory_map else None,
                                               allow_pickle=False))
    if h5py.is_hdf5(path):
        arrays = _readable(path, lambda: _read_hdf5(path))
    else:
        arrays = _readable(path, lambda: {name: value for name, value in
                                          scipy.io.loadmat(path).items()
                                          if not name.startswith("__")})
    return _pick(arrays, key, path, key_name)


def _check_npy_header(path):
    """InvalidInput unless ``path`` starts with numpy's .npy header: numpy takes any
    other file for pickled objects, and its error advises loading it unsafely."""
    with open(path, "rb") as f:
        if f.read(len(np.lib.format.MAGIC_PREFIX)) != np.lib.format.MAGIC_PREFIX:
            raise InvalidInput(f"{path}: not a numpy array file (no .npy header)")


def _readable(path, read):
    """``read()``, with a file that cannot be parsed (truncated, not of its type) refused.

    scipy reads a v5 file cut short as far as it goes and then fails in several ways
    (IndexError among them); a v7.3 file cut inside its HDF5 part is taken for a v5
    file and answers NotImplementedError.
    """
    try:
        return read()
    except (ValueError, OSError, EOFError, TypeError, IndexError, NotImplementedError,
            MatReadError) as error:
        reason = " ".join(str(error).split()) or type(error).__name__
        raise InvalidInput(f"{path}: cannot be read as a {path.suffix} file "
                           f"(truncated or not of this type?): {reason}") from error


def _read_hdf5(path):
    """All top-level numeric datasets of an HDF5 file: a MATLAB v7.3 file's transposed to
    MATLAB's order, any other's as written."""
    with open(path, "rb") as f:
        matlab = f.read(len(MATLAB_V73_HEADER)) == MATLAB_V73_HEADER
    with h5py.File(path, "r") as handle:
        return {name: np.asarray(item[()]).T if matlab else np.asarray(item[()])
                for name, item in handle.items()
                if isinstance(item, h5py.Dataset) and not name.startswith("#")}


def _pick(arrays, key, path, key_name="a key"):
    """Selects ``key`` from ``arrays`` (or the only array when ``key`` is None)."""
    names = sorted(arrays)
    if not arrays:
        raise InvalidInput(f"{path}: holds no array (truncated, or saved empty?)")
    if key is None:
        if len(arrays) != 1:
            raise InvalidInput(f"{path}: holds {len(arrays)} arrays {names}; " + (
                f"name the one to use with {key_name}" if key_name else
                "it must hold a single array"))
        return arrays[names[0]]
    if key in arrays:
        return arrays[key]
    same_but_case = [name for name in names if name.lower() == key.lower()]
    if len(same_but_case) == 1:
        return arrays[same_but_case[0]]
    raise InvalidInput(f"{path}: no array named {key!r}; the file holds {names}")
