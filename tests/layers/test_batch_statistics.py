"""Batch norm with each replica's own statistics (``hmp.layers.batch_statistics("local")``)
against plain TensorFlow and numpy, replica by replica."""

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

import harness
import hmp
from hmp import layers
from hmp.compat import import_mesh_tensorflow

mtf = import_mesh_tensorflow()
CPUS = harness.CPUS
# batch on mesh axis a as [4, 2]; the channels on axis b as [1, 5]
MESH, RULES, SPLITS = "a:2;b:2", "batch:a;cin:b", {"batch": [4, 2], "cin": [1, 5]}
REPLICAS = [slice(0, 4), slice(4, 6)]


def _data():
    rng = np.random.RandomState(3)
    x = (2 + 3 * rng.randn(6, 3, 4, 6)).astype(np.float32)
    x[4:] += 5.0   # the second replica's samples are far off the first's
    return x, rng.randn(*x.shape).astype(np.float32)


def _dims():
    return [mtf.Dimension(n, s) for n, s in (("batch", 6), ("h", 3), ("w", 4), ("cin", 6))]


def _reference(x, weight):
    """Per replica, plain TF batch norm of its own samples and the gradients of
    sum(y * weight): y and dx per replica, dscale and doffset summed over them."""
    tf.reset_default_graph()
    ys, dxs, dscale, doffset = [], [], 0.0, 0.0
    with tf.Session() as session:
        for rows in REPLICAS:
            tensors = [tf.constant(x[rows]), tf.ones([6]), tf.zeros([6])]
            y = tf.nn.batch_normalization(tensors[0], *tf.nn.moments(tensors[0], [0, 1, 2]),
                                          tensors[2], tensors[1], 1e-3)
            values = session.run([y] + tf.gradients(tf.reduce_sum(y * weight[rows]), tensors))
            ys.append(values[0])
            dxs.append(values[1])
            dscale, doffset = dscale + values[2], doffset + values[3]
    return [np.concatenate(ys), np.concatenate(dxs), dscale, doffset]


def test_local_statistics_are_each_replicas_own_and_need_no_allreduce_of_their_own():
    x, weight = _data()
    graph, mesh, (tx,) = harness.mesh_with_inputs([(x, _dims())])
    with layers.batch_statistics("local"):
        y = layers.batch_norm(tx, training=True, epsilon=1e-3)[0]
    objective = mtf.reduce_sum(y * mtf.import_tf_tensor(mesh, tf.constant(weight), y.shape))
    scale, offset = graph.trainable_variables
    dx, dscale, doffset = mtf.gradients([objective], [tx, scale.outputs[0], offset.outputs[0]])
    impl = harness.CountingMeshImpl(MESH, RULES, CPUS, SPLITS)
    lowering = hmp.HeteroLowering(graph, {mesh: impl})
    fetch = [lowering.export_to_tf_tensor(t) for t in (y, dx)]
    assert impl.allreduces == []   # normalising and the input gradient: each replica alone
    fetch += [lowering.export_to_tf_tensor(t) for t in (dscale, doffset)]
    assert impl.allreduces == [[0], [0]]   # the weight gradients: summed over the replicas
    assert tf.get_collection(layers.BATCH_NORMS) == []   # no norm layer's all-reduces to price
    with tf.Session(config=harness.session_config()) as session:
        harness.initialise(session, graph, lowering, weights=None)
        values = session.run(fetch)
    expected = _reference(x, weight)
    for actual, wanted in zip(values, expected):
        assert actual.shape == wanted.shape
        assert harness.max_relative_error(actual, wanted) <= 1e-4


def test_local_statistics_hold_for_channels_whose_mean_is_large_against_their_spread():
    """Each replica's variance from the deviations from its mean: at a mean of 1000 and
    a spread of 1, E[x^2] - E[x]^2 in float32 is off by about 10 (its normalised outputs
    by more than 1); numpy's float64 batch norm of each replica's samples is the
    reference."""
    x, _ = _data()
    x = (1000 + (x - x.mean()) / x.std()).astype(np.float32)
    graph, mesh, (tx,) = harness.mesh_with_inputs([(x, _dims())])
    with layers.batch_statistics("local"):
        y = layers.batch_norm(tx, training=True, epsilon=1e-3)[0]
    lowering = hmp.HeteroLowering(graph, {mesh: hmp.HeteroMeshImpl(MESH, RULES, CPUS, SPLITS)})
    fetch = lowering.export_to_tf_tensor(y)
    with tf.Session(config=harness.session_config()) as session:
        harness.initialise(session, graph, lowering, weights=None)
        actual = session.run(fetch)
    for rows in REPLICAS:
        own = x[rows].astype(np.float64)
        wanted = (own - own.mean(axis=(0, 1, 2))) / np.sqrt(own.var(axis=(0, 1, 2)) + 1e-3)
        np.testing.assert_allclose(actual[rows], wanted, atol=2e-3)


def test_replicas_moving_statistics_are_averaged_by_their_samples():
    """One update of the moving statistics, each replica from its own samples, then
    ``average_over_replicas``: every device's copy holds the numpy mean of the replicas'
    updates, weighted 4:2 by their samples."""
    x, _ = _data()
    graph, mesh, (tx,) = harness.mesh_with_inputs([(x, _dims())])
    with layers.batch_statistics("local"):
        _, updates = layers.batch_norm(tx, training=True, momentum=0.9, name="bn")
    impl = hmp.HeteroMeshImpl(MESH, RULES, CPUS, SPLITS)
    lowering = hmp.HeteroLowering(graph, {mesh: impl})
    update = tf.group([lowering.lowered_operation(u) for u in updates])
    average = lowering.average_over_replicas(tf.get_collection(layers.REPLICA_STATISTICS),
                                             mtf.Dimension("batch", 6))
    moving = {v.name: v for v in graph.all_variables if "moving" in v.name}
    copies = {name: lowering.variables[v].laid_out_tensor.tensor_list
              for name, v in moving.items()}
    with tf.Session(config=harness.session_config()) as session:
        harness.initialise(session, graph, lowering, weights=None)
        session.run(update)
        before = session.run(copies)
        session.run(average)
        after = session.run(copies)
    means = [x[rows].mean(axis=(0, 1, 2)) for rows in REPLICAS]
    variances = [x[rows].var(axis=(0, 1, 2)) for rows in REPLICAS]
    channels = [slice(0, 1), slice(1, 6), slice(0, 1), slice(1, 6)]   # devices (a, b)
    replica = [0, 0, 1, 1]
    for name, stats, start in (("bn/moving_mean", means, 0.0),
                               ("bn/moving_variance", variances, 1.0)):
        own = [0.9 * start + 0.1 * s for s in stats]
        for device in range(4):
            np.testing.assert_allclose(before[name][device],
                                       own[replica[device]][channels[device]], rtol=1e-5)
            np.testing.assert_allclose(after[name][device],
                                       ((4 * own[0] + 2 * own[1]) / 6)[channels[device]],
                                       rtol=1e-5)


@pytest.mark.parametrize("config", ["model", "single"])
def test_local_statistics_without_a_batch_split_are_the_global_ones(config):
    """Where no device holds part of the batch, local and sync batch norm agree: a model
    split and one device give the one-device sync result and gradients."""
    x, weight = _data()
    results = {}
    for mode in ("sync", "local"):
        graph, mesh, (tx,) = harness.mesh_with_inputs([(x, _dims())])
        with layers.batch_statistics(mode):
            y = layers.batch_norm(tx, training=True)[0]
        objective = mtf.reduce_sum(y * mtf.import_tf_tensor(mesh, tf.constant(weight),
                                                            y.shape))
        grads = mtf.gradients([objective], [tx] + [v.outputs[0]
                                                   for v in graph.trainable_variables])
        mesh_config = (harness.MeshConfig("m:2", "cin:m", CPUS[:2], {"cin": [5, 1]})
                       if config == "model" and mode == "local" else harness.SINGLE_DEVICE)
        _, lowering = harness.lower(graph, mesh, mesh_config)
        fetch = [lowering.export_to_tf_tensor(t) for t in [y] + grads]
        with tf.Session(config=harness.session_config()) as session:
            harness.initialise(session, graph, lowering, weights=None)
            results[mode] = session.run(fetch)
    for local, sync in zip(results["local"], results["sync"]):
        assert harness.max_relative_error(local, sync) <= 1e-5


def test_an_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="sync, local"):
        with layers.batch_statistics("global"):
            pass


def test_a_trainers_replicas_agree_on_their_moving_statistics_once_saved(tmp_path):
    """A training epoch with local statistics on an uneven batch split: the replicas'
    copies of the moving statistics differ while training and agree after the epoch's
    checkpoint, each at the samples-weighted mean of the copies before."""
    from hmp.graph.graph import TrainingGraph
    from hmp.graph.graph_config import Placement
    from hmp.run import experiment
    from hmp.run.trainer import Trainer
    from models import model_config
    exp = experiment.prepare(experiment.DataConfig(patch_size=5, train_fraction=0.05, pca=8,
                                                   seed=1))
    config = model_config("cnn2d", 5, exp.bands, exp.n_classes, width=2, batch_norm="local")
    graph = TrainingGraph(config, Placement("batch:2", "batch:batch", tuple(CPUS[:2]),
                                            {"batch": [40, 24]}),
                          64, exp.scene.labels.shape, "adam", 1e-3, seed=1)
    trainer = Trainer(graph, exp, str(tmp_path), seed=1,
                      session_config=harness.session_config(), log=lambda line: None)
    trainer.initialise(resume=False)
    moving_mean = next(v for v in graph.mtf_graph.all_variables if "moving_mean" in v.name)
    copies = graph.lowering.variables[moving_mean].laid_out_tensor.tensor_list
    batch = next(iter(exp.train.batches(64, seed=1, epoch=0, drop_remainder=True)))
    trainer.session.run(graph.train_op, graph.feed(batch.indices, batch.labels))
    before = trainer.session.run(copies)
    assert np.abs(before[0] - before[1]).max() > 1e-6   # each replica its own
    trainer.save()
    after = trainer.session.run(copies)
    trainer.close()
    expected = (40 * before[0] + 24 * before[1]) / 64
    for copy in after:
        np.testing.assert_allclose(copy, expected, rtol=1e-6)
