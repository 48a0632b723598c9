"""The data side of a training run: scene, preprocessing, split, patch datasets.

Everything here is decided by the run's settings and seed, so a resumed run
rebuilds exactly the same training and test sets.
"""

import dataclasses
import functools
import json
import math
import os

import numpy as np

from hmp import data
from hmp.data.catalog import default_data_dir
from hmp.data.synthetic import GENERATED_LAYOUT
from hmp.errors import InvalidInput
from hmp.files import write_json
from hmp.formatting import counted
from hmp.run.run_files import read_results


@dataclasses.dataclass(frozen=True)
class DataConfig:
    """What to train on and how to cut it."""

    dataset: str = "synthetic"
    data_dir: str = None
    labels_path: str = None
    cube_key: str = None
    labels_key: str = None
    synthetic_layout: str = "generated"
    synthetic_kind: str = "reflectance"   # hmp.data.synthetic.KINDS
    patch_size: int = 9
    pca: int = 0
    train_fraction: float = 0.1
    train_per_class: int = 0
    split: str = "random"
    seed: int = 0
    train_set: str = None   # label-map files of a given split (both, or neither)
    test_set: str = None
    val_fraction: float = 0.0   # share of each class's training pixels held out to validate
    val_split: str = "random"   # how (VAL_SPLITS): random, spatial, or auto (as the split)
    # each pixel's spectrum over its brightness (BRIGHTNESS_NORMS): on, off, or auto
    # (on for a scene of radiance: ``divides_brightness``)
    brightness_norm: str = "auto"


@dataclasses.dataclass
class Experiment:
    """A prepared scene: training and test patch datasets and the class names."""

    scene: data.Scene
    split: data.Split
    train: data.PatchDataset
    test: data.PatchDataset
    labelled: data.PatchDataset
    nodata_pixels: int = 0   # pixels masked for holding NaN or infinite values
    preprocessor: data.Preprocessor = None   # fitted on the training pixels
    val: data.PatchDataset = None   # held out of ``split.train``; None without validation
    guide: data.Guide = None   # of the smoothing, fitted on the training pixels

    @functools.cached_property
    def guide_image(self):
        """[H, W]: the guide of the scene's pixels (``hmp.evaluation.smoothing``)."""
        extractor = self.train.extractor
        margin = extractor.patch_size // 2
        height, width = extractor.image_shape
        return self.guide.image(extractor.padded[margin:margin + height, margin:margin + width])

    @property
    def guard_dropped(self):
        """Training pixels of the split left out of both training and validation: the
        guard band of a spatial validation share (0 for a random one)."""
        return len(self.split.train) - len(self.train) - (len(self.val) if self.val else 0)

    @property
    def n_classes(self):
        return len(self.scene.class_names)

    def steps_per_epoch(self, batch_size):
        """Training steps an epoch takes: the whole batches of the training pixels (the
        rest waits for a later epoch's order); an InvalidInput when not one batch fits."""
        steps = self.train.steps_per_epoch(batch_size, drop_remainder=True)
        if not steps:
            raise InvalidInput("batch_size must be at most the %d training pixels, got %d"
                               % (len(self.train), batch_size))
        return steps

    def epoch_batches(self, batch_size, seed, epoch=0, start_step=0):
        """Yields the training batches of epoch ``epoch`` from step ``start_step`` on:
        whole batches only, as ``steps_per_epoch`` counts them."""
        return self.train.batches(batch_size, seed=seed, epoch=epoch, drop_remainder=True,
                                  start_step=start_step)

    @property
    def train_counts(self):
        """The training pixels of each class [n_classes] (validation pixels not counted)."""
        return np.bincount(self.train.class_ids, minlength=self.n_classes)

    @property
    def unlabelled_classes(self):
        """The classes (1..K) that no pixel of the scene's label map holds."""
        counts = np.bincount(self.scene.labels.ravel(), minlength=self.n_classes + 1)[1:]
        return [int(k) + 1 for k in np.flatnonzero(counts[:self.n_classes] == 0)]

    @property
    def bands(self):
        return self.train.extractor.n_bands

    @functools.cached_property
    def all_bands(self):
        """The scaled cube with all its bands, before the PCA (a ``PatchExtractor``): the
        scene of a graph that projects the patches itself (``hmp.graph.projection``)."""
        cube = self.preprocessor.scale(self.scene.cube)
        cube[mask_nodata(self.scene)] = 0.0   # as in prepare
        return data.PatchExtractor(cube, self.train.extractor.patch_size)


SPLITS = ("random", "disjoint")
VAL_SPLITS = ("random", "spatial", "auto")
BRIGHTNESS_NORMS = ("auto", "on", "off")


def divides_brightness(config, scene):
    """Whether the run divides each pixel's spectrum by its brightness
    (``hmp.data.BrightnessNormaliser``): as ``config.brightness_norm`` says, and with
    ``auto`` when the scene holds radiance (``Scene.units``). On radiance the brightness
    a field or the light gives a crop varies more than the crop's spectral shape, and
    across the generator's radiance scenes dividing it out was level or better; on
    reflectance it cost accuracy (docs/benchmarks.md, "Dividing by brightness")."""
    if config.brightness_norm == "auto":
        return scene.units == "radiance"
    return config.brightness_norm == "on"


def describe_brightness(exp, config):
    """The line that says the run divides each pixel's spectrum by its brightness, and
    why; None when it does not."""
    if exp.preprocessor.brightness_norm is None:
        return None
    why = " (the scene holds radiance)" if config.brightness_norm == "auto" else ""
    return "spectra divided by their brightness: --brightness_norm=%s%s" % (
        config.brightness_norm, why)


def prepare(config, split=None):
    """Loads the scene and builds the datasets described by ``config``.

    ``split``: a saved :class:`hmp.data.Split` (e.g. from :func:`load`) to use
    instead of the one ``config`` describes; it must fit the scene's shape.
    """
    for what, kind, known in (("split", config.split, SPLITS),
                              ("val_split", config.val_split, VAL_SPLITS),
                              ("brightness_norm", config.brightness_norm, BRIGHTNESS_NORMS)):
        if kind not in known:
            raise InvalidInput("%s %r is not known; choose one of %s"
                               % (what, kind, ", ".join(known)))
    data.check_patch_size(config.patch_size)
    scene = load_scene(config)
    ground_truth = scene.labels.copy()   # as its file holds it, no-data pixels too
    nodata = mask_nodata(scene)
    if split is None:
        split = _split(scene.labels, config, ground_truth, scene.raster)
    elif tuple(split.image_shape) != scene.labels.shape:
        raise InvalidInput("the saved split is for a %dx%d image, but scene %r is %dx%d"
                           % (*split.image_shape, scene.name, *scene.labels.shape))
    preprocessor = data.Preprocessor("standard", pca_components=config.pca or None,
                                     brightness_norm=divides_brightness(config, scene))
    cube = preprocessor.fit_transform(scene.cube, split.train)
    cube[nodata] = 0.0   # the training pixels' mean: no NaN reaches a neighbour's patch
    extractor = data.PatchExtractor(cube, config.patch_size)
    labelled = np.flatnonzero(scene.labels.ravel() > 0)
    train, val = _validation(scene.labels, split.train, config)
    return Experiment(scene, split,
                      data.PatchDataset(extractor, scene.labels, train),
                      data.PatchDataset(extractor, scene.labels, split.test),
                      data.PatchDataset(extractor, scene.labels, labelled),
                      int(nodata.sum()), preprocessor,
                      data.PatchDataset(extractor, scene.labels, val) if len(val) else None,
                      data.Guide.fit(cube, split.train))


def load_scene(config):
    """The scene ``config`` names (its dataset, files, synthetic layout and seed)."""
    if config.dataset == "synthetic":
        return data.load_scene("synthetic", config.data_dir, layout=config.synthetic_layout,
                               kind=config.synthetic_kind, seed=config.seed)
    return data.load_scene(config.dataset, config.data_dir, labels_path=config.labels_path,
                           cube_key=config.cube_key, labels_key=config.labels_key)


SPLIT_FILE = "split.npz"
CONFIG_FILE = "data.json"


def data_folder(config):
    """The folder the scene of ``config`` reads its files from, absolute: its
    ``data_dir``, else the default one now (``$HMP_DATA_DIR``, else ``./data``); None for
    a scene that reads none from a folder (a cube file, the generated synthetic layout)."""
    if data.is_cube_file(config.dataset) or (
            config.dataset == "synthetic" and config.synthetic_layout == GENERATED_LAYOUT):
        return None
    return os.path.abspath(config.data_dir or default_data_dir())


def save(model_dir, config, split):
    """Writes the run's split (``split.npz``) and data settings (``data.json``) to
    ``model_dir``, so that baselines and later tools score on exactly its pixels; its
    ``data_dir`` the folder the scene's files were read from (:func:`data_folder`), so
    that they are found without the environment (``$HMP_DATA_DIR``) the run had."""
    data.save_split(os.path.join(model_dir, SPLIT_FILE), split)
    read_from = data_folder(config)
    if read_from is not None:
        config = dataclasses.replace(config, data_dir=read_from)
    write_json(os.path.join(model_dir, CONFIG_FILE), dataclasses.asdict(config))


def recorded_data_dir(model_dir):
    """The folder the run in ``model_dir`` read its scene's files from, as its data.json
    records it (:func:`save`), while it is there; else None: a run of a scene read from
    no folder, one from before data.json recorded the folder (its ``data_dir`` then as
    given, or None), a folder since moved or on another machine (the default one then:
    :func:`from_folder`), or a run folder without data.json. InvalidInput naming the file
    for a data.json that cannot be read."""
    path = os.path.join(model_dir, CONFIG_FILE)
    if not os.path.isfile(path):
        return None
    recorded = _load_config(path).data_dir
    return _still_there(recorded)


def with_recorded_folder(config, model_dir):
    """``config`` reading its scene from the folder the run in ``model_dir`` read it from
    (:func:`recorded_data_dir`) when ``config`` names no ``data_dir``: a resume or a
    prediction without --data_dir, whatever ``$HMP_DATA_DIR`` is then."""
    recorded = recorded_data_dir(model_dir) if config.data_dir is None else None
    return dataclasses.replace(config, data_dir=recorded) if recorded else config


def _still_there(data_dir):
    """A data.json's ``data_dir`` if it is a folder :func:`save` recorded (absolute) that
    is still there, else None."""
    return data_dir if data_dir and os.path.isabs(data_dir) and os.path.isdir(data_dir) else None


# the data.json keys that runs from before them lack, and what those runs did
_ADDED_KEYS = {"val_fraction": 0.0, "synthetic_kind": "reflectance", "val_split": "random",
              "brightness_norm": "off"}   # a run from before --brightness_norm did not divide


def from_folder(config, working_dir):
    """``config`` with its relative paths of files and folders (a cube file's
    ``dataset``, ``data_dir``, ``labels_path``, ``train_set``, ``test_set``) made absolute
    from ``working_dir``, the folder its run was started in, so that the scene is found
    from any folder; no ``data_dir`` (a run from before data.json recorded the folder its
    files were read from, :func:`save`), or a recorded one no longer there (the run or
    its data moved): the default one (``$HMP_DATA_DIR``, or ``./data`` there if it has
    one).
    A path found from the current folder but not from ``working_dir`` (a project moved
    since) stays as it is; when ``working_dir`` is None (a run from before results.json
    kept it), the paths as they are."""
    if config.data_dir and os.path.isabs(config.data_dir):   # moved since: as none recorded
        config = dataclasses.replace(config, data_dir=_still_there(config.data_dir))
    if working_dir is None:
        return config

    def absolute(path):
        if not path or os.path.isabs(path):
            return path
        joined = os.path.join(working_dir, path)
        return path if os.path.exists(path) and not os.path.exists(joined) else joined

    default = str(default_data_dir())
    data_dir = config.data_dir
    if (data_dir is None and not os.path.isabs(default)
            and os.path.isdir(os.path.join(working_dir, default))):
        data_dir = default
    return dataclasses.replace(
        config, data_dir=absolute(data_dir), labels_path=absolute(config.labels_path),
        train_set=absolute(config.train_set), test_set=absolute(config.test_set),
        dataset=(absolute(config.dataset) if data.is_cube_file(config.dataset)
                 else config.dataset))


def load(model_dir):
    """The data settings and split a run saved with :func:`save`: (DataConfig, Split)."""
    paths = [os.path.join(model_dir, name) for name in (CONFIG_FILE, SPLIT_FILE)]
    missing = [path for path in paths if not os.path.isfile(path)]
    if missing:
        raise InvalidInput("%s holds no saved split (missing %s); give the folder of a "
                           "training run" % (model_dir, ", ".join(missing)))
    return _load_config(paths[0]), data.load_split(paths[1])


def load_as_trained(model_dir):
    """:func:`load`, the relative paths made absolute from the folder the run was started
    in (``from_folder`` with its results.json's ``working_dir``): the scene of a finished
    run, read from any folder."""
    config, split = load(model_dir)
    results = read_results(model_dir) or {}
    return from_folder(config, results.get("working_dir")), split


def _load_config(path):
    """The DataConfig a run saved in ``path`` (its data.json); InvalidInput naming the
    file when it holds none: not JSON, or keys missing or unknown."""
    try:
        with open(path, encoding="utf-8") as f:
            saved = json.load(f)
    except ValueError as error:   # not JSON, or not text
        raise InvalidInput("%s is not a run's data settings: not JSON (%s)"
                           % (path, error)) from error
    names = [field.name for field in dataclasses.fields(DataConfig)]
    if not isinstance(saved, dict):
        raise InvalidInput("%s is not a run's data settings: not a JSON object of %s"
                           % (path, ", ".join(names)))
    missing = [name for name in names if name not in saved and name not in _ADDED_KEYS]
    unknown = sorted(set(saved) - set(names))
    if missing or unknown:
        raise InvalidInput("%s is not a run's data settings: %s" % (path, "; ".join(
            "%s keys %s" % (what, ", ".join(keys))
            for what, keys in (("missing", missing), ("unknown", unknown)) if keys)))
    return DataConfig(**{**_ADDED_KEYS, **saved})


def nodata_mask(cube):
    """The no-data pixels [H, W] of a cube (or a window of one) [H, W, B]: those whose
    spectrum holds NaN or inf (a file's data-ignore value reads as NaN:
    ``hmp.data.raster``)."""
    return ~np.isfinite(cube).all(axis=2)


def nodata_summary(pixels, raster):
    """The line that says how many pixels are no-data, and why (``raster``: the scene's
    ``hmp.data.raster.RasterInfo``, whose data-ignore values are named when it has any)."""
    values = sorted({value for value in raster.ignore_values   # NaN: said already
                     if value is not None and not math.isnan(value)})
    ignored = ("" if not values else " or the data-ignore value %g" % values[0]
               if len(values) == 1 else " or their band's data-ignore value (%s)"
               % ", ".join("%g" % value for value in values))
    return "%s NaN or infinite values%s: masked as no-data (label 0)" % (
        counted(pixels, "pixel holds", "pixels hold"), ignored)


def mask_nodata(scene):
    """Marks the pixels whose spectrum holds NaN or inf as no-data; returns their mask [H, W].

    Their labels become 0 (unlabelled), so they are neither trained on nor
    scored; :func:`prepare` then sets their preprocessed values to 0. A scene
    with no finite pixel is refused.
    """
    nodata = nodata_mask(scene.cube)
    if nodata.all():
        raise InvalidInput(f"scene {scene.name!r}: every pixel holds NaN or infinite values")
    scene.labels[nodata] = 0
    return nodata


def validation_kind(config):
    """How ``config``'s validation share is held out of the training pixels:
    ``config.val_split``, where "auto" mirrors how the test pixels are held out:
    "spatial" (blocks apart from training by the patch radius,
    :func:`hmp.data.spatial_validation_split`) for a disjoint split or a given training
    set, "random" (:func:`hmp.data.validation_split`) for a random split, whose test
    pixels lie among the training pixels too."""
    if config.val_split != "auto":
        return config.val_split
    return "spatial" if config.split == "disjoint" or config.train_set else "random"


def describe_validation(exp, config):
    """The line that says what ``exp``'s validation share is and what it cost training;
    None without one asked (``config.val_fraction`` 0)."""
    if not config.val_fraction:
        return None
    if exp.val is None:
        return ("validation: none (no class can spare a validation pixel at val_fraction=%g):"
                " the last epoch's weights classify" % config.val_fraction)
    classes = len(np.unique(exp.val.class_ids))
    if validation_kind(config) == "random":
        return ("validation: %d pixels of %d classes, drawn at random from the training "
                "pixels" % (len(exp.val), classes))
    return ("validation: %d pixels of %d classes, blocks at one end of each class's training "
            "pixels; the %d training pixels within %d pixels of them dropped, so that no "
            "validation pixel lies in a training patch (as the disjoint split keeps its test "
            "pixels)" % (len(exp.val), classes, exp.guard_dropped, config.patch_size // 2))


def _validation(labels, train, config):
    """(training, validation) flat indices: ``config.val_fraction`` of ``train`` held out
    as :func:`validation_kind` says."""
    if validation_kind(config) == "spatial":
        return data.spatial_validation_split(labels, train, config.val_fraction,
                                             config.patch_size)
    return data.validation_split(labels, train, config.val_fraction, seed=config.seed)


def _split(labels, config, ground_truth, raster):
    """The split ``config`` asks for of the label map ``labels`` (no-data pixels 0); the
    sets of --train_set and --test_set are checked against the ``ground_truth`` as the
    file holds it and the grid of the scene's ``raster`` (its RasterInfo), then their
    no-data pixels left out, as unlabelled."""
    if config.train_set or config.test_set:
        if not (config.train_set and config.test_set):
            raise InvalidInput("give both train_set and test_set (label-map files), or neither")
        given = data.split_from_label_maps(ground_truth, config.train_set, config.test_set,
                                           raster)
        return dataclasses.replace(given, **{
            part: pixels[labels.ravel()[pixels] > 0]
            for part, pixels in (("train", given.train), ("test", given.test))})
    if config.split == "disjoint":
        return data.disjoint_split(labels, train_fraction=config.train_fraction,
                                   patch_size=config.patch_size, seed=config.seed)
    if config.train_per_class:
        return data.stratified_split(labels, train_per_class=config.train_per_class,
                                     seed=config.seed)
    return data.stratified_split(labels, train_fraction=config.train_fraction, seed=config.seed)
