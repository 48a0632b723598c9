"""A trained run's model on any devices: the class probabilities of every pixel of a scene.

A checkpoint holds whole tensors (each Mesh-TF variable's master copy, under
its own name; the per-device slices are not saved), so a model trained on any
plan restores on any other device set: :class:`InferenceGraph` lowers the
model with the batch split evenly over the devices it is given (one device:
no split) and restores only the model's weights, not the optimizer's. The
scene is transformed with the run's own preprocessing statistics
(``hmp.run.fitted_preprocessing``), never fitted again on the scene classified.
"""

import dataclasses
import os
import time

import numpy as np
import tensorflow.compat.v1 as tf

from hmp.compat import import_mesh_tensorflow
from hmp.data import PatchExtractor, Scene, is_cube_file, read_array
from hmp.errors import InvalidInput
from hmp.mesh.lowering import HeteroLowering
from hmp.mesh.mesh_impl import HeteroMeshImpl
from hmp.planning import apportion
from hmp.run import experiment, fitted_preprocessing, runs
from hmp.run.augment import symmetry_probabilities
from hmp.run.graph import Placement, ModelConfig, build_logits_graph
from hmp.run.progress import rate_and_eta
from hmp.run.scene_input import SceneCubes, patches_around
from hmp.run.trainer import BestEpoch

mtf = import_mesh_tensorflow()

# The training flags that name the scene (hmp.train's), as DataConfig fields.
DATA_FLAGS = {"dataset": "dataset", "data_dir": "data_dir", "labels": "labels_path",
              "cube_key": "cube_key", "labels_key": "labels_key",
              "synthetic_layout": "synthetic_layout", "seed": "seed"}


@dataclasses.dataclass
class Run:
    """What a run's folder tells about its model: flags, classes, preprocessing, checkpoint."""

    model_dir: str
    flags: dict
    class_names: list
    preprocessor: object   # hmp.data.Preprocessor, fitted on the run's training pixels
    checkpoint: str
    model: object          # the model (a module with logits), from the application

    @classmethod
    def open(cls, model_dir, get_model):
        """Reads the run in ``model_dir``; InvalidInput if it is not a finished run.
        ``get_model(name)`` is the application's model lookup (``models.get_model``)."""
        if not os.path.isdir(model_dir):
            raise InvalidInput("not a folder" if os.path.exists(model_dir) else
                               "no such folder")
        results = runs.read_json(os.path.join(model_dir, "results.json"))
        if results is None or "test" not in results:
            raise InvalidInput("%s holds no finished run (no readable results.json)"
                               % model_dir)
        # the weights that classified the run's test pixels: its best epoch's, if it kept one
        checkpoint = (tf.train.latest_checkpoint(model_dir, latest_filename=BestEpoch.FILE)
                      or tf.train.latest_checkpoint(model_dir))
        if checkpoint is None:
            raise InvalidInput("%s holds no checkpoint" % model_dir)
        return cls(model_dir, results["flags"], list(results["test"]["per_class_accuracy"]),
                   fitted_preprocessing.load(model_dir), checkpoint,
                   get_model(results["flags"]["model"]))

    @property
    def model_config(self):
        return ModelConfig(self.flags["model"], self.flags["patch_size"],
                           fitted_preprocessing.output_bands(self.preprocessor),
                           len(self.class_names), self.flags["width"], model=self.model)

    def data_config(self, **given):
        """The scene to classify (an ``experiment.DataConfig``): the run's own, with the
        data flags ``given`` (hmp.train's names, e.g. ``data_dir=``) changed; when
        ``given`` names a ``dataset``, that scene with only the flags given."""
        fields = {} if "dataset" in given else {
            field: self.flags[name] for name, field in DATA_FLAGS.items()}
        fields.update({DATA_FLAGS[name]: value for name, value in given.items()})
        return experiment.DataConfig(**fields)

    def preprocess(self, scene):
        """The model's input cube of ``scene`` and its no-data mask [H, W].

        No-data pixels (NaN or inf in the spectrum) are set to 0, as in training.
        """
        bands = fitted_preprocessing.input_bands(self.preprocessor)
        if scene.cube.shape[2] != bands:
            raise InvalidInput("the cube has %d bands; the run in %s was trained on %d"
                               % (scene.cube.shape[2], self.model_dir, bands))
        nodata = experiment.mask_nodata(scene)
        cube = self.preprocessor.transform(scene.cube)
        cube[nodata] = 0.0   # as in training (hmp.run.experiment.prepare)
        return cube, nodata


def load_scene(config):
    """The scene of an ``experiment.DataConfig``; a cube file may come without labels
    (its label map is then all 0: unlabelled)."""
    if config.labels_path is None and is_cube_file(config.dataset):
        cube = read_array(config.dataset, config.cube_key, key_name="cube_key")
        return Scene(os.path.splitext(os.path.basename(config.dataset))[0], cube,
                     np.zeros(np.shape(cube)[:2], np.int32))
    return experiment.load_scene(config)


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
    cuts its patches from its copy of the scene (``load_scene``), turned into the
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
    """``saver.restore``; InvalidInput when the checkpoint lacks or misshapes a weight."""
    try:
        saver.restore(session, checkpoint)
    except (tf.errors.NotFoundError, tf.errors.InvalidArgumentError) as error:
        raise InvalidInput("checkpoint %s does not fit the model of its run (%s)"
                           % (checkpoint, error.message.splitlines()[0])) from None


def classify(run, cube, devices, batch_size, session_config=None, progress=None, tta=False):
    """Class probabilities (float32 [H, W, classes]) of every pixel of the model's input
    ``cube`` (``Run.preprocess``), by ``run``'s model on ``devices``; with ``tta``, their
    mean over the 8 symmetries of each patch (``hmp.run.augment.symmetry_probabilities``).

    ``progress`` receives a text after every batch and None at the end.
    """
    progress = progress or (lambda text: None)
    height, width = cube.shape[:2]
    graph = InferenceGraph(run.model_config, batch_placement(devices, batch_size), batch_size,
                           (height, width))
    pixels = height * width
    probabilities = np.zeros((pixels, len(run.class_names)), np.float32)
    batches, started = -(-pixels // batch_size), time.perf_counter()
    with tf.Session(graph=graph.tf_graph, config=session_config) as session:
        graph.restore(session, run.checkpoint)
        graph.scene.load(session, PatchExtractor(cube, run.model_config.patch).padded)
        for done, start in enumerate(range(0, pixels, batch_size), start=1):
            indices = np.arange(start, start + batch_size, dtype=np.int32)
            indices[indices >= pixels] = 0   # pixel 0 fills the last short batch
            values = symmetry_probabilities(session, graph.probabilities, graph.symmetry,
                                            {graph.indices: indices}, tta).mean(axis=0)
            probabilities[start:start + batch_size] = values[:pixels - start]
            progress("classifying  batch %d/%d  %s" % (done, batches, rate_and_eta(
                done, batches, time.perf_counter() - started, batch_size)))
    progress(None)
    return probabilities.reshape(height, width, -1)
