"""Builds small split CNNs on virtual CPU devices and runs them, for the tests.

The reference for every comparison is the same model lowered by *stock*
Mesh-TensorFlow (``PlacementMeshImpl`` + ``mtf.Lowering``) on one device,
with the same initial weights loaded into the master variables. Every graph
is seeded (``reset_graph``), so initial weights, and with them every rounding
difference a test compares, are the same in every run.
"""

import collections

import numpy as np
import tensorflow.compat.v1 as tf

import hmp
from hmp import layers
from hmp.mesh import mesh_impl

mtf = mesh_impl.mtf

N_VIRTUAL_CPUS = 4
BATCH = 12
N_CLASSES = 4
CPUS = ["/cpu:%d" % i for i in range(N_VIRTUAL_CPUS)]
SEED = 0

MeshConfig = collections.namedtuple("MeshConfig", "shape layout devices splits hosts allreduce",
                                    defaults=(None, "hierarchical"))

SINGLE_DEVICE = MeshConfig("", "", [""], {})
MODEL_SPLIT = MeshConfig("model:3", "filters1:model", CPUS[:3], {"filters1": [7, 4, 1]})
BATCH_SPLIT = MeshConfig("batch:2", "batch:batch", CPUS[:2], {"batch": [8, 4]})
HYBRID_SPLIT = MeshConfig("batch:2;model:2", "batch:batch;filters1:model", CPUS,
                          {"batch": [7, 5], "filters1": [9, 3]})
UNEVEN_CONFIGS = {"model": MODEL_SPLIT, "batch": BATCH_SPLIT, "hybrid": HYBRID_SPLIT}


class CountingMeshImpl(hmp.HeteroMeshImpl):
    """HeteroMeshImpl that records the mesh axes of every all-reduce it lowers."""

    def __init__(self, *args):
        super().__init__(*args)
        self.allreduces = []

    def allreduce(self, x, mesh_axes, reduction_fn_string):
        self.allreduces.append(list(mesh_axes))
        return super().allreduce(x, mesh_axes, reduction_fn_string)


def reset_graph():
    """A new default TF graph with the tests' graph-level seed."""
    tf.reset_default_graph()
    tf.set_random_seed(SEED)


def mesh_with_inputs(inputs):
    """In a new seeded default TF graph: an mtf graph, its mesh, and ``inputs``
    ((numpy value, mtf dims) pairs) imported onto it as mtf tensors."""
    reset_graph()
    graph = mtf.Graph()
    mesh = mtf.Mesh(graph, "mesh")
    return graph, mesh, [mtf.import_tf_tensor(mesh, tf.constant(value), mtf.Shape(dims))
                         for value, dims in inputs]


def session_config(rewrites=False):
    """The virtual CPUs; TensorFlow's graph rewrites (Grappler) only with ``rewrites``.
    The engine's tests compare the graphs hmp builds, and rewriting a split step of
    thousands of ops takes seconds at its first run (a third of these tests' time).
    ``train`` runs them, as users' runs do (and the programs' tests): the ordered step's
    guard against the optimizer race must hold under the runtime's rewrites of control
    edges too; so do tests that compare what a program wrote with the same graph run here
    (tests/programs/test_predict.py: a class is an argmax, which another rounding of a
    near tie would flip)."""
    config = tf.ConfigProto(device_count={"CPU": N_VIRTUAL_CPUS})
    config.graph_options.rewrite_options.disable_meta_optimizer = not rewrites
    return config


def cnn2d(mesh, x_np, y_np, dtype=tf.float32):
    """conv (split out) -> conv (split in) -> max pool -> dense -> softmax CE, computed in
    ``dtype`` (the input cast to it; the loss in float32)."""
    batch = mtf.Dimension("batch", x_np.shape[0])
    x = mtf.cast(mtf.import_tf_tensor(mesh, tf.constant(x_np), mtf.Shape(
        [batch, mtf.Dimension("h", x_np.shape[1]), mtf.Dimension("w", x_np.shape[2]),
         mtf.Dimension("bands", x_np.shape[3])])), dtype)
    y = mtf.import_tf_tensor(mesh, tf.constant(y_np), mtf.Shape([batch]))
    hidden = layers.conv2d(x, mtf.Dimension("filters1", 12), activation=mtf.relu,
                           name="conv1")
    features = layers.conv2d(hidden, mtf.Dimension("filters2", 6), padding="VALID",
                             activation=mtf.relu, name="conv2")
    pooled = layers.max_pool2d(features, (2, 2))
    logits = layers.dense(pooled, mtf.Dimension("classes", N_CLASSES),
                          reduced_dims=pooled.shape.dims[1:], name="logits")
    loss = mtf.reduce_mean(layers.softmax_cross_entropy(logits, y, logits.shape.dims[-1]))
    return loss, {"conv1": hidden, "conv2": features, "pool": pooled, "logits": logits}


def cnn3d(mesh, x_np, y_np, dtype=tf.float32):
    """3-D conv over (spectrum, h, w) in the same alternating pattern, in ``dtype``."""
    batch = mtf.Dimension("batch", x_np.shape[0])
    x = mtf.cast(mtf.import_tf_tensor(mesh, tf.constant(x_np), mtf.Shape(
        [batch, mtf.Dimension("d", x_np.shape[1]), mtf.Dimension("h", x_np.shape[2]),
         mtf.Dimension("w", x_np.shape[3]), mtf.Dimension("channels", 1)])), dtype)
    y = mtf.import_tf_tensor(mesh, tf.constant(y_np), mtf.Shape([batch]))
    hidden = layers.conv3d(x, mtf.Dimension("filters1", 12), activation=mtf.relu,
                           name="conv1")
    features = layers.conv3d(hidden, mtf.Dimension("filters2", 4), strides=(2, 1, 1),
                             padding="VALID", activation=mtf.relu, name="conv2")
    pooled = layers.max_pool3d(features, (1, 2, 2), padding="SAME")
    logits = layers.dense(pooled, mtf.Dimension("classes", N_CLASSES),
                          reduced_dims=pooled.shape.dims[1:], name="logits")
    loss = mtf.reduce_mean(layers.softmax_cross_entropy(logits, y, logits.shape.dims[-1]))
    return loss, {"conv1": hidden, "conv2": features, "pool": pooled, "logits": logits}


def data_2d(seed=0):
    rng = np.random.RandomState(seed)
    return (rng.randn(BATCH, 7, 7, 5).astype(np.float32),
            rng.randint(0, N_CLASSES, BATCH).astype(np.int32))


def data_3d(seed=0):
    rng = np.random.RandomState(seed)
    return (rng.randn(BATCH, 9, 5, 5).astype(np.float32)[..., None],
            rng.randint(0, N_CLASSES, BATCH).astype(np.int32))


def lower(graph, mesh, config):
    """Lowers with hmp for split meshes, with stock Mesh-TF for one device."""
    if config is SINGLE_DEVICE:
        impl = mtf.placement_mesh_impl.PlacementMeshImpl(
            config.shape, config.layout, config.devices)
        return impl, mtf.Lowering(graph, {mesh: impl})
    impl = hmp.HeteroMeshImpl(config.shape, config.layout, config.devices, config.splits,
                              config.hosts, config.allreduce)
    return impl, hmp.HeteroLowering(graph, {mesh: impl})


def initialise(session, graph, lowering, weights):
    """Runs the initialisers, loads ``weights`` (if any) into the masters, copies to slices."""
    session.run(tf.global_variables_initializer())
    for v in graph.all_variables:
        if weights and v.name in weights:
            v.get_master().load(weights[v.name], session)
    session.run(lowering.copy_masters_to_slices())


def masters(session, graph, lowering):
    session.run(lowering.copy_slices_to_masters())
    return session.run({v.name: v.get_master() for v in graph.all_variables})


Gradients = collections.namedtuple("Gradients", "loss grads activations weights slices")


def loss_and_gradients(model, data, config, weights=None):
    """Loss, every gradient and activation (whole tensors), and the slice shapes."""
    reset_graph()
    graph = mtf.Graph()
    mesh = mtf.Mesh(graph, "mesh")
    loss, activations = model(mesh, *data)
    variables = graph.trainable_variables
    grads = mtf.gradients([loss], [v.outputs[0] for v in variables])
    impl, lowering = lower(graph, mesh, config)
    fetches = {
        "loss": lowering.export_to_tf_tensor(loss),
        "grads": {v.name: lowering.export_to_tf_tensor(g) for v, g in zip(variables, grads)},
        "activations": {k: lowering.export_to_tf_tensor(a) for k, a in activations.items()},
    }
    slices = {k: lowering.tensors[a].to_laid_out_tensor().tensor_list
              for k, a in activations.items()}
    slices.update({v.name: lowering.variables[v].laid_out_tensor.tensor_list
                   for v in variables})
    slice_info = {k: [(t.shape.as_list(), t.device) for t in ts] for k, ts in slices.items()}
    with tf.Session(config=session_config()) as session:
        initialise(session, graph, lowering, weights)
        out = session.run(fetches)
        return Gradients(out["loss"], out["grads"], out["activations"],
                         masters(session, graph, lowering), slice_info)


def train(model, data, config, make_optimizer, steps, weights, ordered=True, loss_scale=1.0):
    """Runs ``steps`` optimizer steps; returns the losses and the final weights."""
    reset_graph()
    tf.train.get_or_create_global_step()
    graph = mtf.Graph()
    mesh = mtf.Mesh(graph, "mesh")
    loss, _ = model(mesh, *data)
    updates = (hmp.train_step(loss, make_optimizer(), loss_scale) if ordered
               else unordered_train_step(loss, make_optimizer()))
    _, lowering = lower(graph, mesh, config)
    tf_loss = lowering.export_to_tf_tensor(loss)
    tf_updates = tf.group([lowering.lowered_operation(op) for op in updates])
    losses = []
    with tf.Session(config=session_config(rewrites=True)) as session:
        initialise(session, graph, lowering, weights)
        for _ in range(steps):
            losses.append(session.run([tf_loss, tf_updates])[0])
        return np.array(losses), masters(session, graph, lowering)


def unordered_train_step(loss, optimizer):
    """The naive step (gradients straight into the optimizer), to show the race."""
    variables = loss.graph.trainable_variables
    grads = mtf.gradients([loss], [v.outputs[0] for v in variables])
    return optimizer.apply_grads(grads, variables)


def max_relative_error(actual, expected):
    """max |a - e| / max |e|, the figure the 1e-5 tolerance applies to."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    scale = np.max(np.abs(expected))
    return float(np.max(np.abs(actual - expected)) / (scale if scale else 1.0))
