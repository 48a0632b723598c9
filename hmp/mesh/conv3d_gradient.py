"""A 3-D convolution whose gradient a CPU computes with its fast kernels.

TensorFlow's CPU kernels for the gradients of a 3-D convolution are slow, and with a
stride above 1 pathologically so (10-80 times the convolution at the batches hmp trains
with; figures and why in docs/engine.md). 2-D convolutions'
gradient kernels have no such penalty. ``conv3d`` gives a 3-D convolution this
gradient, from TensorFlow's forward convolution kernel:

- the filter gradient is a stride-1 convolution of the input, its batch taken as
  channels and its channels as the batch, with the output gradient as the filter,
  spread by the stride (zeros between its positions);
- with a stride above 1, the input gradient is a stride-1 convolution of the spread
  output gradient, padded by the window less one, with the filter reversed in space
  and its channels swapped; with stride 1, TensorFlow's own (``Conv3DBackpropInputV2``),
  as fast there.

Both are the same sums as TensorFlow's gradient in another order: equal to it up to
rounding (``tests/engine/test_conv3d_gradient.py``). The forward convolution is
TensorFlow's own, unchanged.
"""

import tensorflow.compat.v1 as tf

_GRADIENT = "HmpConv3D"   # the name the gradient is registered under


def conv3d(x, conv_filter, strides, padding):
    """``tf.nn.conv3d(x, conv_filter, [1, *strides, 1], padding)`` (NDHWC, no
    dilation) with this module's gradient."""
    with tf.get_default_graph().gradient_override_map({"Conv3D": _GRADIENT}):
        return tf.nn.conv3d(x, conv_filter, [1, *strides, 1], padding)


def _same_padding(size, window, stride, output):
    """(before, after): the zeros TensorFlow's SAME padding adds along a dim of ``size``
    for ``output`` positions (the output's own size: hmp.layer_math.output_size)."""
    total = max((output - 1) * stride + window - size, 0)
    return total // 2, total - total // 2


def _dilate(t, axis, stride):
    """``t`` with ``stride - 1`` zeros after each position along ``axis`` but the last."""
    if stride == 1:
        return t
    shape = t.shape.as_list()
    zeros = tf.zeros(shape[:axis + 1] + [stride - 1] + shape[axis + 1:], t.dtype)
    spread = tf.reshape(tf.concat([tf.expand_dims(t, axis + 1), zeros], axis + 1),
                        shape[:axis] + [shape[axis] * stride] + shape[axis + 1:])
    begin = [0] * len(shape)
    size = shape[:axis] + [(shape[axis] - 1) * stride + 1] + shape[axis + 1:]
    return tf.slice(spread, begin, size)


@tf.RegisterGradient(_GRADIENT)
def _gradient(op, dy):
    """Gradients of a ``Conv3D`` op's input and filter (module docstring); ``conv3d``
    builds its ops NDHWC, without dilation."""
    x, conv_filter = op.inputs
    strides = list(op.get_attr("strides"))[1:4]
    padding = op.get_attr("padding").decode()
    window = conv_filter.shape.as_list()[:3]
    sizes, outputs = x.shape.as_list()[1:4], dy.shape.as_list()[1:4]
    pads = ([_same_padding(*dim) for dim in zip(sizes, window, strides, outputs)]
            if padding == "SAME" else [(0, 0)] * 3)

    spread = dy   # the output gradient at the positions of the input it came from
    for axis, stride in enumerate(strides, start=1):
        spread = _dilate(spread, axis, stride)

    # the input, its batch as channels, convolved with the spread output gradient
    padded_x = tf.pad(x, [[0, 0], *pads, [0, 0]]) if any(map(any, pads)) else x
    by_channel = tf.nn.conv3d(tf.transpose(padded_x, [4, 1, 2, 3, 0]),
                              tf.transpose(spread, [1, 2, 3, 0, 4]), [1] * 5, "VALID")
    filter_gradient = tf.transpose(tf.slice(by_channel, [0] * 5, [-1, *window, -1]),
                                   [1, 2, 3, 0, 4])
    if max(strides) == 1:
        return tf.nn.conv3d_transpose(dy, conv_filter, x.shape.as_list(), [1] * 5,
                                      padding), filter_gradient

    # the spread output gradient, padded to a full convolution, with the turned filter
    padded = [n + before + after for n, (before, after) in zip(sizes, pads)]
    padded_spread = tf.pad(spread, [[0, 0]] + [
        [k - 1, p - (o - 1) * s - 1] for k, p, o, s in zip(window, padded, outputs, strides)]
        + [[0, 0]])
    turned = tf.transpose(tf.reverse(conv_filter, [0, 1, 2]), [0, 1, 2, 4, 3])
    input_gradient = tf.slice(tf.nn.conv3d(padded_spread, turned, [1] * 5, "VALID"),
                              [0] + [before for before, _ in pads] + [0], [-1, *sizes, -1])
    return input_gradient, filter_gradient
