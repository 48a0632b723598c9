"""Functional CNN layers that work on unevenly split meshes.

Each layer is a plain function taking mtf Tensors and Dimensions, in the style
of ``mesh_tensorflow.layers``. The filter dimension a layer creates is the one
the planner splits: give it a name of its own (``mtf.Dimension("filters1",
32)``) and lay it out on the ``model`` mesh axis. The batch dimension can be
laid out on a ``batch`` axis at the same time.

The split-friendly pattern (Moreno-Alvarez et al.) alternates a layer that
splits its *output* filters (each device computes its own filters) with one
that splits its *input* channels (each device computes a partial sum over its
filters, and Mesh-TF all-reduces them): :func:`filter_split_block`.

Every layer computes in the dtype of its input: a model fed bfloat16 or float16
patches (``hmp.graph.graph_config.PRECISIONS``) computes in it, its weights read through a
cast from float32 masters (``mtf.VariableDType``). :func:`batch_norm` computes its
statistics and normalisation in float32 whatever its input, and
:func:`softmax_cross_entropy` its loss.
"""

import contextlib

import tensorflow.compat.v1 as tf

from hmp.compat import import_mesh_tensorflow
from hmp.errors import InvalidInput
from hmp.layer_math import per_axis
from hmp.mesh import ops
from hmp.mesh.bucketing import reduce_together

mtf = import_mesh_tensorflow()


def _kernel_dims(names, sizes):
    sizes = per_axis(sizes, len(names), tf.get_variable_scope().name + ": filter_size")
    return [mtf.Dimension(n, s) for n, s in zip(names, sizes)]


def _default_initializer(activation):
    """He initialisation before a ReLU-like activation (keeps the activation
    variance), Glorot for linear outputs such as logits (keeps them small)."""
    if activation is None:
        return tf.glorot_uniform_initializer()
    return tf.variance_scaling_initializer(scale=2.0, mode="fan_in",
                                           distribution="truncated_normal")


def _bias_and_activation(y, output_dim, use_bias, activation):
    """``activation(y + bias)``, in the caller's variable scope."""
    if use_bias:
        y += mtf.get_variable(y.mesh, "bias", [output_dim],
                              initializer=tf.zeros_initializer(),
                              activation_dtype=y.dtype)
    return activation(y) if activation else y


def _conv(x, output_dim, kernel_names, filter_size, strides, padding, in_dims,
          use_bias, activation, kernel_initializer, name, default_name):
    in_dims = list(in_dims) if in_dims is not None else x.shape.dims[-1:]
    with tf.variable_scope(name, default_name=default_name):
        kernel = mtf.get_variable(
            x.mesh, "kernel",
            _kernel_dims(kernel_names, filter_size) + in_dims + [output_dim],
            initializer=kernel_initializer or _default_initializer(activation),
            activation_dtype=x.dtype)
        y = ops.convolution(x, kernel, strides, padding, in_dims, name="conv")
        return _bias_and_activation(y, output_dim, use_bias, activation)


def conv2d(x, output_dim, filter_size=(3, 3), strides=(1, 1), padding="SAME",
           in_dims=None, use_bias=True, activation=None,
           kernel_initializer=None, name=None):
    """2-D convolution of ``x`` = [batch..., h, w, in_dims...] to ``output_dim``.

    ``in_dims`` (default: the last dim of ``x``) are contracted; several dims
    may be given (e.g. ``[depth, channels]`` of a 3-D feature map). Returns
    [batch..., h', w', output_dim]: spatial dims keep their names. ``filter_size`` and
    ``strides``: a whole number >= 1 per spatial dim, or one for both.

    Raises:
      InvalidInput: ``x`` has no dim before [h, w, in_dims...] (the batch), or
        ``filter_size`` or ``strides`` are not 2 whole numbers >= 1.
    """
    return _conv(x, output_dim, ("fh", "fw"), filter_size, strides, padding,
                 in_dims, use_bias, activation, kernel_initializer, name,
                 "conv2d")


def conv3d(x, output_dim, filter_size=(3, 3, 3), strides=(1, 1, 1),
           padding="SAME", in_dims=None, use_bias=True, activation=None,
           kernel_initializer=None, name=None):
    """3-D convolution of ``x`` = [batch..., d, h, w, in_dims...] to ``output_dim``, as
    :func:`conv2d` (``filter_size`` and ``strides``: 3 whole numbers, or one for all).

    Raises:
      InvalidInput: ``x`` has no dim before [d, h, w, in_dims...] (a [batch, h, w,
        bands] patch would convolve across the samples: make it a volume first), or
        ``filter_size`` or ``strides`` are not 3 whole numbers >= 1.
    """
    return _conv(x, output_dim, ("fd", "fh", "fw"), filter_size, strides,
                 padding, in_dims, use_bias, activation, kernel_initializer,
                 name, "conv3d")


def dense(x, output_dim, reduced_dims=None, use_bias=True, activation=None,
          kernel_initializer=None, name=None):
    """Fully connected layer contracting ``reduced_dims`` (default: last dim).

    Reducing over several dims lets a feature map [batch, h, w, filters] feed
    it directly; if ``filters`` is split, each device multiplies its part and
    Mesh-TF all-reduces the partial sums.

    Raises:
      InvalidInput: one of ``reduced_dims`` is not a dim of ``x`` (by name and size:
        e.g. the dims of a map before it was pooled).
    """
    reduced_dims = list(reduced_dims) if reduced_dims is not None else x.shape.dims[-1:]
    with tf.variable_scope(name, default_name="dense"):
        for dim in reduced_dims:
            if dim not in x.shape.dims:
                raise InvalidInput("%s: reduced dim %s=%d is not a dim of x [%s]" % (
                    tf.get_variable_scope().name, dim.name, dim.size,
                    ", ".join("%s=%d" % d for d in x.shape.dims)))
        kernel = mtf.get_variable(
            x.mesh, "kernel", reduced_dims + [output_dim],
            initializer=kernel_initializer or _default_initializer(activation),
            activation_dtype=x.dtype)
        output_shape = (x.shape - reduced_dims) + [output_dim]
        y = mtf.einsum([x, kernel], output_shape=output_shape)
        return _bias_and_activation(y, output_dim, use_bias, activation)


def max_pool2d(x, window=(2, 2), strides=None, padding="VALID", name=None):
    """Max pooling over [h, w] of x = [batch..., h, w, channels].

    ``window`` and ``strides`` (default: the window): 2 whole numbers >= 1, or one for
    both. InvalidInput if they are not, or ``x`` has no dim before [h, w, channels]."""
    return ops.pool(x, 2, window, strides, padding, "max", name)


def max_pool3d(x, window=(2, 2, 2), strides=None, padding="VALID", name=None):
    """Max pooling over [d, h, w] of x = [batch..., d, h, w, channels], as
    :func:`max_pool2d` (3 whole numbers, or one for all)."""
    return ops.pool(x, 3, window, strides, padding, "max", name)


def avg_pool2d(x, window=(2, 2), strides=None, padding="VALID", name=None):
    """Average pooling over [h, w] of x = [batch..., h, w, channels], as
    :func:`max_pool2d`."""
    return ops.pool(x, 2, window, strides, padding, "avg", name)


def avg_pool3d(x, window=(2, 2, 2), strides=None, padding="VALID", name=None):
    """Average pooling over [d, h, w] of x = [batch..., d, h, w, channels], as
    :func:`max_pool3d`."""
    return ops.pool(x, 3, window, strides, padding, "avg", name)


# TF collection of the mtf assign operations of every ``batch_norm``'s moving
# statistics; ``hmp.graph.graph`` runs them with each training step (the TF1
# ``tf.GraphKeys.UPDATE_OPS`` idiom, for mtf operations).
UPDATE_OPS = "hmp_update_ops"
# TF collection of the output of every ``batch_norm`` that uses the global batch's
# statistics: what ``hmp.graph.from_graph`` counts as the model's norm layers (all-reduces
# a step).
BATCH_NORMS = "hmp_batch_norms"
# TF collection of the output of every ``batch_norm`` that uses each replica's own
# statistics: what ``hmp.graph.from_graph`` counts as the model's replica norm layers
# (each replica of a batch split needs enough samples of its own).
REPLICA_NORMS = "hmp_replica_norms"
# TF collection of the moving statistics of every ``batch_norm`` with ``local``
# statistics: each replica of a batch split updates its own copy, and
# ``hmp.graph.graph`` averages them (``HeteroLowering.average_over_replicas``) before they
# are saved or classify.
REPLICA_STATISTICS = "hmp_replica_statistics"

# The statistics ``batch_norm`` normalises with while training: "sync", those of the
# whole global batch (exact under any split: an all-reduce per layer and pass), or
# "local", each replica's own samples' (no collective; what data-parallel
# frameworks do by default). The same on one device and on a model split.
BATCH_STATISTICS = ("sync", "local")
_statistics = ["sync"]


@contextlib.contextmanager
def batch_statistics(mode):
    """Within it, :func:`batch_norm` layers built take ``mode`` statistics
    (:data:`BATCH_STATISTICS`); ``hmp.graph.graph.model_logits`` builds a model in one."""
    if mode not in BATCH_STATISTICS:
        raise ValueError("batch statistics must be one of %s, got %r"
                         % (", ".join(BATCH_STATISTICS), mode))
    _statistics.append(mode)
    try:
        yield
    finally:
        _statistics.pop()


def _blend(training, when_training, otherwise):
    """``when_training`` if ``training`` (True, False, or an mtf scalar that is 1.0
    while training and 0.0 at inference), else ``otherwise``."""
    if isinstance(training, bool):
        return when_training if training else otherwise
    training = mtf.cast(training, when_training.dtype)
    return training * when_training + (1.0 - training) * otherwise


def batch_norm(x, training, momentum=0.99, epsilon=1e-3, name=None):
    """Batch normalisation over every dim but the last (the channels).

    With "sync" statistics (the default; :func:`batch_statistics`) they are over the
    whole global batch: with the batch split across devices, the partial sums are
    all-reduced, so an uneven batch split gives the same result as one device. Each
    step all-reduces twice per layer, however the batch is split: the sums of ``x``
    and ``x**2`` in the forward pass (one all-reduce, ``hmp.mesh.bucketing``; the
    variance is their mean square minus the squared mean, as synchronised batch norm
    computes it), and in the backward pass the sums of the output gradient and of
    its product with the normalised input, which are also the gradients of
    ``offset`` and ``scale`` (:func:`_normalise_gradient`). Mesh-TF's own gradient of
    the same formula makes five: every all-reduce is a point where the devices of a
    batch split wait for each other.

    With "local" statistics each replica of a batch split normalises with the mean
    and variance of its own samples, and its input gradient is that of its own
    normalisation: no collective of its own. The gradients of ``scale`` and
    ``offset`` are summed over the replicas with every other weight gradient, in the
    step's one gradient all-reduce. Each replica updates its own copy of the moving
    statistics; ``hmp.graph.graph`` averages the copies (weighted by the replicas'
    samples) before they are saved or used to classify.

    A low-precision ``x`` (bfloat16, float16) is normalised in float32: its
    statistics (sums of ``x**2`` over the batch would lose most of their digits in
    bfloat16), their all-reduces, the moving averages, ``scale`` and ``offset``, and
    the gradient sums; ``y`` returns in ``x``'s dtype.

    ``training``: True (batch statistics), False (the moving averages), or an
    mtf scalar switching between them at run time (``hmp.graph.graph``'s
    ``training`` input; the gradient is that of the batch statistics, as
    training steps feed 1.0). Returns ``(y, update_ops)``: the update ops
    (moving averages for inference) are also added to the TF collection
    ``UPDATE_OPS``; run them with the training step.
    """
    channels = x.shape.dims[-1:]
    count = x.shape.size // channels[0].size   # values per channel the statistics cover
    local = _statistics[-1] == "local"
    dtype = x.dtype
    x = mtf.cast(x, tf.float32)
    with tf.variable_scope(name, default_name="batch_norm"):
        scale = mtf.get_variable(x.mesh, "scale", channels,
                                 initializer=tf.ones_initializer())
        offset = mtf.get_variable(x.mesh, "offset", channels,
                                  initializer=tf.zeros_initializer())
        moving_mean = mtf.get_variable(x.mesh, "moving_mean", channels,
                                       initializer=tf.zeros_initializer(), trainable=False)
        moving_variance = mtf.get_variable(x.mesh, "moving_variance", channels,
                                           initializer=tf.ones_initializer(),
                                           trainable=False)
        if training is False:
            return mtf.cast((x - moving_mean) * mtf.rsqrt(moving_variance + epsilon) * scale
                            + offset, dtype), []

        def normalise(x, scale, offset):
            batch_mean, batch_variance = (_replica_moments(x, channels) if local
                                          else _moments(x, channels, count))
            mean = _blend(training, batch_mean, moving_mean)
            variance = _blend(training, batch_variance, moving_variance)
            y = (x - mean) * mtf.rsqrt(variance + epsilon) * scale + offset
            return y, batch_mean, batch_variance

        def gradient(explicit_inputs, all_inputs, forward_operations, outputs, output_grads):
            del forward_operations   # the gradient is computed from the statistics
            x, scale, _ = explicit_inputs
            _, batch_mean, batch_variance = outputs
            dx, dscale, doffset = (_replica_normalise_gradient if local
                                   else _normalise_gradient)(
                x, scale, batch_mean, batch_variance, epsilon, output_grads[0], channels,
                count)
            return [dx, dscale, doffset] + [None] * (len(all_inputs) - 3)

        y, batch_mean, batch_variance = mtf.custom_gradient(
            normalise, gradient, [x, scale, offset])
        updates = [
            mtf.assign(moving_mean, momentum * moving_mean + (1 - momentum) * batch_mean),
            mtf.assign(moving_variance,
                       momentum * moving_variance + (1 - momentum) * batch_variance)]
        for update in updates:
            tf.add_to_collection(UPDATE_OPS, update)
        if local:
            tf.add_to_collection(REPLICA_NORMS, y)
            tf.add_to_collection(REPLICA_STATISTICS, moving_mean)
            tf.add_to_collection(REPLICA_STATISTICS, moving_variance)
        else:
            tf.add_to_collection(BATCH_NORMS, y)
        return mtf.cast(y, dtype), updates


def _moments(x, channels, count):
    """Mean and variance of ``x`` per channel over all its other dims (``count`` values a
    channel), from one all-reduce of the sums of ``x`` and ``x**2`` (the variance
    clipped at 0, where rounding would make a constant channel's slightly negative). One
    all-reduce's price: a channel whose mean is large against its spread loses digits
    (docs/engine.md, "Batch norm in two all-reduces")."""
    sums, squares = reduce_together([mtf.reduce_sum(x, output_shape=channels),
                                     mtf.reduce_sum(mtf.square(x), output_shape=channels)])
    mean = sums / count
    return mean, mtf.relu(squares / count - mtf.square(mean))


def _replica_moments(x, channels):
    """The mean and variance of each replica's own samples (``hmp.mesh.ops.replica_mean``),
    the variance from the deviations from the mean (no all-reduce to save: exact where
    E[x^2] - E[x]^2 loses a channel whose mean is large against its spread)."""
    mean = ops.replica_mean(x, channels)
    return mean, ops.replica_mean(mtf.square(x - mean), channels)


def _normalise_gradient(x, scale, mean, variance, epsilon, dy, channels, count):
    """Gradients of ``x``, ``scale`` and ``offset`` of batch norm with batch statistics,
    from one all-reduce of the sums of ``dy`` and of ``dy`` times the normalised ``x``::

        dx = scale / std * (dy - mean(dy) - x_hat * mean(dy * x_hat))

    The two sums are the gradients of ``offset`` and ``scale`` themselves."""
    inverse_std = mtf.rsqrt(variance + epsilon)
    normalised = (x - mean) * inverse_std
    doffset, dscale = reduce_together([mtf.reduce_sum(dy, output_shape=channels),
                                       mtf.reduce_sum(dy * normalised, output_shape=channels)])
    dx = (dy - doffset / count - normalised * (dscale / count)) * (scale * inverse_std)
    return dx, dscale, doffset


def _replica_normalise_gradient(x, scale, mean, variance, epsilon, dy, channels, count):
    """:func:`_normalise_gradient` with each replica's own statistics: ``dx`` from its
    own means of ``dy`` and ``dy * x_hat``; the gradients of ``scale`` and ``offset``
    left as pending sums over the replicas, which the step's gradient all-reduce
    does (``hmp.mesh.train_step``)."""
    del count   # each replica's own
    inverse_std = mtf.rsqrt(variance + epsilon)
    normalised = (x - mean) * inverse_std
    product = dy * normalised
    dx = (dy - ops.replica_mean(dy, channels)
          - normalised * ops.replica_mean(product, channels)) * (scale * inverse_std)
    return (dx, mtf.reduce_sum(product, output_shape=channels),
            mtf.reduce_sum(dy, output_shape=channels))


def dropout(x, training, rate, name=None):
    """Zeroes a ``rate`` fraction of ``x`` at random while training.

    ``training``: True, False or an mtf scalar (see :func:`batch_norm`). The
    mask is drawn whole and sliced per device (``HeteroMeshImpl.random``), so
    an uneven split drops the same elements as one device.
    """
    if not 0 <= rate < 1:
        raise ValueError("dropout rate must be in [0, 1), got %r" % (rate,))
    if training is False or rate == 0:
        return x
    dropped = mtf.dropout(x, is_training=True, rate=rate, name=name)
    return _blend(training, dropped, x)


def filter_split_block(x, hidden_dim, output_dim, conv=conv2d,
                       activation=mtf.relu, name=None, **conv_kwargs):
    """Two convolutions whose shared ``hidden_dim`` is split across devices.

    The first conv splits its output filters (``hidden_dim``), each device
    computing its own share; the second splits its input channels, each device
    computing a partial sum, and produces ``output_dim`` (replicated), which
    Mesh-TF all-reduces. Lay ``hidden_dim`` out on the model axis and give
    ``output_dim`` no layout: one all-reduce per block, no other traffic.
    """
    with tf.variable_scope(name, default_name="filter_split_block"):
        hidden = conv(x, hidden_dim, activation=activation, name="split_out", **conv_kwargs)
        return conv(hidden, output_dim, activation=activation, name="split_in", **conv_kwargs)


def softmax_cross_entropy(logits, labels, classes_dim):
    """Per-example cross-entropy of ``logits`` against integer ``labels``, in float32
    whatever the logits' dtype (a low precision would round the log-probabilities).

    ``labels`` count from 0 (class k of a ground truth numbered 1..K is label k - 1). A
    label outside [0, classes) is not checked in the graph: its one-hot target is all
    zeros and its loss 0 (``tf.nn.sparse_softmax_cross_entropy_with_logits`` would
    fail), so check labels where they are made, as ``hmp.data`` does a scene's."""
    logits = mtf.cast(logits, tf.float32)
    targets = ops.one_hot(labels, classes_dim, dtype=logits.dtype)
    return mtf.layers.softmax_cross_entropy_with_logits(logits, targets, classes_dim)
