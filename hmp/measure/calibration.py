"""Op-size efficiency and element-wise work, measured for the cost model's model splits.

A model split divides a layer's filters, not its fixed cost per sample and op, and it
replicates the element-wise work on the activations it holds whole. The cost model
prices both (``DeviceSpec.half_rate_flops`` ``h`` and ``elementwise_s_per_element``
``e``, docs/costmodel.md "Compute"): per sample, a device alone takes

    3 (F(w) + L h) / peak + E(w) e

at model width ``w`` (``F``: forward FLOPs, ``L``: layer ops with FLOPs, ``E``: the
activation elements of every layer's output; ``costmodel.per_sample_totals``).
Measured per device, never from split layouts:

* ``e``: a bias add + ReLU and their gradients on a tensor shaped like the first
  layer's output (``ElementwiseStep``), at two batch sizes: the slope per element;
* ``peak`` and ``h``: the one-device step at the model's width and at half of it
  (``half_width``), same batch: with ``e`` taken out, the two per-sample times give
  the two unknowns (``fit_op_size``).

``hmp.measure.speeds.measure_speeds(..., op_size=True)`` times these beside its other
steps; ``scripts/bench_costmodel.py`` uses the same pieces.
"""

import dataclasses
import time

import tensorflow.compat.v1 as tf

from hmp.cluster.sessions import close_session
from hmp.graph.from_graph import model_width
from hmp.planning.costmodel import TRAIN_FLOPS_FACTOR


def half_width(config):
    """``config`` at half the width its model is built with (``width=0``: the model's
    default), or None when that width cannot be halved (below 2)."""
    width = model_width(config)
    return dataclasses.replace(config, width=width // 2) if width >= 2 else None


def fit_op_size(per_sample, half_per_sample, full_totals, half_totals, elementwise):
    """``(peak FLOP/s, half_rate_flops, elementwise_s_per_element)`` of one device.

    Args:
      per_sample: seconds per sample of the one-device step at full width, its
        fixed per-step overhead taken out.
      half_per_sample: the same at half width (same batch), or None (not measured).
      full_totals, half_totals: ``costmodel.per_sample_totals`` (F, E, L) of the model
        at both widths
        (``half_totals`` unused without ``half_per_sample``).
      elementwise: the device's measured seconds per activation element (``e``).

    Per-sample time is ``3 (F + L h) / peak + E e`` at both widths. ``e`` is kept
    unless it leaves no time for the FLOPs (noise of a tiny benchmark: then 0). Without a
    half-width time, or when the two do not give a positive peak (noise), or without
    layer ops: ``h = 0`` and the peak is the rate of the full-width step.
    """
    flops, held, ops = full_totals
    if held * elementwise >= per_sample:
        elementwise = 0.0
    full_work = per_sample - held * elementwise
    if half_per_sample is not None and ops:
        half_flops, half_held, _ = half_totals
        half_work = half_per_sample - half_held * elementwise
        if full_work > half_work > 0 and flops > half_flops:
            peak = TRAIN_FLOPS_FACTOR * (flops - half_flops) / (full_work - half_work)
            half = max(full_work * peak / TRAIN_FLOPS_FACTOR - flops, 0.0) / ops
            # The same peak unless h was clipped at 0.
            return TRAIN_FLOPS_FACTOR * (flops + ops * half) / full_work, half, elementwise
    return TRAIN_FLOPS_FACTOR * flops / max(full_work, 1e-12), 0.0, elementwise


def elementwise_slope(seconds, small_seconds, batch_size, small, spec):
    """Seconds per activation element from ``ElementwiseStep`` times at two batch sizes
    (>= 0: noise does not make work negative)."""
    elements = spec.layers[0].output_elems_per_sample * (batch_size - small)
    return max((seconds - small_seconds) / elements, 0.0)


class ElementwiseStep:
    """A bias add + ReLU and their gradients (ReLU gradient, bias gradient summed over the
    batch) on ``device``, on a [batch, positions, channels] tensor shaped like the first
    layer's output of ``spec``, in a session of its own."""

    def __init__(self, spec, device, batch_size, target=None, session_config=None):
        first = spec.layers[0]
        channels = first.split_size if first.split_role == "output" else 0
        if not channels or first.output_elems_per_sample % channels:
            channels = first.output_elems_per_sample
        shape = [batch_size, first.output_elems_per_sample // channels, channels]
        graph = tf.Graph()
        with graph.as_default(), tf.device(device):
            x = tf.Variable(tf.random.normal(shape, seed=1))
            upstream = tf.Variable(tf.random.normal(shape, seed=2))
            bias = tf.Variable(tf.zeros([channels]))
            y = tf.nn.relu(x + bias)
            grad_x, grad_bias = tf.gradients(y, [x, bias], grad_ys=upstream)
            # One element of each gradient (a tf.group of them is pruned and runs nothing).
            self._fetch = [grad_x[0, 0, 0], grad_bias[0]]
            init = tf.global_variables_initializer()
        self.session = tf.Session(target or "", graph=graph, config=session_config)
        self.session.run(init)

    def run(self):
        """Runs the work once; returns its wall time in seconds."""
        start = time.perf_counter()
        self.session.run(self._fetch)
        return time.perf_counter() - start

    def close(self):
        close_session(self.session)   # a lost worker's session closes on its own


def describe(device):
    """The op-size figures of a measured ``device`` (a DeviceSpec) for a profiling line,
    e.g. "peak 154 GFLOP/s, half rate at 0.131 MFLOP per sample and op, element-wise
    0.76 ns per element" ("no op-size effect measured", "no element-wise cost measured"
    where a fit gave none: no time at half width or batch, or one too noisy to tell); ""
    when they were not measured."""
    if device.half_rate_flops is None:
        return ""
    op_size = ("no op-size effect measured" if device.half_rate_flops == 0 else
               f"half rate at {device.half_rate_flops / 1e6:.3g} MFLOP per sample and op")
    elementwise = ("no element-wise cost measured" if device.elementwise_s_per_element == 0
                   else f"element-wise {device.elementwise_s_per_element * 1e9:.3g} ns per "
                   "element")
    return f"peak {device.flops_per_s / 1e9:.3g} GFLOP/s, {op_size}, {elementwise}"
