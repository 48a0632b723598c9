"""What the planner knows about a model: its layers' sizes, costs and split dims.

A model describes itself as a ``ModelSpec``: a sequence of ``LayerSpec`` in
execution order. Each layer says which Mesh-TF dimension the planner may split
over the ``model`` axis and how:

* ``split_role="output"``: the layer's output channels are split; every device
  computes its own filters (also used for a pool applied to channels that are
  already split);
* ``split_role="input"``: the layer's input channels are split; every device
  computes a partial sum over its channels, and an all-reduce over the model
  axis adds them up.

The helpers build specs from shapes so that users (a platform of their own
model, ``scripts/bench_planner.py``) and tests need not count FLOPs by hand (the
trainer reads its specs off the model's graph, ``hmp.graph.from_graph``); the
sizes and FLOPs are ``hmp.layer_math``'s, the rules the engine and
``hmp.graph.workload`` use. FLOPs count a multiply-add as 2.
"""

import dataclasses
import math
from dataclasses import dataclass

from hmp.errors import InvalidInput, whole_number
from hmp.layer_math import conv_flops, dense_flops, output_size, per_axis, pool_flops

KINDS = ("conv2d", "conv3d", "dense", "pool")
CONVOLUTIONS = ("conv2d", "conv3d")   # the kinds whose output channels come in blocks
ROLES = ("output", "input")
# The fewest samples a replica of a batch split may hold when the model's batch norms use
# each replica's own statistics (``ModelSpec.replica_norm_layers``): over fewer, a replica's
# mean and variance are noise (a replica of one sample normalises a dense layer's output
# to its offset).
# Batch norm's error grows steeply below 8 samples a device: ImageNet ResNet-50, 32 a
# device 23.6%, 8 24.8%, 4 27.3%, 2 34.7% (Wu and He, Group Normalization, ECCV 2018,
# figure 1); hmp's local statistics on hybridsn's [21, 11] split trained level with sync
# (docs/benchmarks.md, "Accuracy with each replica's own batch-norm statistics").
MIN_REPLICA_SAMPLES = 8


@dataclass(frozen=True)
class LayerSpec:
    """One layer: its split dim and its per-sample forward cost."""

    name: str  # "conv1"
    kind: str  # one of KINDS
    split_dim: str | None  # Mesh-TF dimension the planner may split ("filters1"), or None
    split_size: int  # its size (0 if none)
    split_role: str | None  # "output", "input" or None (see module docstring)
    flops_per_sample: float  # forward FLOPs of the whole layer for one sample
    params: int  # parameter count of the whole layer
    output_elems_per_sample: int  # activation elements the layer outputs per sample

    def __post_init__(self):
        where = f"layer {self.name!r}"
        if not isinstance(self.name, str) or not self.name:
            raise InvalidInput(f"layer name must be a non-empty string, got {self.name!r}")
        if self.kind not in KINDS:
            raise InvalidInput(f"{where}: kind {self.kind!r} is unknown (allowed: {', '.join(KINDS)})")
        if self.split_dim is None:
            if self.split_role is not None or self.split_size != 0:
                raise InvalidInput(f"{where}: without a split_dim, split_role must be None "
                                 "and split_size 0")
        else:
            if not isinstance(self.split_dim, str) or not self.split_dim or self.split_dim == "batch":
                raise InvalidInput(f"{where}: split_dim {self.split_dim!r} must be a non-empty "
                                 "name other than 'batch'")
            if self.split_role not in ROLES:
                raise InvalidInput(f"{where}: split_role {self.split_role!r} is unknown "
                                 f"(allowed: {', '.join(ROLES)})")
            whole_number(self.split_size, f"{where}: split_size")
        for field in ("params", "output_elems_per_sample"):
            whole_number(getattr(self, field), f"{where}: {field}", 0)
        if not math.isfinite(self.flops_per_sample) or self.flops_per_sample < 0:
            raise InvalidInput(f"{where}: flops_per_sample {self.flops_per_sample!r} "
                             "must be finite and >= 0")

    @property
    def in_channel_blocks(self):
        """Whether a device's share of this layer costs its whole channel blocks
        (``DeviceSpec.channel_block``): an output-split convolution's."""
        return self.kind in CONVOLUTIONS and self.split_role == "output"


@dataclass(frozen=True)
class ModelSpec:
    """A model as the planner sees it: name, layers in execution order, input shape.

    ``input_shape`` is the shape of one sample (no batch dimension). A split
    dim may appear in several layers (the output split of one and the input
    split of the next), always with the same size.
    """

    name: str
    layers: tuple
    input_shape: tuple
    # Layers that normalise over the global batch (batch norm with sync statistics).
    # Each all-reduces over the batch axis twice per training step: its statistics in
    # the forward pass and its gradient sums in the backward pass
    # (``hmp.layers.batch_norm``); the devices of a batch split wait for each other
    # there. Local statistics make no such all-reduce and are not counted.
    norm_layers: int = 0
    # Layers that normalise over each batch replica's own samples (batch norm with local
    # statistics): no all-reduce, but a replica of few samples normalises over them
    # alone (``fewest_replica_samples``).
    replica_norm_layers: int = 0
    # Bytes of an activation element and of its gradient: 4 (float32), 2 under mixed
    # precision (``hmp.graph.graph_config.PRECISIONS``); weights, slots and the gradient sum
    # stay float32 (``hmp.planning.costmodel``).
    activation_bytes: int = 4

    def __post_init__(self):
        object.__setattr__(self, "layers", tuple(self.layers))
        object.__setattr__(self, "input_shape", tuple(self.input_shape))
        if not isinstance(self.name, str) or not self.name:
            raise InvalidInput(f"model name must be a non-empty string, got {self.name!r}")
        if not self.layers:
            raise InvalidInput(f"model {self.name!r} has no layers")
        if not self.input_shape:
            raise InvalidInput(f"model {self.name!r}: input_shape is empty")
        whole_number(self.norm_layers, f"model {self.name!r}: norm_layers", 0)
        whole_number(self.replica_norm_layers, f"model {self.name!r}: replica_norm_layers", 0)
        whole_number(self.activation_bytes, f"model {self.name!r}: activation_bytes")
        for d in self.input_shape:
            whole_number(d, f"model {self.name!r}: input_shape {self.input_shape!r}: a size")
        seen = set()
        sizes = {}
        for layer in self.layers:
            if not isinstance(layer, LayerSpec):
                raise InvalidInput(f"model {self.name!r}: {layer!r} is not a LayerSpec")
            if layer.name in seen:
                raise InvalidInput(f"model {self.name!r}: two layers are named {layer.name!r}")
            seen.add(layer.name)
            if layer.split_dim is not None:
                size = sizes.setdefault(layer.split_dim, layer.split_size)
                if size != layer.split_size:
                    raise InvalidInput(
                        f"model {self.name!r}: split dim {layer.split_dim!r} has size {size} "
                        f"in one layer but {layer.split_size} in layer {layer.name!r}")

    @property
    def fewest_replica_samples(self):
        """The fewest samples a replica of a batch split may hold: ``MIN_REPLICA_SAMPLES``
        when a batch norm normalises over each replica's own samples, else 1."""
        return MIN_REPLICA_SAMPLES if self.replica_norm_layers else 1

    def split_dims(self):
        """Every split dim and its size, in order of first appearance."""
        return {layer.split_dim: layer.split_size
                for layer in self.layers if layer.split_dim is not None}

    def replicating(self, dims):
        """This model with the split dims ``dims`` replicated: their layers are not split
        (every model column computes them whole), as when a layout leaves those dims out
        of its rules. Unknown dims raise InvalidInput."""
        dims = set(dims)
        unknown = sorted(dims - set(self.split_dims()))
        if unknown:
            raise InvalidInput(f"model {self.name!r}: cannot replicate {', '.join(unknown)}: "
                               f"not a split dim (its split dims: "
                               f"{', '.join(self.split_dims()) or 'none'})")
        if not dims:
            return self
        return dataclasses.replace(self, layers=[
            dataclasses.replace(l, split_dim=None, split_size=0, split_role=None)
            if l.split_dim in dims else l for l in self.layers])

    def input_elems_per_sample(self, index):
        """Activation elements entering layer ``index`` per sample (layers are a chain)."""
        if index == 0:
            return math.prod(self.input_shape)
        return self.layers[index - 1].output_elems_per_sample


def conv_output_spatial(in_spatial, kernel, strides=1, padding="same"):
    """Output spatial shape of a convolution or pool (``hmp.layer_math.output_size``
    on every axis)."""
    rank = len(in_spatial)
    in_spatial = per_axis(tuple(in_spatial), rank, "in_spatial")
    kernel = per_axis(kernel, rank, "kernel")
    strides = per_axis(strides, rank, "strides")
    return tuple(output_size(n, k, s, padding, f"axis {axis} of in_spatial {in_spatial}")
                 for axis, (n, k, s) in enumerate(zip(in_spatial, kernel, strides)))


def _split(out_channels, in_channels, split_dim, split_role):
    """The split size implied by the role: output or input channels."""
    if split_dim is None:
        return 0
    return {"output": out_channels, "input": in_channels}.get(split_role, 0)


def conv_layer_spec(name, kind, in_spatial, kernel, in_channels, out_channels,
                    strides=1, padding="same", split_dim=None, split_role=None, bias=True):
    """A conv2d/conv3d layer's spec from its shapes.

    FLOPs per sample: ``2 * prod(kernel) * in_channels * out_channels *
    prod(out_spatial)``; params: ``prod(kernel) * in_channels * out_channels``
    plus ``out_channels`` biases. ``in_spatial`` is (H, W) for conv2d and
    (H, W, bands) for conv3d. The split size is ``out_channels`` for role
    "output" and ``in_channels`` for role "input".
    """
    rank = {"conv2d": 2, "conv3d": 3}.get(kind)
    if rank is None or len(in_spatial) != rank:
        raise InvalidInput(f"layer {name!r}: kind {kind!r} with in_spatial {in_spatial!r}; "
                         "need conv2d with (H, W) or conv3d with (H, W, D)")
    out_spatial = conv_output_spatial(in_spatial, kernel, strides, padding)
    taps = math.prod(per_axis(kernel, rank, "kernel"))
    weights = taps * in_channels * out_channels
    return LayerSpec(
        name=name, kind=kind, split_dim=split_dim,
        split_size=_split(out_channels, in_channels, split_dim, split_role),
        split_role=split_role,
        flops_per_sample=float(conv_flops(math.prod(out_spatial) * out_channels, weights,
                                          out_channels)),
        params=weights + (out_channels if bias else 0),
        output_elems_per_sample=math.prod(out_spatial) * out_channels)


def dense_layer_spec(name, in_features, out_features, split_dim=None, split_role=None, bias=True):
    """A dense layer's spec: ``2 * in * out`` FLOPs, ``in * out (+ out)`` params."""
    return LayerSpec(
        name=name, kind="dense", split_dim=split_dim,
        split_size=_split(out_features, in_features, split_dim, split_role),
        split_role=split_role,
        flops_per_sample=float(dense_flops(in_features * out_features)),
        params=in_features * out_features + (out_features if bias else 0),
        output_elems_per_sample=out_features)


def pool_layer_spec(name, in_spatial, channels, window, strides=None, padding="valid",
                    split_dim=None):
    """A max/average pool's spec: one FLOP per window element per output, no params.

    With ``split_dim`` (the dim of its already-split channels) it is an
    "output" split: every device pools its own channels.
    """
    out_spatial = conv_output_spatial(in_spatial, window, window if strides is None else strides,
                                      padding)
    out_elems = math.prod(out_spatial) * channels
    return LayerSpec(
        name=name, kind="pool", split_dim=split_dim,
        split_size=channels if split_dim is not None else 0,
        split_role="output" if split_dim is not None else None,
        flops_per_sample=float(pool_flops(
            out_elems, math.prod(per_axis(window, len(in_spatial), "window")))),
        params=0, output_elems_per_sample=out_elems)
