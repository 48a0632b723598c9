"""A trained run's model on any devices: the class probabilities of every pixel of a scene.

A checkpoint holds whole tensors (each Mesh-TF variable's master copy, under
its own name; the per-device slices are not saved), so a model trained on any
plan restores on any other device set: :class:`InferenceGraph` lowers the
model with the batch split evenly over the devices it is given (one device:
no split) and restores only the model's weights, not the optimizer's. The
scene is transformed with the run's own preprocessing statistics
(``hmp.run.fitted_preprocessing``), never fitted again on the scene classified.

A scene of any size is classified in tiles (:func:`classify_tiles`): read from
its file a tile at a time with the patch radius around it (``hmp.data.tiles``),
so memory follows the tile, not the scene, and every pixel gets the
probabilities the whole scene's graph would give it (:func:`classify`).
"""

import dataclasses
import os
import time

import numpy as np
import tensorflow.compat.v1 as tf

from hmp.compat import import_mesh_tensorflow
from hmp.data import PatchExtractor, is_cube_file
from hmp.data.loaders import open_cube_file
from hmp.data.patches import padded_batches
from hmp.data.raster import ArrayRaster, check_wavelengths
from hmp.data.tiles import padded_tile, tile_rows, tile_shape
from hmp.errors import InvalidInput, op_error_line
from hmp.evaluation.smoothing import check_window, context
from hmp.evaluation.spectral_prior import window_means
from hmp.graph.augment import symmetry_probabilities
from hmp.graph.graph import build_logits_graph
from hmp.graph.graph_config import ModelConfig, Placement
from hmp.graph.scene_input import SceneCubes, patches_around
from hmp.mesh.lowering import HeteroLowering
from hmp.mesh.mesh_impl import HeteroMeshImpl
from hmp.planning import apportion
from hmp.run import experiment, fitted_preprocessing, run_files, run_folder
from hmp.run.progress import rate_and_eta
from hmp.run.settings import FLAG_FIELDS

mtf = import_mesh_tensorflow()

# The training flags that name the scene (hmp.train's): {flag: its DataConfig field}.
DATA_FLAGS = {name: FLAG_FIELDS[name][1] for name in (
    "dataset", "data_dir", "labels", "cube_key", "labels_key", "synthetic_layout",
    "synthetic_kind", "seed")}


def smoothed_over(results):
    """The window a run's class probabilities were smoothed over, from its results.json
    (``results``): 1 (none) for runs from before ``--smoothing``."""
    return results.get("smoothing", {}).get("window", 1)


def smoothed_guided(results):
    """Whether a run's smoothing follows the scene's edges (``--smoothing_guide``), from its
    results.json (``results``): as it smoothed, or for a run that smoothed nothing (window
    1), as its flag asked (``hmp.predict --smoothing=N`` smooths as the run would have);
    False for runs from before the guided smoothing."""
    smoothing = results.get("smoothing", {})
    if "guided" not in smoothing:
        return False
    if smoothing.get("window", 1) > 1:
        return smoothing["guided"]
    return bool(results.get("flags", {}).get("smoothing_guide", False))


@dataclasses.dataclass
class TrainedRun:
    """What a run's folder tells about its model: flags, classes, preprocessing, checkpoint."""

    model_dir: str
    flags: dict
    class_names: list
    preprocessor: object   # hmp.data.Preprocessor, fitted on the run's training pixels
    checkpoint: str
    model: object          # the model (a module with logits), from the application
    wavelengths: tuple = ()   # of the training scene's bands, when its file named them
    smoothing: int = 1   # the window its class probabilities were smoothed over
    guided: bool = False   # whether that smoothing was guided (--smoothing_guide)
    guide: object = None   # the hmp.data.Guide fitted with it; None for runs from before
    # the folder it was trained in (its relative paths are from there); None: from before
    working_dir: str = None
    wavelength_units: str = None   # the units of ``wavelengths``, when its file named them
    prior: object = None   # its hmp.evaluation.spectral_prior.SpectralPrior; None: none

    @classmethod
    def open(cls, model_dir, get_model):
        """Reads the run in ``model_dir``; InvalidInput if it is not a finished run.
        ``get_model(name)`` is the application's model lookup (``models.get_model``)."""
        if not os.path.isdir(model_dir):
            raise InvalidInput("not a folder" if os.path.exists(model_dir) else
                               "no such folder")
        results = run_files.read_results(model_dir)
        if results is None or "test" not in results:
            seeds = run_folder.seed_folders(model_dir)
            if seeds:
                hint = "; it holds the runs of --runs: give one of them, e.g. %s" % seeds[0]
            elif run_folder.checkpoint_step(model_dir) is not None:
                hint = "; its training stopped before the end: finish it with python -m " \
                       "hmp.train %s" % run_folder.continuing_flags(model_dir)
            else:
                hint = ""
            raise InvalidInput("%s holds no finished run (no readable results.json)%s"
                               % (model_dir, hint))
        # the weights that classified the run's test pixels: its best epoch's, if it kept one
        checkpoint = (tf.train.latest_checkpoint(model_dir,
                                                 latest_filename=run_files.BEST_CHECKPOINT)
                      or tf.train.latest_checkpoint(model_dir))
        if checkpoint is None:
            raise InvalidInput("%s holds no checkpoint" % model_dir)
        saved = fitted_preprocessing.read(model_dir)
        if smoothed_guided(results) and saved.guide is None:
            raise InvalidInput("%s: results.json says the run's smoothing was guided, but %s "
                               "holds no guide" % (model_dir, fitted_preprocessing.FILE_NAME))
        return cls(model_dir, results["flags"], list(results["test"]["per_class_accuracy"]),
                   saved.preprocessor, checkpoint, get_model(results["flags"]["model"]),
                   saved.wavelengths, smoothed_over(results), smoothed_guided(results),
                   saved.guide, results.get("working_dir"), saved.wavelength_units,
                   saved.prior)

    def classifying(self, tta=None, smoothing=None):
        """(TTA on or off, the smoothing window) of a prediction: the run's own, or those
        given (not None); InvalidInput for a window that is not an odd number >= 1."""
        window = self.smoothing if smoothing is None else smoothing
        check_window(window)
        _check_switch(tta, "tta")
        return (self.flags.get("tta", False) if tta is None else tta), window

    def guide_for(self, window, guided=None):
        """The hmp.data.Guide to smooth a prediction over ``window`` with, or None for the
        window's mean (or no smoothing): as the run, or as ``guided`` says (not None);
        InvalidInput for a guided smoothing of a run that keeps no guide."""
        _check_switch(guided, "smoothing_guide")
        guided = self.guided if guided is None else guided
        if guided and self.guide is None:
            raise InvalidInput("the run in %s keeps no guide (trained before the guided "
                               "smoothing): smooth with the window's mean" % self.model_dir)
        return self.guide if guided and window > 1 else None

    @property
    def model_config(self):
        return ModelConfig(self.flags["model"], self.flags["patch_size"],
                           fitted_preprocessing.output_bands(self.preprocessor),
                           len(self.class_names), self.flags["width"],
                           precision=self.flags.get("precision", "float32"),
                           model=self.model)

    def data_config(self, **given):
        """The scene to classify (an ``experiment.DataConfig``): the run's own, with the
        data flags ``given`` (hmp.train's names, e.g. ``data_dir=``) changed, its files
        read from the folder the run read them from unless ``data_dir`` is given
        (``experiment.with_recorded_folder``); when ``given`` names a ``dataset``, that
        scene with only the flags given."""
        default = experiment.DataConfig()   # a flag a run's flags lack: of before it
        trained = default if "dataset" in given else experiment.from_folder(
            experiment.with_recorded_folder(experiment.DataConfig(
                **{field: self.flags.get(name, getattr(default, field))
                   for name, field in DATA_FLAGS.items()}), self.model_dir),
            self.working_dir)
        return dataclasses.replace(trained, **{DATA_FLAGS[name]: value
                                               for name, value in given.items()})

    def check_bands(self, bands, wavelengths=(), units=None, bad_bands=()):
        """InvalidInput unless a cube of ``bands`` bands (at ``wavelengths`` in ``units``,
        when its file names them; ``bad_bands``: those its header's bbl left out) is
        what the run was trained on."""
        trained = fitted_preprocessing.input_bands(self.preprocessor)
        if bands != trained:
            left_out = (" (bands %s left out: its header's bad band list, bbl)"
                        % ", ".join(map(str, bad_bands)) if bad_bands else "")
            raise InvalidInput("the cube has %d bands%s; the run in %s was trained on %d"
                               % (bands, left_out, self.model_dir, trained))
        check_wavelengths(self.wavelengths, wavelengths, "the cube", self.wavelength_units,
                          units)

    def prepare_scene(self, scene):
        """The model's input cube of ``scene`` and its no-data mask [H, W].

        No-data pixels (NaN or inf in the spectrum) are set to 0, as in training.
        """
        self.check_bands(scene.cube.shape[2], scene.raster.wavelengths,
                         scene.raster.wavelength_units, scene.raster.bad_bands)
        experiment.mask_nodata(scene)   # refuses a scene without a finite pixel
        return self.prepare(scene.cube)

    def prepare(self, cube):
        """(the model's input, the no-data mask) of a cube or a window of one, pixel by
        pixel: no-data pixels (NaN or inf in the spectrum) set to 0, as in training
        (``hmp.run.experiment.prepare``)."""
        prepared, _, nodata = self.prepare_and_scale(cube)
        return prepared, nodata

    def prepare_and_scale(self, cube):
        """(the model's input, the scaled cube with all its bands, the no-data mask) of a
        cube or a window of one, scaled once: ``prepare``'s input, and what the spectral
        prior reads (before the PCA, no-data pixels 0, as
        ``hmp.run.experiment.Experiment.all_bands``)."""
        nodata = experiment.nodata_mask(cube)
        scaled = self.preprocessor.scale(cube)
        pca = self.preprocessor.pca
        prepared = scaled if pca is None else pca.transform(scaled)   # (one array: no PCA)
        prepared[nodata], scaled[nodata] = 0.0, 0.0
        return prepared, scaled, nodata

    def prepare_with_scaled(self, cube):
        """``prepare`` with the scaled cube after the model's bands
        (:meth:`prepare_and_scale`; one array, so that a tile pads both alike:
        ``classify_tiles``)."""
        prepared, scaled, nodata = self.prepare_and_scale(cube)
        return np.concatenate([prepared, scaled], axis=-1), nodata

    def fused(self, probabilities, scaled_padded):
        """``probabilities`` [rows, cols, K] of the pixels whose patches the padded scaled
        cube ``scaled_padded`` (:meth:`prepare_and_scale`'s, padded by the patch radius) holds, fused
        with the run's spectral prior (as they are without one)."""
        if self.prior is None:
            return probabilities
        rows, cols, classes = probabilities.shape
        means = window_means(scaled_padded, self.model_config.patch)
        return self.prior.fused(probabilities.reshape(-1, classes),
                                means.reshape(rows * cols, -1)).reshape(rows, cols, classes)


def open_cube(config):
    """The cube of an ``experiment.DataConfig`` as an ``hmp.data.raster.Raster``: a cube
    file opened, to be read a tile at a time (its labels are not read); a scene given
    by name loaded."""
    if is_cube_file(config.dataset):
        return open_cube_file(config.dataset, config.cube_key)
    scene = experiment.load_scene(config)
    return ArrayRaster(scene.cube, info=scene.raster)


def batch_placement(devices, batch_size):
    """The batch split evenly over ``devices`` (one device: no split)."""
    devices = tuple(devices)
    if len(devices) == 1:
        return Placement("", "", devices, {})
    return Placement("batch:%d" % len(devices), "batch:batch", devices,
                  {"batch": apportion(batch_size, [1.0] * len(devices))})


class InferenceGraph:
    """The model's logits and class probabilities for a batch of a scene's pixels.

    Feed flat pixel indices (``indices``, ``batch_size`` of them); each device
    cuts its patches from its copy of the scene (``scene.load``), turned into the
    symmetry fed to ``symmetry`` (default 0: as they are).
    """

    def __init__(self, config, placement, batch_size, image_shape):
        self.batch_size = batch_size
        self.tf_graph = tf.Graph()
        with self.tf_graph.as_default():
            self.scene = SceneCubes(image_shape, config.patch, config.bands)
            self.indices = tf.placeholder(tf.int32, [batch_size], name="pixel_indices")
            self.symmetry = tf.placeholder_with_default(0, [], name="symmetry")
            graph, mesh, logits = build_logits_graph(
                config, batch_size, patches_around(self.scene, self.indices),
                symmetry=self.symmetry)
            mesh_impl = HeteroMeshImpl(placement.mesh_shape, placement.layout_rules,
                                       list(placement.devices), placement.splits)
            lowering = HeteroLowering(graph, {mesh: mesh_impl})
            self.logits = lowering.export_to_tf_tensor(logits)
            self.probabilities = tf.nn.softmax(self.logits)
            self.copy_masters_to_slices = lowering.copy_masters_to_slices()
            self.saver = tf.train.Saver(tf.global_variables())   # the model's weights only

    def restore(self, session, checkpoint):
        """Loads the weights of ``checkpoint`` into the master variables and the slices."""
        restore_weights(self.saver, session, checkpoint)
        session.run(self.copy_masters_to_slices)


def restore_weights(saver, session, checkpoint):
    """``saver.restore`` of the graph's variables; InvalidInput when the checkpoint lacks a
    weight or holds one of another shape (which TensorFlow's restore of a resource
    variable would take without a word, the graph then failing or classifying wrongly)."""
    held = dict(tf.train.list_variables(checkpoint))
    for variable in session.graph.get_collection(tf.GraphKeys.GLOBAL_VARIABLES):
        name, shape = variable.op.name, variable.shape.as_list()
        if name in held and held[name] != shape:
            raise InvalidInput("checkpoint %s does not fit the model of its run (%s is %s "
                               "there, %s in the model)" % (checkpoint, name, held[name],
                                                           shape))
    try:
        saver.restore(session, checkpoint)
    except (tf.errors.NotFoundError, tf.errors.InvalidArgumentError) as error:
        raise InvalidInput("checkpoint %s does not fit the model of its run (%s)"
                           % (checkpoint, op_error_line(error, limit=300))) from None


class Classifier:
    """``run``'s model restored on ``devices`` in a session of its own, for padded cubes of
    one image shape (a scene's, or a tile's): ``with Classifier(...) as c:
    c.probabilities(padded)``. With ``tta``, probabilities are the mean over the 8
    symmetries of each patch (``hmp.graph.augment.symmetry_probabilities``)."""

    def __init__(self, run, devices, batch_size, image_shape, session_config=None, tta=False):
        self.batch_size, self.tta = batch_size, tta
        self.image_shape = tuple(image_shape)
        self.classes = len(run.class_names)
        self.graph = InferenceGraph(run.model_config, batch_placement(devices, batch_size),
                                    batch_size, self.image_shape)
        self.session = tf.Session(graph=self.graph.tf_graph, config=session_config)
        try:
            self.graph.restore(self.session, run.checkpoint)
        except BaseException:
            self.session.close()
            raise

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.session.close()

    def probabilities(self, padded, shape=None, progress=None):
        """Class probabilities (float32 [rows, cols, classes]) of the top-left ``shape``
        (default: all) of the image whose cube, padded by the patch radius, is
        ``padded``; a smaller image than the graph's fills the top-left of its cube.

        ``progress`` receives the number of pixels done after every batch.
        """
        progress = progress or (lambda pixels: None)
        rows, cols = shape or self.image_shape
        padding = np.subtract(self.graph.scene.padded_shape[:2], self.image_shape)
        if tuple(padded.shape[:2]) != (rows + padding[0], cols + padding[1]):
            raise ValueError("padded cube %s does not pad a %dx%d image"
                             % (padded.shape, rows, cols))
        if (rows, cols) != self.image_shape:   # a tile at the scene's end: top-left
            full = np.zeros(self.graph.scene.padded_shape, np.float32)
            full[:padded.shape[0], :padded.shape[1]] = padded
            padded = full
        self.graph.scene.load(self.session, padded)
        pixels = (np.arange(rows)[:, None] * self.image_shape[1]
                  + np.arange(cols)[None, :]).ravel().astype(np.int32)
        probabilities = np.zeros((len(pixels), self.classes), np.float32)
        for start, count, indices in padded_batches(pixels, self.batch_size):
            values = symmetry_probabilities(
                self.session, self.graph.probabilities,
                lambda k, indices=indices: {self.graph.indices: indices, self.graph.symmetry: k},
                self.tta).mean(axis=0)
            probabilities[start:start + count] = values[:count]
            progress(start + count)
        return probabilities.reshape(rows, cols, -1)


def classify(run, cube, devices, batch_size, session_config=None, progress=None, tta=False,
             scaled=None):
    """Class probabilities (float32 [H, W, classes]) of every pixel of the model's input
    ``cube`` (``TrainedRun.prepare_scene``), by ``run``'s model on ``devices``, the whole scene in
    one graph; with ``tta``, their mean over the 8 symmetries of each patch; with the
    scene's ``scaled`` cube (``TrainedRun.prepare_and_scale``), fused with the run's spectral prior
    (None: the network's alone).

    ``progress`` receives a text after every batch and None at the end.
    """
    progress = progress or (lambda text: None)
    pixels, started = cube.shape[0] * cube.shape[1], time.perf_counter()
    with Classifier(run, devices, batch_size, cube.shape[:2], session_config, tta) as model:
        probabilities = model.probabilities(
            PatchExtractor(cube, run.model_config.patch).padded,
            progress=lambda done: progress("classifying  %s" % _progress(done, pixels, started)))
    progress(None)
    if scaled is None:
        return probabilities
    return run.fused(probabilities, PatchExtractor(scaled, run.model_config.patch).padded)


def _progress(done, pixels, started):
    """'D/N pixels  R samples/s  ETA T' after ``done`` of ``pixels`` since ``started``."""
    return "%d/%d pixels  %s" % (done, pixels,
                                 rate_and_eta(done, pixels, time.perf_counter() - started))


# Bytes a pixel of a tile's window costs while it is read, preprocessed and loaded
# into the graph, per band of the file and per band of the model's input (float32
# copies and numpy's float64 temporaries of the brightness division, the scaling and the
# PCA; tracemalloc found 23 bytes a band of the file at the peak with the division, 19
# without), and a pixel's
# results until its row of tiles is written: per class, and for its no-data flag and
# its class as numpy computes it (int64).
WINDOW_BYTES_PER_INPUT_BAND = 24
WINDOW_BYTES_PER_MODEL_BAND = 24
# Smoothing a row of tiles (``hmp.evaluation.smoothing.smooth_rows``) holds, per class,
# float32 copies of its rows and of the context's rows above and below them: those
# waiting, the stack with the rows above, the weighted and the summed probabilities, and
# the means; guided, also the covariances, the slopes and intercepts and their means
# (estimates from the arrays the filter makes; a tracemalloc of the guided 7 x 7 filter,
# smooth_rows alone with 40 classes, found 41 bytes a class and pixel for one block of
# rows, 81 for blocks of 20 rows and 134 for blocks of 7, where the estimate with the
# context's rows gives 52, 83 and 141: docs/benchmarks.md, "Prediction memory").
RESULT_BYTES_PER_CLASS = 4
# A run with a spectral prior also holds, per band of the file, the scaled cube, its copy
# beside the model's input and that padded (float32), and the padded window's float64
# copy, its filtered means and their flat copy: an estimate from the arrays, not measured
# (the model's bands' copies in the joined arrays are within WINDOW_BYTES_PER_MODEL_BAND).
PRIOR_BYTES_PER_INPUT_BAND = 36
SMOOTHING_BYTES_PER_CLASS = 20
GUIDED_SMOOTHING_BYTES_PER_CLASS = 48
RESULT_BYTES_PER_PIXEL = 17


def tiling(run, raster, memory_bytes, window=1, guide=None):
    """The rows of tiles (``hmp.data.tiles.tile_rows``) of ``raster``'s scene whose
    windows and results (smoothed over ``window`` x ``window`` pixels, with ``guide``
    or the mean, with the rows of the smoothing's context) fit ``memory_bytes``; their
    shape is the first tile's."""
    bands_in = fitted_preprocessing.input_bands(run.preprocessor)
    bands_out = fitted_preprocessing.output_bands(run.preprocessor)
    per_input_band = WINDOW_BYTES_PER_INPUT_BAND + (
        0 if run.prior is None else PRIOR_BYTES_PER_INPUT_BAND)
    shape = tile_shape(memory_bytes, raster.shape[:2], run.model_config.patch // 2,
                       per_input_band * bands_in + WINDOW_BYTES_PER_MODEL_BAND * bands_out,
                       (RESULT_BYTES_PER_CLASS + _smoothing_bytes(window, guide))
                       * len(run.class_names) + RESULT_BYTES_PER_PIXEL,
                       held_rows=2 * context(window, guide is not None))
    return tile_rows(raster.shape[:2], shape)


def _smoothing_bytes(window, guide):
    """Bytes per class and pixel of smoothing probabilities over ``window`` (with
    ``guide``, or the mean)."""
    if window == 1:
        return 0
    return SMOOTHING_BYTES_PER_CLASS if guide is None else GUIDED_SMOOTHING_BYTES_PER_CLASS


def classify_tiles(run, raster, rows_of_tiles, model, progress=None, guide=None):
    """Yields, for each row of tiles (top to bottom), its pixel rows (a slice), the class
    probabilities of its pixels (float32 [rows, W, classes]), their no-data mask
    [rows, W] and ``guide``'s image of them (an ``hmp.data.Guide``'s, [rows, W]; None
    without one): ``raster`` (an ``hmp.data.raster.Raster``) classified by ``model`` (a
    :class:`Classifier` of the tiles' shape) a tile at a time, each read with the patch
    radius around it, and fused with the run's spectral prior when it has one (each
    tile's patch means from that window). The probabilities equal :func:`classify`'s of
    the whole scene (given its scaled cube).

    ``progress`` receives a text after every batch and None at the end.
    """
    progress = progress or (lambda text: None)
    margin = run.model_config.patch // 2
    bands = run.model_config.bands
    height, width = raster.shape[:2]
    count = sum(len(row) for row in rows_of_tiles)
    done, pixels_done, started = 0, 0, time.perf_counter()
    try:   # the progress line ended also when a signal stops the work
        for row in rows_of_tiles:
            rows = row[0].rows
            probabilities = np.zeros((rows.stop - rows.start, width, model.classes), np.float32)
            nodata = np.zeros((rows.stop - rows.start, width), bool)
            image = None if guide is None else np.zeros((rows.stop - rows.start, width),
                                                         np.float32)
            for tile in row:
                done += 1
                padded, nodata[:, tile.cols] = padded_tile(
                    raster, tile, margin,
                    run.prepare if run.prior is None else run.prepare_with_scaled)
                padded, scaled = padded[..., :bands], padded[..., bands:]
                if image is not None:
                    image[:, tile.cols] = guide.image(
                        padded[margin:margin + tile.shape[0], margin:margin + tile.shape[1]])

                def say(pixels):   # of this tile, done so far
                    progress("tile %d/%d  %s" % (done, count, _progress(
                        pixels_done + pixels, height * width, started)))

                probabilities[:, tile.cols] = run.fused(
                    model.probabilities(padded, tile.shape, say), scaled)
                pixels_done += tile.shape[0] * tile.shape[1]
            yield rows, probabilities, nodata, image
    finally:
        progress(None)


def _check_switch(value, name):
    """InvalidInput for a switch ``name`` given as other than True, False or None (as the
    run), e.g. the text "no", which would count as on."""
    if value is not None and not isinstance(value, bool):
        raise InvalidInput("%s=%r: give True, False or None (as the run)" % (name, value))
