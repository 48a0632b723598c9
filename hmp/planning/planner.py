"""Chooses how to lay a model out over unequal devices: ``plan_layout``.

For a given mesh the layout follows from the speeds: every split dim (filter
dimension) is apportioned over the model columns in proportion to the summed
speed of each column's devices, and the batch over the batch rows so that
each row's step (its per-step overhead + its samples at its summed speed)
takes as long as the others' (``_row_rates``). Memory caps turn into caps on
filters and samples (the cost model's memory estimate is affine in both), so work
moves from a device that would not fit to devices with room. With
``mesh="auto"`` every device is first priced alone (the cost model's step of its
one-device layout at the batch: overhead, op-size terms and FLOPs), which ranks
them; then every data-, hybrid and model-parallel mesh of the right size is laid
out and priced, on all devices and, for smaller k, on the k fastest alone and on
the k of highest FLOP rate (``subsets``), down to the device fastest alone, so
the plan is never predicted slower than any device by itself; the fastest wins,
every candidate's prediction is kept as the reason, and every device left out is
recorded with why.
"""

import contextlib
import dataclasses
import math
from typing import NamedTuple

import numpy as np

from hmp.device_names import check_distinct
from hmp.errors import InvalidInput, is_positive_number, whole_number
from hmp.planning.apportion import apportion, apportion_in_blocks, check_speeds
from hmp.planning.costmodel import (alone_flops_per_s, memory_bytes, predict,
                                    train_flops_per_sample, weight_fractions)
from hmp.planning.layout import candidate_meshes, check_mesh_size, layout_rules, parse_mesh
from hmp.formatting import counted, format_bytes, format_time
from hmp.planning.plan import Candidate, Plan, layer_entries
from hmp.planning.platform import DeviceSpec, device_names

# Speeds whose largest is below this are taken as relative (70, 25, 5), not FLOP/s:
# no device that trains CNNs is slower than 1 MFLOP/s.
MIN_ABSOLUTE_FLOPS = 1e6
# --mesh=auto on a measured platform: a layout on more devices must be predicted this
# much faster than the best on fewer (against one device: unless the run measures that
# choice itself, hmp.train's --try_alone: ``alone_margin=0``). The cost model is within
# about 20% of measured steps, and the two predictions err alike; on 8 against 2 cores a
# split predicted 6% faster than the fast worker alone ran 12-14% slower (cnn2d: 20.9
# against 22.2 ms, 0.86x and 0.88x), one predicted 7% faster ran 13% faster (cnn3d: 96.9
# against 104 ms, 1.13x) and one predicted 17% faster ran no faster (hybridsn: 103 against
# 124 ms, 1.00x; docs/benchmarks.md, "Heterogeneity on 8 against 2 cores", "Before the
# split margin" and the table of hmp.train --local_workers).
SPLIT_MARGIN = 0.10
# mesh="auto" tries every subset size and every mesh up to this many devices (see subset_sizes).
EXHAUSTIVE_DEVICES = 16
# replicated="auto" weighs splitting against replicating each split dim of models with at
# most this many (k + 2 predictions per mesh with a model axis); larger models split all.
REPLICATION_MAX_DIMS = 8
# mesh="auto" on a measured platform of at most HINT_MAX_DEVICES devices, leaving some
# out: the multiples of the batch at which the plan looks for a layout that would use
# them, and the same batch with each replica's own batch-norm statistics (no barriers),
# to say so in its reason (up to 5 more plans: cheap on few devices).
HINT_BATCH_FACTORS = (2, 4, 8, 16)
HINT_MAX_DEVICES = 8


class _Layout(NamedTuple):
    """A feasible candidate: its predicted step, subset size, mesh, device indices (in
    the given order), splits, Prediction, replicated dims and their records, and the
    ranking its subset came from ("alone", "rate"; None for a given mesh)."""
    step: float
    size: int
    mesh: object
    indices: list
    splits: dict
    prediction: object
    dims: tuple
    records: list
    ranking: str | None


def _device_specs(devices, speeds, memory_caps):
    """Normalises devices (names or DeviceSpecs), speeds and caps; checks them."""
    if isinstance(devices, (str, bytes)) or not devices:
        raise InvalidInput(f"devices must be a non-empty list, got {devices!r}")
    names = device_names(devices)
    for i, name in enumerate(names):
        if not isinstance(name, str) or not name:
            raise InvalidInput(f"device {i} must be named by a non-empty string, got {name!r}")
    check_distinct(names)
    labels = [f"device {i} ({name})" for i, name in enumerate(names)]
    if speeds is None:
        if not all(isinstance(d, DeviceSpec) for d in devices):
            raise InvalidInput("speeds are missing (None): give one speed per device, "
                             "or DeviceSpecs with flops_per_s")
        speeds = [d.flops_per_s for d in devices]
    speeds = check_speeds(speeds, labels)
    if memory_caps is None:
        memory_caps = [d.mem_bytes if isinstance(d, DeviceSpec) else None for d in devices]
    if len(memory_caps) != len(names):
        raise InvalidInput(f"got {len(memory_caps)} memory caps for {len(names)} devices")
    for label, cap in zip(labels, memory_caps):
        if cap is not None and not is_positive_number(cap):
            raise InvalidInput(f"{label} has memory cap {cap!r}; must be a number of bytes > 0 "
                             "or None")
    # A DeviceSpec keeps its other figures (mem_bw, overhead_s, host, host_cores).
    specs = [dataclasses.replace(d, flops_per_s=float(speed), mem_bytes=cap)
             if isinstance(d, DeviceSpec) else DeviceSpec(name, float(speed), cap)
             for name, speed, cap, d in zip(names, speeds, memory_caps, devices)]
    return specs


def _group_labels(names, mesh, axis):
    """Labels for model columns / batch rows in messages (plain device labels on 1-D meshes)."""
    grid = np.array(names, dtype=object).reshape(mesh.batch, mesh.model)
    groups = grid.T if axis == "model" else grid
    if len(groups[0]) == 1:  # a 1-D mesh: group i is device i
        return [f"device {i} ({g[0]})" for i, g in enumerate(groups)]
    word = "model column" if axis == "model" else "batch row"
    return [f"{word} {i} ({', '.join(g)})" for i, g in enumerate(groups)]


def _units_cap(headroom, size, minimum):
    """Caps per group on ``size`` units from the fraction each group may hold (each
    group's room for ``minimum`` units checked first, ``_check_room``)."""
    return [None if h >= 1 else max(minimum, math.floor(h * size)) for h in headroom]


def _check_room(room, minimum, specs, mesh, unit, takes):
    """InvalidInput naming each device (``specs``) whose memory cap has ``room`` (per
    device, in units) for fewer than ``minimum`` units of its share, and what ``takes``
    its memory (one text per device)."""
    short = [f"device {i} ({d.name}) has room for {max(int(r), 0)} of the {unit} under its "
             f"cap of {format_bytes(d.mem_bytes)} (at least {minimum} needed): {takes[i]}"
             for i, (r, d) in enumerate(zip(room, specs)) if r < minimum]
    if short:
        raise InvalidInput(f"mesh {mesh}: the model does not fit: {'; '.join(short)}")


def _row_rates(model_spec, specs, mesh):
    """Per batch row: its speed and per-step overhead (the largest of its devices': each
    pays its own in full). With overheads, the speed is in samples/s (its devices'
    FLOP rates alone, ``alone_flops_per_s``, over the training FLOPs of a sample);
    when no device has one, the overhead is None and the speed its summed FLOP/s
    (shares by speed alone, for which the unit does not matter)."""
    overhead = np.array([d.overhead_s for d in specs]).reshape(mesh.batch, mesh.model)
    flops = np.array([alone_flops_per_s(model_spec, d)
                      for d in specs]).reshape(mesh.batch, mesh.model)
    if not overhead.any():
        return flops.sum(axis=1), None
    return flops.sum(axis=1) / train_flops_per_sample(model_spec), overhead.max(axis=1)


def _speed_splits(model_spec, specs, mesh, batch_size, min_filters):
    """The splits for one mesh: apportioned by speed, within the memory caps.

    Model columns first (filter caps from each column's memory headroom at the
    speed-proportional batch; a convolution's output filters in whole channel
    blocks of the devices' largest ``channel_block``, ``apportion_in_blocks``), then
    batch rows given those filters (sample caps from what is left), then a final
    check of every device.
    """
    names = [d.name for d in specs]
    speed = np.array([d.flops_per_s for d in specs]).reshape(mesh.batch, mesh.model)
    caps = np.array([np.inf if d.mem_bytes is None else d.mem_bytes
                     for d in specs]).reshape(mesh.batch, mesh.model)
    row_labels = _group_labels(names, mesh, "batch")
    row_speed, row_overhead = _row_rates(model_spec, specs, mesh)
    fewest = fewest_samples_a_row(model_spec, mesh, batch_size)
    rows = (apportion(batch_size, row_speed, fewest, names=row_labels, unit="samples",
                      offsets=row_overhead)
            if "batch" in mesh.axes else [batch_size])
    splits = {}
    if "model" in mesh.axes:
        is_split = np.array([l.split_dim is not None for l in model_spec.layers])[:, None]
        ones = np.ones((len(model_spec.layers), mesh.model))
        fixed = memory_bytes(model_spec, rows, np.where(is_split, 0.0, ones))
        full = memory_bytes(model_spec, rows, ones)
        with np.errstate(divide="ignore", invalid="ignore"):
            headroom = np.where(full > fixed, (caps - fixed) / (full - fixed), np.inf)
        if "batch" not in mesh.axes:   # else its rows may move samples off a device
            takes = [f"the layers it does not split take {format_bytes(f)}"
                     for f in fixed.ravel()]
            for dim, size in model_spec.split_dims().items():
                _check_room(np.floor(headroom.ravel() * size), min_filters, specs, mesh,
                            f"{size} {dim} filters", takes)
        headroom = np.maximum(headroom.min(axis=0), 0)  # per model column
        columns = _group_labels(names, mesh, "model")
        block = max(d.channel_block for d in specs)
        blocked = {l.split_dim for l in model_spec.layers if l.in_channel_blocks}
        for dim, size in model_spec.split_dims().items():
            splits[dim] = apportion_in_blocks(
                size, speed.sum(axis=0), block if dim in blocked else 1,
                min_filters, _units_cap(headroom, size, min_filters),
                names=columns, unit=f"{dim} filters")
    fractions = weight_fractions(model_spec, mesh, splits)
    if "batch" in mesh.axes:
        held = memory_bytes(model_spec, [0], fractions)[0]
        per_sample = memory_bytes(model_spec, [1], fractions)[0] - held
        room = (caps - held) / per_sample   # samples each device can hold
        _check_room(np.floor(room.ravel()), fewest, specs, mesh,
                    counted(batch_size, "sample"), [
                        f"the weights and their state take {format_bytes(h)}, a sample "
                        f"{format_bytes(s)}"
                        for h, s in zip(np.broadcast_to(held, caps.shape).ravel(),
                                        np.broadcast_to(per_sample, caps.shape).ravel())])
        headroom = room.min(axis=1) / batch_size  # per batch row
        splits["batch"] = apportion(batch_size, row_speed, fewest,
                                    _units_cap(headroom, batch_size, fewest),
                                    names=row_labels, unit="samples", offsets=row_overhead)
        rows = splits["batch"]
    memory = memory_bytes(model_spec, rows, fractions).ravel()
    over = [f"device {i} ({names[i]}) needs {memory[i]:.4g} bytes but its cap is "
            f"{specs[i].mem_bytes:.4g}" for i in np.flatnonzero(memory > caps.ravel())]
    if over:
        raise InvalidInput(f"mesh {mesh}: the model does not fit: {'; '.join(over)}")
    return splits


def fewest_batch(model_spec, mesh):
    """The smallest batch ``mesh`` can split: a sample a batch row, and on a batch split
    (more than one row) ``ModelSpec.fewest_replica_samples`` a row."""
    return mesh.batch * (model_spec.fewest_replica_samples if mesh.batch > 1 else 1)


def fewest_samples_a_row(model_spec, mesh, batch_size):
    """The fewest samples a batch row of ``mesh`` gets (``fewest_batch`` over its rows);
    InvalidInput when ``batch_size`` has a sample for every row but not that many (fewer
    samples than rows: ``apportion`` says so)."""
    if batch_size < mesh.batch:   # apportion says why not
        return 1
    smallest = fewest_batch(model_spec, mesh)
    fewest = smallest // mesh.batch
    if batch_size < smallest:
        raise InvalidInput(
            f"mesh {mesh}: {counted(batch_size, 'sample')} give {mesh.batch} batch replicas "
            f"at most {batch_size // mesh.batch} each, and each replica normalises its batch "
            f"norms over its own samples (local statistics), which needs {fewest} a replica; "
            f"allowed: a batch of at least {smallest}, fewer batch rows, or sync batch-norm "
            "statistics")
    return fewest


def subset_sizes(device_count):
    """The subset sizes ``mesh="auto"`` tries, largest first.

    Every size up to ``EXHAUSTIVE_DEVICES`` devices; beyond that 1 to
    ``EXHAUSTIVE_DEVICES``, the powers of two below ``device_count``, and all.
    """
    if device_count <= EXHAUSTIVE_DEVICES:
        return list(range(device_count, 0, -1))
    sizes = set(range(1, EXHAUSTIVE_DEVICES + 1)) | {device_count}
    power = 2 * EXHAUSTIVE_DEVICES
    while power < device_count:
        sizes.add(power)
        power *= 2
    return sorted(sizes, reverse=True)


def subset_meshes(size, device_count):
    """The meshes ``mesh="auto"`` tries on a subset of ``size`` of ``device_count`` devices.

    Every mesh (``candidate_meshes``) for all devices and for up to
    ``EXHAUSTIVE_DEVICES``; only the two 1-D meshes (``batch:k``, ``model:k``)
    for the larger proper subsets, which keeps a 1024-device plan fast.
    """
    meshes = candidate_meshes(size)
    if size == device_count or size <= EXHAUSTIVE_DEVICES:
        return meshes
    return [m for m in meshes if m.batch == 1 or m.model == 1]


def rate_order(model_spec, specs):
    """Device indices of highest FLOP rate first: the rate at which each computes the
    model alone (``alone_flops_per_s``, the slope of its one-device step over the
    batch); equal rates keep the given order."""
    rates = [alone_flops_per_s(model_spec, d) for d in specs]
    return sorted(range(len(specs)), key=lambda i: -rates[i])


def alone_order(alone_steps):
    """Device indices fastest alone first, from each device's predicted step alone (its
    one-device layout at the batch: overhead, op-size terms and FLOPs; None where that
    layout does not fit, ranked last); equal steps keep the given order."""
    return sorted(range(len(alone_steps)),
                  key=lambda i: (alone_steps[i] is None, alone_steps[i] or 0.0))


def subsets(by_alone, by_rate, device_count):
    """The device subsets ``mesh="auto"`` prices, largest first: ``(size, indices in the
    given order, ranking)`` for the ``size`` devices fastest alone (``by_alone``: device
    indices in that order; ``ranking`` "alone") and, where they differ, the ``size`` of
    highest rate ("rate"; ``by_rate``, in that order), for every size of
    ``subset_sizes``. Size 1 is the device fastest alone: every device was priced alone
    to rank them, so no one-device layout is faster."""
    found = []
    for size in subset_sizes(device_count):
        first = sorted(by_alone[:size])
        found.append((size, first, "alone"))
        if size > 1 and sorted(by_rate[:size]) != first:
            found.append((size, sorted(by_rate[:size]), "rate"))
    return found


def _replication(model_spec, specs, mesh, batch_size, min_filters, link, replicated):
    """The split dims to replicate on ``mesh``, with the splits and prediction of that
    layout and a record per replicated dim: ``(dims, splits, prediction, records)``.

    ``replicated``: the dims to replicate, or "auto": a dim whose replication alone is
    predicted faster than splitting every dim is a candidate; the fastest of all dims
    split, each candidate alone and all candidates together wins. Only with a link and a
    model axis: without communication to save, a replicated layer only costs compute.
    At least one dim stays split: a model axis that splits nothing would repeat the
    one-device layout on every column (the one-device candidates cover that).
    Raises InvalidInput when the all-split layout (or the given one) does not fit.
    """
    def priced(dims):
        view = model_spec.replicating(dims)
        splits = _speed_splits(view, specs, mesh, batch_size, min_filters)
        return predict(view, specs, mesh, batch_size, splits, link), splits

    if replicated != "auto":
        if isinstance(replicated, str):
            raise InvalidInput(f"replicated={replicated!r}: give \"auto\" or a list of "
                               "split dims")
        dims = tuple(replicated) if "model" in mesh.axes else ()
        prediction, splits = priced(dims)
        return dims, splits, prediction, [
            {"dim": d, "saved_s": None, "reason": f"{d} replicated: given by the caller"}
            for d in dims]
    all_split, splits = priced(())
    names = list(model_spec.split_dims())
    if (link is None or "model" not in mesh.axes or len(names) < 2
            or len(names) > REPLICATION_MAX_DIMS):
        return (), splits, all_split, []
    options = {(): (all_split, splits)}
    for dim in names:
        with contextlib.suppress(InvalidInput):   # replicated, it does not fit
            options[(dim,)] = priced((dim,))
    faster = tuple(d for d in names if (d,) in options
                   and options[(d,)][0].step < all_split.step)
    if 1 < len(faster) < len(names):
        with contextlib.suppress(InvalidInput):
            options[faster] = priced(faster)
    dims = min(options, key=lambda d: (options[d][0].step, len(d)))
    prediction, splits = options[dims]
    return dims, splits, prediction, [_replicated_record(d, options[(d,)][0].step,
                                                         all_split.step) for d in dims]


def _replicated_record(dim, alone_step, all_split_step):
    """The plan's record of a dim replicated by choice: its predicted saving and why."""
    saved = all_split_step - alone_step
    return {"dim": dim, "saved_s": saved,
            "reason": f"{dim} replicated: every model column computes its layers whole, "
                      f"no model-axis collectives for it; replicating it alone is "
                      f"predicted {format_time(saved)} faster than splitting it "
                      f"({format_time(alone_step)} against {format_time(all_split_step)} "
                      "with every dim split)"}


def plan_layout(model_spec, devices, speeds, batch_size, mesh, memory_caps=None,
                min_filters=1, link=None, replicated="auto", alone_margin=SPLIT_MARGIN):
    """Plans the layout of ``model_spec`` over ``devices``; returns a Plan.

    Args:
      model_spec: a ModelSpec.
      devices: TF device names, one per mesh position in row-major order, or
        DeviceSpecs (their flops_per_s, mem_bytes and mem_bw are then used
        where ``speeds`` / ``memory_caps`` are None).
      speeds: one per device, relative (70, 25, 5) or absolute FLOP/s (taken
        as relative when all are below 1e6; predicted times are then in
        relative units and no link may be given).
      batch_size: the global batch.
      mesh: "model:N", "batch:M", "batch:M;model:N" (all devices) or "auto":
        every device priced alone (``Plan.alone``), then every mesh on the k
        devices fastest alone and on the k of highest FLOP rate (``subsets``,
        ``subset_meshes``); the fastest prediction wins, so the one-device
        layout of the device fastest alone is always a candidate. Devices left
        out are recorded in ``Plan.left_out`` with the reason.
      memory_caps: None or bytes per device (None entries: no cap).
      min_filters: the fewest filters of every split dim any model column gets.
      link: a LinkSpec to price communication, or None to leave it out.
      replicated: on meshes with a model axis, "auto" (per split dim, split or
        replicate, whichever the cost model predicts faster; with a link only) or the
        split dims to replicate (``()``: split every one). A replicated dim is left out
        of the layout rules: every model column computes its layers whole.
      alone_margin: with mesh="auto" and a link, how much faster (a share) a layout on
        several devices must be predicted than the best on one (``SPLIT_MARGIN``, the
        cost model's error, as between any two sizes); 0 where the caller measures
        the plan against the fastest device alone anyway (``hmp.train --try_alone``).

    With ``mesh="auto"``, a link and at most ``HINT_MAX_DEVICES`` devices, a plan that
    leaves devices out also says at which larger batch (``HINT_BATCH_FACTORS``) a
    layout would use them, if any, and, for a model with batch norms, whether one would
    with each replica's own statistics.

    Raises:
      ValueError: on bad speeds, devices, caps or mesh, or when no layout fits.
    """
    return _plan_layout(model_spec, devices, speeds, batch_size, mesh, memory_caps,
                        min_filters, link, replicated, alone_margin, hint=True)


def _plan_layout(model_spec, devices, speeds, batch_size, mesh, memory_caps, min_filters,
                 link, replicated, alone_margin, hint):
    """``plan_layout``; with ``hint``, the larger-batch hint of a plan that leaves
    devices out (``_larger_batch_hint``)."""
    specs = _device_specs(devices, speeds, memory_caps)
    whole_number(batch_size, "batch_size")
    relative = max(d.flops_per_s for d in specs) < MIN_ABSOLUTE_FLOPS
    if relative and link is not None:
        raise InvalidInput(
            f"speeds {[d.flops_per_s for d in specs]} look relative (all below "
            f"{MIN_ABSOLUTE_FLOPS:g} FLOP/s); a link's cost can only be weighed against "
            "absolute speeds in FLOP/s: give those (or measure them), or plan without the link")
    n = len(specs)
    price = lambda indices, m: _layout_of(  # noqa: E731
        model_spec, [specs[i] for i in indices], m, batch_size, min_filters, link, replicated)
    priced, order, alone, trials = _trials(model_spec, specs, mesh, price)
    candidates, layouts = _candidates(trials, priced, price, n)
    margins = ((SPLIT_MARGIN, alone_margin) if mesh == "auto" and link is not None
               else (0.0, 0.0))
    best = _fastest(layouts, *margins)
    kept = [specs[i] for i in best.indices]
    left_out = _left_out(specs, order, best, layouts, relative, *margins)
    if mesh != "auto":
        reason = "mesh given by the caller"
    else:
        reason = _auto_reason(candidates, layouts, n, link, left_out)
        if left_out and hint and link is not None and n <= HINT_MAX_DEVICES:
            reason += _larger_batch_hint(model_spec, specs, batch_size, min_filters,
                                         link, replicated, alone_margin, best.size)
            reason += _local_statistics_hint(model_spec, specs, batch_size, min_filters,
                                             link, replicated, alone_margin, best.size)
    return Plan(
        model=model_spec.name, mesh=str(best.mesh),
        layout_rules=layout_rules(model_spec.replicating(best.dims), best.mesh),
        batch_size=batch_size, devices=[d.name for d in kept],
        speeds=[d.flops_per_s for d in kept], splits=best.splits,
        layers=layer_entries(model_spec), time_unit="relative" if relative else "s",
        prediction=best.prediction,
        memory_caps=([d.mem_bytes for d in kept]
                     if any(d.mem_bytes is not None for d in kept) else None),
        candidates=candidates, reason=reason, left_out=left_out, replicated=best.records,
        alone=alone, channel_blocks=([d.channel_block for d in kept]
                                     if any(d.channel_block > 1 for d in kept) else []))


def _trials(model_spec, specs, mesh, price):
    """What to price for ``mesh`` ("auto" or one given): ``(priced, order, alone,
    trials)``: the candidates priced already ({(device indices, mesh): ``price``'s
    result}: with "auto", every device alone), the devices fastest alone first, their
    rows for the plan's ``alone`` (auto only) and ``[(k, device indices, meshes,
    ranking)]``, the subsets of devices and the meshes to try on each."""
    n = len(specs)
    if mesh != "auto":
        given = parse_mesh(mesh)
        check_mesh_size(given, n)
        return {}, list(range(n)), [], [(n, list(range(n)), [given], None)]
    one = candidate_meshes(1)[0]
    priced = {((i,), str(one)): price([i], one) for i in range(n)}   # every device alone
    steps = [None if isinstance(r, InvalidInput) else r[2].step for r in priced.values()]
    order = alone_order(steps)
    rates = [alone_flops_per_s(model_spec, d) for d in specs]
    alone = [{"device": specs[i].name, "step": steps[i], "rate": rates[i]} for i in order]
    trials = [(k, indices, subset_meshes(k, n), ranking)
              for k, indices, ranking in subsets(order, rate_order(model_spec, specs), n)]
    return priced, order, alone, trials


def _candidates(trials, priced, price, n):
    """``(candidates, layouts)``: a ``Candidate`` row for every mesh of ``trials``
    (``_trials``), feasible or not, and a ``_Layout`` for each feasible one. Raises the
    InvalidInput of the only mesh tried, or one naming every mesh when none fits."""
    single = sum(len(meshes) for _, _, meshes, _ in trials) == 1
    candidates, layouts = [], []
    for k, indices, meshes, ranking in trials:
        for m in meshes:
            key = (tuple(indices), str(m))
            result = priced[key] if key in priced else price(indices, m)
            if isinstance(result, InvalidInput):   # an infeasible mesh
                if single:
                    raise result
                candidates.append(Candidate(str(m), None, None, None, f"infeasible: {result}",
                                            k, ranking))
                continue
            dims, splits, prediction, records = result
            layouts.append(_Layout(prediction.step, k, m, indices, splits, prediction, dims,
                                   records, ranking))
            candidates.append(Candidate(str(m), prediction.step, prediction.compute,
                                        prediction.comm,
                                        f"replicated: {', '.join(dims)}" if dims else "", k,
                                        ranking))
    if not layouts:
        raise InvalidInput("no mesh fits: " + "; ".join(
            f"{c.mesh}" + (f" on {counted(c.devices, 'device')}" if c.devices != n else "")
            + f": {c.note}" for c in candidates))
    return candidates, layouts


def _auto_reason(candidates, layouts, n, link, left_out):
    """Why ``--mesh=auto`` chose its plan (without the hints)."""
    meshes = counted(len(candidates), "candidate mesh", "candidate meshes")
    reason = (f"lowest predicted step time of {meshes} ({len(layouts)} feasible) on the k of "
              f"{counted(n, 'device')} fastest alone and the k of highest FLOP rate, k = "
              f"{_counts(subset_sizes(n))}, every device priced alone"
              + ("" if link is not None else "; communication not priced (no link given)"))
    if left_out:
        reason += f"; {counted(len(left_out), 'device')} left out"
    return reason


def _layout_of(model_spec, subset, mesh, batch_size, min_filters, link, replicated):
    """``_replication`` of one candidate (``subset``: its DeviceSpecs), or the
    InvalidInput that says why it does not fit; any other error is a bug."""
    try:
        return _replication(model_spec, subset, mesh, batch_size, min_filters, link,
                            replicated)
    except InvalidInput as e:
        return e


def _larger_batch_hint(model_spec, specs, batch_size, min_filters, link, replicated,
                       alone_margin, kept):
    """For the smallest batch of ``HINT_BATCH_FACTORS`` x ``batch_size`` at which the
    auto plan would use more than ``kept`` devices: "; at a batch of B the plan would
    use N devices (mesh), predicted F x the samples/s of the best layout on ``kept``
    at that batch"; "" when none does (or none fits)."""
    for factor in HINT_BATCH_FACTORS:
        larger = batch_size * factor
        try:
            plan = _plan_layout(model_spec, specs, None, larger, "auto", None, min_filters,
                                link, replicated, alone_margin, hint=False)
        except InvalidInput:   # e.g. over a memory cap: larger batches fit no better
            return ""
        if len(plan.devices) > kept:
            return f"; at a batch of {larger}" + _more_devices(plan, kept, " at that batch")
    return ""


def _local_statistics_hint(model_spec, specs, batch_size, min_filters, link, replicated,
                           alone_margin, kept):
    """For a model whose batch norms normalise over the global batch (barriers on a batch
    split), when the auto plan would use more than ``kept`` devices with each replica's
    own statistics instead: "; with each batch replica's own batch-norm statistics the
    plan would use N devices (mesh), predicted F x ..."; "" otherwise."""
    if not model_spec.norm_layers:
        return ""
    local = dataclasses.replace(model_spec, norm_layers=0,
                                replica_norm_layers=model_spec.norm_layers)
    try:
        plan = _plan_layout(local, specs, None, batch_size, "auto", None, min_filters, link,
                            replicated, alone_margin, hint=False)
    except InvalidInput:
        return ""
    if len(plan.devices) <= kept:
        return ""
    return "; with each batch replica's own batch-norm statistics" + _more_devices(plan, kept)


def _more_devices(plan, kept, where=""):
    """" the plan would use N devices (mesh), predicted F x the samples/s of ``kept``
    devices``where``": ``plan``'s devices against its best candidate on ``kept``."""
    text = f" the plan would use {len(plan.devices)} devices ({plan.mesh})"
    on_kept = min((c.step for c in plan.candidates
                   if c.devices == kept and c.step is not None), default=None)
    if on_kept is None:
        return text
    return (text + f", predicted {on_kept / plan.prediction.step:.2f}x the samples/s of "
            f"{kept} device{'s' if kept > 1 else ''}{where}")


def _fastest(layouts, margin, alone_margin):
    """The layout of lowest predicted step; one on more devices only when it is
    predicted faster by more than ``margin`` (a share) than the best on fewer, or by
    ``alone_margin`` when that best is on one device. On a tie the one with fewer
    devices (less that can go wrong), then the one found first."""
    best = None
    for size in sorted({l.size for l in layouts}):
        layout = min((l for l in layouts if l.size == size), key=lambda l: l.step)
        if best is None or layout.step < best.step * (1 - _margin(best, margin, alone_margin)):
            best = layout
    return best


def _margin(best, margin, alone_margin):
    """The margin a layout on more devices than ``best`` must beat it by."""
    return alone_margin if best.size == 1 else margin


def _counts(sizes):
    """``[3, 2, 1]`` -> "3, 2 and 1"; long runs of counts shortened."""
    words = [str(s) for s in sizes]
    if len(words) > 8:
        words = words[:3] + ["..."] + words[-2:]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def _group(size, device_count, ranking):
    """How the reasons name a subset: "all devices", "the 2 fastest alone", ..."""
    if size == device_count:
        return "all devices"
    return f"the {size} {'fastest alone' if ranking == 'alone' else 'of highest FLOP rate'}"


def _left_out(specs, order, best, layouts, relative, margin, alone_margin):
    """A record per device the chosen layout ``best`` leaves out, in ``order`` (fastest
    alone first), with the reason: the best prediction of the smallest subset tried that
    includes it, against the chosen one (and the margin, ``_margin``, when that subset
    was predicted faster, but not by it)."""
    smallest = {}   # device index -> the best layout of the smallest subset holding it
    for layout in sorted(layouts, key=lambda l: (l.size, l.step)):
        for i in layout.indices:
            smallest.setdefault(i, layout)
    chosen = set(best.indices)
    records = []
    for i in (i for i in order if i not in chosen):
        spec, layout = specs[i], smallest.get(i)
        if layout is not None:
            with_it = (f"with it the best layout ({_group(layout.size, len(specs), layout.ranking)}"
                       f", {layout.mesh}) is predicted {format_time(layout.step, relative)}")
            if layout.step < best.step:
                with_it += (f", not faster by the {_margin(best, margin, alone_margin):.0%} "
                            "the cost model's error asks of a layout on more devices")
        else:
            with_it = "with it no layout fits"
        records.append({"device": spec.name, "speed": spec.flops_per_s,
                        "reason": f"left out {spec.name}: {with_it}, without it "
                                  f"{format_time(best.step, relative)}"})
    return records
