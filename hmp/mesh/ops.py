"""Mesh-TensorFlow operations that respect per-device slice sizes.

The central piece is :class:`LocalOperation`: each device applies a TensorFlow
function to its own slices, whatever their sizes, and partial results are
summed over the mesh axes that the inputs are split on but the output is not
(exactly Mesh-TensorFlow's einsum rule). Its gradient is another local
operation that differentiates the same per-slice function with
``tf.gradients``, so forward and backward passes see each device's real slice
shapes. Stock Mesh-TensorFlow conv backprop ops compute one slice shape for
all devices and cannot do this. Convolutions and pooling are built on it.

``argmax``, ``constant``, ``one_hot`` and ``reshape`` are the stock
operations (``hmp.mesh.stock_ops`` lowers them per device); ``barrier`` adds the
ordering the training step needs.

Low precision on a CPU. A GPU's bfloat16 and float16 convolutions (tensor cores) add
their products up in float32 and round the result once. TensorFlow's CPU kernels of
bfloat16 ``conv3d`` and of the convolutions' filter gradients add up in bfloat16
(2.5-5% off on sums of 63 to 5488 positive terms, where one rounding is 0.4%;
docs/engine.md), and run at half float32's speed; ``max_pool3d`` has no float16 CPU
kernel. On a CPU a convolution or a pool of low-precision slices therefore runs in
float32 on those (rounded) values and rounds its result to their dtype
(``_float32_on_cpu``): a GPU's numbers, at float32's speed.
"""

import math

import tensorflow.compat.v1 as tf

from hmp.compat import import_mesh_tensorflow
from hmp.errors import InvalidInput
from hmp.layer_math import output_size, per_axis
from hmp.mesh import conv3d_gradient

mtf = import_mesh_tensorflow()

LOW_PRECISION = (tf.bfloat16, tf.float16)


def _mesh_axes(mesh_impl, shapes):
    """The mesh axes that any dimension of ``shapes`` is laid out on."""
    axes = set()
    for shape in shapes:
        for dim in shape.dims:
            axis = mesh_impl.tensor_dimension_to_mesh_axis(dim)
            if axis is not None:
                axes.add(axis)
    return axes


def _lazy_sum(lowering, mesh_impl, laid_out, mesh_axes, output):
    """Sums per-device partial results over ``mesh_axes``, lazily as Mesh-TF does.

    Laziness lets Mesh-TF fuse the all-reduce with following elementwise ops
    (for example a bias add happens before, not after, the reduction).
    """
    if not mesh_axes:
        return laid_out
    mesh_axes = sorted(mesh_axes)
    def count_allreduce():
        lowering.add_counter("allreduce/%s/%s" % (mesh_axes, output.operation.name),
                             mesh_impl.laid_out_size(output.shape))
    return mtf.LazyAllreduceSum(mesh_impl, laid_out, mesh_axes, count_allreduce)


class LocalOperation(mtf.Operation):
    """Applies ``local_fn`` to every device's slices and sums partial results.

    Args:
      inputs: mtf Tensors.
      output_shape: the mtf Shape of the (global) result.
      local_fn: TensorFlow function from input slices to the output slice. It
        must work for any slice sizes of the split dimensions, and must not mix
        elements across ``local_dims`` slices (those are never split).
      local_dims: dimensions ``local_fn`` needs whole, e.g. the spatial
        dimensions of a convolution; lowering refuses a layout that splits one.
      name: operation name.
      output_dtype: dtype of the result (default: the first input's).
      kind: what the op computes, for work accounting (``hmp.graph.workload``):
        "conv2d" or "conv3d" (inputs [x, filter]), "pool", or None.
      window: elements of a pool's window (1 otherwise).
    """

    def __init__(self, inputs, output_shape, local_fn, local_dims=(), name=None,
                 output_dtype=None, kind=None, window=1):
        super().__init__(inputs, name=name or "local")
        self.kind = kind
        self.window = window
        self._local_fn = local_fn
        self._local_dims = list(local_dims)
        self._outputs = [mtf.Tensor(self, mtf.Shape(output_shape),
                                    output_dtype or inputs[0].dtype)]
        self._splittable_dims, self._unsplittable_dims = (
            self._initialize_splittable_and_unsplittable_dims(
                "splittable", [d.name for d in self._local_dims]))

    @property
    def local_fn(self):
        return self._local_fn

    def gradient(self, grad_ys):
        return LocalGradOperation(self, grad_ys[0]).outputs

    def check_layout(self, mesh_impl):
        for dim in self._local_dims:
            if mesh_impl.tensor_dimension_to_mesh_axis(dim) is not None:
                raise ValueError(
                    "%s: dimension %r is laid out on a mesh axis, but this "
                    "operation needs it whole on every device; remove it from "
                    "the layout rules" % (self.name, dim.name))

    def computation_axes(self, mesh_impl):
        """Mesh axes the computation is split over."""
        return _mesh_axes(mesh_impl, [t.shape for t in self.inputs + self.outputs])

    def lower(self, lowering):
        mesh_impl = lowering.mesh_impl(self)
        self.check_layout(mesh_impl)
        y = mesh_impl.slicewise(
            self._local_fn, *[lowering.tensors[x] for x in self.inputs])
        reduce_axes = (self.computation_axes(mesh_impl)
                       - _mesh_axes(mesh_impl, [self.outputs[0].shape]))
        lowering.set_tensor_lowering(
            self.outputs[0],
            _lazy_sum(lowering, mesh_impl, y, reduce_axes, self.outputs[0]))


class LocalGradOperation(mtf.Operation):
    """Gradients of a :class:`LocalOperation` with respect to all its inputs.

    Each device differentiates the forward per-slice function on its own
    slices. The gradient of an input is then summed over the mesh axes the
    computation is split on but that input is not: those devices used the same
    input slice to produce different parts of the result.
    """

    def __init__(self, forward_op, dy, name=None):
        super().__init__(forward_op.inputs + [dy],
                         name=name or forward_op.name + "_grad")
        self._forward_op = forward_op
        self._outputs = [mtf.Tensor(self, x.shape, dy.dtype)
                         for x in forward_op.inputs]

    def lower(self, lowering):
        mesh_impl = lowering.mesh_impl(self)
        forward = self._forward_op
        def local_grads(*slices):
            xs, dy = list(slices[:-1]), slices[-1]
            grads = tf.gradients(forward.local_fn(*xs), xs, grad_ys=dy)
            return tuple(tf.zeros_like(x) if g is None else g
                         for x, g in zip(xs, grads))
        grads = mesh_impl.slicewise(
            local_grads, *[lowering.tensors[x] for x in self.inputs])
        computation_axes = forward.computation_axes(mesh_impl)
        for output, grad in zip(self.outputs, grads):
            reduce_axes = computation_axes - _mesh_axes(mesh_impl, [output.shape])
            lowering.set_tensor_lowering(
                output, _lazy_sum(lowering, mesh_impl, grad, reduce_axes, output))


# ----------------------------------------------------------------------
# Convolution and pooling
# ----------------------------------------------------------------------
def _on_cpu(tensor):
    """Whether ``tensor`` runs on a CPU: its device's type, or (a tensor placed on no
    device in particular) whether TensorFlow sees no GPU to put it on."""
    device_type = tf.DeviceSpec.from_string(tensor.device or "").device_type
    if device_type:
        return device_type.upper() == "CPU"
    return not tf.config.list_physical_devices("GPU")


def _float32_on_cpu(local_fn):
    """``local_fn`` of slices, computed in float32 on the slices' (low-precision) values
    and rounded back to their dtype where it runs on a CPU (module docstring)."""
    def local(*slices):
        dtype = slices[0].dtype
        if dtype not in LOW_PRECISION:
            return local_fn(*slices)
        widened = [tf.cast(s, tf.float32) for s in slices]   # placed where the op runs
        if not _on_cpu(widened[0]):
            return local_fn(*slices)   # the unused casts never run
        return tf.cast(local_fn(*widened), dtype)
    return local


def _strided_dims(spatial_dims, windows, strides, padding, name):
    """Output spatial dims: same names, sizes after the window and stride."""
    return [mtf.Dimension(d.name, output_size(d.size, w, s, padding,
                                              "%s: dimension %r" % (name, d.name)))
            for d, w, s in zip(spatial_dims, windows, strides)]


_SPATIAL = {2: ["height", "width"], 3: ["depth", "height", "width"]}


def _batch_dims(x, rank, trailing, what):
    """The dims of ``x`` before its ``rank`` spatial dims and the ``trailing`` dims after
    them (channels); InvalidInput when there are none: the batch would be taken for a
    spatial dim (a 3-D op on [batch, h, w, bands] would mix the samples)."""
    batch_dims = x.shape.dims[:-(rank + len(trailing))]
    if not batch_dims:
        raise InvalidInput(
            "%s needs [batch..., %s]; got %d dimensions [%s]%s"
            % (what, ", ".join(_SPATIAL[rank] + [d.name for d in trailing]), x.shape.ndims,
               ", ".join(d.name for d in x.shape.dims),
               ": a [batch, h, w, bands] patch is the volume [batch, bands, h, w, 1] "
               "(models.cnn3d.to_volume)" if rank == 3 else ""))
    return batch_dims


def _merge_axes(t, begin, end):
    """Reshapes axes [begin, end) of ``t`` into one (static shapes)."""
    shape = t.shape.as_list()
    merged = 1
    for size in shape[begin:end]:
        merged *= size
    return tf.reshape(t, shape[:begin] + [merged] + shape[end:])


def convolution(x, conv_filter, strides, padding, in_dims, name=None):
    """N-d convolution (N = 2 or 3) over the spatial dims of ``x``.

    ``x`` has shape ``[batch dims..., spatial dims (N)..., in_dims...]`` and
    ``conv_filter`` ``[kernel dims (N)..., in_dims..., out_dim]``. Several
    ``in_dims`` are contracted together, so a 3-D feature map
    ``[b, h, w, depth, channels]`` can feed a 2-D convolution without a
    reshape (the hybrid 3D->2D network). Any of ``in_dims``, ``out_dim`` and
    the batch dims may be split (unevenly); the spatial dims may not. ``strides``:
    one whole number >= 1 a spatial dim, or one for all (``hmp.layer_math.per_axis``).

    Raises:
      InvalidInput: ``x`` has no batch dim before its spatial dims, ``strides`` are
        not N whole numbers >= 1, or a VALID window is larger than its dim.
    """
    name = name or "conv"
    where = tf.get_variable_scope().name + "/" + name
    in_dims = list(in_dims)
    n_in = len(in_dims)
    rank = conv_filter.shape.ndims - n_in - 1
    if rank not in (2, 3):
        raise ValueError("%s: filter %s must have 2 or 3 kernel dims, then %s, "
                         "then the output dim" % (where, conv_filter.shape, in_dims))
    if x.shape.dims[-n_in:] != in_dims or conv_filter.shape.dims[rank:-1] != in_dims:
        raise ValueError("%s: input %s and filter %s must both end in %s"
                         % (where, x.shape, conv_filter.shape, in_dims))
    batch_dims = _batch_dims(x, rank, in_dims, "%s: a %d-D convolution" % (where, rank))
    spatial_dims = x.shape.dims[-(rank + n_in):-n_in]
    kernel_dims = conv_filter.shape.dims[:rank]
    out_dim = conv_filter.shape.dims[-1]
    strides = list(per_axis(strides, rank, where + ": strides"))
    out_spatial = _strided_dims(spatial_dims, [k.size for k in kernel_dims],
                                strides, padding, where)
    tf_conv = tf.nn.conv2d if rank == 2 else tf.nn.conv3d
    n_batch = len(batch_dims)

    def local_conv(tx, tw):
        flat_x = _merge_axes(_merge_axes(tx, n_batch + rank, n_batch + rank + n_in),
                             0, n_batch)
        flat_w = _merge_axes(tw, rank, rank + n_in)
        if rank == 3 and _on_cpu(flat_x):   # a gradient from the CPU's fast kernels
            y = conv3d_gradient.conv3d(flat_x, flat_w, strides, padding.upper())
        else:
            y = tf_conv(flat_x, flat_w, [1] + strides + [1], padding.upper())
        batch_sizes = tx.shape.as_list()[:n_batch]
        return tf.reshape(y, batch_sizes + y.shape.as_list()[1:])

    return LocalOperation(
        [x, conv_filter], batch_dims + out_spatial + [out_dim], _float32_on_cpu(local_conv),
        local_dims=spatial_dims + kernel_dims, name=name,
        kind="conv%dd" % rank).outputs[0]


def pool(x, rank, window, strides, padding, kind, name=None):
    """Max or average pooling over the ``rank`` (2 or 3) dims before the last.

    ``x`` is ``[batch dims..., spatial dims (rank)..., channels]``. Unlike the
    stock Mesh-TF pooling it accepts any window, stride and padding, and its
    gradient is TensorFlow's own. ``window`` and ``strides`` (None: the window's): one
    whole number >= 1 a spatial dim, or one for all (``hmp.layer_math.per_axis``).

    Raises:
      InvalidInput: ``x`` has no batch dim before its spatial dims, ``window`` or
        ``strides`` are not ``rank`` whole numbers >= 1, or a VALID window is larger
        than its dim.
    """
    if rank not in (2, 3) or kind not in ("max", "avg"):
        raise ValueError("pool: need rank 2 or 3 and kind 'max' or 'avg', got %r and %r"
                         % (rank, kind))
    name = name or kind + "_pool"
    batch_dims = _batch_dims(x, rank, x.shape.dims[-1:], "%s: a %d-D pool" % (name, rank))
    spatial_dims = x.shape.dims[-(rank + 1):-1]
    window = per_axis(window, rank, name + ": window")
    strides = window if strides is None else per_axis(strides, rank, name + ": strides")
    out_spatial = _strided_dims(spatial_dims, window, strides, padding, name)
    tf_pool = {(2, "max"): tf.nn.max_pool2d, (3, "max"): tf.nn.max_pool3d,
               (2, "avg"): tf.nn.avg_pool2d, (3, "avg"): tf.nn.avg_pool3d}[rank, kind]
    n_batch = len(batch_dims)

    def local_pool(tx):
        y = tf_pool(_merge_axes(tx, 0, n_batch), [1] + list(window) + [1],
                    [1] + list(strides) + [1], padding.upper())
        return tf.reshape(y, tx.shape.as_list()[:n_batch] + y.shape.as_list()[1:])

    return LocalOperation(
        [x], batch_dims + out_spatial + x.shape.dims[-1:], _float32_on_cpu(local_pool),
        local_dims=spatial_dims, name=name, kind="pool",
        window=math.prod(window)).outputs[0]


# ----------------------------------------------------------------------
# Stock operations under the names hmp's callers use. They used to be hmp's
# own; the stock ones are now exact on uneven splits, lowered per device by
# hmp.mesh.stock_ops (through hmp.HeteroLowering).
# ----------------------------------------------------------------------
argmax = mtf.argmax
constant = mtf.constant
one_hot = mtf.one_hot
reshape = mtf.reshape


class _Barrier(mtf.Operation):
    """Identity of several tensors, each available only once all are computed (or, with
    ``per_device_if_replicated`` and every input replicated on every device, once that
    device's own copies of all are)."""

    def __init__(self, xs, per_device_if_replicated, name=None):
        super().__init__(xs, name=name or "barrier")
        self._per_device_if_replicated = per_device_if_replicated
        self._outputs = [mtf.Tensor(self, x.shape, x.dtype) for x in xs]

    def lower(self, lowering):
        mesh_impl = lowering.mesh_impl(self)
        laid_out = [lowering.tensors[x].to_laid_out_tensor() for x in self.inputs]
        if self._per_device_if_replicated and all(
                mesh_impl.tensor_layout(x).is_fully_replicated for x in self.inputs):
            waits = [[lo.tensor_list[pnum] for lo in laid_out] for pnum in range(mesh_impl.size)]
        else:
            waits = [[t for lo in laid_out for t in lo.tensor_list]] * mesh_impl.size

        def after_waits(pnum, x):
            with tf.control_dependencies(waits[pnum]):
                return tf.identity(x)

        for output, lo in zip(self.outputs, laid_out):
            lowering.set_tensor_lowering(
                output, mesh_impl.slicewise(after_waits, mesh_impl.laid_out_pnum(), lo))


def barrier(xs, per_device_if_replicated=False, name=None):
    """Returns copies of ``xs`` that are computed only after all of ``xs``.

    With ``per_device_if_replicated``, where every one of ``xs`` is replicated on every
    device, each device's copies wait for that device's own copies of ``xs`` only: no
    exchange between the devices."""
    return _Barrier(list(xs), per_device_if_replicated, name=name).outputs


class _ReplicaMean(mtf.Operation):
    """Each device's mean of its own slice of ``x`` over the dims ``output_shape`` lacks.

    The devices that hold different parts of a reduced dimension (the replicas of a
    batch split) get different values of the same output: deliberately, for
    :func:`replica_mean`'s callers only, which use them on the device that computed them.
    """

    def __init__(self, x, output_shape, name=None):
        super().__init__([x], name=name or "replica_mean")
        missing = [d for d in output_shape.dims if d not in x.shape.dims]
        kept = [d for d in x.shape.dims if d in output_shape.dims]
        if missing or kept != output_shape.dims:
            raise ValueError("replica_mean: output %s must be dims of input %s, in its order"
                             % (output_shape, x.shape))
        self._outputs = [mtf.Tensor(self, output_shape, x.dtype)]

    def lower(self, lowering):
        mesh_impl = lowering.mesh_impl(self)
        x = self.inputs[0]
        kept = self.outputs[0].shape.dims
        axes = [i for i, d in enumerate(x.shape.dims) if d not in kept]
        lowering.set_tensor_lowering(self.outputs[0], mesh_impl.slicewise(
            lambda t: tf.reduce_mean(t, axis=axes), lowering.tensors[x]))


def replica_mean(x, output_shape, name=None):
    """The mean of ``x`` over its dims not in ``output_shape``, on each device over its
    own slice only: no all-reduce. On a batch split each replica gets the mean of its
    own samples; where a reduced dim is not split it is the plain mean. Not
    differentiable: for use inside a ``custom_gradient`` (``hmp.layers.batch_norm``)."""
    return _ReplicaMean(x, mtf.Shape(output_shape), name=name).outputs[0]
