"""Each device's measured speed, as the planner's ``DeviceSpec``: ``measure_speeds`` and
``measure_platform`` (with the link between the devices).

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
(``hmp.measure.calibration``): ``flops_per_s`` is then the peak rate, beside
``half_rate_flops`` and ``elementwise_s_per_element``, and the cost model still
reproduces the one-device step. ``DeviceStep`` is that one-device step, for other
measurements (the cost-model benchmark runs several side by side). Each device comes
back on its host (``hmp.measure.linkprobe.with_hosts``), ready for the planner.

``measure_platform`` adds the link between the devices (``hmp.measure.linkprobe``) and
the wait at a barrier (``LinkSpec.barrier_s``, the cost model's docstring): the
model's step split by batch over all devices, as planned from the speeds just
measured (``SplitStep``), and each device alone on its share of that batch are timed
in turns; what the split takes beyond its slowest share and the priced hand-overs is
spread over its barriers (``barrier_wait``).
"""

import dataclasses
import statistics
import time

import numpy as np

from hmp.cluster.sessions import close_session
from hmp.graph.from_graph import model_spec, model_width
from hmp.graph.graph import TrainingGraph
from hmp.graph.graph_config import Placement, Recipe
from hmp.measure import calibration
from hmp.measure.channel_blocks import with_channel_blocks
from hmp.measure.linkprobe import measure_link, with_hosts
from hmp.planning import DeviceSpec, costmodel, parse_mesh, plan_layout


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
    random scene on the device and a fixed random batch of its pixels, kept on the
    device and taken by every step (``TrainingGraph.load_batches``), as the trainer's
    steps take theirs. ``recipe``: the run's, so that its augmentation and in-graph PCA
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
        graph.load_batches(self.session, [(batch.indices, batch.labels)])
        self._train_op, self._feed = graph.kept_steps(1)

    def run(self):
        """Runs one step; returns its wall time in seconds."""
        start = time.perf_counter()
        self.session.run(self._train_op, self._feed)
        return time.perf_counter() - start

    def close(self):
        close_session(self.session)   # a lost worker's session closes on its own


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
      config: an ``hmp.graph.graph_config.ModelConfig``.
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
        need; ``hmp.measure.calibration``).
      recipe: the run's ``hmp.graph.graph_config.Recipe`` (its augmentation and in-graph
        projection are part of the step); default: the model alone.

    Returns:
      A ``DeviceSpec`` per device, in the order given, on its host (``with_hosts``),
      with its samples/s (median, slowest and fastest repeat), FLOP rate and
      per-step overhead; its op-size figures with ``op_size``, else None.
    """
    spec = spec or model_spec(config)   # once: building it builds the model's graph
    steps = _warmed_steps(config, devices, batch_size, warmup, repeats, target,
                          session_config, optimizer, progress, spec, op_size, recipe)
    try:
        return _timed(steps, config, devices, batch_size, repeats, progress, spec, op_size,
                      target, session_config)
    finally:
        for step in steps.values():
            step.close()


def measure_platform(config, devices, batch_size, warmup=2, repeats=5, target=None,
                     session_config=None, optimizer="adam", progress=None, spec=None,
                     op_size=False, recipe=Recipe()):
    """``measure_speeds``, then the link between the devices (``hmp.measure.linkprobe``), idle
    and while every device runs its training step, as in a split step (the same
    steps that were timed), and its wait per barrier (``measure_barrier``: on a batch
    split over every device, or over those ``barrier_devices`` gives a split).

    Returns ``(DeviceSpecs, LinkSpec or None)``; the arguments are those of
    ``measure_speeds``.
    """
    spec = spec or model_spec(config)
    steps = _warmed_steps(config, devices, batch_size, warmup, repeats, target,
                          session_config, optimizer, progress, spec, op_size, recipe)
    try:
        speeds = _timed(steps, config, devices, batch_size, repeats, progress, spec,
                        op_size, target, session_config)
        link = measure_link(devices, target, session_config, progress=progress,
                            busy=[steps[d, STEP, batch_size].run for d in devices])
    finally:
        for step in steps.values():
            step.close()
    split = barrier_devices(spec, speeds, batch_size)
    if link is None or len(split) < 2:   # nothing to split
        return speeds, link
    return speeds, measure_barrier(config, spec, [devices[i] for i in split],
                                   [speeds[i] for i in split], link, batch_size, warmup,
                                   repeats, target, session_config, optimizer, progress,
                                   recipe)


def barrier_devices(spec, speeds, batch_size):
    """The indices of the devices whose batch split times the wait at a barrier: every
    device, or where ``batch_size`` cannot give each its fewest samples a replica
    (``ModelSpec.fewest_replica_samples``), as many of the fastest as it can (in their
    order); fewer than two: no split to time."""
    most = batch_size // spec.fewest_replica_samples
    fastest = sorted(range(len(speeds)), key=lambda i: -speeds[i].samples_per_s)[:most]
    return sorted(fastest)


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
    ``devices`` as ``plan_layout`` plans it from ``speeds`` (``DeviceSpec``) and
    ``link``, and each device's one-device step on its share of that batch, in turns
    (``warmup`` untimed rounds, then the medians of ``repeats``): ``barrier_wait``
    of those and the plan's predicted communication. Timing the shares in the same
    turns keeps the compute model's errors and the machine's changing load out of
    the wait."""
    plan = plan_layout(spec, speeds, None, batch_size, "batch:%d" % len(devices),
                       link=link)
    shares = plan.splits["batch"]
    if progress:
        progress("profiling the wait at a barrier: the batch split %s and each device on "
                 "its share, %d steps each, in turns" % (shares, repeats))
    steps = {}
    try:
        steps["split"] = SplitStep(config, plan, target, session_config, optimizer, recipe)
        for device, share in zip(devices, shares):   # each its fewest samples or more
            steps[device] = DeviceStep(config, device, share, target, session_config,
                                       optimizer, recipe)
        in_turns(steps, warmup)
        median = {key: statistics.median(times)
                  for key, times in in_turns(steps, repeats).items()}
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
# training step at half width, the element-wise work (``hmp.measure.calibration``).
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


def overhead_text(overhead_s):
    """A device's per-step overhead for people: ``2.68 ms of every step``, or, where
    ``affine_fit`` found none (the step's time in proportion to its samples), says so."""
    if overhead_s > 0:
        return "%.3g ms of every step" % (1e3 * overhead_s)
    return "no fixed time a step (the step's time fits its samples alone)"


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


def in_turns(steps, repeats, per_turn=1):
    """``{key: [seconds of each turn]}``: ``repeats`` turns of ``steps`` ({key: a step
    with ``run()``}), each step run ``per_turn`` times a turn (a turn's seconds: their
    median), so that a change in the machine's load hits every one of them alike."""
    seconds = {key: [] for key in steps}
    for _ in range(repeats):
        for key, step in steps.items():
            seconds[key].append(statistics.median(step.run() for _ in range(per_turn)))
    return seconds


def _timed(steps, config, devices, batch_size, repeats, progress, spec, op_size, target,
           session_config):
    """DeviceSpecs from ``repeats`` steps of each of ``steps``, round-robin, on their
    hosts and with their channel blocks (``hmp.measure.channel_blocks``); with
    ``op_size``, their op-size figures too (``_op_size_fit``), else None."""
    if progress:
        progress(_timing_line(steps, config, repeats))
    seconds = in_turns(steps, repeats)
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
                   else {"flops_per_s": train_flops / per_sample, "half_rate_flops": None,
                         "elementwise_s_per_element": None})
        speeds.append(DeviceSpec(device, overhead_s=overhead, samples_per_s=rate,
                                 min_samples_per_s=batch_size / max(full),
                                 max_samples_per_s=batch_size / min(full), **figures))
    return with_channel_blocks(with_hosts(speeds), target, session_config)


def with_given_figures(measured, given):
    """The ``measured`` DeviceSpecs (each device on its host: virtual CPUs of one process
    share its cores); a ``given`` device that is a DeviceSpec (a ``--platform`` file's)
    keeps its memory figures and any host it names, the rest is measured."""
    return [dataclasses.replace(spec, mem_bytes=device.mem_bytes, mem_bw=device.mem_bw,
                                host=device.host or spec.host,
                                host_cores=device.host_cores or spec.host_cores)
            if isinstance(device, DeviceSpec) else spec
            for spec, device in zip(measured, given)]


def relative_speeds(speeds):
    """Each device's samples/s over the sum over all of ``speeds`` (measured
    DeviceSpecs): relative speeds, which sum to 1."""
    total = sum(s.samples_per_s for s in speeds)
    return [s.samples_per_s / total for s in speeds]


def _op_size_fit(step, config, batch_size, spec):
    """``fit(device, per_sample, overhead)`` -> the DeviceSpec figures ``flops_per_s``
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
