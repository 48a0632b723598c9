"""hmp's Adam, momentum, LARS and weight decay against numpy, on a variable split unevenly."""

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

import harness
import hmp
from hmp.mesh.optimizers import Lars, Momentum, make_optimizer
from hmp.compat import import_mesh_tensorflow

mtf = import_mesh_tensorflow()
STEPS = 4
TARGET = np.random.RandomState(0).randn(6, 4).astype(np.float32)
START = np.random.RandomState(1).randn(6, 4).astype(np.float32)


def mtf_steps(optimizer, name="w"):
    """Minimises 0.5 |w - TARGET|^2 (gradient w - TARGET) with w (a variable called
    ``name``) split [4, 2] over 2 devices."""
    tf.reset_default_graph()
    graph = mtf.Graph()
    mesh = mtf.Mesh(graph, "mesh")
    shape = mtf.Shape([mtf.Dimension("rows", 6), mtf.Dimension("cols", 4)])
    w = mtf.get_variable(mesh, name, shape, initializer=tf.constant_initializer(START))
    target = mtf.import_tf_tensor(mesh, tf.constant(TARGET), shape)
    loss = 0.5 * mtf.reduce_sum(mtf.square(w - target))
    updates = hmp.train_step(loss, optimizer)
    impl = hmp.HeteroMeshImpl("model:2", "rows:model", harness.CPUS[:2], {"rows": [4, 2]})
    lowering = hmp.HeteroLowering(graph, {mesh: impl})
    step = tf.group([lowering.lowered_operation(u) for u in updates])
    with tf.Session(config=harness.session_config()) as session:
        harness.initialise(session, graph, lowering, None)
        for _ in range(STEPS):
            session.run(step)
        return harness.masters(session, graph, lowering)[name]


def numpy_momentum(lr, momentum):
    w, v = START.astype(np.float64), np.zeros_like(START, np.float64)
    for _ in range(STEPS):
        v = momentum * v + lr * (w - TARGET)
        w = w - v
    return w


def numpy_lars(lr, momentum, weight_decay, trust):
    w, v = START.astype(np.float64), np.zeros_like(START, np.float64)
    for _ in range(STEPS):
        g = w - TARGET
        w_norm, g_norm = np.linalg.norm(w), np.linalg.norm(g)
        local_lr = trust * w_norm / (g_norm + weight_decay * w_norm)
        v = momentum * v + lr * local_lr * (g + weight_decay * w)
        w = w - v
    return w


def test_momentum_matches_numpy():
    np.testing.assert_allclose(mtf_steps(Momentum(0.1, 0.9)), numpy_momentum(0.1, 0.9),
                               rtol=1e-5, atol=1e-6)


def test_lars_matches_numpy():
    np.testing.assert_allclose(mtf_steps(Lars(5.0, 0.9, 1e-2, 1e-2)),
                               numpy_lars(5.0, 0.9, 1e-2, 1e-2), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["conv1/bias", "block/batch_norm/scale", "bn/offset"])
def test_lars_leaves_biases_and_norms_to_plain_momentum(name):
    np.testing.assert_allclose(mtf_steps(Lars(0.1, 0.9, 1e-2, 1e-2), name),
                               numpy_momentum(0.1, 0.9), rtol=1e-5, atol=1e-6)


def numpy_adamw(lr, weight_decay, beta1=0.9, beta2=0.999, epsilon=1e-6):
    """Mesh-TF's Adam (no bias correction) with decoupled weight decay, in float32 and
    in the order TensorFlow's fused kernel computes it: the decay, then
    m += (g - m)(1 - b1), v += (g^2 - v)(1 - b2), w -= m lr / (sqrt(v) + eps).
    (Adam divides by each element's RMS, which magnifies float32 rounding: another
    order, or float64, differs by up to 3e-4 relative after 4 steps here.)"""
    f = np.float32
    lr, weight_decay, beta1, beta2, epsilon = map(f, (lr, weight_decay, beta1, beta2,
                                                      epsilon))
    w = START.copy()
    m, v = np.zeros_like(w), np.zeros_like(w)
    for _ in range(STEPS):
        g = w - TARGET
        w = w - lr * weight_decay * w
        m = m + (g - m) * (f(1) - beta1)
        v = v + (g * g - v) * (f(1) - beta2)
        w = w - m * lr / (np.sqrt(v) + epsilon)
    return w


def numpy_momentum_l2(lr, momentum, weight_decay):
    w, v = START.astype(np.float64), np.zeros_like(START, np.float64)
    for _ in range(STEPS):
        v = momentum * v + lr * (w - TARGET + weight_decay * w)
        w = w - v
    return w


def test_weight_decay_matches_numpy():
    np.testing.assert_allclose(mtf_steps(make_optimizer("adam", 0.1, 0.5)),
                               numpy_adamw(0.1, 0.5), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(mtf_steps(make_optimizer("momentum", 0.1, 0.5)),
                               numpy_momentum_l2(0.1, 0.9, 0.5), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["conv1/bias", "block/batch_norm/scale", "bn/offset"])
def test_adam_does_not_decay_biases_and_norms(name):
    np.testing.assert_allclose(mtf_steps(make_optimizer("adam", 0.1, 0.5), name),
                               numpy_adamw(0.1, 0.0), rtol=1e-6, atol=1e-7)


def test_unknown_optimizer_is_refused_by_name():
    with pytest.raises(ValueError, match=r"optimizer 'rmsprop' is not known; choose one of"):
        make_optimizer("rmsprop", 0.1)
