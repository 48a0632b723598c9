"""Measured device speeds and per-device busy times, for the planner and re-balancing.

``measure_speeds`` runs the model's whole training step (the run's augmentation
and in-graph PCA projection, forward, backward, optimizer update) on one device
at a time: a ``TrainingGraph`` with the
one-device layout per device, warm-up steps, then timed steps. Devices take
turns step by step (round-robin), never two at once, so on a shared machine
every device sees the same background load and none competes with another
for cores. Each device's speed is its median samples/s; the spread of the
repeats is kept. Each device is also timed, in the same turns, at a quarter
of the batch: a step takes ``overhead_s + samples / rate`` (op launches, the
session round trip and other per-step costs do not shrink with the batch),
and the two batch sizes give both. A slow worker's overhead is a larger part
of its step, so a batch split by speed alone gives it too many samples
(measured: 8 against 2 cores). ``flops_per_s`` is the planner's absolute FLOP
rate from the slope: ``rate`` x the training FLOPs of one sample
(``TRAIN_FLOPS_FACTOR`` x the forward FLOPs ``model_spec`` counts), so the cost
model, adding ``overhead_s``, reproduces the measured one-device step time.
With ``op_size=True`` (for plans that may split the model) each device is also
timed, in the same turns, at half the model's width and on element-wise work
(``hmp.run.calibration``): ``flops_per_s`` is then the peak rate, beside
``half_rate_flops`` and ``elementwise_s_per_element``, and the cost model still
reproduces the one-device step. ``DeviceStep`` is that one-device step, for other
measurements (the cost-model benchmark runs several side by side).

``measure_platform`` adds the link between the devices (``hmp.run.linkprobe``) and
the wait at a barrier (``LinkSpec.barrier_s``, the cost model's docstring): the
model's step split by batch over all devices, as planned from the speeds just
measured (``SplitStep``), and each device alone on its share of that batch are timed
in turns; what the split takes beyond its slowest share and the priced hand-overs is
spread over its barriers (``barrier_wait``).

``busy_times`` reads TensorFlow's step statistics of one traced step
(``tf.RunOptions(trace_level=FULL_TRACE)``) and returns, per mesh device, the
union of the execution intervals of the operations that ran on it (on a GPU, also of
its kernels as the GPU ran them): the time it was busy. Unions, not sums, so that ops
running in parallel on one device are not counted twice. Send/receive operations are
left out: their interval includes waiting for another device; so does a task serving
a tensor to another task over gRPC (``RecvTensor``), also left out, and a GPU's copies.
A GPU whose trace holds no kernel (TensorFlow traces kernels through CUPTI) is busy
for the whole step, by step timing (``step_timed``): its launches alone would read it
as idle.
"""

import dataclasses
import re
import statistics
import time

import numpy as np
import tensorflow.compat.v1 as tf

from hmp.planning import costmodel, parse_mesh, plan_layout
from hmp.run import calibration
from hmp.run.from_graph import model_spec, model_width
from hmp.run.graph import Placement, Recipe, TrainingGraph
from hmp.run.linkprobe import measure_link, platform_specs

# Op types whose recorded interval includes waiting for another device.
TRANSFER_OPS = ("_Send", "_Recv", "_HostSend", "_HostRecv")
# What a task's gRPC server records while it hands a tensor to another task
# (its interval includes waiting until the tensor exists).
SERVED_TENSOR = "RecvTensor"


@dataclasses.dataclass(frozen=True)
class DeviceSpeed:
    """One device's measured training speed."""

    device: str
    samples_per_s: float  # median over the repeats
    min_samples_per_s: float  # slowest repeat
    max_samples_per_s: float  # fastest repeat
    relative: float  # samples_per_s / the sum over all devices (relative speeds sum to 1)
    # training FLOPs per sample / seconds per extra sample (the slope); the peak rate
    # when half_rate_flops is measured
    flops_per_s: float
    overhead_s: float = 0.0  # seconds of every step, whatever the batch (the intercept)
    half_rate_flops: float | None = None  # op-size efficiency (op_size=True), else None
    elementwise_s_per_element: float | None = None  # element-wise work (op_size=True)


@dataclasses.dataclass(frozen=True)
class RandomBatch:
    """A fixed random scene and batch: what a ``TrainingGraph`` loads and is fed."""

    image_shape: tuple  # (rows, columns) of the scene
    padded_cube: np.ndarray  # float32 [rows + p - 1, columns + p - 1, bands]
    indices: np.ndarray  # int64 [batch] flat pixel indices
    labels: np.ndarray  # int32 [batch] 0-based classes

    def feed(self, graph):
        return graph.feed(self.indices, self.labels)


def random_batch(config, batch_size, seed=0, image_side=32, bands=None):
    """A ``RandomBatch`` for ``config``: a random ``image_side`` square scene of ``bands``
    (default: the model's input bands), random pixels."""
    rng = np.random.RandomState(seed)
    border = config.patch - 1
    cube = rng.randn(image_side + border, image_side + border, bands or config.bands)
    return RandomBatch((image_side, image_side), cube.astype(np.float32),
                       rng.randint(0, image_side * image_side, batch_size),
                       rng.randint(0, config.n_classes, batch_size).astype(np.int32))


class DeviceStep:
    """The model's whole training step on one device, in a session of its own.

    A ``TrainingGraph`` on the one-device layout, fresh weights, a fixed
    random scene on the device and a fixed random batch of its pixels fed
    every step. ``recipe``: the run's, so that its augmentation and in-graph PCA
    projection (``Recipe.projection``: the scene then has the raw bands) are timed
    with the model.
    """

    def __init__(self, config, device, batch_size, target=None, session_config=None,
                 optimizer="adam", recipe=Recipe()):
        self._build(config, Placement("", "", (device,), {}), batch_size, target,
                    session_config, optimizer, recipe)

    def _build(self, config, placement, batch_size, target, session_config, optimizer,
               recipe):
        batch = random_batch(config, batch_size, bands=recipe.scene_bands(config))
        graph = TrainingGraph(config, placement, batch_size, batch.image_shape, optimizer,
                              recipe=recipe)
        self.session = graph.session(batch.padded_cube, session_config, target)
        self._feed = batch.feed(graph)
        self._train_op = graph.train_op

    def run(self):
        """Runs one step; returns its wall time in seconds."""
        start = time.perf_counter()
        self.session.run(self._train_op, self._feed)
        return time.perf_counter() - start

    def close(self):
        self.session.close()


class SplitStep(DeviceStep):
    """The model's whole training step laid out as ``plan`` (an ``hmp.planning.Plan``),
    as ``DeviceStep`` builds it on one device."""

    def __init__(self, config, plan, target=None, session_config=None, optimizer="adam",
                 recipe=Recipe()):
        self._build(config, Placement.from_plan(plan), plan.batch_size, target,
                    session_config, optimizer, recipe)


def measure_speeds(config, devices, batch_size, warmup=2, repeats=5, target=None,
                   session_config=None, optimizer="adam", progress=None, spec=None,
                   op_size=False, recipe=Recipe()):
    """Times the model's training step alone on each device.

    Args:
      config: an ``hmp.run.graph.ModelConfig``.
      devices: TensorFlow device strings ("/cpu:1", "/gpu:0",
        "/job:worker/task:1/device:CPU:0", ...).
      batch_size: samples per step.
      warmup: untimed steps per device first (graph optimisation, allocation).
      repeats: timed steps per device; devices take turns step by step.
      target: session target for remote devices ("grpc://host:port"), or None.
      session_config: a ``tf.ConfigProto`` (e.g. ``device_count`` for
        virtual CPU devices), or None.
      optimizer: the optimizer of the step (its update is part of the work).
      progress: optional ``callable(str)`` told what is happening.
      spec: the config's ``model_spec``, if the caller has it (else built here).
      op_size: also time the step at half width and the element-wise work, for
        ``half_rate_flops`` and ``elementwise_s_per_element`` (what model splits
        need; ``hmp.run.calibration``).
      recipe: the run's ``hmp.run.graph.Recipe`` (its augmentation and in-graph
        projection are part of the step); default: the model alone.

    Returns:
      A ``DeviceSpeed`` per device, in the order given.
    """
    spec = spec or model_spec(config)   # once: building it builds the model's graph
    steps = _warmed_steps(config, devices, batch_size, warmup, repeats, target,
                          session_config, optimizer, progress, spec, op_size, recipe)
    try:
        return _timed(steps, config, devices, batch_size, repeats, progress, spec, op_size)
    finally:
        for step in steps.values():
            step.close()


def measure_platform(config, devices, batch_size, warmup=2, repeats=5, target=None,
                     session_config=None, optimizer="adam", progress=None, spec=None,
                     op_size=False, recipe=Recipe()):
    """``measure_speeds``, then the link between the devices (``hmp.run.linkprobe``), idle
    and while every device runs its training step, as in a split step (the same
    steps that were timed), and its wait per barrier (``measure_barrier``).

    Returns ``(DeviceSpeeds, LinkSpec or None)``; the arguments are those of
    ``measure_speeds``.
    """
    spec = spec or model_spec(config)
    steps = _warmed_steps(config, devices, batch_size, warmup, repeats, target,
                          session_config, optimizer, progress, spec, op_size, recipe)
    try:
        speeds = _timed(steps, config, devices, batch_size, repeats, progress, spec,
                        op_size)
        link = measure_link(devices, target, session_config, progress=progress,
                            busy=[steps[d, STEP, batch_size].run for d in devices])
    finally:
        for step in steps.values():
            step.close()
    if link is None or batch_size < len(devices):   # nothing to split
        return speeds, link
    return speeds, measure_barrier(config, spec, devices, speeds, link, batch_size, warmup,
                                   repeats, target, session_config, optimizer, progress,
                                   recipe)


def barrier_wait(split_s, shares_s, comm_s, count):
    """The wait per barrier: what a split step of ``split_s`` seconds takes beyond its
    slowest device alone on its share (``shares_s``: each device's step on its share of
    the batch) and the hand-overs the cost model prices (``comm_s``), over its ``count``
    barriers; 0 when it has none or takes no longer."""
    if count < 1:
        return 0.0
    return max(0.0, (split_s - max(shares_s) - comm_s) / count)


def measure_barrier(config, spec, devices, speeds, link, batch_size, warmup=2, repeats=5,
                    target=None, session_config=None, optimizer="adam", progress=None,
                    recipe=Recipe()):
    """``link`` with its ``barrier_s`` measured: the model's step split by batch over
    ``devices`` as ``plan_layout`` plans it from ``speeds`` (``DeviceSpeed``) and
    ``link``, and each device's one-device step on its share of that batch, in turns
    (``warmup`` untimed rounds, then the medians of ``repeats``): ``barrier_wait``
    of those and the plan's predicted communication. Timing the shares in the same
    turns keeps the compute model's errors and the machine's changing load out of
    the wait."""
    platform = platform_specs(devices, [dataclasses.asdict(s) for s in speeds])
    plan = plan_layout(spec, platform, None, batch_size, "batch:%d" % len(devices),
                       link=link)
    shares = plan.splits["batch"]
    if progress:
        progress("profiling the wait at a barrier: the batch split %s and each device on "
                 "its share, %d steps each, in turns" % (shares, repeats))
    steps = {}
    try:
        steps["split"] = SplitStep(config, plan, target, session_config, optimizer, recipe)
        for device, share in zip(devices, shares):   # each share >= 1 (the planner's minimum)
            steps[device] = DeviceStep(config, device, share, target, session_config,
                                       optimizer, recipe)
        _in_turns(steps, warmup)
        median = {key: statistics.median(times)
                  for key, times in _in_turns(steps, repeats).items()}
    finally:
        for step in steps.values():
            step.close()
    _, count = costmodel.barriers(spec, parse_mesh(plan.mesh))
    wait = barrier_wait(median.pop("split"), list(median.values()), plan.prediction.comm,
                           count)
    return dataclasses.replace(link, barrier_s=wait)


def small_batch(batch_size):
    """The second batch size each device is timed at (for its overhead), or None."""
    return batch_size // 4 if batch_size >= 4 else None


# What a profiled device runs (the keys of ``_warmed_steps``): the training step, the
# training step at half width, the element-wise work (``hmp.run.calibration``).
STEP, HALF_WIDTH, ELEMENTWISE = "step", "half width", "element-wise"


def _warmed_steps(config, devices, batch_size, warmup, repeats, target, session_config,
                  optimizer, progress, spec, op_size, recipe):
    """``{(device, what, batch): warmed-up step}``: the ``DeviceStep`` at ``batch_size``
    and its ``small_batch``; with ``op_size`` also the step at half width (if the
    model's width can be halved) and the ``ElementwiseStep`` at both batch sizes.
    The caller closes them."""
    if not devices:
        raise ValueError("measure_speeds: no devices given")
    if warmup < 0 or repeats < 1:
        raise ValueError(f"measure_speeds: need warmup >= 0 and repeats >= 1, "
                         f"got {warmup} and {repeats}")
    say = progress or (lambda message: None)
    batches = [b for b in (batch_size, small_batch(batch_size)) if b]
    half = calibration.half_width(config) if op_size else None
    steps = {}

    def warmed(key, step):
        steps[key] = step
        for _ in range(warmup):
            step.run()

    try:
        for i, device in enumerate(devices):
            say(f"profiling {device} ({i + 1}/{len(devices)}): building and warming up")
            for batch in batches:
                warmed((device, STEP, batch), DeviceStep(config, device, batch, target,
                                                         session_config, optimizer, recipe))
            if half is not None:
                warmed((device, HALF_WIDTH, batch_size), DeviceStep(
                    half, device, batch_size, target, session_config, optimizer, recipe))
            if op_size and len(batches) > 1:
                for batch in batches:
                    warmed((device, ELEMENTWISE, batch), calibration.ElementwiseStep(
                        spec, device, batch, target, session_config))
    except BaseException:
        for step in steps.values():
            step.close()
        raise
    return steps


def affine_fit(batch_size, seconds, small, small_seconds):
    """``(seconds per sample, overhead seconds)`` of steps taking ``seconds`` at
    ``batch_size`` and ``small_seconds`` at ``small`` samples (medians); no
    overhead, the whole step per sample, when the two do not give a positive
    slope and intercept (``small`` None, or noise)."""
    if small is not None:
        slope = (seconds - small_seconds) / (batch_size - small)
        overhead = seconds - batch_size * slope
        if slope > 0 and overhead >= 0:
            return slope, overhead
    return seconds / batch_size, 0.0


def _timing_line(steps, config, repeats):
    """The progress line saying what ``_timed`` times."""
    what = {key[1] for key in steps}
    extra = []
    if HALF_WIDTH in what:
        width = model_width(config)
        extra.append(f"at half width ({width // 2} for {width})")
    if ELEMENTWISE in what:
        extra.append("element-wise work (bias add + ReLU)")
    return (f"profiling: timing {repeats} steps per device and batch size"
            + "".join(f", {e}" for e in extra) + ", round-robin")


def _in_turns(steps, repeats):
    """``{key: [seconds of each of its repeats]}``: ``repeats`` steps of each of
    ``steps`` ({key: a step with ``run()``}), taking turns step by step, so that a
    change in the machine's load hits every one of them alike."""
    seconds = {key: [] for key in steps}
    for _ in range(repeats):
        for key, step in steps.items():
            seconds[key].append(step.run())
    return seconds


def _timed(steps, config, devices, batch_size, repeats, progress, spec, op_size):
    """DeviceSpeeds from ``repeats`` steps of each of ``steps``, round-robin; with
    ``op_size``, their op-size figures too (``_op_size_fit``)."""
    if progress:
        progress(_timing_line(steps, config, repeats))
    seconds = _in_turns(steps, repeats)
    train_flops = costmodel.train_flops_per_sample(spec)
    small = small_batch(batch_size)
    step = {key: statistics.median(times) for key, times in seconds.items()}
    rates = [batch_size / step[d, STEP, batch_size] for d in devices]
    fit = _op_size_fit(step, config, batch_size, spec) if op_size else None
    speeds = []
    for device, rate in zip(devices, rates):
        full = seconds[device, STEP, batch_size]
        per_sample, overhead = affine_fit(batch_size, step[device, STEP, batch_size], small,
                                          step[device, STEP, small] if small else None)
        figures = (fit(device, per_sample, overhead) if fit
                   else {"flops_per_s": train_flops / per_sample})
        speeds.append(DeviceSpeed(device, rate, batch_size / max(full), batch_size / min(full),
                                  rate / sum(rates), overhead_s=overhead, **figures))
    return speeds


def _op_size_fit(step, config, batch_size, spec):
    """``fit(device, per_sample, overhead)`` -> the DeviceSpeed figures ``flops_per_s``
    (the peak), ``half_rate_flops`` and ``elementwise_s_per_element`` from the median
    seconds ``step`` of ``_timed``: 0 for what was not timed (a width below 2, a
    batch too small for two sizes)."""
    small = small_batch(batch_size)
    half = calibration.half_width(config)
    totals = costmodel.per_sample_totals(spec)
    half_totals = costmodel.per_sample_totals(model_spec(half)) if half else None

    def fit(device, per_sample, overhead):
        elementwise = (calibration.elementwise_slope(
            step[device, ELEMENTWISE, batch_size], step[device, ELEMENTWISE, small],
            batch_size, small, spec) if (device, ELEMENTWISE, batch_size) in step else 0.0)
        half_step = step.get((device, HALF_WIDTH, batch_size))
        half_per_sample = (half_step - overhead) / batch_size if half_step else None
        figures = calibration.fit_op_size(per_sample, half_per_sample, totals, half_totals,
                                          elementwise)
        return dict(zip(("flops_per_s", "half_rate_flops", "elementwise_s_per_element"),
                        figures))
    return fit


# A step statistics device name: the device, then what recorded it (``_records``).
_DEVICE_PART = re.compile(r"^(.*?/device:[^/:]+:\d+)(.*)$", re.IGNORECASE)
# A GPU's kernels as it ran them (TensorFlow's GPU tracer, through CUPTI): one record per
# stream and all of them again under "stream:all". Its copies ("/memcpy",
# "/stream:N<MemcpyH2D>") are transfers and its "/sync" records host threads waiting
# for it: both are left out, as _Send and _Recv are.
_KERNELS = re.compile(r"^/stream:(?:\d+|all)$", re.IGNORECASE)


def _device_spec(name):
    """``(tf.DeviceSpec, what follows the device)`` of a step statistics device name.
    A name without a job (a GPU tracer's: ``/device:GPU:0/stream:all``) is this
    process's device."""
    match = _DEVICE_PART.match(name)
    spec = tf.DeviceSpec.from_string(match.group(1) if match else name)
    if spec.job is None:
        spec = spec.replace(job="localhost", replica=0, task=0)
    return spec, match.group(2) if match else ""


def _matches(mesh_device, stats_device):
    """True if every field the mesh device names equals the stats device's."""
    fields = ("job", "replica", "task", "device_type", "device_index")
    return all(getattr(mesh_device, f) is None
               or str(getattr(mesh_device, f)).upper() == str(getattr(stats_device, f)).upper()
               for f in fields)


def _specificity(spec):
    return sum(getattr(spec, f) is not None for f in ("job", "replica", "task"))


def _union_length(intervals):
    """Total length covered by (start, end) intervals."""
    covered, reach = 0, None
    for start, end in sorted(intervals):
        if reach is None or start > reach:
            covered += end - start
            reach = end
        elif end > reach:
            covered += end - reach
            reach = end
    return covered


def _op_type(node_stats):
    """The op type from a timeline label ``"name = Type(inputs)"``."""
    return node_stats.timeline_label.partition(" = ")[2].partition("(")[0]


def trace_step(session, fetches, feed):
    """``session.run(fetches, feed)`` with TensorFlow's step statistics
    (``FULL_TRACE``); returns the values, the ``tf.RunMetadata`` and the step's wall
    seconds."""
    metadata = tf.RunMetadata()
    started = time.perf_counter()
    values = session.run(fetches, feed, run_metadata=metadata,
                         options=tf.RunOptions(trace_level=tf.RunOptions.FULL_TRACE))
    return values, metadata, time.perf_counter() - started


def run_traced(session, fetches, feed, devices):
    """``session.run(fetches, feed)`` with step statistics; returns the values
    and the busy seconds of each of ``devices`` (see ``busy_times``)."""
    values, metadata, seconds = trace_step(session, fetches, feed)
    return values, busy_times(metadata, devices, seconds)


def _computes(node_stats):
    """Whether a traced op computes (is no transfer: see ``_records``)."""
    return _op_type(node_stats) not in TRANSFER_OPS and node_stats.node_name != SERVED_TENSOR


def _records(run_metadata, devices, keep=_computes):
    """``(executor, kernels, launching)``: for each mesh device, the (start, end)
    nanoseconds of the ops its executors ran, and of the kernels a GPU tracer recorded
    on it, and whether an executor of a device other than a CPU (a GPU's: it launches
    kernels) ran its ops; only the ops (``NodeExecStats``) that ``keep`` accepts.

    A statistics device belongs to the most specific mesh device that matches every
    field that one names (``_matches``); statistics of devices outside the mesh are
    ignored. By default (``_computes``) transfers are left out: their interval includes
    waiting for another device; so does a task serving a tensor to another task over
    gRPC."""
    mesh_specs = [tf.DeviceSpec.from_string(d) for d in devices]
    executor, kernels = [[] for _ in devices], [[] for _ in devices]
    launching = [False] * len(devices)
    for dev_stats in run_metadata.step_stats.dev_stats:
        stats_spec, recorder = _device_spec(dev_stats.device)
        owners = [i for i, spec in enumerate(mesh_specs) if _matches(spec, stats_spec)]
        if not owners or not (recorder == "" or _KERNELS.match(recorder)):
            continue
        owner = max(owners, key=lambda i: _specificity(mesh_specs[i]))
        found = executor[owner] if recorder == "" else kernels[owner]
        launches = recorder == "" and (stats_spec.device_type or "").upper() != "CPU"
        for node in dev_stats.node_stats:
            if not keep(node):
                continue
            start = node.all_start_nanos or 1000 * node.all_start_micros
            length = node.all_end_rel_nanos or 1000 * node.all_end_rel_micros
            found.append((start, start + length))
            launching[owner] = launching[owner] or launches
    return executor, kernels, launching


def step_timed(run_metadata, devices):
    """For each of ``devices``: whether its busy time is the step's (``busy_times``):
    a GPU's executor launched ops on it, but the trace holds none of its kernels (no
    CUPTI, or a cluster task's GPU: the tracer's records name no task)."""
    _, kernels, launching = _records(run_metadata, devices)
    return [launched and not k for k, launched in zip(kernels, launching)]


def busy_times(run_metadata, devices, step_seconds):
    """Busy seconds of each mesh device during one traced step.

    A CPU's is the union of the intervals of the ops its executor ran. A GPU's executor
    only launches its kernels (and runs ops on host memory), so a GPU's is the union of
    those and its kernels' intervals; unions, not sums, so that ops running in parallel
    on one device are not counted twice. Where the trace has no kernel of a GPU that
    launched ops (``step_timed``), its busy time is the step's wall time,
    ``step_seconds``: its launches alone would read it as nearly idle.

    Args:
      run_metadata: the ``tf.RunMetadata`` of a ``session.run`` with
        ``tf.RunOptions(trace_level=tf.RunOptions.FULL_TRACE)``.
      devices: the mesh's device strings ("/cpu:1", "/job:worker/task:1/..."; a task
        alone: all its devices); step statistics name devices in full
        ("/job:localhost/replica:0/task:0/device:CPU:1").
      step_seconds: the step's wall time (``trace_step``).

    Returns:
      A list of seconds, one per device.
    """
    executor, kernels, launching = _records(run_metadata, devices)
    return [step_seconds if launched and not k else _union_length(ops + k) / 1e9
            for ops, k, launched in zip(executor, kernels, launching)]


# The parts of a training step (``step_parts``), in the order they are reported.
INPUT, MODEL, EXCHANGE, OPTIMIZER, METRICS, TRANSFERS = (
    "input", "model", "gradient sums", "optimizer", "metrics", "transfers + waiting")
STEP_PARTS = (INPUT, MODEL, EXCHANGE, OPTIMIZER, METRICS, TRANSFERS)
# The mtf operations (and placeholders) of the input: patches cut from the scene on the
# device, the in-graph PCA projection, the augmentation's draws and transforms.
_INPUT_OPS = ("scene_cube", "pixel_indices", "labels", "training", "symmetry",
              "cut_patches", "pca_projection", "symmetry_draw", "test_symmetry",
              "shift_draw", "gain_draw", "field_look", "brightness_draw", "spectral_noise")
_UNIQUE_SUFFIX = re.compile(r"_\d+$")


def _operation_of(name):
    """The mtf operation a TensorFlow op (or a traced node, ``name:Type`` or a name
    grappler derived from the op's) was lowered from: its first name scope."""
    return name.partition(":")[0].split("/")[0]


def step_parts(tf_graph):
    """``{mtf operation: part}`` of a ``TrainingGraph``'s ops (``_operation_of``):
    ``INPUT`` (``_INPUT_OPS``), ``EXCHANGE`` (the bucketed gradient all-reduce,
    ``gradient_sums``), ``OPTIMIZER`` (everything that runs after the ordered step's
    barrier ``all_gradients``: the updates, the global step), ``METRICS`` (the loss and
    accuracy sums); every other op is the ``MODEL``'s forward or backward pass."""
    parts = {}
    after_barrier = [op for op in tf_graph.get_operations()
                     if _operation_of(op.name) == "all_gradients"]
    seen = set()
    while after_barrier:
        op = after_barrier.pop()
        if op.name in seen:
            continue
        seen.add(op.name)
        parts[_operation_of(op.name)] = OPTIMIZER
        after_barrier.extend(c for t in op.outputs for c in t.consumers())
        after_barrier.extend(op._control_outputs)
    for op in tf_graph.get_operations():
        operation = _operation_of(op.name)
        plain = _UNIQUE_SUFFIX.sub("", operation)
        if plain in _INPUT_OPS:
            parts[operation] = INPUT
        elif plain == "gradient_sums":
            parts[operation] = EXCHANGE
        elif plain == "metric_sums":
            parts[operation] = METRICS
    return parts


def busy_by_part(run_metadata, devices, parts):
    """``{part: [busy seconds of each of devices]}`` of one traced step, for each of
    ``STEP_PARTS``: the union of the intervals of that part's ops (``parts``:
    ``step_parts``; ops of no part are the model's), as ``busy_times`` counts them on a
    CPU. Parts may run at the same time on one device, so they may add up to more than
    its busy time. ``TRANSFERS`` is the union of the sends and receives, which includes
    waiting for the other devices."""
    def part_of(node):
        if not _computes(node):
            return TRANSFERS
        return parts.get(_operation_of(node.node_name), MODEL)

    found = {}
    for part in STEP_PARTS:
        executor, kernels, _ = _records(run_metadata, devices,
                                        lambda node, part=part: part_of(node) == part)
        found[part] = [_union_length(e + k) / 1e9 for e, k in zip(executor, kernels)]
    return found
