"""Checks hmp on this machine before real work: ``python -m hmp.selfcheck``.

Run it first on a new machine, above all one with GPUs. With a tiny model (cnn2d) on
a random scene, in under a minute (most of it building graphs), it checks:

1. ``devices``: the devices TensorFlow sees (a GPU's name, compute capability and
   memory); a CUDA build of TensorFlow that sees no GPU fails.
2. ``split``: a few SGD steps on uneven model and batch splits over the machine's real
   devices (``/cpu:0`` and every GPU; with no GPU, the virtual ``/cpu:1`` beside it, so
   that a split is still checked) give one device's losses and weights, within 1e-5
   relative (the engine's promise, docs/engine.md), with sync batch-norm statistics
   (the exact mode). SGD, because Adam's first step turns a rounding-sized gradient (a
   bias before batch norm) into a whole step.
3. ``float32``: once the engine has a mesh on each device, float32 is computed in full
   (TensorFloat-32 off where a GPU is listed: ``hmp.mesh.numerics``).
4. ``plan``: each device's training step and the link are measured
   (``hmp.measure.speeds``) and ``--mesh=auto`` plans from them, within each device's
   memory.
5. ``train``: Adam steps on that plan, with ``hmp.train``'s default batch-norm statistics,
   fit one batch (the loss falls); one traced step
   gives each device's busy time, from its own records or, for a GPU whose trace has
   no kernel, from step timing.
6. ``repeat``: with TensorFlow's op determinism on (``hmp.train --deterministic``), the
   plan's steps run twice give the same weights bit for bit.

The report is one block on stdout (progress goes to stderr). Exit code 0 when every
check passed, 1 when one failed (the report says which and why), 2 for a bad flag.
"""

import dataclasses
import sys

import numpy as np

from hmp import cli

cli.import_tensorflow_quietly()   # before anything imports TensorFlow

import tensorflow as tf2  # noqa: E402
import tensorflow.compat.v1 as tf  # noqa: E402
from absl import flags  # noqa: E402

import models  # noqa: E402
from hmp import planning  # noqa: E402
from hmp.checklist import Check, report, run_checks  # noqa: E402
from hmp.graph.from_graph import model_spec  # noqa: E402
from hmp.graph.graph import TrainingGraph  # noqa: E402
from hmp.graph.graph_config import Placement  # noqa: E402
from hmp.measure.devices import (check_local, default_devices, device_list,  # noqa: E402
                                 memory_bytes, session_config_for)
from hmp.measure.linkprobe import measure_link  # noqa: E402
from hmp.measure.speeds import measure_speeds, overhead_text, random_batch  # noqa: E402
from hmp.mesh.mesh_impl import HeteroMeshImpl  # noqa: E402
from hmp.mesh.numerics import require_determinism, rounds_float32  # noqa: E402
from hmp.formatting import format_bytes  # noqa: E402
from hmp.run.profiler import busy_times, step_timed, trace_step  # noqa: E402
from hmp.run.settings import DEFAULT  # noqa: E402

flags.DEFINE_string("devices", None, "Comma-separated TensorFlow devices to check (default: "
                    "/cpu:0 and every GPU TensorFlow sees; with no GPU, /cpu:0,/cpu:1).")
FLAGS = flags.FLAGS

TOLERANCE = 1e-5        # the engine's promise: every split equals one device
SPLIT_STEPS = 3         # SGD steps compared with one device
TRAIN_STEPS = 10        # Adam steps on the plan
SEED = 1


@dataclasses.dataclass
class Machine:
    """What the checks share: the devices, the tiny model, its batch and session."""

    devices: list
    config: object      # hmp.graph.graph_config.ModelConfig, as hmp.train trains it
    spec: object        # its planning.ModelSpec
    batch_size: int
    batch: object       # hmp.measure.speeds.RandomBatch
    session_config: object
    plan: object = None  # the measured plan, once made
    graph: object = None  # the TrainingGraph on the plan, once built


def say(line):
    print("selfcheck: " + line, file=sys.stderr, flush=True)


def machine_devices():
    """--devices, or /cpu:0 and every GPU; with no GPU, /cpu:0 and the virtual /cpu:1."""
    if FLAGS.devices is not None:
        with cli.blame("devices"):
            devices = device_list(FLAGS.devices, minimum=2)   # a split needs two
            check_local(devices)
        return devices
    devices = default_devices()
    return devices if len(devices) > 1 else ["/cpu:0", "/cpu:1"]


def tiny_machine(devices):
    """The tiny model (cnn2d on 5x5 patches of 8 bands, 4 classes; wide enough to give
    every device a filter; its batch norms as ``hmp.train``'s default) and a random
    batch of 8 samples per device and 8 more."""
    config = models.model_config("cnn2d", 5, 8, 4, width=max(4, len(devices)),
                                 batch_norm=DEFAULT.model.batch_norm)
    batch_size = 8 * (len(devices) + 1)
    return Machine(devices, config, model_spec(config), batch_size,
                   random_batch(config, batch_size, seed=SEED),
                   session_config_for(devices))


def training_graph(machine, placement, optimizer, learning_rate, config=None):
    """The tiny model's TrainingGraph on ``placement`` (``config``: the model another
    way, by default ``machine.config``), seeded."""
    return TrainingGraph(config or machine.config, placement, machine.batch_size,
                         machine.batch.image_shape, optimizer, learning_rate, seed=SEED)


def run_steps(machine, graph, steps, traced=False):
    """(loss of each step, the weights after them, and with ``traced`` one more step's
    ``(run metadata, seconds)``) of ``steps`` steps of ``graph`` in a new session: from
    the seeded initial weights (the same in every session), on the machine's batch."""
    session = graph.session(machine.batch.padded_cube, machine.session_config)
    try:
        feed = machine.batch.feed(graph)
        losses = [session.run([graph.loss, graph.train_op], feed)[0] for _ in range(steps)]
        trace = trace_step(session, graph.train_op, feed)[1:] if traced else None
        session.run(graph.copy_slices_to_masters)
        weights = session.run({v.name: v.get_master() for v in graph.mtf_graph.all_variables})
        return np.array(losses, np.float64), weights, trace
    finally:
        session.close()


def relative_error(actual, expected):
    """max |a - e| / max |e| over arrays (the figure the engine's 1e-5 applies to)."""
    pairs = [(np.asarray(a, np.float64), np.asarray(e, np.float64))
             for a, e in zip(actual, expected)]
    scale = max(float(np.max(np.abs(e))) for _, e in pairs) or 1.0
    return max(float(np.max(np.abs(a - e))) for a, e in pairs) / scale


def uneven_speeds(count):
    """Speeds 2^(n-1), ..., 2, 1: every split they plan is uneven."""
    return [float(2 ** (count - 1 - i)) for i in range(count)]


# -- the checks: each returns (passed, what it found) -------------------------------

def check_devices(machine):
    build = tf2.sysconfig.get_build_info()
    gpus = tf2.config.list_physical_devices("GPU")
    lines = ["TensorFlow %s, %s" % (tf2.__version__, "CUDA %s / cuDNN %s build" % (
        build.get("cuda_version"), build.get("cudnn_version"))
        if build.get("is_cuda_build") else "CPU build")]
    for device, memory in zip(machine.devices, memory_bytes(machine.devices)):
        lines.append("%s: %s, %s" % (device, describe_device(device, gpus),
                                     "memory ?" if memory is None else format_bytes(memory)))
    if not gpus:
        lines.append("no GPU" + (": TensorFlow is a CUDA build but sees none (is the driver "
                                 "loaded? nvidia-smi; are the CUDA libraries found?)"
                                 if build.get("is_cuda_build") else
                                 " (a CPU build of TensorFlow; README, Install: the CUDA "
                                 "build)"))
    return bool(gpus) or not build.get("is_cuda_build"), lines


def describe_device(device, gpus):
    """What ``device`` is: a GPU's name and compute capability (``gpus``: the physical
    GPUs TensorFlow lists), the CPU, or a virtual device on its cores."""
    spec = tf2.DeviceSpec.from_string(device)
    kind = (spec.device_type or "").upper()
    if kind == "GPU":
        details = tf2.config.experimental.get_device_details(gpus[spec.device_index or 0])
        capability = details.get("compute_capability")
        return details.get("device_name", "a GPU") + (
            ", compute capability %d.%d" % capability if capability else "")
    if kind == "CPU":
        return ("the CPU (the machine's memory)" if not spec.device_index else
                "a virtual device on the same CPU cores (and memory)")
    return kind or "a device"


def check_split(machine):
    lines, worst = [], 0.0
    exact = dataclasses.replace(machine.config, batch_norm="sync")
    exact_spec = model_spec(exact)

    def steps(placement):
        return run_steps(machine, training_graph(machine, placement, "sgd", 0.05, exact),
                         SPLIT_STEPS)[:2]

    alone_losses, alone_weights = steps(Placement("", "", (machine.devices[0],), {}))
    names = sorted(alone_weights)
    for mesh in ("model:%d" % len(machine.devices), "batch:%d" % len(machine.devices)):
        plan = planning.plan_layout(exact_spec, machine.devices,
                                    uneven_speeds(len(machine.devices)), machine.batch_size,
                                    mesh)
        losses, weights = steps(Placement.from_plan(plan))
        loss_error = max(abs(losses / alone_losses - 1))
        weight_error = relative_error([weights[n] for n in names],
                                      [alone_weights[n] for n in names])
        worst = max(worst, loss_error, weight_error)
        lines.append("%s %s: losses within %.1g, weights within %.1g of the largest"
                     % (mesh, " ".join("%s %s" % (dim, sizes)
                                       for dim, sizes in sorted(plan.splits.items())),
                        loss_error, weight_error))
    lines.insert(0, "%d SGD steps of cnn2d (width %d, batch %d, sync batch norm) on uneven "
                 "splits against %s alone (allowed: %g relative)"
                 % (SPLIT_STEPS, exact.width, machine.batch_size, machine.devices[0],
                    TOLERANCE))
    return worst <= TOLERANCE, lines


def check_float32(machine):
    for device in machine.devices:   # what every graph on the device starts with
        HeteroMeshImpl("", "", [device])
    if not rounds_float32(machine.devices):
        return True, ["CPUs only: float32 computed in full"]
    tf32 = tf2.config.experimental.tensor_float_32_execution_enabled()
    return not tf32, ["TensorFloat-32 %s once the engine has a mesh on %s"
                      % ("on: float32 matmuls and convolutions round to 10 bits" if tf32
                         else "off: float32 computed in full", ", ".join(machine.devices))]


def check_plan(machine):
    speeds = measure_speeds(machine.config, machine.devices, machine.batch_size, warmup=1,
                            repeats=2, session_config=machine.session_config, progress=say,
                            spec=machine.spec)
    link = measure_link(machine.devices, session_config=machine.session_config,
                        progress=say)
    machine.plan = planning.plan_layout(machine.spec, speeds, None, machine.batch_size,
                                        "auto", memory_bytes(machine.devices), link=link)
    plan = machine.plan
    lines = ["%s: %.4g samples/s, %s" % (s.name, s.samples_per_s, overhead_text(s.overhead_s))
             for s in speeds]
    if link is not None:
        lines.append("link: " + link.figures())
    lines.append("plan: %s on %s, %s; predicted %.3g ms a step"
                 % (plan.mesh, ", ".join(plan.devices),
                    " ".join("%s %s" % (dim, sizes) for dim, sizes in sorted(plan.splits.items()))
                    or "no split", 1e3 * plan.prediction.step))
    lines += [record["reason"] for record in plan.left_out]
    rates = [s.samples_per_s for s in speeds]
    return all(np.isfinite(rates)) and min(rates) > 0, lines


def check_train(machine):
    machine.graph = training_graph(machine, Placement.from_plan(machine.plan), "adam", 1e-2)
    losses, _, (metadata, seconds) = run_steps(machine, machine.graph, TRAIN_STEPS,
                                               traced=True)
    devices = list(machine.plan.devices)
    busy = busy_times(metadata, devices, seconds)
    by_step = step_timed(metadata, devices)
    lines = ["%d Adam steps on the plan, %s batch norm, one batch: loss %.3f -> %.3f"
             % (TRAIN_STEPS, machine.config.batch_norm, losses[0], losses[-1])]
    lines += ["%s busy %.3g ms of a %.3g ms traced step%s"
              % (d, 1e3 * b, 1e3 * seconds, " (by step timing: its trace has no kernel "
                 "records; CUPTI missing?)" if t else "")
              for d, b, t in zip(devices, busy, by_step)]
    learns = bool(np.all(np.isfinite(losses))) and losses[-1] < losses[0]
    return learns and all(b > 0 for b in busy), lines


def check_repeat(machine):
    require_determinism()   # for the kernels of sessions made from now on
    first, second = (run_steps(machine, machine.graph, SPLIT_STEPS)[1] for _ in range(2))
    differing = sorted(name for name in first
                       if not np.array_equal(first[name], second[name]))
    return not differing, ["with op determinism (--deterministic), %d Adam steps twice on "
                           "the plan: %s" % (SPLIT_STEPS, "the same weights bit for bit"
                                             if not differing else "these weights differ: "
                                             + ", ".join(differing))]


def checks(machine):
    """The checks of ``machine``, in order (``hmp.checklist``)."""
    def on(function):
        return lambda: function(machine)
    return [Check("devices", on(check_devices)), Check("split", on(check_split)),
            Check("float32", on(check_float32)), Check("plan", on(check_plan)),
            Check("train", on(check_train), needs=("plan",)),
            Check("repeat", on(check_repeat), needs=("train",))]


def main(argv):
    if len(argv) > 1:
        raise cli.UsageError("unexpected arguments %s (flags start with --)" % argv[1:])
    tf.disable_eager_execution()
    tf.logging.set_verbosity(tf.logging.ERROR)
    machine = tiny_machine(machine_devices())
    text, passed = report("hmp self-check on %s" % ", ".join(machine.devices),
                          run_checks(checks(machine), progress=say))
    print(text, flush=True)
    sys.exit(0 if passed else 1)


if __name__ == "__main__":
    cli.run(main, "hmp.selfcheck")
