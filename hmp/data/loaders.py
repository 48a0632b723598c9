"""Loads a scene by name (benchmark or synthetic) or from any cube and label files.

``load_scene`` is the single entry point used by training and evaluation
scripts: ``load_scene("indian_pines", "data")``, ``load_scene("synthetic")``,
or ``load_scene("my_cube.mat", labels_path="my_gt.mat")``.
"""

import pathlib

from hmp.data.catalog import SCENES, default_data_dir, find_file, scene_spec
from hmp.data.matfile import SUPPORTED_SUFFIXES, read_array
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
        (``.mat`` or ``.npy``), which then needs ``labels_path``.
      data_dir: folder holding the benchmark files (default ``$HMP_DATA_DIR`` or
        ``./data``); for ``"synthetic"`` it is where a named layout's ground
        truth is read from.
      labels_path, cube_key, labels_key, class_names: for a cube given by path,
        see :func:`load_scene_files`.
    """
    if name_or_path == SYNTHETIC:
        return synthetic_scene(data_dir=data_dir, **synthetic_options)
    if synthetic_options:
        raise InvalidInput(
            f"options {sorted(synthetic_options)} only apply to the synthetic scene, "
            f"not to {name_or_path!r}")
    if _is_benchmark_name(name_or_path):
        return load_benchmark_scene(name_or_path, data_dir)
    if is_cube_file(name_or_path):
        if labels_path is None:
            raise InvalidInput(f"cube file {name_or_path} given without labels_path")
        return load_scene_files(name_or_path, labels_path, cube_key=cube_key,
                                labels_key=labels_key, class_names=class_names)
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
                 class_names=list(spec.class_names))


def load_scene_files(cube_path, labels_path, *, cube_key=None, labels_key=None,
                     class_names=None, name=None):
    """Reads a scene from any cube file and label-map file.

    Args:
      cube_path: ``.mat`` or ``.npy`` file holding the cube [H, W, B].
      labels_path: ``.mat`` or ``.npy`` file holding the label map [H, W]
        (0 = unlabelled, 1..K = classes).
      cube_key, labels_key: MATLAB variable names; may be left out when the
        ``.mat`` file holds exactly one array.
      class_names: names of classes 1..K (default ``"class 1"``...).
      name: scene name (default: the cube file's stem).
    """
    cube_path = pathlib.Path(cube_path)
    return Scene(name=name or cube_path.stem,
                 cube=_read(cube_path, cube_key, "cube", "cube_key"),
                 labels=_read(labels_path, labels_key, "labels", "labels_key"),
                 class_names=list(class_names or []))


def _read(path, key, role, key_name):
    """read_array, its errors saying which of the scene's files (cube, labels) failed."""
    try:
        return read_array(path, key, key_name=key_name)
    except InvalidInput as error:
        raise InvalidInput(f"{role} file {error}") from error


def is_cube_file(name_or_path):
    """Whether a scene given by name or path is a cube file (``SUPPORTED_SUFFIXES``)
    rather than the name of a scene."""
    return pathlib.Path(name_or_path).suffix.lower() in SUPPORTED_SUFFIXES


def _is_benchmark_name(name):
    try:
        scene_spec(name)
    except ValueError:
        return False
    return True
