"""Loads a scene by name (benchmark or synthetic) or from any cube and label files.

``load_scene`` is the single entry point used by training and evaluation
scripts: ``load_scene("indian_pines", "data")``, ``load_scene("synthetic")``,
or ``load_scene("my_cube.hdr", labels_path="my_gt.tif")`` (any file type of
``hmp.data.formats``).
"""

import pathlib

from hmp.data.catalog import SCENES, default_data_dir, find_file, scene_spec
from hmp.data.georeference import check_same_grid
from hmp.data.formats import SUPPORTED_SUFFIXES, is_raster_path, open_raster, read_label_map
from hmp.data.matfile import read_array
from hmp.data.scene import Scene
from hmp.data.synthetic import synthetic_scene
from hmp.errors import InvalidInput

SYNTHETIC = "synthetic"


def load_scene(name_or_path, data_dir=None, *, labels_path=None, cube_key=None,
               labels_key=None, class_names=None, **synthetic_options):
    """Returns the :class:`Scene` named by ``name_or_path``.

    Args:
      name_or_path: ``"indian_pines"``, ``"paviau"``, ``"salinas"`` (files read
        from ``data_dir``), ``"synthetic"`` (generated; ``synthetic_options`` are
        passed to :func:`hmp.data.synthetic_scene`), or the path of a cube file
        (``.mat``, ``.npy``, ENVI, GeoTIFF...), which then needs ``labels_path``.
      data_dir: folder holding the benchmark files (default ``$HMP_DATA_DIR`` or
        ``./data``); for ``"synthetic"`` it is where a named layout's ground
        truth is read from.
      labels_path, cube_key, labels_key, class_names: for a cube given by path,
        see :func:`load_scene_files`.
    """
    check_scene_name(name_or_path)
    if name_or_path == SYNTHETIC:
        return synthetic_scene(data_dir=data_dir, **synthetic_options)
    if synthetic_options:
        raise InvalidInput(
            f"options {sorted(synthetic_options)} only apply to the synthetic scene, "
            f"not to {name_or_path!r}")
    if _is_benchmark_name(name_or_path):
        return load_benchmark_scene(name_or_path, data_dir)
    if labels_path is None:   # a cube file
        raise InvalidInput(f"cube file {name_or_path} given without labels_path")
    return load_scene_files(name_or_path, labels_path, cube_key=cube_key,
                            labels_key=labels_key, class_names=class_names)


def check_scene_name(name_or_path):
    """InvalidInput unless ``name_or_path`` names a scene :func:`load_scene` knows: the
    synthetic one, a benchmark's, or a cube file (by its suffix)."""
    if not (name_or_path == SYNTHETIC or _is_benchmark_name(name_or_path)
            or is_cube_file(name_or_path)):
        raise InvalidInput(
            f"unknown scene {name_or_path!r}; allowed: {', '.join([*SCENES, SYNTHETIC])}, "
            f"or the path of a cube file ({', '.join(SUPPORTED_SUFFIXES)}) and its label map")


def load_benchmark_scene(name, data_dir=None):
    """Reads benchmark scene ``name`` from its usual ``.mat`` files in ``data_dir``.

    File names are matched ignoring case (``PaviaU.mat`` or ``paviaU.mat``);
    MATLAB v5 and v7.3 files are both read.
    """
    spec = scene_spec(name)
    data_dir = pathlib.Path(data_dir or default_data_dir())
    cube_path = find_file(data_dir, spec.cube.file_name, spec.name)
    labels_path = find_file(data_dir, spec.labels.file_name, spec.name)
    return Scene(name=spec.name,
                 cube=read_array(cube_path, spec.cube.key),
                 labels=read_array(labels_path, spec.labels.key),
                 class_names=list(spec.class_names), units=spec.units)


def load_scene_files(cube_path, labels_path, *, cube_key=None, labels_key=None,
                     class_names=None, name=None):
    """Reads a scene from any cube file and label-map file (``hmp.data.formats``).

    Args:
      cube_path: the file holding the cube [H, W, B]: ``.mat``, ``.npy``, an ENVI
        header (or its data file), a GeoTIFF or another GDAL raster. Its
        data-ignore value reads as NaN: a no-data pixel.
      labels_path: the file holding the label map [H, W] (0 = unlabelled, 1..K
        = classes), of any of these types (an ENVI classification file too).
      cube_key, labels_key: MATLAB variable names; may be left out when the
        ``.mat`` file holds exactly one array.
      class_names: names of classes 1..K (default: the names an ENVI
        classification file gives, else ``"class 1"``...).
      name: scene name (default: the cube file's stem).

    Raises:
      FileNotFoundError: a file is missing.
      InvalidInput: a file that cannot be read, or a label map of another shape
        than the cube, or on another grid (what both files name of their
        georeference differs: ``hmp.data.georeference``); the message names the file.
    """
    cube_path = pathlib.Path(cube_path)
    raster = _read("cube", lambda: open_cube_file(cube_path, cube_key))
    given = _read("labels", lambda: read_label_map(labels_path, labels_key,
                                                   key_name="--labels_key"))
    if given.labels.shape != raster.shape[:2]:
        raise InvalidInput(
            f"labels file {labels_path}: the label map is {given.labels.shape[0]} x "
            f"{given.labels.shape[1]} (rows x columns), but the cube {cube_path} is "
            f"{raster.shape[0]} x {raster.shape[1]}")
    check_same_grid(raster.info, given.info, raster.shape[:2],
                    f"labels file {labels_path}", f"the cube {cube_path}")
    return Scene(name=name or cube_path.stem, cube=_read("cube", raster.read_all),
                 labels=given.labels, class_names=list(class_names or given.class_names or []),
                 raster=raster.info)


def open_cube_file(path, cube_key=None):
    """The cube file ``path`` as an ``hmp.data.raster.Raster`` (``open_raster``):
    ``cube_key``, the MATLAB variable of a ``.mat`` file holding several arrays, is
    hmp's --cube_key, as the errors call it."""
    return open_raster(path, cube_key, key_name="--cube_key")


def _read(role, read):
    """``read()``, its errors saying which of the scene's files (cube, labels) failed."""
    try:
        return read()
    except InvalidInput as error:
        raise InvalidInput(f"{role} file {error}") from error


def is_cube_file(name_or_path):
    """Whether a scene given by name or path is a cube file (``SUPPORTED_SUFFIXES`` of
    ``hmp.data.formats``) rather than the name of a scene."""
    return is_raster_path(name_or_path)


def _is_benchmark_name(name):
    try:
        scene_spec(name)
    except ValueError:
        return False
    return True
