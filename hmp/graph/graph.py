"""One lowered training graph: a model, a mesh layout, an optimizer.

``TrainingGraph`` is what the trainer, the profiler and the benchmarks run: it
builds the model's Mesh-TF graph for a global batch, lowers it on a
``HeteroMeshImpl`` with the given splits, and exposes the TensorFlow pieces
(the pixel-index and label placeholders, fed with the switches of training, symmetry
and field look through ``feed``, the loss, class probabilities, the ordered training
step, the master/slice copy ops, a saver of whole tensors). Its input is the scene on
the devices (``hmp.graph.scene_input``): load the padded cube once with
``load_scene``, then an epoch's pixel indices and labels (``load_batches``, run by
``kept_steps``) or feed them every step. What it is built
from (the model's config, the placement, the recipe) are plain values of
``hmp.graph.graph_config``; the TensorFlow side of the model's config is :func:`model_logits`.
"""

import contextlib
import dataclasses
import inspect
import math

import numpy as np

import tensorflow.compat.v1 as tf

from hmp import layers

from hmp.compat import import_mesh_tensorflow
from hmp.graph.augment import augment, in_symmetry
from hmp.graph.graph_config import Recipe
from hmp.graph.projection import project
from hmp.graph.scene_input import SceneCubes, patches_around
from hmp.mesh import ops
from hmp.mesh.device_inputs import DeviceInputs
from hmp.mesh.lowering import HeteroLowering
from hmp.mesh.mesh_impl import HeteroMeshImpl
from hmp.mesh.optimizers import learning_rate_at, make_optimizer
from hmp.mesh.train_step import train_step

mtf = import_mesh_tensorflow()

# A run's latest checkpoints kept (its saver's max_to_keep).
CHECKPOINTS_KEPT = 3

# The name scope of a graph's k-th step for k >= 2 (``TrainingGraph.steps_per_run``); the
# first step's ops have none of their own.
LATER_STEP_SCOPE = "step_%d"
# The roles of the step's inputs kept on the devices (``load_batches``)
KEPT_INDICES, KEPT_LABELS = "pixel_indices", "labels"


def model_logits(config, x, classes, training=True):
    """The float32 logits of ``config``'s model (an ``hmp.graph.graph_config.ModelConfig``)
    on the patches ``x`` (float32), computed in the config's precision: the patches are
    cast to its dtype, the logits back to float32. ``training`` reaches models whose
    ``logits`` take it (batch norm and dropout switch on it)."""
    kwargs = {"width": config.width} if config.width else {}
    if "training" in inspect.signature(config.model.logits).parameters:
        kwargs["training"] = training
    with layers.batch_statistics(config.batch_norm):
        logits = config.model.logits(mtf.cast(x, tf.as_dtype(config.compute.dtype)), classes,
                                     **kwargs)
    return mtf.cast(logits, tf.float32)


def imported(x):
    """Model input from ``x``, a TensorFlow tensor of patches (for ``build_model_graph``)."""
    return lambda mesh, shape: mtf.import_tf_tensor(mesh, x, shape)


def build_logits_graph(config, batch_size, inputs, training=False, augmentation=None,
                       symmetry=None, projection=None, look_strength=None):
    """Builds the model's mtf graph up to its logits; returns (mtf graph, mesh, logits).

    ``inputs(mesh, shape)`` makes the mtf patches of ``shape`` [batch, h, w,
    bands] (``imported(x)``, or ``hmp.graph.scene_input.patches_around``). The logits are
    [batch, classes]. ``training``: False (inference: batch norm's moving
    averages, no dropout), True, or a TensorFlow float scalar switching at run
    time (1.0 training, 0.0 inference); ``augmentation``: an
    ``hmp.graph.graph_config.Augmentation`` of the patches while training, or None;
    ``symmetry``: a TensorFlow int32 scalar turning every patch into that symmetry of
    the square (``hmp.graph.augment.in_symmetry``; test-time augmentation), or None;
    ``projection``: an ``hmp.graph.graph_config.Projection``: ``inputs`` then makes
    patches of its raw bands, projected onto ``config.bands`` after augmentation;
    ``look_strength``: a TensorFlow float scalar, the share of the field look's strengths
    drawn (``hmp.graph.augment.augment``), or None (all of them).
    """
    graph = mtf.Graph()
    mesh = mtf.Mesh(graph, "mesh")
    bands = mtf.Dimension("bands", config.bands)
    mtf_x = inputs(mesh, mtf.Shape(
        [mtf.Dimension("batch", batch_size), mtf.Dimension("h", config.patch),
         mtf.Dimension("w", config.patch),
         bands if projection is None else mtf.Dimension("raw_bands", projection.raw_bands)]))
    mode = (training if isinstance(training, bool)
            else mtf.import_tf_tensor(mesh, training, mtf.Shape([])))
    if symmetry is not None:
        mtf_x = in_symmetry(mtf_x, mtf.import_tf_tensor(mesh, symmetry, mtf.Shape([])))
    if augmentation is not None and augmentation.active and mode is not False:
        mtf_x = augment(mtf_x, 1.0 if mode is True else mode, augmentation,
                        1.0 if look_strength is None or not augmentation.field_look
                        else mtf.import_tf_tensor(mesh, look_strength, mtf.Shape([])))
    if projection is not None:
        mtf_x = project(mtf_x, projection, bands)
    return graph, mesh, model_logits(config, mtf_x, mtf.Dimension("classes", config.n_classes),
                                     mode)


def build_model_graph(config, batch_size, inputs, y, training=None, recipe=Recipe(),
                      symmetry=None, look_strength=None):
    """Builds the model's mtf graph; returns
    (mtf graph, mesh, loss, logits, number correct).

    ``inputs``, ``symmetry`` and ``look_strength`` as for :func:`build_logits_graph`;
    ``y`` is the TensorFlow
    tensor of labels [batch]; ``training`` a TensorFlow float scalar, 1.0
    while training and 0.0 at inference (None: always training), which
    switches batch norm, dropout and the augmentation of ``recipe``. The loss
    is the mean cross-entropy, weighted by ``recipe.class_weights``.
    """
    graph, mesh, logits = build_logits_graph(
        config, batch_size, inputs, True if training is None else training, recipe.augmentation,
        symmetry, recipe.projection, look_strength)
    batch = mtf.Dimension("batch", batch_size)
    classes = mtf.Dimension("classes", config.n_classes)
    mtf_y = mtf.import_tf_tensor(mesh, y, mtf.Shape([batch]))
    cross_entropy = layers.softmax_cross_entropy(logits, mtf_y, classes)
    if recipe.class_weights is not None:
        weights = mtf.import_tf_tensor(
            mesh, tf.constant(recipe.class_weights, tf.float32), mtf.Shape([classes]))
        cross_entropy *= mtf.einsum([ops.one_hot(mtf_y, classes, dtype=logits.dtype), weights],
                                    output_shape=mtf.Shape([batch]))
    # the mean as a sum of shares: its pending all-reduce stays lazy (``DeviceMetrics``)
    loss = mtf.reduce_sum(cross_entropy * (1.0 / batch_size))
    predicted = ops.argmax(logits, classes)
    correct = mtf.reduce_sum(mtf.to_float(mtf.equal(predicted, mtf_y)))
    return graph, mesh, loss, logits, correct


class DeviceMetrics:
    """Sums of mtf scalars over the steps, kept on the devices: no collective a step.

    A scalar that sums over a split dimension (the loss of a batch split) is an
    all-reduce of per-device partial sums; ``accumulate`` (run with each step) adds
    each device's partial sum to a variable of its own instead, and ``read`` sums
    those on the client when the totals are wanted (every few steps, not every step).
    A device that holds a copy of another's partial sum (the replicas of a model split)
    counts its share of it. The sums are the devices' ``count`` variables; each step of
    a graph that runs several (``TrainingGraph.steps_per_run``) adds to the same ones.
    """

    def __init__(self, devices, count):
        self._totals = []
        for pnum, device in enumerate(devices):
            with tf.device(device):
                self._totals.append(tf.Variable(
                    tf.zeros([count]), trainable=False, name="metric_sums_%d" % pnum,
                    collections=[tf.GraphKeys.LOCAL_VARIABLES]))
        # zeroes the sums (their initialiser: also where a restored session has not run it)
        self.reset = tf.group([total.initializer for total in self._totals])

    def accumulate(self, lowering, mesh_impl, scalars):
        """The op adding one step's ``scalars`` (mtf, as lowered by ``lowering``) to the
        sums, each device its partial sums."""
        parts = [_device_parts(lowering, mesh_impl, scalar) for scalar in scalars]
        adds = []
        with tf.name_scope("metric_sums"):   # the step's metrics part (hmp.run.profiler)
            for pnum, (device, total) in enumerate(zip(mesh_impl.devices, self._totals)):
                with tf.device(device):
                    adds.append(tf.assign_add(total, tf.stack(
                        [tf.cast(p[pnum], tf.float32) for p in parts])))
            return tf.group(adds)

    def read(self, session):
        """Each scalar's sum over the steps since the last ``reset``, as a numpy array."""
        return np.sum(session.run(self._totals), axis=0)


def _device_parts(lowering, mesh_impl, scalar):
    """Per-device TensorFlow scalars that add up to the mtf ``scalar``, with no all-reduce:
    the partial sums of its pending one (``mtf.LazyAllreduceSum``), each divided by the
    number of devices that hold the same partial sum, on its device (unplaced, the
    division could land on another task: two hand-overs in the middle of every step)."""
    lowered = lowering.tensors[scalar]
    if isinstance(lowered, mtf.LazyAllreduceSum):
        parts, summed_over = lowered.laid_out_input.tensor_list, lowered.mesh_axes
    else:
        parts, summed_over = lowered.to_laid_out_tensor().tensor_list, []
    copies = mesh_impl.size // math.prod(mesh_impl.shape[a].size for a in summed_over)
    divided = []
    for device, part in zip(mesh_impl.devices, parts):
        with tf.device(device):
            divided.append(part / copies)
    return divided


class TrainingGraph:
    """A model lowered on a placement, with an ordered training step.

    Everything lives in its own ``tf.Graph`` (``self.tf_graph``) so several
    (e.g. before and after re-planning) can coexist.

    ``steps_per_run`` (K) lowers the step K times, the k-th after the (k-1)-th
    (every op of a step after the previous step's updates), on the same variables:
    one ``session.run`` of ``train_ops[j - 1]`` runs j steps on j batches
    (``feed_steps``), so the client's round trip and the workers' start are paid once
    per j steps. Each step equals the step of a graph of one (the same variables,
    random draws keyed by the global step); ``train_op`` is ``train_ops[0]``, and the
    loss, probabilities and placeholders are the first step's.

    Each device is fed its own slice of the step's placeholders (or keeps the batches of a
    run of steps, ``load_batches`` and ``kept_steps``) and keeps its own step counter,
    from which it computes the learning rate, the random draws' key and Adafactor's decay
    (``hmp.mesh.device_inputs``): nothing crosses between devices before the step's first
    collective. So feed it through ``feed`` or ``feed_steps`` (a feed of the placeholders
    alone leaves the devices' own unfed), or run ``kept_steps``, and run
    ``copy_masters_to_slices`` after the weights are initialised or restored (it also
    sets the counters to the global step).
    """

    def __init__(self, config, placement, batch_size, image_shape, optimizer="adam",
                 learning_rate=1e-3, seed=0, recipe=Recipe(), steps_per_run=1):
        if steps_per_run < 1:
            raise ValueError("steps_per_run must be at least 1, got %r" % steps_per_run)
        self.config = config
        self.placement = placement
        self.batch_size = batch_size
        self.projection = recipe.projection   # the scene: the scaled cube of all bands
        self.tf_graph = tf.Graph()
        with self.tf_graph.as_default():
            self.scene = SceneCubes(image_shape, config.patch, recipe.scene_bands(config))
            tf.set_random_seed(seed)   # the same seed gives the same initial weights
            self.global_step = tf.train.get_or_create_global_step()
            # 1.0 while training; ``feed(..., training=False)`` feeds 0.0 (inference).
            # These three are fed through ``feed`` (the look's strength also through
            # ``kept_steps`` and ``feed_steps``): each device has its own.
            self._training = tf.placeholder_with_default(1.0, [], name="training")
            # Feed k to classify the patches in symmetry k (hmp.graph.augment.symmetries).
            self._symmetry = tf.placeholder_with_default(0, [], name="symmetry")
            # The share of the field look's strengths drawn (hmp.run.look_yield).
            self._look_strength = tf.placeholder_with_default(1.0, [], name="look_strength")
            self.metrics = DeviceMetrics(placement.devices, 2)
            self.device_inputs = DeviceInputs(self.global_step)
            self._steps = []
            for k in range(steps_per_run):
                self._steps.append(self._lowered_step(
                    k, optimizer, learning_rate, recipe,
                    self._steps[-1].train_op if self._steps else None))
            first = self._steps[0]
            self.indices, self.y = first.indices, first.y
            self.mesh_impl, self.lowering, self.mtf_graph = (
                first.mesh_impl, first.lowering, first.mtf_graph)
            self.loss = first.loss
            self.probabilities = first.probabilities
            self.correct = first.correct
            self.train_ops = [step.train_op for step in self._steps]
            self.train_op = self.train_ops[0]   # runs one step; its value is the step after it
            self.copy_masters_to_slices = tf.group(self.lowering.copy_masters_to_slices(),
                                                   self.device_inputs.sync())
            self.copy_slices_to_masters = self.lowering.copy_slices_to_masters()
            # Local batch statistics: each replica's moving statistics, averaged before
            # they are saved or classify (``average_replicas``); None without them.
            self._average_replica_statistics = (self.lowering.average_over_replicas(
                first.replica_statistics, mtf.Dimension("batch", batch_size))
                if first.replica_statistics else None)
            self.init = tf.group(tf.global_variables_initializer(), self.metrics.reset)
            self.saver = tf.train.Saver(max_to_keep=CHECKPOINTS_KEPT,
                                        save_relative_paths=True)   # movable

    @property
    def steps_per_run(self):
        return len(self._steps)

    def series_saver(self, max_to_keep):
        """A saver of another series of checkpoints, keeping its newest ``max_to_keep``
        (None: all): ``saver``'s save and restore ops, so that it adds none to the graph
        and its first save runs what the run's saves have prepared on the devices."""
        saver_def = tf.train.SaverDef()
        saver_def.CopyFrom(self.saver.as_saver_def())
        saver_def.max_to_keep = max_to_keep or 0
        return tf.train.Saver(saver_def=saver_def, save_relative_paths=True)

    def _lowered_step(self, k, optimizer, learning_rate, recipe, after):
        """The ``k``-th (0-based) lowered step, every op of it after the op ``after``
        (None for the first); the later steps reuse the first's variables, and their ops
        lie in the name scope ``step_<k+1>`` (random draws ignore it,
        ``HeteroMeshImpl.random``)."""
        config, placement, batch_size = self.config, self.placement, self.batch_size
        with contextlib.ExitStack() as later:
            # fed tensors first: a fed placeholder made under the control dependency
            # would let its consumers skip it
            indices = tf.placeholder(tf.int32, [batch_size], name="pixel_indices")
            y = tf.placeholder(tf.int32, [batch_size], name="labels")
            self.device_inputs.keep(indices, KEPT_INDICES)
            self.device_inputs.keep(y, KEPT_LABELS)
            if after is not None:
                later.enter_context(tf.name_scope(LATER_STEP_SCOPE % (k + 1)))
                later.enter_context(tf.variable_scope(tf.get_variable_scope(), reuse=True))
                later.enter_context(tf.control_dependencies([after]))
            known = {key: len(tf.get_collection(key))
                     for key in (layers.UPDATE_OPS, layers.REPLICA_STATISTICS)}
            graph, mesh, loss, logits, correct = build_model_graph(
                config, batch_size, patches_around(self.scene, indices), y,
                self._training, recipe, self._symmetry, self._look_strength)

            def at_step(function):   # an mtf scalar of function(step), on each device
                value = function(self.global_step)   # what the devices' imports replace
                self.device_inputs.of_step(value, function)
                return mtf.import_tf_tensor(mesh, value, mtf.Shape([]))

            rate = at_step(lambda step: learning_rate_at(
                step, learning_rate, recipe.schedule, recipe.total_steps, recipe.warmup_steps))
            updates = train_step(
                loss, make_optimizer(optimizer, rate, recipe.weight_decay, at_step),
                config.compute.loss_scale)
            # batch norm's moving averages
            updates += tf.get_collection(layers.UPDATE_OPS)[known[layers.UPDATE_OPS]:]
            mesh_impl = HeteroMeshImpl(placement.mesh_shape, placement.layout_rules,
                                       list(placement.devices), placement.splits,
                                       device_inputs=self.device_inputs)
            lowering = HeteroLowering(graph, {mesh: mesh_impl})
            accumulate = self.metrics.accumulate(lowering, mesh_impl, [loss, correct])
            # each device's counter: after its own reads of it, nothing else
            counted = self.device_inputs.increments()
            with tf.control_dependencies(
                    [lowering.lowered_operation(u) for u in updates] + [accumulate] + counted):
                train_op = tf.assign_add(self.global_step, 1)
            return _LoweredStep(
                indices, y, graph, mesh_impl, lowering,
                lowering.export_to_tf_tensor(loss),
                tf.nn.softmax(lowering.export_to_tf_tensor(logits)),
                lowering.export_to_tf_tensor(correct), train_op,
                tf.get_collection(layers.REPLICA_STATISTICS)[
                    known[layers.REPLICA_STATISTICS]:])

    def feed(self, indices, labels, training=True, look_strength=None, symmetry=0):
        """The feed of one step: flat pixel indices and 0-based labels, ``batch_size``
        each; ``training=False`` for inference (batch norm's moving averages, no
        dropout, no augmentation), with the patches turned into ``symmetry`` (0: as they
        are; ``hmp.graph.augment.symmetries``); ``look_strength``: the share of the
        field look's strengths drawn while training (None: all, and nothing more is
        fed). Each device is fed its own (``hmp.mesh.device_inputs``)."""
        feed = {self.indices: indices, self.y: labels}
        if not training:
            feed[self._training] = 0.0
            if symmetry:
                feed[self._symmetry] = symmetry
        elif look_strength is not None:
            feed[self._look_strength] = look_strength
        return self.device_inputs.feed(feed)

    def feed_steps(self, batches, look_strength=None):
        """``(train op, feed)`` running one step on each of ``batches`` (1 to
        ``steps_per_run`` ``(indices, labels)`` pairs) in one ``session.run``; the op's
        value is the global step after the last. ``look_strength`` as for ``feed``. (The
        trainer's steps take kept batches, ``kept_steps``; tests compare them with this.)"""
        train_op, feed = self._run_of(len(batches), look_strength)
        for step, (indices, labels) in zip(self._steps, batches):
            feed[step.indices], feed[step.y] = indices, labels
        return train_op, self.device_inputs.feed(feed)

    def load_batches(self, session, batches):
        """Keeps ``batches`` (``(indices, labels)`` per step) on the devices, each device
        its slices, in one run (``hmp.mesh.device_inputs``): from the global step now, each
        step run by ``kept_steps`` takes the next of them, and after the last they start
        over. A step fed its batch (``feed``, ``feed_steps``) still takes the fed one."""
        session.run(*self.device_inputs.load({KEPT_INDICES: [b[0] for b in batches],
                                              KEPT_LABELS: [b[1] for b in batches]}))

    def kept_steps(self, count, look_strength=None):
        """``(train op, feed)`` running the next ``count`` (1 to ``steps_per_run``) of the
        batches kept on the devices (``load_batches``) in one ``session.run``: nothing is
        fed but ``look_strength`` (as for ``feed``), so no device waits for a hand-over
        from the client's task before its step. Before any ``load_batches`` of this
        session, running it fails on the kept batches' uninitialised variables."""
        train_op, feed = self._run_of(count, look_strength)
        return train_op, self.device_inputs.feed(feed)

    def _run_of(self, count, look_strength):
        """The train op of a run of ``count`` steps and the feed of ``look_strength``."""
        if not 1 <= count <= len(self._steps):
            raise ValueError("a run takes 1 to %d steps, got %d" % (len(self._steps), count))
        return (self.train_ops[count - 1],
                {} if look_strength is None else {self._look_strength: look_strength})

    def average_replicas(self, session):
        """Averages the replicas' copies of local batch statistics (``hmp.layers``) in
        ``session``; nothing (no round trip) for a graph without them."""
        if self._average_replica_statistics is not None:
            session.run(self._average_replica_statistics)

    def load_scene(self, session, padded_cube):
        """Loads the padded, preprocessed cube into every device's copy (once per session)."""
        self.scene.load(session, padded_cube)

    def session(self, padded_cube, config=None, target=""):
        """A session on this graph (``target``: a gRPC master, or "" for in-process),
        initialised with fresh weights and the scene ``padded_cube``. Its variables are
        its own (``isolate_session_state``): on a server, another graph's of the same
        names (a profile at another batch, a plan kept beside) are other variables."""
        isolated = tf.ConfigProto()
        if config is not None:
            isolated.CopyFrom(config)
        isolated.isolate_session_state = True
        session = tf.Session(target=target or "", graph=self.tf_graph, config=isolated)
        session.run(self.init)
        session.run(self.copy_masters_to_slices)
        self.load_scene(session, padded_cube)
        return session


@dataclasses.dataclass(frozen=True)
class _LoweredStep:
    """One lowered training step of a ``TrainingGraph``: its placeholders (pixel indices,
    labels), mtf graph, mesh implementation and lowering, exported loss,
    class probabilities and number right, the op that runs it, and its replica-local
    batch statistics (mtf variables)."""

    indices: tf.Tensor
    y: tf.Tensor
    mtf_graph: object
    mesh_impl: HeteroMeshImpl
    lowering: HeteroLowering
    loss: tf.Tensor
    probabilities: tf.Tensor
    correct: tf.Tensor
    train_op: tf.Tensor
    replica_statistics: list
