"""Plans how a model is laid out over unequal devices; prints the plan and writes its JSON.

  python scripts/plan_layout.py --model=cnn2d --bands=200 --speeds=70,25,5 --mesh=auto
  python scripts/plan_layout.py --model=cnn3d --devices=/cpu:0,/cpu:1 --speeds=auto
  python scripts/plan_layout.py --platform=platform.json --batch_size=128 --out=plan.json

``--speeds=auto`` measures every device with ``hmp.measure.speeds.measure_platform``
(one device at a time) and the link between them with ``hmp.measure.linkprobe``, and
plans with the measured figures (and the link of ``--platform`` where it gives one,
which is then not measured; its memory figures and hosts stay too), so ``--mesh=auto`` weighs communication; when
``--mesh`` may split the model (``auto``, ``model:N``), also each device's op-size
figures (``hmp.measure.calibration``). ``--precision`` and ``--batch_norm`` are the run's
(``hmp.train``'s flags of those names): 16-bit activations halve the activations'
memory and hand-overs, and sync batch norm adds a barrier per layer, and the cost model
prices both (docs/costmodel.md). The plan's model name holds the model
and its input shape, so ``Plan.from_json`` refuses it for another model or input. Every bad flag value ends the run with one
line ``plan_layout: error: ...`` on stderr and exit code 2.
"""

import os
import sys

from absl import flags

from hmp import cli, files

cli.import_tensorflow_quietly()   # before anything imports TensorFlow

import tensorflow.compat.v1 as tf  # noqa: E402

import models  # noqa: E402
from hmp.data import check_patch_size  # noqa: E402
from hmp.graph.from_graph import model_spec  # noqa: E402
from hmp.graph.graph_config import PRECISIONS  # noqa: E402
from hmp.layers import BATCH_STATISTICS  # noqa: E402
from hmp.planning import (check_mesh_size, check_speeds, device_names,  # noqa: E402
                          load_platform, parse_mesh, plan_layout, splits_the_model)
from hmp.measure.calibration import describe  # noqa: E402
from hmp.errors import number_in_text, op_error_line  # noqa: E402
from hmp.measure.devices import (LOCAL_JOBS, check_device_string, check_local,  # noqa: E402
                                 device_list, parse_memory_caps, virtual_cpus)
from hmp.measure.speeds import (measure_platform, measure_speeds, overhead_text,  # noqa: E402
                                relative_speeds, with_given_figures)
from hmp.run.settings import DEFAULT  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string("model", "cnn2d", "The model: " + ", ".join(models.MODEL_NAMES)
                    + ", or a module path (mypackage.mymodel) with logits and SPLIT_DIMS, "
                    "as hmp.train --model.")
flags.DEFINE_integer("width", 0, "Model width (filters of its first layer scale with it); "
                     "0: the model's default.", lower_bound=0)
flags.DEFINE_integer("patch_size", 9, "Spatial patch size (odd, pixels per side).")
flags.DEFINE_integer("bands", 200, "Spectral bands (or PCA components) per pixel.",
                     lower_bound=1)
flags.DEFINE_integer("classes", 16, "Number of classes.", lower_bound=2)
flags.DEFINE_enum("precision", DEFAULT.model.precision, list(PRECISIONS), "What the model computes in "
                  "(as hmp.train --precision).")
flags.DEFINE_enum("batch_norm", DEFAULT.model.batch_norm, BATCH_STATISTICS, "Batch norm's training "
                  "statistics (as hmp.train --batch_norm).")
flags.DEFINE_string("devices", "/cpu:0,/cpu:1,/cpu:2",
                    "Comma list of TensorFlow devices, one per mesh position (row-major).")
flags.DEFINE_string("speeds", "auto", '"auto" (measure them) or one number per device: '
                    "relative (70,25,5) or FLOP/s.")
flags.DEFINE_string("memory_caps", "", "Bytes per device, or one size for all (units B, KB, "
                    "MB, GB, TB, KiB, MiB, GiB, TiB; e.g. 2GB,512MiB,1e9), or empty for none.")
flags.DEFINE_integer("batch_size", 32, "Global batch size.", lower_bound=1)
flags.DEFINE_string("mesh", "auto", '"model:N", "batch:M", "batch:M;model:N" or "auto".')
flags.DEFINE_integer("min_filters", 1, "The fewest filters of each split dimension any "
                     "device gets.", lower_bound=1)
flags.DEFINE_string("platform", "", "Optional JSON file of device and link figures "
                    "(see hmp.planning.load_platform); its devices replace --devices.")
flags.DEFINE_string("out", "plan.json", "Where to write the plan.")
flags.DEFINE_integer("warmup", 2, "--speeds=auto: untimed steps per device.", lower_bound=0)
flags.DEFINE_integer("repeats", 5, "--speeds=auto: timed steps per device.", lower_bound=1)
flags.DEFINE_string("target", "", "--speeds=auto: session target for remote devices "
                    "(grpc://host:port).")


def parse_devices(text):
    """The device list; UsageError on an empty or malformed entry or a repeat."""
    devices = [d.strip() for d in text.split(",")]
    for device in devices:
        if not device:
            raise cli.UsageError(f"--devices={text!r} has an empty entry; allowed: a comma "
                                 "list such as /cpu:0,/cpu:1,/gpu:0")
        with cli.blame("devices"):
            check_device_string(device)
    if len(set(devices)) != len(devices):
        raise cli.UsageError(f"--devices={text!r} names a device twice")
    return devices


def check_platform_devices(names):
    """InvalidInput for a platform file's device that is no TensorFlow device string, or
    is named twice (``device_list``)."""
    for name in device_list(names):
        check_device_string(name)


def parse_speeds(text, devices):
    """``"auto"`` or one finite number > 0 per device (``check_speeds``)."""
    if text.strip() == "auto":
        return "auto"
    allowed = (f'allowed: "auto" or {len(devices)} numbers > 0 (one per device), '
               "e.g. 70,25,5 or 7e12,2.5e12,5e11")
    speeds = [number_in_text(s) for s in text.split(",")]
    if None in speeds:
        raise cli.UsageError(f"--speeds={text!r} is not a list of numbers; {allowed}")
    names = device_names(devices)
    with cli.blame("speeds"):
        return list(check_speeds(speeds, names))


def check_mesh(text, count):
    """UsageError unless ``text`` is "auto" or a mesh of ``count`` positions."""
    if text == "auto":
        return
    with cli.blame("mesh"):
        check_mesh_size(parse_mesh(text), count)


def profile(config, spec, devices, link_given=False):
    """Measured FLOP rates of ``devices`` (one at a time; ``spec``: the config's
    ``model_spec``) and the link between them (``hmp.measure.linkprobe``; None for one
    device, or when ``link_given``: the plan takes that one, so it is not measured), with
    progress on stderr."""
    names = device_names(devices)
    remote = [n for n in names if tf.DeviceSpec.from_string(n).job not in LOCAL_JOBS]
    if remote and not FLAGS.target:
        raise cli.UsageError(f"--target: devices {remote} are remote; give the session "
                             "target (grpc://host:port) to profile them")
    if not FLAGS.target:   # before any graph: TensorFlow's placement error says less
        with cli.blame("devices"):
            check_local(names)
    cpus = virtual_cpus(names)
    session_config = tf.ConfigProto(device_count={"CPU": cpus}) if cpus else None
    progress = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    try:
        measure = measure_speeds if link_given else measure_platform
        measured = measure(config, names, FLAGS.batch_size, FLAGS.warmup, FLAGS.repeats,
                           FLAGS.target or None, session_config, progress=progress, spec=spec,
                           op_size=splits_the_model(FLAGS.mesh))
        speeds, link = (measured, None) if link_given else measured
    except tf.errors.OpError as e:
        raise cli.UsageError(f"--devices: profiling failed: {op_error_line(e)}") from e
    print("Measured speeds (training step alone on each device, median of "
          f"{FLAGS.repeats}; min - max):")
    for s, relative in zip(speeds, relative_speeds(speeds)):
        op_size = describe(s)
        print(f"  {s.name}  {s.samples_per_s:.4g} samples/s ({s.min_samples_per_s:.4g} - "
              f"{s.max_samples_per_s:.4g})  relative {relative:.3f}  "
              f"{s.flops_per_s:.4g} FLOP/s  {overhead_text(s.overhead_s)}"
              + (f"  {op_size}" if op_size else "")
              + (f"  channel block {s.channel_block}" if s.channel_block > 1 else ""))
    if link is not None:
        print(f"  link: {link.figures()}")
    print()
    return speeds, link


def run():
    """Reads the flags, plans, prints and writes the plan."""
    with cli.blame("out"):   # before any planning or measuring
        files.check_file_can_be_written(FLAGS.out)
    with cli.blame("patch_size"):
        check_patch_size(FLAGS.patch_size)
    devices, link = parse_devices(FLAGS.devices), None
    if FLAGS.platform:
        with cli.blame("platform", also=(OSError,)):
            specs, link = load_platform(FLAGS.platform)
            check_platform_devices([s.name for s in specs])
        if FLAGS["devices"].present and [s.name for s in specs] != devices:
            raise cli.UsageError(f"--devices {devices} differ from the devices of --platform "
                                 f"{[s.name for s in specs]}; allowed: leave --devices out")
        devices = specs
    use_platform_speeds = FLAGS.platform and not FLAGS["speeds"].present
    speeds = None if use_platform_speeds else parse_speeds(FLAGS.speeds, devices)
    with cli.blame("memory_caps"):
        caps = parse_memory_caps(FLAGS.memory_caps, len(devices))
    check_mesh(FLAGS.mesh, len(devices))
    with cli.blame("model"):
        config = models.model_config(FLAGS.model, FLAGS.patch_size, FLAGS.bands,
                                     FLAGS.classes, FLAGS.width, FLAGS.batch_norm,
                                     FLAGS.precision)
    with cli.blame("model", "patch_size", "bands", "width", also=(ValueError,)):
        spec = model_spec(config)
    if speeds == "auto":
        measured, measured_link = profile(config, spec, devices, link_given=link is not None)
        devices = with_given_figures(measured, devices)
        speeds, link = None, link or measured_link
    given = ("platform",) if FLAGS.platform else ("devices",)   # what names the devices
    with cli.blame(*given, "speeds", "mesh", "batch_size", "memory_caps", "min_filters"):
        plan = plan_layout(spec, devices, speeds, FLAGS.batch_size, FLAGS.mesh, caps,
                           FLAGS.min_filters, link)
    print(plan.explain())
    try:
        plan.to_json(FLAGS.out)
    except OSError as e:
        raise cli.UsageError(f"--out={FLAGS.out}: cannot write it: {e.strerror}") from e
    print(f"\nwrote {FLAGS.out}")


def main(argv):
    if len(argv) > 1:
        raise cli.UsageError(f"unexpected arguments {argv[1:]}; every option is a flag "
                             "(--name=value)")
    tf.disable_eager_execution()
    tf.logging.set_verbosity(tf.logging.ERROR)
    # a --model module path is found as `python -m hmp.train` finds it, in the current
    # folder too (python puts a script's own folder on the path, not that one)
    sys.path.append(os.getcwd())
    run()


if __name__ == "__main__":
    cli.run(main, "plan_layout")
