"""A strided 3-D convolution whose gradient a CPU computes with fast kernels.

TensorFlow's CPU kernels for the gradients of a 3-D convolution with a stride above 1
(``Conv3DBackpropFilterV2``, ``Conv3DBackpropInputV2``) take 10-50 times the
convolution's own time: on one core, the first layer of ``cnn3d`` (a 7 x 3 x 3 window
striding the spectrum by 2, batch 32, 30 bands) convolves in 20 ms and takes 1027 ms
for its filter gradient and 918 ms for its input gradient (docs/engine.md). A 2-D
convolution's gradient kernels have no such penalty.

``conv3d`` gives a strided convolution the gradient below, built from kernels that
are fast on a CPU:

- the filter gradient is one matrix product: the input's windows
  (``tf.extract_volume_patches``, each window a row) times the output gradient;
- the input gradient is a stride-1 convolution (TensorFlow's forward kernel) of the
  output gradient, dilated by the stride (zeros between its positions) and padded by
  the window less one, with the filter reversed in space and its channels swapped.

Both are the same sums as TensorFlow's gradient in another order: equal to it up to
float32 rounding (``tests/engine/test_strided_conv3d.py``). The forward convolution is
TensorFlow's own, unchanged.
"""

import tensorflow.compat.v1 as tf

GRADIENT = "HmpStridedConv3D"   # the name the gradient is registered under


def conv3d(x, conv_filter, strides, padding):
    """``tf.nn.conv3d(x, conv_filter, [1, *strides, 1], padding)`` (NDHWC, no
    dilation); with a stride above 1, its gradient is this module's."""
    conv = lambda: tf.nn.conv3d(x, conv_filter, [1, *strides, 1], padding)
    if max(strides) == 1:
        return conv()
    with tf.get_default_graph().gradient_override_map({"Conv3D": GRADIENT}):
        return conv()


def _same_padding(size, window, stride):
    """(before, after): the zeros TensorFlow's SAME padding adds along one dim."""
    out = -(-size // stride)
    total = max((out - 1) * stride + window - size, 0)
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


@tf.RegisterGradient(GRADIENT)
def _gradient(op, dy):
    """Gradients of a ``Conv3D`` op's input and filter (module docstring)."""
    x, conv_filter = op.inputs
    if op.get_attr("data_format") != b"NDHWC" or list(op.get_attr("dilations")) != [1] * 5:
        raise ValueError("%s: only NDHWC convolutions without dilation" % op.name)
    strides = list(op.get_attr("strides"))[1:4]
    window = conv_filter.shape.as_list()[:3]
    in_channels, out_channels = conv_filter.shape.as_list()[3:]
    sizes = x.shape.as_list()[1:4]
    if op.get_attr("padding") == b"SAME":
        pads = [_same_padding(n, k, s) for n, k, s in zip(sizes, window, strides)]
    else:
        pads = [(0, 0)] * 3
    padded = [n + before + after for n, (before, after) in zip(sizes, pads)]
    outputs = dy.shape.as_list()[1:4]

    padded_x = tf.pad(x, [[0, 0], *pads, [0, 0]]) if any(map(any, pads)) else x
    windows = tf.extract_volume_patches(padded_x, [1, *window, 1], [1, *strides, 1], "VALID")
    filter_gradient = tf.reshape(
        tf.matmul(tf.reshape(windows, [-1, windows.shape.as_list()[-1]]),
                  tf.reshape(dy, [-1, out_channels]), transpose_a=True),
        conv_filter.shape)

    spread = dy
    for axis, stride in enumerate(strides, start=1):
        spread = _dilate(spread, axis, stride)
    spread = tf.pad(spread, [[0, 0]] + [
        [k - 1, p - (o - 1) * s - 1] for k, p, o, s in zip(window, padded, outputs, strides)]
        + [[0, 0]])
    turned = tf.transpose(tf.reverse(conv_filter, [0, 1, 2]), [0, 1, 2, 4, 3])
    padded_gradient = tf.nn.conv3d(spread, turned, [1] * 5, "VALID")
    input_gradient = tf.slice(padded_gradient, [0] + [before for before, _ in pads] + [0],
                              [-1, *sizes, in_channels])
    return input_gradient, filter_gradient
