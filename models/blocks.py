"""Building blocks the built-in models share: batch norm + ReLU, residual blocks.

``training`` is what the models receive (True, or hmp.graph.graph's run-time
switch, an mtf scalar): batch norm uses the batch's statistics while
training and its moving averages at inference.
"""

import tensorflow.compat.v1 as tf

from hmp import layers
from hmp.compat import import_mesh_tensorflow

mtf = import_mesh_tensorflow()

# Moving-average momentum of batch norm: a training set of a few thousand
# pixels gives only tens of steps an epoch, too few for the usual 0.99.
MOMENTUM = 0.9


def batch_norm(training):
    """An activation function: batch norm over the last dim."""
    return lambda y: layers.batch_norm(y, training, momentum=MOMENTUM)[0]


def bn_relu(training):
    """An activation function: batch norm over the last dim, then ReLU."""
    return lambda y: mtf.relu(layers.batch_norm(y, training, momentum=MOMENTUM)[0])


def residual_block(x, hidden_dim, training, conv, name, **conv_kwargs):
    """``relu(x + bn(conv(bn_relu(conv(x)))))``: two same-size convolutions whose
    ``hidden_dim`` (split over the model axis) joins them, as in SSRN."""
    with tf.variable_scope(name):
        h = conv(x, hidden_dim, padding="SAME", activation=bn_relu(training),
                 name="split_out", **conv_kwargs)
        h = conv(h, x.shape.dims[-1], padding="SAME", activation=batch_norm(training),
                 name="split_in", **conv_kwargs)
        return mtf.relu(x + h)
