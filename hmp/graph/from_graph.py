"""A model's ``ModelSpec`` read off its Mesh-TF graph, so specs never drift from models.

``model_spec(config)`` builds the model's graph for one sample in a
throwaway ``tf.Graph`` and turns every layer ``hmp.graph.workload.layer_ops``
finds into a ``LayerSpec``: FLOPs, parameters and outputs per sample from the
graph's shapes, the split dim from the model's ``SPLIT_DIMS`` (``config.model``)
and its role from where that dim occurs ("output" if the layer's output has it, "input" if
only its inputs do). Its batch norms are counted too (``ModelSpec.norm_layers`` with sync
statistics, ``ModelSpec.replica_norm_layers`` with local ones), and the bytes of its
activations' dtype (``ModelSpec.activation_bytes``: 2 under mixed
precision).

Unlike the rest of ``hmp.planning`` this module needs TensorFlow and Mesh-TF;
import it explicitly (``from hmp.graph.from_graph import model_spec``).
"""

import inspect

import tensorflow.compat.v1 as tf

from hmp.errors import InvalidInput
from hmp.graph.graph import build_model_graph, imported
from hmp.graph.workload import layer_ops
from hmp.layers import BATCH_NORMS, REPLICA_NORMS
from hmp.planning.model_spec import LayerSpec, ModelSpec


def model_width(config):
    """The width the model is built with: ``config.width`` or the model's default."""
    return config.width or default_width(config.model)


def default_width(model):
    """The width ``model`` (a module with ``logits(x, classes, width=...)``) builds by
    default."""
    return inspect.signature(model.logits).parameters["width"].default


def spec_name(config):
    """A name that identifies the model, its input and how it computes, e.g.
    ``cnn2d(width=32, input=9x9x200, classes=16)`` (float32 and sync batch norm, the
    layers' defaults, go unsaid; else ``, precision=mixed_bfloat16, batch_norm=local``): a plan
    made for another model, input, precision or batch norm is refused when loaded."""
    unusual = "".join(f", {name}={value}" for name, value, usual in (
        ("precision", config.precision, "float32"), ("batch_norm", config.batch_norm, "sync"))
        if value != usual)
    return (f"{config.name}(width={model_width(config)}, "
            f"input={config.patch}x{config.patch}x{config.bands}, "
            f"classes={config.n_classes}{unusual})")


def _split(layer, split_dims):
    """(split dim, its size, role) of a layer, or (None, 0, None)."""
    found = [d for d in layer.dims if d.name in split_dims]
    if not found:
        return None, 0, None
    if len(found) > 1:
        raise ValueError(f"layer {layer.name!r} has several split dims "
                         f"{[d.name for d in found]}; a layer may split at most one")
    dim = found[0]
    role = "output" if dim in layer.op.outputs[0].shape.dims else "input"
    return dim.name, dim.size, role


def split_dims(model, layers, output_dims):
    """The names of ``model.SPLIT_DIMS`` (a lone string: one name, as ``("hidden")``
    reads), checked against ``layers`` (``hmp.graph.workload.layer_ops``): InvalidInput
    naming SPLIT_DIMS, the names no layer has and the dims that can be split (each
    layer's weights' output dim, the model's output ``output_dims`` left out), else a
    model split would split nothing and every device compute the whole model."""
    names = model.SPLIT_DIMS
    names = (names,) if isinstance(names, str) else tuple(names)
    present = {dim.name for layer in layers for dim in layer.dims}
    unknown = [name for name in names if name not in present]
    if unknown:
        candidates = list(dict.fromkeys(
            layer.kernel.shape.dims[-1].name for layer in layers
            if layer.kernel is not None and layer.kernel.shape.dims[-1].name not in output_dims))
        raise InvalidInput("SPLIT_DIMS %s: %s %s no dim of the model's layers; the dims it "
                           "could split are %s" % (
                               names, ", ".join(map(repr, unknown)),
                               "is" if len(unknown) == 1 else "are",
                               ", ".join(candidates) or "none (no layer has weights)"))
    return names


def model_spec(config):
    """The ``ModelSpec`` of ``config`` (an ``hmp.graph.graph_config.ModelConfig``), from its
    graph; InvalidInput when the model's ``SPLIT_DIMS`` names a dim none of its layers has
    (:func:`split_dims`)."""
    with tf.Graph().as_default():
        tf.set_random_seed(0)   # never drawn; a seed lets it build under op determinism
        x = tf.placeholder(tf.float32, [1, config.patch, config.patch, config.bands])
        y = tf.placeholder(tf.int32, [1])
        graph, _, _, logits, _ = build_model_graph(config, 1, imported(x), y)
        layers, found = [], layer_ops(graph)
        names = split_dims(config.model, found, {dim.name for dim in logits.shape.dims})
        for layer in found:
            dim, size, role = _split(layer, names)
            layers.append(LayerSpec(
                name=layer.name, kind=layer.kind, split_dim=dim, split_size=size,
                split_role=role, flops_per_sample=float(layer.flops()),
                params=layer.params(),
                output_elems_per_sample=layer.op.outputs[0].shape.size))
        norms = (len(tf.get_collection(BATCH_NORMS)), len(tf.get_collection(REPLICA_NORMS)))
        # the bytes of an activation element (2 under mixed precision): the layers' outputs'
        activation_bytes = max((layer.op.outputs[0].dtype.size for layer in found), default=4)
    return ModelSpec(spec_name(config), layers, (config.patch, config.patch, config.bands),
                     *norms, activation_bytes)
