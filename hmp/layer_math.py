"""The arithmetic of a layer: its window and strides, output sizes and forward FLOPs.

Pure Python (no TensorFlow), so that the engine (``hmp.mesh.ops`` sizes its
outputs, ``hmp.graph.workload`` counts a lowered graph's work) and the planner's
hand-built specs (``hmp.planning.model_spec``) apply the same rules.

FLOPs count a multiply-add as 2.
"""

import collections.abc
import numbers

from hmp.errors import InvalidInput, whole_number


def per_axis(value, rank, what):
    """``value`` (a filter size, window or strides) for each of ``rank`` spatial axes, as
    a tuple of ints: one whole number >= 1 an axis, or one for every axis (``3`` is
    ``(3, 3)`` in 2-D). Else InvalidInput: "<what> <value> must be <rank> whole numbers
    >= 1", or "<what> <value>: an entry must be a whole number >= 1, got ..."."""
    if isinstance(value, numbers.Integral):
        values = (value,) * rank
    else:
        values = tuple(value) if isinstance(value, collections.abc.Iterable) else ()
    if len(values) != rank:
        raise InvalidInput(f"{what} {value!r} must be {rank} whole numbers >= 1")
    return tuple(whole_number(v, f"{what} {value!r}: an entry") for v in values)


def output_size(size, window, stride, padding, what="the input"):
    """Output size along one axis of a convolution or pool, as TensorFlow computes it.

    ``same``: ``ceil(size / stride)``; ``valid``: ``floor((size - window) /
    stride) + 1``. ``padding`` may be written in either case ("SAME", "same").
    ``what`` names the axis in the error of a VALID window larger than it.
    """
    kind = padding.lower() if isinstance(padding, str) else padding
    if kind == "same":
        return -(-size // stride)
    if kind == "valid":
        if size < window:
            raise InvalidInput(
                f"{what} has size {size}, smaller than the VALID window {window} (use a "
                "larger input, e.g. more bands or a bigger patch, or SAME padding)")
        return (size - window) // stride + 1
    raise InvalidInput(f"padding {padding!r} is unknown (allowed: SAME, VALID)")


def conv_flops(output_elements, filter_elements, out_channels):
    """A convolution: 2 x output elements x the filter elements of one output channel."""
    return 2 * output_elements * filter_elements // out_channels


def dense_flops(contraction_elements):
    """A dense layer: 2 x the product of every dim it contracts over or outputs
    (batch x in x out)."""
    return 2 * contraction_elements


def pool_flops(output_elements, window_elements):
    """A pool: one FLOP per window element per output element."""
    return window_elements * output_elements
