"""Analytical step-time model of data-, model- and hybrid layouts.

In the spirit of Castello et al. (PDP 2021): the time of one training step is
priced from per-layer FLOPs and bytes, the devices' FLOP rates and memory
bandwidths, and the link's bandwidth and latency; plus terms that
measurement on small HSI patches showed to matter (fixed per-step overhead,
op-size efficiency, synchronisation at every layer, devices that share a
processor, per-tensor collectives, communication that is CPU work) and the
cost of feeding the input.

Compute. A layer's training FLOPs are ``3 x`` its forward FLOPs (the backward
pass computes the gradients of the input and of the weights, each about as
costly as the forward pass). A device computes its batch share ``b`` of the
samples and its model fraction ``f`` of the layer (its filters over all
filters; 1 for a layer that is not split, which every model column computes
whole -- replicated). Its time on the layer is a roofline plus its share of
a fixed overhead::

    t = max(3 * b * (flops_per_sample * f + h) / flops_per_s,
            3 * a * (params * f + b * outputs_per_sample * g) / mem_bw)
        + overhead_s / layers

with ``g = f`` when the layer's outputs are split and ``g = 1`` when they are
partial sums of the whole output (input-split layers) or replicated, and ``a``
the bytes of an activation element (``ModelSpec.activation_bytes``: 4, or 2 under
mixed precision, when the layers also read their weights in 16 bits). Without
``mem_bw`` only the first term counts. ``overhead_s`` (``DeviceSpec``, default
0) is the part of a device's step that does not shrink with its share:
launching and scheduling every op of the step, which every device of a split
layout runs for every layer. ``h`` (``DeviceSpec.half_rate_flops``, default
0; only for layers with FLOPs) is the op-size efficiency: a slice of ``s``
FLOPs per sample runs at ``flops_per_s * s / (s + h)``, a fixed cost per
sample and layer op that splitting the filters does not divide. ``e``
(``DeviceSpec.elementwise_s_per_element``, default 0) prices the element-wise
work on the activations a device holds -- bias add, activation or pooling and
their gradients -- per sample and layer::

    t += b * outputs_per_sample * g * e

with the same ``g``: a device of a model split handles the whole (replicated)
output of an input-split or unsplit layer, so this work does not shrink with
its filter share, unlike FLOPs. (The adds of the model-axis all-reduces are
not counted here: the link's figures are measured with an add at every
hand-over.) A device's busy time is the sum over layers.

Channel blocks. A convolution computes its output channels in blocks
(``DeviceSpec.channel_block``, ``k``: oneDNN's vector width on a CPU), so for an
output-split convolution ``f`` in the FLOP term is ``ceil(c / k) / ceil(C / k)``
for a share of ``c`` of its ``C`` filters, not ``c / C``: 23 of 64 filters cost
as much as 32 with ``k = 16``. The one-device layout (``c = C``) keeps ``f = 1``,
so the measured rates, which include the model's own whole-layer blocks, stay
its rates. Input-split convolutions and dense layers follow their share (no
staircase in their timings).

Synchronisation. Model parallelism joins the devices of a batch row at a
collective after (nearly) every layer, so their slowest gates every layer, not
only the step: a row's compute = sum over layers of its slowest device on that
layer (equal to that device's busy time when the split is proportional to
speed). Batch rows meet only at the batch axis's barriers (below), whose waits
the communication prices, so the step's compute is the slowest row's: a data
split's, its slowest device's busy time, however each device spreads it over
the layers (a large per-step overhead and little work, or the reverse).
Devices that share a processor (same ``DeviceSpec.host`` with
``host_cores``, e.g. virtual devices of one process or worker) cannot all
compute at once: a row's layer then lasts at least the sum of their times on
it over ``host_cores``, and the step at least all their busy times over
``host_cores``.

Communication (ring algorithms over ``n`` devices, link bandwidth ``bw`` and
latency ``lat``, payload ``B`` bytes)::

    all-reduce:  2 (n - 1) / n * B / bw + r lat,  r = 2 (n - 1); r = 1 for n = 2
    all-gather:  (n - 1) * max_piece / bw + (n - 1) lat   (= (n-1)/n B/bw if even)

``lat`` is the cost of one hand-over (a message and the op that takes it);
``r`` and ``n - 1`` are the hand-overs one after another (two devices exchange
their whole tensors at once: ``hmp.mesh.collectives.ring_allreduce``). A
collective among devices of one host uses the link's ``local`` figures
(another process or machine is not involved), others the link itself.
Hand-overs that run while the devices at their ends compute other work of
the step, on its critical path, use the link's figures under load
(``LinkSpec.loaded``; on a CPU link they wait for and share the cores that
compute): the backward pass's model-axis collectives (an input gradient's
all-reduce runs beside the weight-gradient op of the same layer) and the
input handed to other hosts (the first host computes its samples meanwhile).
The forward pass's model-axis collectives keep the idle figures: the next
layer waits for them, nothing computes beside them (``model_axis_link``). The batch-axis
all-reduces of weight gradients run beside the backward pass of the layers
below, which hides most of their slowdown; they keep the idle figures.
On the model axis: after each input-split layer, the all-reduce of its partial
sums (its output, per sample x batch share); where activations go from
replicated to split (an output-split layer), the matching all-reduce of the
input's gradient in the backward pass (skipped when no earlier layer has
weights, as then no gradient flows back); and an all-gather wherever a split
activation must be whole again (an unsplit layer, or the model's output).
With uneven batch rows every row runs its own collectives; the slowest counts.
On the batch axis: the sum of every weight gradient a model column holds,
over the ``M`` devices of that column, as one all-reduce of all of them
(``hmp.mesh.bucketing``: one set of hand-overs and their latency per step, not
one per weight tensor); and per norm layer with sync statistics
(``ModelSpec.norm_layers``; local ones have none) two all-reduces of its
statistics, priced by their latency (forward idle, backward under load). They
matter: with five all-reduces a layer (Mesh-TF's own gradient), cnn2d's four
batch-norm layers added 51 ms to the 72 ms step of its data split over two workers
of the 2-vCPU VM, and 20 ms to the step of the fast worker alone. A group spanning several hosts
with several devices on some of them uses the two-level all-reduce of
``hmp.mesh.collectives`` (``allreduce_pricer``). Collectives of groups that share a
host (the rows' on the model axis, the columns' on the batch axis) overlap,
except for the ``LinkSpec.cpu_share`` of them that is CPU work of that host
(``concurrent_groups_time``).

Barriers. Each of those collectives whose result the next op needs on every device
is a barrier: a batch norm's statistics (forward and backward), the gradient sum
before the update, every model-axis collective. Devices whose shares balance the
whole step still reach each barrier at different times (their speeds differ from
layer to layer and from moment to moment; a worker on a time-shared core runs in
bursts), and whoever comes first waits. ``LinkSpec.barrier_s`` prices that wait per
barrier (``barriers``); the profiler measures it in a data split of the model's own
step (``hmp.measure.speeds.measure_platform``).

Input. The scene is loaded onto the devices once (``hmp.graph.scene_input``); with
``link.feed`` (the client's link to the first device's host) a fed step feeds
every sample's pixel index and label there (``FED_BYTES_PER_SAMPLE``), and
every other host receives those of the samples its devices need (its batch
rows; the whole batch to a model-parallel row) over the link under load, one
host after another. Patches never travel: every device cuts its own. The trainer's
steps feed nothing (each epoch's batches are kept on the devices,
``TrainingGraph.load_batches``) and its measured link has no ``feed``.

Step time = compute + all communication (not overlapped with compute: on a
CPU link, e.g. loopback between workers of one machine, sending and
receiving is work of the same cores that compute).

Precision. Under mixed precision (``hmp.train --precision``) activations and their
gradients take ``ModelSpec.activation_bytes`` (2) bytes an element: the model-axis
collectives move 2 bytes an element, the layers' memory traffic and activations
halve. The weight gradients are summed over the batch axis in float32 (4 bytes an
element, ``hmp.mesh.train_step``), and batch norm's statistics too. A device's FLOP
rate is measured on the model's own step at its precision (the speed cache keys on
it), so tensor cores show in ``flops_per_s``.

Memory per device = 4 bytes * (4 copies of its weights (weights, gradients,
Adam's two moments; an upper bound for optimizers with fewer slots), plus under
mixed precision 2 x 2 bytes of each weight (its 16-bit read and gradient) + its
batch share * (4 bytes * input sample + ``activation_bytes`` * every layer output it
holds)).
"""

import math
from dataclasses import dataclass

import numpy as np

from hmp.hosts import group_by_host, is_hierarchical
from hmp.planning.layout import check_mesh_size, check_splits

BYTES_PER_ELEMENT = 4  # float32: weights, optimizer slots, gradient sums, input patches
TRAIN_FLOPS_FACTOR = 3  # forward + backward ~= 3 x forward
PARAM_COPIES = 4  # weights, gradients, Adam's two moments (the default optimizer)
LOW_PRECISION_PARAM_COPIES = 2  # mixed precision: the weights' 16-bit read and gradient
FED_BYTES_PER_SAMPLE = 8  # an int32 pixel index and an int32 label (patches are cut on devices)


def train_flops_per_sample(model_spec):
    """The training FLOPs of one sample: ``TRAIN_FLOPS_FACTOR`` x the forward FLOPs
    of ``model_spec``'s layers."""
    return TRAIN_FLOPS_FACTOR * sum(l.flops_per_sample for l in model_spec.layers)


def per_sample_totals(model_spec):
    """``(F, E, L)`` of ``model_spec``: forward FLOPs and activation elements (every
    layer's output) per sample, and the layer ops with FLOPs, which the op-size terms
    count (``DeviceSpec.half_rate_flops``, ``elementwise_s_per_element``)."""
    return (sum(l.flops_per_sample for l in model_spec.layers),
            sum(l.output_elems_per_sample for l in model_spec.layers),
            sum(l.flops_per_sample > 0 for l in model_spec.layers))


def alone_flops_per_s(model_spec, device):
    """The FLOP rate at which ``device`` (a DeviceSpec) computes ``model_spec`` alone, its
    per-step overhead aside: ``flops_per_s`` slowed by the op-size terms, ``3 F / (3 (F +
    L h) / flops_per_s + E e)`` (``per_sample_totals``), ``predict``'s compute of the
    one-device layout without a memory bandwidth. Exactly ``flops_per_s`` without
    op-size figures."""
    flops, elements, ops = per_sample_totals(model_spec)
    extra = (ops * (device.half_rate_flops or 0.0)
             + elements * (device.elementwise_s_per_element or 0.0)
             * device.flops_per_s / TRAIN_FLOPS_FACTOR)
    return device.flops_per_s / (1.0 + extra / flops)


def ring_allreduce_time(nbytes, n, link):
    """All-reduce of ``nbytes`` over ``n`` devices, as ``hmp.mesh.collectives.ring_allreduce``
    runs it: a ring's reduce-scatter + all-gather, ``2 (n - 1)`` steps each sending a
    ``1/n`` chunk to the next device; two devices exchange their whole tensors at once,
    one hand-over (the same bytes as the ring's two half-chunks, one latency).
    """
    if n <= 1:
        return 0.0
    hand_overs = 1 if n == 2 else 2 * (n - 1)
    return 2 * (n - 1) / n * nbytes / link.bandwidth_bytes_per_s + hand_overs * link.latency_s


def ring_allgather_time(piece_bytes, link):
    """Ring all-gather of one piece per device (pieces may be uneven).

    Each of the ``n - 1`` steps forwards one piece per device; a step lasts as
    long as the largest piece takes.
    """
    n = len(piece_bytes)
    if n <= 1:
        return 0.0
    return (n - 1) * max(piece_bytes) / link.bandwidth_bytes_per_s + (n - 1) * link.latency_s


def weight_fractions(model_spec, mesh, splits):
    """(layers, model columns): the fraction of each layer's weights each column holds."""
    fractions = np.ones((len(model_spec.layers), mesh.model))
    if "model" in mesh.axes:
        for i, layer in enumerate(model_spec.layers):
            if layer.split_dim is not None:
                fractions[i] = np.asarray(splits[layer.split_dim]) / layer.split_size
    return fractions


def blocked_fractions(model_spec, mesh, splits, devices):
    """(layers, batch rows, model columns): the fraction of each layer's compute each
    device does: its weight fraction, or for an output-split convolution its whole
    channel blocks over the layer's (module docstring, ``DeviceSpec.channel_block``)."""
    fractions = np.repeat(weight_fractions(model_spec, mesh, splits)[:, None, :],
                          mesh.batch, axis=1)
    if "model" not in mesh.axes:
        return fractions
    blocks = np.array([d.channel_block for d in devices]).reshape(mesh.batch, mesh.model)
    for i, layer in enumerate(model_spec.layers):
        if layer.in_channel_blocks:
            share = np.asarray(splits[layer.split_dim])[None, :]
            fractions[i] = np.ceil(share / blocks) / np.ceil(layer.split_size / blocks)
    return fractions


def _output_fractions(model_spec, fractions):
    """Fraction of each layer's output a column holds: whole for input-split layers."""
    is_input = np.array([layer.split_role == "input" for layer in model_spec.layers])
    return np.where(is_input[:, None], 1.0, fractions)


def _layer_arrays(model_spec):
    """Per-layer forward FLOPs, params and outputs per sample, as float arrays."""
    layers = model_spec.layers
    return (np.array([l.flops_per_sample for l in layers], dtype=float),
            np.array([l.params for l in layers], dtype=float),
            np.array([l.output_elems_per_sample for l in layers], dtype=float))


def memory_bytes(model_spec, batch_rows, fractions):
    """Bytes each device holds, as a (batch rows, model columns) array.

    ``batch_rows``: samples per batch row; ``fractions``: as from
    ``weight_fractions``. Affine in both, which the planner uses to turn a
    memory cap into a cap on filters or samples.
    """
    _, params, outputs = _layer_arrays(model_spec)
    held_params = params @ fractions  # (N,)
    held_outputs = (model_spec.activation_bytes * outputs
                    @ _output_fractions(model_spec, fractions)
                    + BYTES_PER_ELEMENT * math.prod(model_spec.input_shape))
    batch_rows = np.asarray(batch_rows, dtype=float)
    return (_bytes_per_param(model_spec) * held_params[None, :]
            + batch_rows[:, None] * held_outputs[None, :])


def _bytes_per_param(model_spec):
    """Bytes a device holds per weight it holds: its float32 copies (``PARAM_COPIES``)
    and, under mixed precision, its 16-bit read and gradient."""
    low = model_spec.activation_bytes < BYTES_PER_ELEMENT
    return (BYTES_PER_ELEMENT * PARAM_COPIES
            + low * LOW_PRECISION_PARAM_COPIES * model_spec.activation_bytes)


def model_axis_collectives(model_spec):
    """The collectives model parallelism needs, in order, per the module docstring.

    Returns ``(kind, elements_per_sample, dim, backward)`` tuples: kind "allreduce" or
    "allgather"; ``dim`` is the split dim an all-gather joins (None otherwise);
    ``backward`` whether it belongs to the backward pass (an input's gradient).
    """
    collectives = []
    split = None  # split dim of the current activation; None = whole on every column
    grads_flow = False  # an earlier layer has weights, so input gradients are needed
    for i, layer in enumerate(model_spec.layers):
        elems_in = model_spec.input_elems_per_sample(i)
        if split is not None and layer.split_dim != split:
            collectives.append(("allgather", elems_in, split, False))
            split = None
        if layer.split_role == "output" and split is None:
            if grads_flow:  # backward: the input's gradient is a sum over columns
                collectives.append(("allreduce", elems_in, None, True))
            split = layer.split_dim
        elif layer.split_role == "input":
            if split is None and grads_flow:  # backward: join the split input gradient
                collectives.append(("allgather", elems_in, layer.split_dim, True))
            collectives.append(("allreduce", layer.output_elems_per_sample, None, False))
            split = None
        grads_flow = grads_flow or layer.params > 0
    if split is not None:
        collectives.append(("allgather", model_spec.layers[-1].output_elems_per_sample, split,
                            False))
    return collectives


def barriers(model_spec, mesh):
    """The barriers of one step laid out as ``mesh`` (module docstring), as each batch
    row and model column meets them: ``(model axis, batch axis)`` -- every model-axis
    collective; two per norm layer and the gradient sum on the batch axis; 0 on an
    axis of one device."""
    model = len(model_axis_collectives(model_spec)) if mesh.model > 1 else 0
    batch = 2 * model_spec.norm_layers + 1 if mesh.batch > 1 else 0
    return model, batch


@dataclass
class Prediction:
    """Predicted times (seconds, or relative units for relative speeds) of one layout."""

    step: float  # compute + comm
    compute: float  # the slowest batch row's sum over layers of its slowest device (>= busy)
    comm: float  # all communication
    busy: list  # per device: compute seconds per step
    load: list  # per device: its FLOPs (in whole channel blocks) over the mesh's by single filters
    memory: list  # per device: bytes held


def _batch_rows(mesh, batch_size, splits):
    if "batch" in mesh.axes:
        return np.asarray(splits["batch"], dtype=float)
    return np.full(mesh.batch, float(batch_size))


def _hosts(devices, shape):
    """(rows, columns) array of host labels; a device without a host is its own."""
    labels = [d.host if d.host is not None else f"\0{i}" for i, d in enumerate(devices)]
    return np.array(labels, dtype=object).reshape(shape)


def allreduce_pricer(hosts, link):
    """The time of one all-reduce among devices on ``hosts`` (one label per device), as a
    function of its bytes (the group's hosts looked at once, not per tensor: a plan
    prices many tensors per group).

    As ``hmp.HeteroMeshImpl`` lowers it: devices of one host use
    ``link.local``; devices all on different hosts a ring over ``link``; a
    group spanning several hosts with several devices on some of them the
    two-level all-reduce of ``hmp.mesh.collectives``: every host reduces onto its
    leader and copies the result back (``2 (k - 1)`` hand-overs of the whole
    tensor on the local link, ``k`` the most devices on one host), and the
    leaders run a ring over ``link`` (two leaders exchange once).
    """
    hosts = list(hosts)
    if len(hosts) <= 1:
        return lambda nbytes: 0.0
    if is_hierarchical(hosts):
        groups = group_by_host(hosts)
        k = max(len(positions) for positions in groups.values())
        local = link.local or link
        return lambda nbytes: (
            2 * (k - 1) * (local.latency_s + nbytes / local.bandwidth_bytes_per_s)
            + ring_allreduce_time(nbytes, len(groups), link))
    ring = link.between(hosts)
    return lambda nbytes: ring_allreduce_time(nbytes, len(hosts), ring)


def concurrent_groups_time(times, groups, link):
    """Time of collectives that groups of devices run at once (one time per group).

    Groups on disjoint hosts overlap: the slowest counts. Groups that share a
    host share its cores for the ``cpu_share`` of their hand-overs that is CPU
    work (``LinkSpec.cpu_share``): on that host they take ``max + cpu_share *
    (sum - max)``. The result is the largest over groups and hosts.
    """
    times = [float(t) for t in times]
    if not times:
        return 0.0
    shares = [link.between(list(g)).cpu_share for g in groups]
    total = max(times)
    for host in {h for g in groups for h in g}:
        mine = [i for i, g in enumerate(groups) if host in g]
        slowest = max(times[i] for i in mine)
        total = max(total, slowest + sum(shares[i] * times[i] for i in mine)
                    - max(shares[i] * times[i] for i in mine if times[i] == slowest))
    return total


def model_axis_link(link, backward):
    """The figures a model-axis collective's hand-overs run at: the link under load
    (``LinkSpec.loaded``) in the backward pass, the idle link in the forward pass.

    What overlaps (the engine's lowering, traced steps): a forward collective joins
    the partial sums or pieces of a layer that every column has just finished, and the
    next layer needs its result, so nothing computes beside its hand-overs but the
    slowest column's last op, which the layer's time already counts. A backward one
    (an input's gradient, summed or joined over the columns) starts while the same
    layer's weight gradient is still computed (an independent op, run by the second
    inter-op thread) and shares the cores with it. Pricing every model-axis hand-over
    under load overpriced model splits across 8- and 2- or 4-core workers by +68% to
    +123% (docs/benchmarks.md).
    """
    return link.under_load() if backward else link


def _model_axis_time(model_spec, mesh, splits, batch_rows, link, hosts):
    """Model-axis collectives: each batch row's own (its samples, its hosts' link), rows
    at once (``concurrent_groups_time``); forward ones at the idle link's figures,
    backward ones under load (``model_axis_link``)."""
    n = mesh.model
    if n == 1:
        return 0.0
    sizes = model_spec.split_dims()
    # (kind, elements per sample, each column's fraction of an all-gathered activation,
    #  backward pass)
    collectives = [(kind, elems, None if dim is None else np.asarray(splits[dim]) / sizes[dim],
                    backward)
                   for kind, elems, dim, backward in model_axis_collectives(model_spec)]
    figures = {backward: model_axis_link(link, backward) for backward in (False, True)}
    model_barriers, _ = barriers(model_spec, mesh)
    groups = [list(hosts[r]) for r in range(mesh.batch)]
    rows = []
    for row_hosts, samples in zip(groups, batch_rows):
        reduce = {b: allreduce_pricer(row_hosts, f) for b, f in figures.items()}
        gather_link = {b: f.between(row_hosts) for b, f in figures.items()}
        per_sample = model_spec.activation_bytes * samples
        total = model_barriers * link.between(row_hosts).barrier_s
        for kind, elems, pieces, backward in collectives:
            if kind == "allreduce":
                total += reduce[backward](per_sample * elems)
            else:
                total += ring_allgather_time(per_sample * elems * pieces, gather_link[backward])
        rows.append(total)
    return concurrent_groups_time(rows, groups, link)


def _batch_axis_time(model_spec, mesh, fractions, link, hosts):
    """The batch axis's all-reduces over each model column's M devices, columns at once.

    ``hmp.train_step`` sums all of a column's weight gradients in one
    all-reduce (``hmp.mesh.bucketing``): the bytes of every layer's weights the
    column holds (float32 under any precision), one set of hand-overs. Every norm
    layer adds two all-reduces of a few channels' statistics
    (``ModelSpec.norm_layers``), priced by their hand-overs: the forward one at the idle link (the next layer waits for it),
    the backward one under load (the weight gradients compute beside it).
    Each of these all-reduces is a barrier (``barriers``, ``LinkSpec.barrier_s``).
    """
    if mesh.batch == 1:
        return 0.0
    _, params, _ = _layer_arrays(model_spec)
    groups = [list(hosts[:, c]) for c in range(mesh.model)]
    loaded = link.under_load()
    _, batch_barriers = barriers(model_spec, mesh)
    columns = []
    for c, column_hosts in enumerate(groups):
        idle_sum = allreduce_pricer(column_hosts, link)
        norm_sums = idle_sum(0.0) + allreduce_pricer(column_hosts, loaded)(0.0)
        columns.append(idle_sum(BYTES_PER_ELEMENT * float(params @ fractions[:, c]))
                       + model_spec.norm_layers * norm_sums
                       + batch_barriers * link.between(column_hosts).barrier_s)
    return concurrent_groups_time(columns, groups, link)


def feed_time(batch_rows, hosts, link):
    """Feeding the batch: to the first device's host over ``link.feed``, then to the others.

    The scene lives on the devices (``hmp.graph.scene_input``): a step feeds every
    sample's int32 pixel index and int32 label once, and each other host then
    receives those of the samples its devices compute (its batch rows; a
    row's model columns share them) over ``link`` under load, one host after
    another. 0 without ``link.feed``.
    """
    if link is None or link.feed is None:
        return 0.0
    link = link.under_load()
    total = (link.feed.latency_s + float(np.sum(batch_rows)) * FED_BYTES_PER_SAMPLE
             / link.feed.bandwidth_bytes_per_s)
    first = hosts.flat[0]
    for host in dict.fromkeys(hosts.flat):
        if host != first:
            samples = sum(batch_rows[r] for r in range(hosts.shape[0]) if host in hosts[r])
            total += link.latency_s + samples * FED_BYTES_PER_SAMPLE / link.bandwidth_bytes_per_s
    return total


def gated_compute(seconds, devices, shape):
    """Compute time of a step from every device's seconds per layer, (layers, devices),
    on a mesh of ``shape`` (batch rows, model columns).

    The devices of a batch row meet at a model-axis collective after (nearly) every
    layer, so each of the row's layers lasts as long as its slowest device on it; rows
    meet only at the batch axis's barriers (priced as waits in the communication,
    ``LinkSpec.barrier_s``), so the slowest row counts. Devices of one host with
    ``host_cores`` cores take together at least the sum of their times over
    ``host_cores``: a row's on each layer, and all of theirs over the step.
    """
    rows, columns = shape
    row_of = np.arange(len(devices)) // columns
    per_layer = seconds.reshape(len(seconds), rows, columns).max(axis=2)   # (layers, rows)
    floor = 0.0
    groups = {}
    for i, d in enumerate(devices):
        if d.host is not None and d.host_cores is not None:
            groups.setdefault(d.host, []).append(i)
    for members in groups.values():
        cores = min(devices[i].host_cores for i in members)
        for row in set(row_of[members]):
            mine = [i for i in members if row_of[i] == row]
            per_layer[:, row] = np.maximum(per_layer[:, row],
                                           seconds[:, mine].sum(axis=1) / cores)
        floor = max(floor, seconds[:, members].sum() / cores)
    return float(max(per_layer.sum(axis=0).max(), floor))


def predict(model_spec, devices, mesh, batch_size, splits, link=None):
    """Predicts one training step of ``model_spec`` laid out as ``mesh`` + ``splits``.

    Args:
      model_spec: a ModelSpec.
      devices: one DeviceSpec per mesh position (row-major, see layout.py); their
        optional ``overhead_s``, ``host``, ``host_cores`` and ``channel_block`` are used.
      mesh: a layout.Mesh.
      batch_size: the global batch.
      splits: sizes per laid-out dim (checked with ``layout.check_splits``).
      link: a LinkSpec, or None to leave communication out (free); its optional
        ``local`` and ``feed`` links are used.

    Returns:
      A Prediction.
    """
    check_mesh_size(mesh, len(devices))
    splits = check_splits(model_spec, mesh, batch_size, splits)
    flops, params, outputs = _layer_arrays(model_spec)
    fractions = weight_fractions(model_spec, mesh, splits)
    batch_rows = _batch_rows(mesh, batch_size, splits)

    shape = (mesh.batch, mesh.model)
    # Op-size efficiency: a fixed half_rate_flops per sample and layer op with FLOPs.
    half = np.array([d.half_rate_flops or 0.0 for d in devices]).reshape(shape)
    fixed = TRAIN_FLOPS_FACTOR * (flops > 0)[:, None, None] * batch_rows[None, :, None] \
        * half[None]
    # (layers, rows, columns) training FLOPs of every layer on every device, an
    # output-split convolution's in whole channel blocks
    blocked = TRAIN_FLOPS_FACTOR * flops[:, None, None] * batch_rows[None, :, None] \
        * blocked_fractions(model_spec, mesh, splits, devices)
    seconds = (blocked + fixed) / np.array([d.flops_per_s for d in devices]).reshape(shape)
    # (layers, rows, columns) activation elements every device holds: whole when replicated.
    held = batch_rows[None, :, None] \
        * (outputs[:, None] * _output_fractions(model_spec, fractions))[:, None, :]
    if any(d.mem_bw is not None for d in devices):
        traffic = TRAIN_FLOPS_FACTOR * model_spec.activation_bytes * (
            (params[:, None] * fractions)[:, None, :] + held)
        bandwidth = np.array([d.mem_bw or np.inf for d in devices]).reshape(shape)
        seconds = np.maximum(seconds, traffic / bandwidth)
    elementwise = np.array([d.elementwise_s_per_element or 0.0 for d in devices]).reshape(
        shape)
    seconds = seconds + held * elementwise[None]
    overhead = np.array([d.overhead_s for d in devices]).reshape(shape)
    seconds = seconds + overhead[None] / len(model_spec.layers)
    busy = seconds.sum(axis=0).ravel()
    device_flops = blocked.sum(axis=0).ravel()

    comm = 0.0
    if link is not None:
        hosts = _hosts(devices, shape)
        comm = (_model_axis_time(model_spec, mesh, splits, batch_rows, link, hosts)
                + _batch_axis_time(model_spec, mesh, fractions, link, hosts)
                + feed_time(batch_rows, hosts, link))
    compute = gated_compute(seconds.reshape(len(model_spec.layers), -1), devices, shape)
    # the mesh's work by single filters: the same for every split, so that the loads of
    # two plans on one mesh compare (hmp.run.rebalance prices one plan by another's speeds)
    plain_flops = (TRAIN_FLOPS_FACTOR * (flops[:, None] * fractions)[:, None, :]
                   * batch_rows[None, :, None]).sum()
    return Prediction(
        step=compute + comm, compute=compute, comm=comm, busy=busy.tolist(),
        load=(device_flops / plain_flops if plain_flops else device_flops).tolist(),
        memory=memory_bytes(model_spec, batch_rows, fractions).ravel().tolist())
