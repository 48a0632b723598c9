"""The standard HSI benchmark scenes: file names, MATLAB keys, classes, sources.

One table serves both the loader (which file and variable to read, how to
name the classes) and the download command (where to fetch each file and
which SHA-256 it must have). File names are matched case-insensitively,
because copies of these files circulate as ``PaviaU.mat``, ``paviaU.mat``,
``indian_pines_corrected.mat`` and so on.

Checksums: the ground-truth digests equal those of the original 2011 MATLAB
files kept in the project's shared data folder; the cube digests are the ones
independently published for the same EHU files by several public projects.
A ``None`` digest means "unknown": the download is kept and its digest printed.

Pavia Centre, Kennedy Space Center and Botswana: file names, upload paths, MATLAB
keys and class names as DeepHyperX's ``datasets.py`` lists them (KSC's class 13,
misspelt "Wate" there, is "Water" as on the EHU wiki). Their digests are not
known here (no copy of the files could be checked), so they are None.
"""

import os
import pathlib
from dataclasses import dataclass

from hmp.data.matfile import read_array
from hmp.data.scene import as_label_map
from hmp.errors import InvalidInput

EHU_BASE_URL = "http://www.ehu.eus/ccwintco/uploads"
DATA_DIR_ENV = "HMP_DATA_DIR"


@dataclass(frozen=True)
class SceneFile:
    """One downloadable ``.mat`` file of a scene.

    Attributes:
      file_name: canonical file name, as served by the EHU wiki.
      key: MATLAB variable holding the array.
      url_path: path below the EHU upload folder (``<base>/<url_path>``).
      sha256: expected SHA-256 hex digest, or None when unknown.
    """

    file_name: str
    key: str
    url_path: str
    sha256: object = None


@dataclass(frozen=True)
class SceneSpec:
    """A benchmark scene: its cube file, label file, classes and size."""

    name: str
    title: str
    cube: SceneFile
    labels: SceneFile
    class_names: tuple
    units: str = None   # what the cube file holds (hmp.data.scene.Scene.units), if known


SCENES = {
    "indian_pines": SceneSpec(
        name="indian_pines",
        title="Indian Pines (AVIRIS)",
        cube=SceneFile("Indian_pines_corrected.mat", "indian_pines_corrected",
                       "6/67/Indian_pines_corrected.mat",
                       "ec2f8808710919d566f70f0d4aa885aae1ddfd42b734aba71c5e12ca65450939"),
        labels=SceneFile("Indian_pines_gt.mat", "indian_pines_gt", "c/c4/Indian_pines_gt.mat",
                         "65c4687a8ab04f6da4789799bc3bc4f6e88bccac3ed6a2e6ae367e5e6b9e429c"),
        class_names=(
            "Alfalfa", "Corn-notill", "Corn-mintill", "Corn", "Grass-pasture", "Grass-trees",
            "Grass-pasture-mowed", "Hay-windrowed", "Oats", "Soybean-notill",
            "Soybean-mintill", "Soybean-clean", "Wheat", "Woods",
            "Buildings-Grass-Trees-Drives", "Stone-Steel-Towers"),
        units="radiance",   # at-sensor radiance counts (uint16), water-vapour bands left out
    ),
    "paviau": SceneSpec(
        name="paviau",
        title="Pavia University (ROSIS)",
        cube=SceneFile("PaviaU.mat", "paviaU", "e/ee/PaviaU.mat",
                       "28447fa87f7a5797845e9a189c0da85e23b1d06a4ba7361e5ff44efbf834d2fb"),
        labels=SceneFile("PaviaU_gt.mat", "paviaU_gt", "5/50/PaviaU_gt.mat",
                         "23f6a426928f9b32984adffe659e29f554f9fb6c93b5a107528d308d5087a829"),
        class_names=(
            "Asphalt", "Meadows", "Gravel", "Trees", "Painted metal sheets", "Bare Soil",
            "Bitumen", "Self-Blocking Bricks", "Shadows"),
    ),
    "salinas": SceneSpec(
        name="salinas",
        title="Salinas (AVIRIS)",
        cube=SceneFile("Salinas_corrected.mat", "salinas_corrected",
                       "a/a3/Salinas_corrected.mat",
                       "5ec1c0d22f56d18ecd336f8e35735863c0f160682e04e0c18ef3f89a3334d87d"),
        labels=SceneFile("Salinas_gt.mat", "salinas_gt", "f/fa/Salinas_gt.mat",
                         "ecfab4d31ef5553f097943235d8ea502038eb4a2067b2ad10b33e37c949955e2"),
        class_names=(
            "Brocoli_green_weeds_1", "Brocoli_green_weeds_2", "Fallow", "Fallow_rough_plow",
            "Fallow_smooth", "Stubble", "Celery", "Grapes_untrained", "Soil_vinyard_develop",
            "Corn_senesced_green_weeds", "Lettuce_romaine_4wk", "Lettuce_romaine_5wk",
            "Lettuce_romaine_6wk", "Lettuce_romaine_7wk", "Vinyard_untrained",
            "Vinyard_vertical_trellis"),
        units="radiance",   # at-sensor radiance counts, as Indian Pines
    ),
    "pavia_centre": SceneSpec(
        name="pavia_centre",
        title="Pavia Centre (ROSIS)",
        cube=SceneFile("Pavia.mat", "pavia", "e/e3/Pavia.mat"),
        labels=SceneFile("Pavia_gt.mat", "pavia_gt", "5/53/Pavia_gt.mat"),
        class_names=(
            "Water", "Trees", "Asphalt", "Self-Blocking Bricks", "Bitumen", "Tiles", "Shadows",
            "Meadows", "Bare Soil"),
    ),
    "ksc": SceneSpec(
        name="ksc",
        title="Kennedy Space Center (AVIRIS)",
        cube=SceneFile("KSC.mat", "KSC", "2/26/KSC.mat"),
        labels=SceneFile("KSC_gt.mat", "KSC_gt", "a/a6/KSC_gt.mat"),
        class_names=(
            "Scrub", "Willow swamp", "Cabbage palm hammock", "Cabbage palm/oak hammock",
            "Slash pine", "Oak/broadleaf hammock", "Hardwood swamp", "Graminoid marsh",
            "Spartina marsh", "Cattail marsh", "Salt marsh", "Mud flats", "Water"),
    ),
    "botswana": SceneSpec(
        name="botswana",
        title="Botswana (Hyperion)",
        cube=SceneFile("Botswana.mat", "Botswana", "7/72/Botswana.mat"),
        labels=SceneFile("Botswana_gt.mat", "Botswana_gt", "5/58/Botswana_gt.mat"),
        class_names=(
            "Water", "Hippo grass", "Floodplain grasses 1", "Floodplain grasses 2", "Reeds",
            "Riparian", "Firescar", "Island interior", "Acacia woodlands", "Acacia shrublands",
            "Acacia grasslands", "Short mopane", "Mixed mopane", "Exposed soils"),
    ),
}


ALIASES = {"paviac": "paviacentre", "paviacenter": "paviacentre",
           "kennedyspacecenter": "ksc"}


def scene_spec(name):
    """Returns the :class:`SceneSpec` of a benchmark scene, accepting common spellings.

    ``"Indian Pines"``, ``"indian-pines"`` and ``"IndianPines"`` all name
    ``indian_pines``; ``"PaviaU"`` and ``"pavia_u"`` name ``paviau``; ``"PaviaC"``
    (DeepHyperX's name) names ``pavia_centre``.
    """
    normalised = str(name).lower().replace("-", "").replace("_", "").replace(" ", "")
    normalised = ALIASES.get(normalised, normalised)
    for spec in SCENES.values():
        if spec.name.replace("_", "") == normalised:
            return spec
    raise InvalidInput(f"unknown scene {name!r}; allowed: {', '.join(SCENES)}")


def default_data_dir():
    """The data folder used when none is given: ``$HMP_DATA_DIR`` or ``./data``."""
    return pathlib.Path(os.environ.get(DATA_DIR_ENV, "data"))


def find_file(data_dir, file_name, scene_name):
    """Returns the file in ``data_dir`` whose name equals ``file_name`` ignoring case.

    Raises:
      FileNotFoundError: naming the file looked for, the folder searched and
        the command that downloads scene ``scene_name``; when that folder is the
        default one (:func:`default_data_dir`), how to name another: --data_dir or
        ``$HMP_DATA_DIR``.
    """
    data_dir = pathlib.Path(data_dir)
    if data_dir.is_dir():
        wanted = file_name.lower()
        for candidate in sorted(data_dir.iterdir()):
            if candidate.name.lower() == wanted and candidate.is_file():
                return candidate
    where = f"in {data_dir}" if data_dir.is_dir() else f"because folder {data_dir} does not exist"
    elsewhere = ""
    if data_dir == default_data_dir():
        now = os.environ.get(DATA_DIR_ENV)
        elsewhere = (f"give the folder that holds it with --data_dir or the environment "
                     f"variable {DATA_DIR_ENV} ("
                     + (f"now {now}" if now is not None else "not set: ./data") + "), or ")
    raise FileNotFoundError(
        f"{file_name} (any upper/lower case) not found {where}; {elsewhere}"
        f"download it with: python -m hmp.data.download --dataset={scene_name} "
        f"--data_dir={data_dir}")


def ground_truth_file(name, data_dir=None):
    """The ground-truth file of benchmark scene ``name`` in ``data_dir`` (None: the
    default folder); FileNotFoundError (:func:`find_file`'s) when it is not there."""
    spec = scene_spec(name)
    return find_file(data_dir or default_data_dir(), spec.labels.file_name, spec.name)


def load_ground_truth(name, data_dir=None):
    """Reads the ground-truth label map of benchmark scene ``name`` as int32 [H, W]."""
    path = ground_truth_file(name, data_dir)
    return as_label_map(read_array(path, scene_spec(name).labels.key), what=f"{path}: label map")
