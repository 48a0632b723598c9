"""Per-device busy times of a traced training step, for the trainer's epoch line and
re-balancing (a device's speed alone is measured by ``hmp.measure.speeds``).

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

import re
import time

import tensorflow.compat.v1 as tf

from hmp.graph.graph import LATER_STEP_SCOPE

# Op types whose recorded interval includes waiting for another device.
TRANSFER_OPS = ("_Send", "_Recv", "_HostSend", "_HostRecv")
# What a task's gRPC server records while it hands a tensor to another task
# (its interval includes waiting until the tensor exists).
SERVED_TENSOR = "RecvTensor"


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


# A later step's name scope (``hmp.graph.graph.LATER_STEP_SCOPE``), before its operations'
_LATER_STEP = re.compile("^" + LATER_STEP_SCOPE.replace("%d", r"\d+") + "/")


def _operation_of(name):
    """The mtf operation a TensorFlow op (or a traced node, ``name:Type`` or a name
    grappler derived from the op's) was lowered from: its first name scope, after the
    scope of a graph's later step (then with it: each step's operations are its own)."""
    name = name.partition(":")[0]
    later = _LATER_STEP.match(name)
    start = later.end() if later else 0
    return name[:start] + name[start:].split("/")[0]


def step_parts(tf_graph):
    """``{mtf operation: part}`` of a ``TrainingGraph``'s ops (``_operation_of``):
    ``INPUT`` (``_INPUT_OPS``), ``EXCHANGE`` (the bucketed gradient all-reduce,
    ``gradient_sums``), ``OPTIMIZER`` (everything that runs after the ordered step's
    barrier ``all_gradients``: the updates, the global step), ``METRICS`` (the loss and
    accuracy sums); every other op is the ``MODEL``'s forward or backward pass."""
    parts = {}
    after_barrier = [op for op in tf_graph.get_operations()
                     if _plain(_operation_of(op.name)) == "all_gradients"]
    seen = set()
    while after_barrier:
        op = after_barrier.pop()
        if op.name in seen:
            continue
        seen.add(op.name)
        parts[_operation_of(op.name)] = OPTIMIZER
        # within its step: the next step of a graph of several runs after this one's
        step = _LATER_STEP.match(op.name)
        after_barrier.extend(
            c for c in [*(c for t in op.outputs for c in t.consumers()), *op._control_outputs]
            if _same_step(_LATER_STEP.match(c.name), step))
    for op in tf_graph.get_operations():
        operation = _operation_of(op.name)
        plain = _plain(operation)
        if plain in _INPUT_OPS:
            parts[operation] = INPUT
        elif plain == "gradient_sums":
            parts[operation] = EXCHANGE
        elif plain == "metric_sums":
            parts[operation] = METRICS
    return parts


def _plain(operation):
    """An mtf operation's name without a later step's scope and a unique-name suffix."""
    later = _LATER_STEP.match(operation)
    return _UNIQUE_SUFFIX.sub("", operation[later.end():] if later else operation)


def _same_step(match, other):
    """Whether two ops' ``_LATER_STEP`` matches (None: the first step) are one step's."""
    return (match and match.group()) == (other and other.group())


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
