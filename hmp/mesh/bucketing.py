"""All gradient sums of a step in one all-reduce per group of mesh axes (a bucket).

Mesh-TensorFlow sums every weight gradient over the batch axis on its own: a
kernel and a bias per layer, each an all-reduce of ``2 (n - 1)`` hand-overs (one for two
devices)
whose latency (0.15 ms idle, up to 1 ms under load between two ``hmp.worker``
tasks on one machine) dwarfs the few kilobytes a small HSI CNN's gradients
carry. Mesh-TF keeps such sums lazy (``mtf.LazyAllreduceSum``) until a
consumer needs them; ``reduce_together`` is that consumer for all gradients
at once: per device it concatenates the flattened partial sums of every
gradient that waits for the same mesh axes (and dtype), runs one all-reduce
of the concatenation (hmp's two-level one across hosts), and cuts the result
back into the gradients. Sums that are already done pass through unchanged.

Given ``dtypes``, each tensor is summed and handed on in its own of them: the
training step sums low-precision gradients (``--precision=mixed_*``) in float32,
their variables' dtype, so that a step still makes one all-reduce (a bucket is one
dtype) and the sum adds no rounding of the low precision (``hmp.mesh.train_step``).
"""

import math

import tensorflow.compat.v1 as tf

from hmp.compat import import_mesh_tensorflow

mtf = import_mesh_tensorflow()


class _ReduceTogether(mtf.Operation):
    """Identity of ``xs`` whose pending sums run as one all-reduce per bucket."""

    def __init__(self, xs, dtypes, name=None):
        super().__init__(xs, name=name or "reduce_together")
        self._outputs = [mtf.Tensor(self, x.shape, dtype) for x, dtype in zip(xs, dtypes)]

    def gradient(self, grad_ys):
        return [dy if dy is None else mtf.cast(dy, x.dtype)
                for dy, x in zip(grad_ys, self.inputs)]

    def lower(self, lowering):
        mesh_impl = lowering.mesh_impl(self)
        buckets = {}
        for x, output in zip(self.inputs, self.outputs):
            lowered = lowering.tensors[x]
            if isinstance(lowered, mtf.LazyAllreduceSum):
                key = (tuple(sorted(lowered.mesh_axes)), output.dtype)
                buckets.setdefault(key, []).append((output, lowered))
            elif output.dtype == x.dtype:
                lowering.set_tensor_lowering(output, lowered)
            else:
                lowering.set_tensor_lowering(output, mesh_impl.slicewise(
                    lambda t, dtype=output.dtype: tf.cast(t, dtype), lowered))
        for (mesh_axes, dtype), members in buckets.items():
            reduced = _allreduce_as_one(mesh_impl, [lazy.laid_out_input for _, lazy in members],
                                        list(mesh_axes), dtype)
            for (output, _), laid_out in zip(members, reduced):
                lowering.set_tensor_lowering(output, laid_out)
            lowering.add_counter("allreduce_bucket/%s/%d tensors" % (list(mesh_axes),
                                                                      len(members)),
                                 sum(mesh_impl.laid_out_size(o.shape) for o, _ in members))


def _allreduce_as_one(mesh_impl, laid_out, mesh_axes, dtype):
    """Sums of the ``laid_out`` tensors over ``mesh_axes`` by one all-reduce in ``dtype``;
    returns one LaidOutTensor per input."""
    # Mesh-TF's ring splits a tensor into equal chunks only if their count divides its
    # size (else it sends the whole tensor around): pad to a multiple of every ring's
    # length (a stock mesh runs one ring over each group of the axes).
    rings = (mesh_impl.ring_lengths(mesh_axes) if hasattr(mesh_impl, "ring_lengths")
             else [math.prod(mesh_impl.shape[a].size for a in mesh_axes)])
    multiple = math.lcm(*rings)
    slices = [lo.to_laid_out_tensor().tensor_list for lo in laid_out]
    flat = []
    for pnum, device in enumerate(mesh_impl.devices):
        with tf.device(device):
            parts = [tf.reshape(tf.cast(s[pnum], dtype), [-1]) for s in slices]
            size = sum(p.shape.num_elements() for p in parts)
            padding = -size % multiple
            flat.append(tf.concat(parts + [tf.zeros([padding], parts[0].dtype)], 0))
    summed = mesh_impl.allreduce(mesh_impl.LaidOutTensor(flat), mesh_axes, "SUM").tensor_list
    outputs = [[] for _ in laid_out]
    for pnum, device in enumerate(mesh_impl.devices):
        with tf.device(device):
            shapes = [s[pnum].shape for s in slices]
            pieces = tf.split(summed[pnum][:sum(s.num_elements() for s in shapes)],
                              [s.num_elements() for s in shapes])
            for out, piece, shape in zip(outputs, pieces, shapes):
                out.append(tf.reshape(piece, shape))
    return [mesh_impl.LaidOutTensor(out) for out in outputs]


def reduce_together(xs, dtypes=None, name=None):
    """``xs`` with their pending sums (e.g. gradients over the batch axis) done as one
    all-reduce per group of mesh axes (and dtype) instead of one per tensor; with
    ``dtypes`` (one per tensor), each summed and returned in its own."""
    xs = list(xs)
    return _ReduceTogether(xs, [x.dtype for x in xs] if dtypes is None else list(dtypes),
                           name=name).outputs
