"""Per-device lowerings of stock Mesh-TensorFlow operations: the registry.

A few stock operations compute with one slice size for all devices: they ask
for ``mesh_impl.slice_shape`` (which refuses uneven splits), or, worse, turn a
device's coordinate into an offset as ``coordinate * size // n`` (top-k and
shift), which is silently wrong when the parts are unequal. ``LOWERINGS`` maps
each such operation class to a function ``lower(op, lowering, mesh_impl)``
that lowers it exactly, from every device's own slice extent.
``hmp.HeteroLowering`` consults it for every operation on a
:class:`HeteroMeshImpl`; every other operation uses its own ``lower``.

The functions read the operations' attributes (some private), so they are
tied to mesh-tensorflow 0.1.21, the last release. ``docs/engine.md`` lists
which stock operations run on uneven splits and which are refused.
"""

import tensorflow.compat.v1 as tf

from hmp.compat import import_mesh_tensorflow
from hmp.mesh.mesh_impl import UnevenSplitError

mtf = import_mesh_tensorflow()

# pylint: disable=protected-access


def lower_constant(op, lowering, mesh_impl):
    """``mtf.constant``, ``zeros``, ``ones``: each device fills its own slice."""
    output = op.outputs[0]
    def local_constant(pnum):
        return tf.constant(op._value, output.dtype,
                           shape=mesh_impl.slice_shape(output.shape, pnum))
    lowering.set_tensor_lowering(output, mesh_impl.slicewise_per_device(local_constant))


def lower_one_hot(op, lowering, mesh_impl):
    """``mtf.one_hot``: each device encodes its own part of the new dimension."""
    output = op.outputs[0]
    def local_one_hot(pnum, indices):
        begin, size = mesh_impl.slice_extent(output.shape, pnum)[-1]
        return tf.one_hot(indices - begin, size,
                          on_value=tf.cast(op._on_value, output.dtype),
                          off_value=tf.cast(op._off_value, output.dtype),
                          dtype=output.dtype)
    lowering.set_tensor_lowering(output, mesh_impl.slicewise_per_device(
        local_one_hot, lowering.tensors[op.inputs[0]]))


def lower_top_k(op, lowering, mesh_impl):
    """``mtf.top_k`` (and ``argmax``, ``top_1``, ``sample_with_temperature``).

    Each device takes the top ``min(k, its part)`` of its part of the reduced
    dimension, with global indices (its part's offset added); if that
    dimension is split, the candidates are gathered along its mesh axis and
    the top k taken again. Ties go to the lower index, as on one device.
    """
    x = op.inputs[0]
    reduced_dim, k = op._reduced_dim, op._k_dim.size
    ndims = x.shape.ndims
    axis = x.shape.dims.index(reduced_dim)
    last = [i for i in range(ndims) if i != axis] + [axis]

    def local_top_k(pnum, t):
        begin, size = mesh_impl.slice_extent(x.shape, pnum)[axis]
        values, indices = tf.math.top_k(tf.transpose(t, last), min(k, size))
        return values, indices + begin

    def global_top_k(values, indices):
        values, best = tf.math.top_k(values, k)
        return values, tf.gather(indices, best, batch_dims=ndims - 1)

    values, indices = mesh_impl.slicewise_per_device(local_top_k, lowering.tensors[x])
    mesh_axis = mesh_impl.tensor_dimension_to_mesh_axis(reduced_dim)
    if mesh_axis is not None:
        values = mesh_impl.allconcat(values, mesh_axis, ndims - 1)
        indices = mesh_impl.allconcat(indices, mesh_axis, ndims - 1)
        values, indices = mesh_impl.slicewise(global_top_k, values, indices)
    lowering.set_tensor_lowering(op.outputs[0], values)
    lowering.set_tensor_lowering(op.outputs[1], indices)


def lower_shift(op, lowering, mesh_impl):
    """``mtf.shift`` along a split dimension of a tensor with uneven splits.

    Stock Mesh-TF moves equal blocks between devices; here the dimension is
    gathered, shifted whole, and each device keeps its part. Shifts along a
    dimension that is not split, or of tensors split evenly, are stock.
    """
    x, axis = op.inputs[0], op._axis
    mesh_axis = mesh_impl.tensor_dimension_to_mesh_axis(op._dim)
    if mesh_axis is None or not mesh_impl.uneven_dims(x.shape):
        op.lower(lowering)
        return
    sizes = mesh_impl.part_sizes(op._dim, mesh_axis)
    whole = mesh_impl.allconcat(lowering.tensors[x], mesh_axis, axis)
    shifted = mesh_impl.slicewise(
        lambda t: _shift_whole(t, op._offset, axis, op._wrap), whole)
    lowering.set_tensor_lowering(
        op.outputs[0], mesh_impl.keep_own_parts(shifted, mesh_axis, axis, sizes))


def _shift_whole(t, offset, axis, wrap):
    """``t`` shifted by ``offset`` along ``axis``: wrapped, or filled with zeros."""
    if wrap:
        return tf.roll(t, offset, axis)
    size = t.shape.as_list()[axis]
    kept = max(size - abs(offset), 0)
    before = min(max(offset, 0), size)
    begin = [0] * t.shape.ndims
    extent = [-1] * t.shape.ndims
    begin[axis], extent[axis] = min(max(-offset, 0), size), kept
    paddings = [[0, 0]] * t.shape.ndims
    paddings[axis] = [before, size - kept - before]
    return tf.pad(tf.slice(t, begin, extent), paddings)


def lower_reshape(op, lowering, mesh_impl):
    """``mtf.reshape`` (and ``rename_dimension``) when a split is uneven.

    Each device reshapes to its own slice shape. A mesh axis whose split
    changes (its dimension disappears, appears or is another one) is gathered
    first (all-concat accepts unequal parts) and the new dimension split
    afterwards, each device keeping its part: where stock Mesh-TF would use an
    all-to-all (equal parts only) this moves more data but is exact. Reshapes
    without uneven dimensions are stock.
    """
    old_shape, new_shape = op.inputs[0].shape, op.outputs[0].shape
    if not (mesh_impl.uneven_dims(old_shape) or mesh_impl.uneven_dims(new_shape)):
        op.lower(lowering)
        return
    slices = lowering.tensors[op.inputs[0]]
    split_after = []   # (mesh axis, tensor axis, part sizes) of the new shape
    for mesh_axis, (old, new) in enumerate(zip(_axis_parts(mesh_impl, old_shape),
                                               _axis_parts(mesh_impl, new_shape))):
        if old == new:
            continue  # the same elements stay on the same devices
        if old is not None:
            slices = mesh_impl.allconcat(slices, mesh_axis,
                                         old_shape.cumprod_to_tensor_axis(old[0]))
        if new is not None:
            split_after.append((mesh_axis, new_shape.cumprod_to_tensor_axis(new[0]), new[1]))

    def local_reshape(pnum, t):
        shape = mesh_impl.slice_shape(new_shape, pnum)
        for _, tensor_axis, _ in split_after:
            shape[tensor_axis] = new_shape.dims[tensor_axis].size
        return tf.reshape(t, shape)
    slices = mesh_impl.slicewise_per_device(local_reshape, slices)
    for mesh_axis, tensor_axis, sizes in split_after:
        slices = mesh_impl.keep_own_parts(slices, mesh_axis, tensor_axis, sizes)
    lowering.set_tensor_lowering(op.outputs[0], slices)


def _axis_parts(mesh_impl, shape):
    """Per mesh axis: (cumprod, part sizes) of the dimension split on it, or None."""
    parts = [None] * mesh_impl.ndims
    for mesh_axis, cumprod in enumerate(mesh_impl.mesh_axis_to_cumprod(shape)):
        if cumprod is not None:
            dim = shape.dims[shape.cumprod_to_tensor_axis(cumprod)]
            parts[mesh_axis] = (cumprod, tuple(mesh_impl.part_sizes(dim, mesh_axis)))
    return parts


def lower_while_loop(op, lowering, mesh_impl):
    """``mtf.while_loop``: stock, unless its body needs this registry.

    Stock lowering calls each body operation's own ``lower``, bypassing the
    registry, so a loop whose body (or a nested loop's) holds an operation
    of a registered class that touches an uneven dimension is refused.
    """
    for body_op in _body_operations(op):
        uneven = [d for t in body_op.inputs + body_op.outputs
                  for d in mesh_impl.uneven_dims(t.shape)]
        if type(body_op) in LOWERINGS and uneven:
            raise UnevenSplitError(
                "its body's operation %r (%s) needs hmp's per-device lowering on "
                "the uneven dimension %r, which while_loop's lowering bypasses"
                % (body_op.name, type(body_op).__name__, uneven[0].name), uneven)
    op.lower(lowering)


def _body_operations(op):
    """The operations of a while loop's body, nested loops' bodies included."""
    for body_op in op._body_ops:
        yield body_op
        if isinstance(body_op, mtf.WhileLoopOperation):
            yield from _body_operations(body_op)


LOWERINGS = {
    mtf.Constant: lower_constant,
    mtf.OneHotOperation: lower_one_hot,
    mtf.ReshapeOperation: lower_reshape,
    mtf.ShiftOperation: lower_shift,
    mtf.TopKOperation: lower_top_k,
    mtf.WhileLoopOperation: lower_while_loop,
}
