"""hmp's 2-D and 3-D CNNs written as plain TensorFlow, for ``bench_hetero.py``'s baseline.

The same layers, shapes, initialisers and optimizer as ``models.cnn2d`` and
``models.cnn3d`` built by ``hmp.graph.graph.TrainingGraph`` on one device (batch norm after
every convolution, cnn2d's dropout; not hmp's weight decay and schedule), but with
``tf.nn`` ops and ``tf.train.AdamOptimizer`` in a TF1 graph: what a user would
write without hmp or Mesh-TensorFlow. (Not ``tf.keras``: TensorFlow 2.21's
Keras 3 does not build TF1 graphs.) The throughput ratio of the two on one
device is the cost of the framework itself.
"""

import numpy as np
import tensorflow.compat.v1 as tf


def _initializer(relu):
    """hmp.layers' choice: He before a ReLU, Glorot for linear outputs."""
    if relu:
        return tf.variance_scaling_initializer(scale=2.0, mode="fan_in",
                                               distribution="truncated_normal")
    return tf.glorot_uniform_initializer()


def conv(x, filters, kernel, strides, padding, name):
    """2-D or 3-D convolution (by ``len(kernel)``) with bias, batch norm (batch
    statistics, as while training; moving averages momentum 0.9) and ReLU."""
    with tf.variable_scope(name):
        weights = tf.get_variable("kernel", list(kernel) + [x.shape[-1], filters],
                                  initializer=_initializer(True))
        bias = tf.get_variable("bias", [filters], initializer=tf.zeros_initializer())
        op = tf.nn.conv3d if len(kernel) == 3 else tf.nn.conv2d
        y = op(x, weights, [1, *strides, 1], padding) + bias
        return tf.nn.relu(_batch_norm(y))


def _batch_norm(y, momentum=0.9, epsilon=1e-3):
    """``models.blocks.batch_norm`` while training: over every dim but the channels."""
    channels = [y.shape[-1]]
    scale = tf.get_variable("scale", channels, initializer=tf.ones_initializer())
    offset = tf.get_variable("offset", channels, initializer=tf.zeros_initializer())
    moving = [tf.get_variable(n, channels, initializer=i, trainable=False)
              for n, i in (("moving_mean", tf.zeros_initializer()),
                           ("moving_variance", tf.ones_initializer()))]
    mean, variance = tf.nn.moments(y, list(range(len(y.shape) - 1)))
    for average, value in zip(moving, (mean, variance)):
        tf.add_to_collection(tf.GraphKeys.UPDATE_OPS,
                             average.assign(momentum * average + (1 - momentum) * value))
    return tf.nn.batch_normalization(y, mean, variance, offset, scale, epsilon)


def dense(x, units, name, relu=True):
    """Fully connected layer on ``x`` flattened behind the batch dimension."""
    x = tf.reshape(x, [x.shape[0], -1])
    with tf.variable_scope(name):
        weights = tf.get_variable("kernel", [x.shape[-1], units],
                                  initializer=_initializer(relu))
        bias = tf.get_variable("bias", [units], initializer=tf.zeros_initializer())
        y = tf.matmul(x, weights) + bias
        return tf.nn.relu(y) if relu else y


def cnn2d(x, classes, width=32):
    """``models.cnn2d``: two (3x3 conv to 2w, 3x3 conv to w) blocks, a 2x2 pool between."""
    h = conv(x, 2 * width, (3, 3), (1, 1), "SAME", "block1/split_out")
    h = conv(h, width, (3, 3), (1, 1), "SAME", "block1/split_in")
    h = tf.nn.max_pool2d(h, 2, 2, "SAME")
    h = conv(h, 2 * width, (3, 3), (1, 1), "SAME", "block2/split_out")
    h = conv(h, width, (3, 3), (1, 1), "SAME", "block2/split_in")
    hidden = tf.nn.dropout(dense(h, 4 * width, "hidden"), rate=0.5)
    return dense(hidden, classes, "logits", relu=False)


def cnn3d(x, classes, width=16):
    """``models.cnn3d``: 3-D convs over (spectrum, h, w), strided spectral "pooling" convs."""
    v = tf.expand_dims(tf.transpose(x, [0, 3, 1, 2]), -1)   # [batch, bands, h, w, 1]
    v = conv(v, width, (7, 3, 3), (2, 1, 1), "VALID", "conv1")
    v = conv(v, width, (3, 1, 1), (2, 1, 1), "VALID", "pool1")
    v = conv(v, 2 * width, (3, 3, 3), (1, 1, 1), "VALID", "conv2")
    v = conv(v, width, (3, 1, 1), (2, 1, 1), "VALID", "pool2")
    return dense(dense(v, 4 * width, "hidden"), classes, "logits", relu=False)


MODELS = {"cnn2d": cnn2d, "cnn3d": cnn3d}


class PlainTrainingGraph:
    """The model's training step in a ``tf.Graph`` of its own, every op on ``device``.

    Mirrors ``TrainingGraph``: placeholders ``x`` [batch, patch, patch, bands]
    and ``y``, mean softmax cross-entropy, Adam at ``learning_rate`` (epsilon
    1e-6 as Mesh-TF's), ``train_op``.
    """

    def __init__(self, config, device, batch_size, learning_rate=1e-3, seed=0):
        self.tf_graph = tf.Graph()
        with self.tf_graph.as_default(), tf.device(device):
            tf.set_random_seed(seed)
            self.x = tf.placeholder(tf.float32, [batch_size, config.patch, config.patch,
                                                 config.bands], name="patches")
            self.y = tf.placeholder(tf.int32, [batch_size], name="labels")
            model = MODELS[config.name]
            logits = (model(self.x, config.n_classes, config.width) if config.width
                      else model(self.x, config.n_classes))
            self.loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
                labels=self.y, logits=logits))
            with tf.control_dependencies(tf.get_collection(tf.GraphKeys.UPDATE_OPS)):
                self.train_op = tf.train.AdamOptimizer(learning_rate, epsilon=1e-6).minimize(
                    self.loss)
            self.init = tf.global_variables_initializer()

    def parameter_count(self):
        """Trainable weights (to check that the model is the same as hmp's)."""
        return sum(int(np.prod(v.shape)) for v in
                   self.tf_graph.get_collection(tf.GraphKeys.TRAINABLE_VARIABLES))

    def session(self, config=None, target=""):
        """A session on this graph, initialised with fresh weights."""
        session = tf.Session(target=target or "", graph=self.tf_graph, config=config)
        session.run(self.init)
        return session
