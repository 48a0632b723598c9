"""The work a Mesh-TF graph's layers do: in total, and per device once lowered.

``layer_ops(graph)`` finds the layers among a graph's operations, in
execution order, so that other code (the planner's ``model_spec``, this
module's per-device report) counts the model the graph really is:

* convolutions and pools are ``hmp.mesh.ops.LocalOperation``s, which say which
  they are (``kind``) and, for a pool, the size of its window;
* a dense layer is an ``EinsumOperation`` that contracts a tensor with a
  trainable variable into that variable's last dimension (``hmp.layers.dense``).
  Only forward ops match: the einsums of the backward pass either take no
  variable or produce the input's shape, which lacks that dimension.

Forward FLOPs follow ``hmp.layer_math`` (the planner's hand-built specs use
the same rules): a convolution ``2 x output elements x filter elements /
output-dim size``; a dense layer ``2 x`` the product of the union of its dims;
a pool one FLOP per window element per output element.

``workload(lowering, mesh_impl)`` evaluates the same formulas on every
device's slice shapes and reads the slice variables' sizes: what each device
really computes and holds. A layer none of whose dims is laid out on a mesh
axis is computed whole by every device of that axis; ``replicas`` counts the
copies, so that ``sum(per device) == whole x replicas`` holds exactly.
"""

import dataclasses
import math

from hmp.compat import import_mesh_tensorflow
from hmp.layer_math import conv_flops, dense_flops, pool_flops
from hmp.mesh.ops import LocalOperation

mtf = import_mesh_tensorflow()


def whole_size(dim):
    """The size of ``dim`` in the global (unsplit) graph."""
    return dim.size


@dataclasses.dataclass(frozen=True)
class LayerOp:
    """A layer's main Mesh-TF operation.

    ``name`` is the variable scope of its weights ("block1/split_out") or, for
    a pool, the operation's name; ``kernel`` the weight tensor (None for a
    pool); ``window`` the elements of a pool's window (1 otherwise).
    """

    op: mtf.Operation
    name: str
    kind: str
    kernel: mtf.Tensor | None
    window: int = 1

    @property
    def dims(self):
        """Every dim of the op's inputs and output, each name once."""
        dims = {}
        for tensor in self.op.inputs + self.op.outputs:
            for dim in tensor.shape.dims:
                dims.setdefault(dim.name, dim)
        return list(dims.values())

    def flops(self, size_of=whole_size):
        """Forward FLOPs with each dim's size given by ``size_of(dim)`` (default: whole)."""
        def elements(shape):
            return math.prod(size_of(d) for d in shape.dims)
        output = self.op.outputs[0].shape
        if self.kind == "dense":
            return dense_flops(math.prod(size_of(d) for d in self.dims))
        if self.kind == "pool":
            return pool_flops(elements(output), self.window)
        return conv_flops(elements(output), elements(self.kernel.shape),
                          size_of(self.kernel.shape.dims[-1]))

    def params(self):
        """Elements of the trainable variables in the layer's scope (kernel, bias)."""
        if self.kernel is None:
            return 0
        prefix = self.name + "/"
        return sum(v.outputs[0].shape.size for v in self.op.graph.trainable_variables
                   if v.name.startswith(prefix))


def _trainable_variable(tensor):
    operation = tensor.operation
    return isinstance(operation, mtf.Variable) and operation.trainable


def _dense_layer(op):
    """A LayerOp if ``op`` is the einsum of a dense layer, else None."""
    if not isinstance(op, mtf.EinsumOperation) or len(op.inputs) != 2:
        return None
    output = op.outputs[0].shape
    for kernel, x in (op.inputs, op.inputs[::-1]):
        contracted = [d for d in x.shape.dims if d not in output.dims]
        if (_trainable_variable(kernel) and contracted
                and kernel.shape.dims[-1] in output.dims
                and kernel.shape.dims[-1] not in x.shape.dims):
            return LayerOp(op, kernel.operation.name.rpartition("/")[0] or op.name,
                           "dense", kernel)
    return None


def _local_layer(op):
    """A LayerOp if ``op`` is a convolution or pool LocalOperation, else None."""
    if not isinstance(op, LocalOperation) or op.kind is None:
        return None
    if op.kind == "pool":
        return LayerOp(op, op.name, op.kind, None, op.window)
    kernel = op.inputs[1]
    return LayerOp(op, kernel.operation.name.rpartition("/")[0] or op.name, op.kind, kernel)


def layer_ops(graph):
    """The layers of an mtf ``graph``'s forward pass, in execution order."""
    found = (_local_layer(op) or _dense_layer(op) for op in graph.operations)
    return [layer for layer in found if layer is not None]


@dataclasses.dataclass(frozen=True)
class LayerWork:
    """One layer's forward FLOPs: per device, whole, and how many copies run."""

    name: str
    kind: str
    flops: tuple  # per device (processor order)
    whole: int  # the unsplit layer over the global batch
    replicas: int  # devices computing each element: sum(flops) == whole * replicas


@dataclasses.dataclass(frozen=True)
class Workload:
    """What every device of a lowered graph computes (forward) and holds."""

    devices: tuple
    layers: tuple  # of LayerWork
    param_bytes: tuple  # per device: its slices of the trainable variables
    variable_bytes: tuple  # per device: all its slice variables (with optimizer slots)

    def device_flops(self):
        """Forward FLOPs of every device, summed over the layers."""
        return [sum(layer.flops[p] for layer in self.layers) for p in range(len(self.devices))]


def _replicas(layer, mesh_impl):
    """Devices that compute the same elements of ``layer``: the unsplit mesh axes."""
    axes = {mesh_impl.tensor_dimension_to_mesh_axis(d) for d in layer.dims} - {None}
    return mesh_impl.size // math.prod(mesh_impl.shape[a].size for a in axes)


def _slice_bytes(lowering, variables, n_devices):
    """Per device, the bytes of the slices of ``variables``."""
    per_device = [0] * n_devices
    for variable in variables:
        slices = lowering.variables[variable].laid_out_tensor.tensor_list
        for pnum, tf_slice in enumerate(slices):
            per_device[pnum] += (tf_slice.shape.num_elements()
                                 * tf_slice.dtype.base_dtype.size)
    return tuple(per_device)


def workload(lowering, mesh_impl):
    """The forward FLOPs and variable bytes of every device of a lowered graph.

    Args:
      lowering: the ``hmp.HeteroLowering`` of the graph (one mesh).
      mesh_impl: its ``hmp.HeteroMeshImpl``.

    Returns:
      A ``Workload``: per layer (``layer_ops``) the FLOPs of each device's
      slices and the whole layer's, per device the bytes of its slices.
    """
    layers = []
    for layer in layer_ops(lowering.graph):
        per_device = tuple(
            layer.flops(lambda d, p=pnum: mesh_impl.slice_shape(mtf.Shape([d]), p)[0])
            for pnum in range(mesh_impl.size))
        layers.append(LayerWork(layer.name, layer.kind, per_device, layer.flops(),
                                _replicas(layer, mesh_impl)))
    graph = lowering.graph
    return Workload(tuple(mesh_impl.devices), tuple(layers),
                    _slice_bytes(lowering, graph.trainable_variables, mesh_impl.size),
                    _slice_bytes(lowering, graph.all_variables, mesh_impl.size))
