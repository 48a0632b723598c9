"""Train an HSI classifier on heterogeneous devices: ``python -m hmp.train``.

With no flags it trains HybridSN on the built-in synthetic scene on this
machine's real devices (the CPU, plus every GPU TensorFlow sees), with filter
and batch splits planned from their measured speeds and link (on one device:
no profiling, the one-device layout), and prints the test scores. See
README.md and docs/planner.md for every flag.
"""

import contextlib
import dataclasses
import os
import sys
import time

import numpy as np

from hmp import cli

cli.import_tensorflow_quietly()   # before anything imports TensorFlow

import tensorflow.compat.v1 as tf  # noqa: E402
from absl import flags

import models
from hmp import data, files, planning
from hmp.cluster import launch, sources
from hmp.data.field_look import measure_field_look
from hmp.errors import InvalidInput, whole_number
from hmp.evaluation import maps, report
from hmp.evaluation.metrics import evaluate
from hmp.layers import BATCH_STATISTICS
from hmp.mesh.numerics import require_determinism
from hmp.mesh.optimizers import OPTIMIZERS, SCHEDULES
from hmp.planning.plan import format_bytes
from hmp.run import (calibration, events, experiment, fitted_preprocessing, linkprobe,
                     rebalance, runs, scene_flags, scene_input, speedcache)
from hmp.run.augment import Augmentation
from hmp.run.devices import (check_local, default_devices, memory_bytes, parse_memory_caps,
                             session_config_for)
from hmp.run.from_graph import model_spec
from hmp.run.graph import PRECISIONS, Placement, Recipe, TrainingGraph
from hmp.run.profiler import measure_platform
from hmp.run.projection import Projection
from hmp.run.progress import DEFAULT_LOG_EVERY_S, ProgressLine
from hmp.run.trainer import BestEpoch, Stopped, Trainer

flags.adopt_module_key_flags(scene_flags)   # --dataset, --split, --seed, ...: results.json

AUTO = "auto"   # --spectral_shift and --spectral_gain measured on the scene

flags.DEFINE_string("model", "hybridsn", "Model: " + ", ".join(models.MODEL_NAMES) +
                    ", or a module path (mypackage.mymodel) with logits and SPLIT_DIMS.")
flags.DEFINE_integer("width", 0, "Model width (filters of its first layer); 0: default.")
flags.DEFINE_enum("batch_norm", "sync", BATCH_STATISTICS, "Batch norm's statistics while "
                  "training: sync (the whole batch's: every split equals one device, at an "
                  "all-reduce per layer) or local (each replica of a batch split its own "
                  "samples': no synchronisation of its own).")
flags.DEFINE_enum("precision", "float32", list(PRECISIONS), "What the model computes in: "
                  "float32, or mixed_bfloat16 / mixed_float16 (activations and gradients in "
                  "16 bits, float16 with loss scaling; weights, optimizer slots and "
                  "checkpoints stay float32). Fast on GPUs with tensor cores.")
flags.DEFINE_string("devices", None, "Comma-separated TensorFlow devices (default: /cpu:0 "
                    "and every GPU TensorFlow sees; with --cluster one CPU per task); "
                    "/cpu:N with N >= 1 are virtual devices of the local CPU.")
flags.DEFINE_string("speeds", "auto", "Device speeds: auto (measured speeds and link, reused "
                    "from the speed cache when there), measure (measure again), or a list "
                    "like 70,25,5 (relative; communication is then not priced).")
flags.DEFINE_string("mesh", "auto", "model:N, batch:M, batch:M;model:N or auto.")
flags.DEFINE_string("plan", None, "A plan JSON from scripts/plan_layout.py (overrides "
                    "--devices, --speeds and --mesh).")
flags.DEFINE_integer("batch_size", 32, "Global batch size.")
flags.DEFINE_integer("epochs", 60, "Training epochs (at most: see --patience).")
flags.DEFINE_string("optimizer", "adam", "Optimizer: " + ", ".join(OPTIMIZERS) + ".")
flags.DEFINE_float("learning_rate", 1e-3, "Learning rate.")
flags.DEFINE_integer("runs", 1, "Train this many times, with seeds --seed, --seed+1, ..., each "
                     "in --model_dir/seed-<seed>; then print and save (summary.json) the mean "
                     "and standard deviation of OA, AA and kappa.")
flags.DEFINE_float("val_fraction", 0.1, "Share of each class's training pixels held out for "
                   "validation: the weights of the epoch with the best validation accuracy "
                   "classify the test pixels (0: no validation, the last epoch's weights).")
flags.DEFINE_integer("patience", 15, "Stop after this many epochs without a better validation "
                     "accuracy (0: never).")
flags.DEFINE_string("schedule", "cosine", "Learning rate over the run: " + ", ".join(SCHEDULES)
                    + " (after --warmup_epochs).")
flags.DEFINE_float("warmup_epochs", 1, "Epochs of linear learning-rate warm-up.")
flags.DEFINE_float("weight_decay", None, "Weight decay: decoupled for adam (default 0.01), L2 "
                   "for the other optimizers (default 0; lars 1e-4).")
flags.DEFINE_bool("augment", True, "Augment training patches: random flips and 90-degree "
                  "rotations, and the field look (--spectral_shift, --spectral_gain).")
flags.DEFINE_float("brightness", 0.1, "Augmentation: scale each training patch by a factor "
                   "in [1 - b, 1 + b].")
flags.DEFINE_float("noise", 0.0, "Augmentation: standard deviation of Gaussian noise added to "
                   "the standardised training patches.")
flags.DEFINE_string("spectral_shift", AUTO, "Augmentation (field look): shift each "
                    "training patch's raw spectrum by up to this many bands (a PCA model "
                    "needs --pca_in_graph); auto: as much as the scene's fields differ, "
                    "measured on the training pixels (hmp.data.field_look).")
flags.DEFINE_string("spectral_gain", AUTO, "Augmentation (field look): multiply each "
                    "training patch's raw spectrum by a smooth random gain in [1 - g, 1 + g] "
                    "(g <= 1); auto: measured as --spectral_shift.")
flags.DEFINE_bool("pca_in_graph", True, "For a model on PCA components: cut the patches "
                  "on all scaled bands and project them onto the components on the devices, "
                  "after augmentation, so that the field look (--spectral_shift, "
                  "--spectral_gain) reaches them too.")
flags.DEFINE_bool("tta", True, "Test-time augmentation: classify each test patch in the 8 "
                  "symmetries of the square and average the class probabilities (8 times "
                  "the classification's work; results.json also holds the scores without).")
flags.DEFINE_bool("class_balanced", False, "Weight the loss of each class by the inverse of "
                  "its share of the training pixels.")
flags.DEFINE_string("model_dir", None, "Checkpoints, results and event files "
                    "(default runs/<dataset>-<model>).")
flags.DEFINE_bool("resume", False, "Continue from the latest checkpoint in --model_dir.")
flags.DEFINE_bool("overwrite", False, "Start over in a --model_dir that holds a run: first "
                  "delete its checkpoints, results, maps and event files.")
flags.DEFINE_integer("checkpoint_every", 0, "Also checkpoint every N steps (0: every epoch).",
                     lower_bound=0)
flags.DEFINE_string("rebalance", "off", "off, or epoch: after each epoch, re-plan from "
                    "measured busy times, and switch when that is predicted to pay back.")
flags.DEFINE_bool("try_alone", True, "With --mesh=auto, when the plan spreads over several "
                  "devices: train the second epoch on the fastest device alone and keep "
                  "whichever ran more samples/s (a measured guard against a mispriced plan).")
flags.DEFINE_float("rebalance_threshold", 0.1, "Re-balancing's noise level: re-plan when "
                   "max/min device busy time exceeds 1 + this, switch only to a plan "
                   "predicted this much faster; a plan's samples/s moving by more is a "
                   "changed machine.")
flags.DEFINE_string("cluster", None, "Cluster mode: host:port of every hmp.worker task "
                    "(python -m hmp.worker), task 0 first; or tf_config (TF_CONFIG's job "
                    "worker) or slurm (the Slurm job's tasks, at --port_base); --devices "
                    "default to one CPU per task.")
flags.DEFINE_float("cluster_timeout", 60, "Cluster mode: seconds a worker may take to answer.")
flags.DEFINE_string("local_workers", None, "Cluster mode on this machine: start one hmp.worker "
                    "per CPUS:THREADS (e.g. 0-7:8,8-9:2: CPUs a-b or one CPU, intra-op "
                    "threads) on free ports, train on them, stop them at the end.")
flags.DEFINE_integer("port_base", sources.DEFAULT_PORT_BASE, "--cluster=slurm: the port of a "
                     "node's first task (its next tasks: +1, +2, ...), as the workers have it.")
flags.DEFINE_float("log_every", DEFAULT_LOG_EVERY_S, "When stdout is not a terminal (a log "
                   "file): seconds between progress lines within an epoch (0: none).")
flags.DEFINE_string("memory_caps", "", "Memory of each device, or one size for all (e.g. "
                    "2GB,512MiB or 8GiB; units B, KB, MB, GB, TB, KiB, MiB, GiB, TiB): bounds "
                    "the plan instead of the memory found (a GPU's as TensorFlow reports it, "
                    "a CPU's the machine's).")
flags.DEFINE_bool("deterministic", False, "TensorFlow's op determinism: the same steps give "
                  "the same weights bit for bit, on GPUs too (exact --resume); slower on "
                  "GPUs. With --cluster, start every hmp.worker with --deterministic too.")
flags.DEFINE_string("simulate_slowdown", "", "DEVICE=FACTOR,...: multiply a device's "
                    "measured busy time (tests re-balancing with virtual devices).")
FLAGS = flags.FLAGS

RESUME_HINT = ("; the checkpoints so far are kept: restart the worker, then run again "
               "with --resume")
LOCAL_RESUME_HINT = ("; the checkpoints so far are kept: run again with --resume (it starts "
                     "the local workers anew)")


def _devices(cluster):
    if FLAGS.devices is None:
        return list(cluster.devices) if cluster else default_devices()   # hmp.run.devices
    devices = [d.strip() for d in FLAGS.devices.split(",") if d.strip()]
    if not devices:
        raise cli.UsageError("--devices=%s: give at least one TensorFlow device, e.g. /cpu:0"
                             % FLAGS.devices)
    if not cluster:
        with cli.blame("devices"):
            check_local(devices)
        return devices
    if len(set(devices)) != len(devices):
        raise cli.UsageError("--devices=%s: a device is named twice" % FLAGS.devices)
    with cli.blame("devices", "local_workers" if FLAGS.local_workers else "cluster"):
        cluster.check_devices(devices)
    return devices


@contextlib.contextmanager
def _cluster():
    """The workers of --cluster (checked: every one answers), or those --local_workers
    starts here (stopped on leaving), or None."""
    if FLAGS.local_workers is None:
        cluster = None
        if FLAGS.cluster is not None:
            with cli.blame("cluster", "cluster_timeout",
                           *(("port_base",) if FLAGS.cluster == sources.SLURM else ())):
                cluster, _ = sources.resolve(FLAGS.cluster, FLAGS.cluster_timeout,
                                             FLAGS.port_base)
            cluster.check_answers(say=_say)
        yield cluster
        return
    if FLAGS.cluster is not None:
        raise cli.UsageError("--cluster=%s, --local_workers=%s: give one of them (workers "
                             "running already, or started here)"
                             % (FLAGS.cluster, FLAGS.local_workers))
    with contextlib.ExitStack() as stack:
        with cli.blame("local_workers", "cluster_timeout"):   # the input, not the run
            cluster = stack.enter_context(launch.local_workers(
                launch.parse_worker_list(FLAGS.local_workers), FLAGS.cluster_timeout, _say))
        yield cluster


def _given_flags():
    """This invocation's flags as given (``--name=value``), but --resume and --overwrite:
    the flagfile that starts the run again (defaults, and a model's RECIPE, apply as
    they did)."""
    return [f.serialize() for f in FLAGS.get_key_flags_for_module(sys.modules[__name__])
            if f.present and f.name not in ("resume", "overwrite")]


def _speeds(devices):
    if FLAGS.speeds in ("auto", "measure"):
        return None
    try:
        speeds = [float(s) for s in FLAGS.speeds.split(",")]
    except ValueError:
        raise cli.UsageError("--speeds=%r: give auto, measure or one number per device, "
                             "e.g. 70,25,5" % FLAGS.speeds) from None
    with cli.blame("speeds"):
        return list(planning.check_speeds(speeds, devices))


def _check_flags():
    """One-line errors for values the flag parser cannot judge."""
    scene_flags.check()
    with cli.blame("model"):
        models.get_model(FLAGS.model)
    if FLAGS.optimizer not in OPTIMIZERS:
        raise cli.UsageError("--optimizer=%s: choose one of %s"
                             % (FLAGS.optimizer, ", ".join(OPTIMIZERS)))
    if FLAGS.rebalance not in ("off", "epoch"):
        raise cli.UsageError("--rebalance=%s: choose off or epoch" % FLAGS.rebalance)
    if FLAGS.mesh != "auto":
        with cli.blame("mesh"):
            planning.parse_mesh(FLAGS.mesh)
    for name in ("batch_size", "epochs", "runs"):
        with cli.blame(name):
            whole_number(getattr(FLAGS, name), name)
    with cli.blame("width"):
        whole_number(FLAGS.width, "width", minimum=0)
    if not FLAGS.learning_rate > 0:
        raise cli.UsageError("--learning_rate=%g: must be positive" % FLAGS.learning_rate)
    if FLAGS.schedule not in SCHEDULES:
        raise cli.UsageError("--schedule=%s: choose one of %s"
                             % (FLAGS.schedule, ", ".join(SCHEDULES)))
    if not 0 <= FLAGS.val_fraction < 1:
        raise cli.UsageError("--val_fraction=%g: must lie in [0, 1)" % FLAGS.val_fraction)
    for name in ("spectral_shift", "spectral_gain"):
        _field_look_strength(name)
    for name in ("patience", "warmup_epochs", "weight_decay", "brightness", "noise",
                 "rebalance_threshold", "log_every"):
        value = getattr(FLAGS, name)
        if value is not None and not value >= 0:   # nan too
            raise cli.UsageError("--%s=%g: must be a number >= 0" % (name, value))
    if FLAGS.brightness >= 1:
        raise cli.UsageError("--brightness=%g: must be below 1" % FLAGS.brightness)


def _field_look_strength(name):
    """--spectral_shift or --spectral_gain as a number, or None for auto."""
    text = getattr(FLAGS, name)
    if text == AUTO:
        return None
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    gain = name == "spectral_gain"
    if not 0 <= value <= (1.0 if gain else float("inf")):   # nan too
        raise cli.UsageError("--%s=%s: give auto or a number %s" % (
            name, text, "from 0 to 1 (a gain stays >= 0)" if gain else ">= 0"))
    return value


def _model_dir():
    """--model_dir or its default (runs/<dataset>-<model>)."""
    return FLAGS.model_dir or os.path.join(
        "runs", "%s-%s" % (os.path.basename(FLAGS.dataset).split(".")[0], FLAGS.model))


def _run_dirs(model_dir, seeds):
    """The folder of each seed's run, checked (a used one needs --resume or --overwrite;
    nothing is made or deleted yet). One run: ``model_dir`` itself; several: its
    ``seed-<seed>`` folders."""
    folders = ([model_dir] if len(seeds) == 1 else
               [os.path.join(model_dir, "seed-%d" % seed) for seed in seeds])
    for folder in folders:
        runs.check_model_dir(folder, FLAGS.resume, FLAGS.overwrite)
    if FLAGS.resume and len(folders) == 1 and runs.checkpoint_step(model_dir) is None:
        raise cli.UsageError("--resume: %s holds no checkpoint to resume from; start the "
                             "run without --resume" % model_dir)
    return folders


def _model_default(name):
    """Flag ``name``: as given, else the model's ``RECIPE`` value, else the flag's default."""
    if FLAGS[name].present:
        return FLAGS[name].value
    return models.recipe(FLAGS.model).get(name, FLAGS[name].value)


def _recipe(exp):
    """The training recipe of the flags (schedule over the run, decay, augmentation, loss)."""
    steps_per_epoch = exp.train.steps_per_epoch(FLAGS.batch_size, drop_remainder=True)
    weights = None
    if FLAGS.class_balanced:   # n / (K n_c): the mean weight over the training pixels is 1
        counts = np.bincount(exp.train.class_ids, minlength=exp.n_classes)
        weights = tuple(float(len(exp.train) / (exp.n_classes * c)) if c else 0.0
                        for c in counts)
    return Recipe(weight_decay=FLAGS.weight_decay, schedule=FLAGS.schedule,
                  warmup_steps=int(round(FLAGS.warmup_epochs * steps_per_epoch)),
                  total_steps=FLAGS.epochs * steps_per_epoch,
                  augmentation=Augmentation(FLAGS.augment, FLAGS.brightness, FLAGS.noise,
                                            **_field_look(exp)),
                  class_weights=weights, projection=_projection(exp))


def _projection(exp):
    """The PCA done in the graph (--pca_in_graph), or None."""
    if FLAGS.pca_in_graph and exp.preprocessor.pca is not None:
        return Projection.of(exp.preprocessor.pca)
    return None


def _field_look(exp):
    """The field-look augmentation's settings (on with --augment); it works on the raw
    bands, so after PCA only with --pca_in_graph."""
    strengths = {name: _field_look_strength(name) for name in ("spectral_shift",
                                                                "spectral_gain")}
    if not FLAGS.augment or strengths == {"spectral_shift": 0.0, "spectral_gain": 0.0}:
        return {}
    if exp.preprocessor.pca is not None and not FLAGS.pca_in_graph:
        given = [name for name in ("spectral_shift", "spectral_gain") if FLAGS[name].present]
        if given:
            raise cli.UsageError("--%s=%s: the field-look augmentation needs all bands, but "
                                 "this run keeps %d PCA components (give --pca=0 or "
                                 "--pca_in_graph)"
                                 % (given[0], FLAGS[given[0]].value, exp.bands))
        print("field-look augmentation off: it needs all bands, and this model keeps %d "
              "PCA components (--pca_in_graph projects after it)" % exp.bands, flush=True)
        return {}
    if None in strengths.values():
        measured = measure_field_look(exp.scene.cube, exp.scene.labels, exp.train.indices)
        print(measured.describe(), flush=True)
        strengths = {name: getattr(measured, name) if value is None else value
                     for name, value in strengths.items()}
    scaler = exp.preprocessor.scaler
    return {**strengths,
            "band_offset": tuple(map(float, scaler.offset)),
            "band_scale": tuple(map(float, scaler.scale))}


def _say(line):
    print(line, flush=True)


def _measurement_key(model_config, devices, cluster, recipe):
    """What a speed measured on ``devices`` depends on (``speedcache.cache_key``)."""
    return speedcache.cache_key(model_config, FLAGS.batch_size, FLAGS.optimizer, devices,
                                cluster.identity if cluster else None,
                                recipe.input_work(model_config))


def _measured(model_config, spec, devices, session_config, target, model_dir, cluster,
              recipe):
    """The speed-cache entry (per device: samples/s at --batch_size, FLOP/s, per-step
    overhead, and the op-size figures when --mesh may split the model) and the link (a
    LinkSpec): cached, or measured now (and stored there). See hmp.run.speedcache."""
    key = _measurement_key(model_config, devices, cluster, recipe)
    op_size = planning.splits_the_model(FLAGS.mesh)
    paths = [os.path.join(model_dir, speedcache.FILE_NAME), speedcache.user_cache_path()]
    warn = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731

    def measure():
        return measure_platform(model_config, devices, FLAGS.batch_size, target=target,
                                session_config=session_config, optimizer=FLAGS.optimizer,
                                progress=_say, spec=spec, op_size=op_size, recipe=recipe)

    entry, _ = speedcache.measured_or_cached(key, paths, measure,
                                             force=FLAGS.speeds == "measure", say=_say,
                                             warn=warn, op_size=op_size)
    for s in entry.speeds:
        op_size_figures = calibration.describe(s)
        _say("  %-28s %8.1f samples/s (%.1f - %.1f), %.3g ms of every step%s"
             % (s["device"], s["samples_per_s"], s["min_samples_per_s"],
                s["max_samples_per_s"], 1e3 * s["overhead_s"],
                "; " + op_size_figures if op_size_figures else ""))
    link = entry.link_spec()
    if link is not None:
        _say("  link: " + "; ".join(
            what + l.figures()
            for what, l in (("", link), ("while training ", link.loaded),
                            ("within a host ", link.local)) if l is not None))
    return entry, link


def _plan(spec, speeds, model_config, devices, caps, session_config, target, model_dir,
          cluster, recipe):
    """(the plan made now from ``speeds`` (--speeds's numbers; None: measured on the step
    of ``recipe``, with the link), the device fastest alone at --batch_size as the plan
    priced each alone (``Plan.fastest_alone``)); ``spec``: the model's. Each device's
    memory (``caps``: ``_memory_caps``) bounds the plan."""
    if len(devices) == 1:   # nothing to split: no profiling
        plan = planning.plan_layout(spec, devices, speeds or [1.0], FLAGS.batch_size,
                                    FLAGS.mesh, caps)
        if FLAGS.mesh == "auto":
            plan = dataclasses.replace(plan, reason="one device (%s): the one-device layout, "
                                       "no profiling needed" % devices[0])
        return plan, devices[0]
    if speeds is not None:
        plan = planning.plan_layout(spec, devices, speeds, FLAGS.batch_size, FLAGS.mesh, caps)
        if FLAGS.mesh == "auto":
            plan = dataclasses.replace(plan, reason=plan.reason.replace(
                "communication not priced (no link given)",
                "communication not priced: --speeds=%s gives the speeds, so no link was "
                "measured (--speeds=auto measures both)" % FLAGS.speeds))
        return plan, plan.fastest_alone()
    entry, link = _measured(model_config, spec, devices, session_config, target, model_dir,
                            cluster, recipe)
    platform = linkprobe.platform_specs(devices, entry.speeds)
    plan = planning.plan_layout(spec, platform, None, FLAGS.batch_size, FLAGS.mesh, caps,
                                link=link)
    return plan, plan.fastest_alone()


def _fits(spec, devices, caps, batch_size):
    """Whether the planner finds a layout of --mesh for ``batch_size`` samples on
    ``devices`` within the memory ``caps`` (at equal speeds: memory moves work between
    devices, speeds do not make room). True too when it refuses for another reason
    than memory: that is said where the plan is made, as before."""
    def plans(memory_caps):
        try:
            planning.plan_layout(spec, devices, [1.0] * len(devices), batch_size,
                                 FLAGS.mesh, memory_caps)
            return True
        except InvalidInput:
            return False
    return plans(caps) or not plans(None)


def _memory_caps(devices):
    """Each device's memory in bytes (None: not known): --memory_caps, else as found
    (``memory_bytes``)."""
    with cli.blame("memory_caps"):
        return parse_memory_caps(FLAGS.memory_caps, len(devices)) or memory_bytes(devices)


def _check_memory(spec, devices, caps):
    """UsageError, before any folder is made, when the model at --batch_size fits no
    layout of --mesh on ``devices`` within each one's memory (``caps``): naming
    --batch_size when fewer samples would fit, else --width, and the memory a device
    alone needs (``planning.memory_bytes``: weights with their gradients and optimizer
    slots, and the activations of the batch)."""
    if all(cap is None for cap in caps) or _fits(spec, devices, caps, FLAGS.batch_size):
        return
    fewest = 1 if FLAGS.mesh == "auto" else planning.parse_mesh(FLAGS.mesh).batch
    flag = "batch_size" if _fits(spec, devices, caps, fewest) else "width"
    whole = np.ones((len(spec.layers), 1))
    need, weights = (float(planning.memory_bytes(spec, [batch], whole)[0, 0])
                     for batch in (FLAGS.batch_size, 0))
    raise cli.UsageError(
        "--%s=%d: the model needs %s on one device (%s for its weights, their gradients and "
        "optimizer slots, %s for the activations of %d samples) and fits no layout of "
        "--mesh=%s on %s; allowed: a smaller --width or --batch_size, or devices with more "
        "memory" % (flag, getattr(FLAGS, flag), format_bytes(need), format_bytes(weights),
                    format_bytes(need - weights), FLAGS.batch_size, FLAGS.mesh,
                    ", ".join("%s (%s)" % (d, "?" if c is None else format_bytes(c))
                              for d, c in zip(devices, caps))))


def _alone_trial(spec, plan, fastest, model_config, cluster, recipe, first_epoch, recorded):
    """The trial of the fastest device alone (``--try_alone``), with what ``recorded``
    (its record before a resume) measured, or None when it does not apply: a mesh or
    plan given, a plan on one device, fewer epochs left than it still needs (3 fresh)."""
    if (not FLAGS.try_alone or FLAGS.mesh != "auto" or fastest is None
            or len(plan.devices) < 2):
        return None
    alone = planning.plan_layout(spec, [fastest], [1.0], FLAGS.batch_size, "auto")
    alone = dataclasses.replace(alone, reason="the fastest device alone (%s), on trial "
                                "against the plan (--try_alone)" % fastest)
    # what the rates depend on: what a speed measurement does, and the two layouts
    key = {**_measurement_key(model_config, plan.devices, cluster, recipe), "mesh": plan.mesh,
           "splits": plan.splits, "alone": fastest}
    trial = rebalance.AloneTrial(plan, alone, key)
    line = trial.take_up(recorded, first_epoch)
    if FLAGS.epochs - first_epoch < trial.epochs_needed:
        return None
    if line:
        print(line, flush=True)
    return trial


def _slowdown(devices):
    """{device: factor} from --simulate_slowdown=/cpu:1=3,..."""
    slowdown = {}
    for item in filter(None, FLAGS.simulate_slowdown.split(",")):
        device, _, factor = item.rpartition("=")
        if (device not in devices or not factor.replace(".", "", 1).isdigit()
                or not float(factor) > 0):
            raise InvalidInput("use DEVICE=FACTOR with a device of --devices and a "
                               "positive number, got %r" % item)
        slowdown[device] = float(factor)
    return slowdown


def run(cluster=None):
    _check_flags()
    devices = _devices(cluster)
    if FLAGS.memory_caps and FLAGS.plan:
        raise cli.UsageError("--memory_caps=%s: a --plan file holds its own memory caps "
                             "(scripts/plan_layout.py --memory_caps); give one of them"
                             % FLAGS.memory_caps)
    with cli.blame("memory_caps"):   # before any work
        parse_memory_caps(FLAGS.memory_caps, len(devices))
    if FLAGS.deterministic:   # before any graph runs
        require_determinism()
    given_plan, speeds = None, None
    if FLAGS.plan:
        with cli.blame("plan"):
            given_plan = planning.Plan.from_json(FLAGS.plan)   # its model: once it is built
    else:
        if FLAGS.mesh != "auto":   # before any profiling
            with cli.blame("mesh", "devices"):
                planning.check_mesh_size(planning.parse_mesh(FLAGS.mesh), len(devices))
        speeds = _speeds(devices)
    with cli.blame("simulate_slowdown"):
        slowdown = _slowdown(devices)
    model_dir = _model_dir()
    if cluster:   # task 0 writes the checkpoints: no path relative to its folder
        model_dir = os.path.abspath(model_dir)
    seeds = [FLAGS.seed + i for i in range(FLAGS.runs)]
    run_dirs = _run_dirs(model_dir, seeds)
    if FLAGS.resume:
        _check_same_precision(model_dir)
    # the plan's devices, not (only) --devices' default
    session_config = session_config_for(devices + (given_plan.devices if given_plan else []))
    target = ""
    if cluster:
        session_config, target = cluster.session_config(), cluster.target
    with runs.Signals() as signals:
        for number, (seed, run_dir) in enumerate(zip(seeds, run_dirs), 1):
            if len(seeds) > 1:
                print("run %d/%d: seed %d in %s" % (number, len(seeds), seed, run_dir),
                      flush=True)
            _train(run_dir, seed, devices, session_config, target, signals, cluster,
                   slowdown, given_plan, speeds)
    if len(seeds) > 1:
        _summarise(model_dir, seeds, run_dirs)


def _summarise(model_dir, seeds, run_dirs):
    """summary.json and a table: every run's OA, AA, kappa, and their mean and std."""
    results = [runs.read_json(os.path.join(run_dir, "results.json")) for run_dir in run_dirs]
    summary = report.summarise_runs([result["test"] for result in results])
    print(report.summary_table(summary, ["seed %d" % seed for seed in seeds]))
    files.write_json(os.path.join(model_dir, runs.SUMMARY),
                      {"seeds": seeds, "model_dirs": run_dirs,
                       "leakage": [result["leakage"] for result in results], **summary})
    print("summary of %d runs in %s" % (len(seeds), os.path.join(model_dir, runs.SUMMARY)))


def _load_experiment(seed):
    """The scene loaded, split and preprocessed for seed ``seed``, its split's leakage and
    its DataConfig; says what it holds (and writes nothing)."""
    print("loading %s ..." % FLAGS.dataset, flush=True)
    data_config = dataclasses.replace(scene_flags.data_config(seed), pca=_model_default("pca"),
                                      val_fraction=FLAGS.val_fraction)
    with cli.blame(*scene_flags.blamed(), *(("pca",) if FLAGS["pca"].present else ()),
                   also=(OSError,)):
        try:
            exp = experiment.prepare(data_config)
        except data.TooFewBands as error:
            if FLAGS["pca"].present:
                raise
            raise data.TooFewBands("%s (%d: the default of --model=%s; give --pca=N with "
                                   "fewer components, or --pca=0 for all bands)"
                                   % (error, data_config.pca, FLAGS.model)) from None
    leakage = data.split_leakage(exp.split, FLAGS.patch_size)
    print("%s: %dx%d pixels, %d bands, %d classes; %d training / %d test pixels"
          % (exp.scene.name, *exp.scene.labels.shape, exp.bands, exp.n_classes,
             len(exp.train), len(exp.test)), flush=True)
    print("split: %s; leakage %.1f%% (test pixels with a training pixel in their %dx%d patch)"
          % (exp.split.description, 100 * leakage, FLAGS.patch_size, FLAGS.patch_size),
          flush=True)
    if exp.nodata_pixels:
        print(experiment.nodata_summary(exp.nodata_pixels, exp.scene.raster), flush=True)
    return exp, leakage, data_config


# The data settings a resumed run must share with its first invocation (data.json).
RESUMED_DATA = ("dataset", "synthetic_layout", "synthetic_kind", "patch_size", "pca",
                "train_fraction", "train_per_class", "split", "seed", "val_fraction")


def _check_same_precision(model_dir):
    """UsageError when --resume would go on in another --precision than the run's first
    invocation (its flags.txt; a folder without one has nothing to compare): the same
    weights, but another graph."""
    started = runs.saved_flags(model_dir)
    if started is None:
        return
    precision = started.get("precision", FLAGS["precision"].default)
    if precision != FLAGS.precision:
        raise cli.UsageError(
            "--precision=%s: the run in %s was trained with --precision=%s; resume it with "
            "that (--flagfile=%s gives all its flags), or start over with --overwrite"
            % (FLAGS.precision, model_dir, precision, os.path.join(model_dir, runs.FLAGS_FILE)))


def _check_same_data(model_dir, data_config):
    """UsageError when --resume would go on with other pixels or patches than the run's
    first invocation used (its data.json); a folder without one has nothing to compare."""
    try:
        saved, _ = experiment.load(model_dir)
    except InvalidInput:
        return
    changed = [name for name in RESUMED_DATA
               if getattr(saved, name) != getattr(data_config, name)]
    if changed:
        raise cli.UsageError(
            "--resume: the run in %s was trained with %s, not %s; resume it with the same "
            "data flags, or start over with --overwrite"
            % (model_dir, ", ".join("%s=%s" % (n, getattr(saved, n)) for n in changed),
               ", ".join("%s=%s" % (n, getattr(data_config, n)) for n in changed)))


def _next_plan(plan, trial, epoch, rebalancer, steps, kept):
    """The plan to go on with after ``epoch`` when it changes: the alone trial's choice
    after one of its epochs, or (--rebalance=epoch: ``rebalancer``) a plan whose switch
    is predicted to pay back (epochs of ``steps`` steps; ``kept``: the plan keys whose
    graphs are open); else None."""
    if trial is not None and epoch in trial.epochs.values():   # a trial epoch
        print(trial.message, flush=True)
        return trial.plan if trial.plan is not plan else None
    if rebalancer is not None and epoch + 1 < FLAGS.epochs:
        new_plan = rebalancer.choose(plan, steps, FLAGS.epochs - epoch - 1, kept)
        if rebalancer.message:
            print(rebalancer.message, flush=True)
        return new_plan
    return None


def _classified(exp, probabilities):
    """(class map, test scores) of the labelled pixels' class ``probabilities`` [pixels, K]."""
    class_map = report.prediction_map(exp.scene.labels.shape, exp.labelled.indices,
                                      probabilities.argmax(axis=1))
    return class_map, evaluate(exp.test.class_ids, class_map.ravel()[exp.test.indices] - 1,
                               exp.n_classes)


def _scores(exp, variants, leakage):
    """The test pixels' scores from the labelled pixels' class probabilities ``variants``
    [variants, pixels, K] (their mean: the class map) and, with --tta, those of the
    patches as they are ({"test_without_tta": ...}); prints both. Returns (class map,
    scores, that dict)."""
    predicted_map, scores = _classified(exp, variants.mean(axis=0))
    print(report.score_table(scores, exp.scene.class_names, leakage))
    if not FLAGS.tta:
        return predicted_map, scores, {}
    _, plain = _classified(exp, variants[0])
    print("without --tta (the patches as they are): OA %.2f, AA %.2f, kappa %.4f"
          % (100 * plain.overall_accuracy, 100 * plain.average_accuracy, plain.kappa))
    return predicted_map, scores, {
        "test_without_tta": report.scores_dict(plain, exp.scene.class_names)}


def _train(model_dir, seed, devices, session_config, target, signals, cluster, slowdown,
           given_plan, speeds):
    """One seed's run in ``model_dir``; ``given_plan``: --plan's (checked against the model
    here), else planned from ``speeds`` (--speeds as numbers, or None: measured)."""
    started = time.time()
    exp, leakage, data_config = _load_experiment(seed)
    # --runs with --resume: a seed the series had not reached yet starts afresh
    resume = FLAGS.resume and runs.checkpoint_step(model_dir) is not None
    if FLAGS.resume and not resume:
        print("%s holds no checkpoint yet: this seed's run starts" % model_dir, flush=True)
    if resume:
        _check_same_data(model_dir, data_config)
    steps_per_epoch = exp.train.steps_per_epoch(FLAGS.batch_size, drop_remainder=True)
    if not steps_per_epoch:
        raise cli.UsageError("--batch_size=%d: larger than the %d training pixels; allowed: "
                             "at most %d" % (FLAGS.batch_size, len(exp.train), len(exp.train)))
    steps = FLAGS.epochs * steps_per_epoch
    if resume and runs.finished(model_dir, steps):
        print("the run in %s is finished (%d epochs, step %d); its results are in %s; "
              "to train longer, resume with a larger --epochs"
              % (model_dir, FLAGS.epochs, runs.checkpoint_step(model_dir),
                 os.path.join(model_dir, "results.json")), flush=True)
        return
    model_config = models.model_config(FLAGS.model, FLAGS.patch_size, exp.bands,
                                       exp.n_classes, FLAGS.width, FLAGS.batch_norm,
                                       FLAGS.precision)
    recipe = _recipe(exp)
    with cli.blame("model", "patch_size", "width"):
        spec = model_spec(model_config)
    caps = _memory_caps(devices)   # found once: bounds the scene, the model and the plan
    with cli.blame(*scene_flags.blamed(), "devices",   # every device holds the scene's cube
                   *(("memory_caps",) if FLAGS.memory_caps else ())):
        scene_input.check_cube_fits(exp.scene.image_shape, FLAGS.patch_size,
                                    recipe.scene_bands(model_config), devices, caps)
    if given_plan is None:   # memory before work: before any folder or profiling
        _check_memory(spec, devices, caps)
    if given_plan is not None:   # the device fastest alone is not known
        with cli.blame("plan"):
            given_plan.check_model(spec, "plan file %s" % FLAGS.plan)
        plan, fastest = given_plan, None
    # the input is good: now the folder is made (an old run deleted with --overwrite)
    runs.prepare_model_dir(model_dir, FLAGS.overwrite)
    experiment.save(model_dir, data_config, exp.split)   # for hmp.predict and baselines.py
    fitted_preprocessing.save(model_dir, exp.preprocessor, exp.scene.raster.wavelengths)
    if not FLAGS.resume:   # a resumed run keeps the flags it started with
        runs.save_flags(_model_dir(), _given_flags())
    if given_plan is None:
        with cli.blame("devices", "speeds", "mesh"):
            plan, fastest = _plan(spec, speeds, model_config, devices, caps, session_config,
                                  target, model_dir, cluster, recipe)
    print(plan.explain(), flush=True)
    progress = ProgressLine(log_every=FLAGS.log_every)

    def start(plan, resume):
        graph = TrainingGraph(model_config, Placement.from_plan(plan), FLAGS.batch_size,
                              exp.scene.labels.shape, FLAGS.optimizer, FLAGS.learning_rate,
                              seed, recipe)
        trainer = Trainer(graph, exp, model_dir, seed, session_config, target,
                          checkpoint_every=FLAGS.checkpoint_every, slowdown=slowdown,
                          stop=signals, progress=progress)
        try:
            with cli.blame("resume", "model_dir"):
                trainer.initialise(resume)
        except BaseException:   # e.g. a checkpoint of another model: no session left open
            trainer.close()
            raise
        events.add_text(trainer.writer, trainer.step, "plan", plan.explain())
        return trainer

    # The checkpoint's step and epoch (no steps per epoch: the trainer refuses the batch).
    start_step = (runs.checkpoint_step(model_dir) or 0) if resume else 0
    first_epoch = start_step // steps_per_epoch if steps_per_epoch else 0
    # Every invocation's epochs: a resumed run keeps those before its checkpoint.
    record = runs.History.open(model_dir, resume, first_epoch, start_step, sys.argv[1:])
    trial = _alone_trial(spec, plan, fastest, model_config, cluster, recipe, first_epoch,
                         record.trial)
    if trial is not None:   # a trial taken up may start on the device alone or the winner
        plan, record.trial = trial.plan, trial.record()
    started_at = time.perf_counter()
    trainer = start(plan, resume)
    # The switch into the next epoch and its seconds: the first start is a new graph's.
    switched = ("build", time.perf_counter() - started_at)
    kept = {}   # plan_key -> the open trainer of the plan before: a switch back reuses it
    rebalancer = (rebalance.Rebalancer(spec, FLAGS.rebalance_threshold)
                  if FLAGS.rebalance == "epoch" else None)
    signals.armed = True   # from now on a signal stops after the step, with a checkpoint
    record.add_plan(dataclasses.asdict(plan))
    best = BestEpoch(model_dir, FLAGS.patience, record.epochs)

    def record_epoch(stats):   # the trial's rate goes with its epoch, before the checkpoint
        if trial is not None and not trial.done:
            trial.measure(stats.epoch, stats.steady_samples_per_second
                          or stats.samples_per_second)
            record.trial = trial.record()
        record.add_epoch(stats)

    stats = None
    try:
        for epoch in range(first_epoch, FLAGS.epochs):
            stats = trainer.train_epoch(epoch, FLAGS.epochs, before_save=record_epoch)
            best.update(trainer, stats)
            print(stats.line(FLAGS.epochs), flush=True)
            if best.should_stop(epoch):
                print("early stop: no better validation accuracy for %d epochs"
                      % FLAGS.patience, flush=True)
                break
            if rebalancer is not None:
                rebalancer.measure(plan, stats, switched)
            switched = None
            new_plan = _next_plan(plan, trial, epoch, rebalancer, steps_per_epoch, kept)
            if new_plan is not None:   # the same weights (checkpoint) on the new plan
                started_at = time.perf_counter()
                previous = kept.pop(rebalance.plan_key(new_plan), None)
                for other in kept.values():   # one plan's graph is kept besides the one used
                    other.close()
                kept = {rebalance.plan_key(plan): trainer}
                plan = new_plan
                record.add_plan(dataclasses.asdict(plan))
                if previous is None:
                    trainer = start(plan, resume=True)
                else:
                    previous.restore(tf.train.latest_checkpoint(model_dir))
                    trainer = previous
                switched = ("build" if previous is None else "reuse",
                            time.perf_counter() - started_at)
        for other in kept.values():   # classifying needs only the trainer in use
            other.close()
        kept = {}
        warning = stats and stats.fit_warning(recipe.augmentation)
        if warning:
            print(warning, flush=True)
        step = trainer.step
        if best.path is not None:
            print("the weights of epoch %d (best validation accuracy %.3f) classify"
                  % (best.epoch + 1, best.accuracy), flush=True)
            trainer.restore(best.path)
        print("classifying the %d labelled pixels (%d test pixels)%s ..."
              % (len(exp.labelled), len(exp.test),
                 ", each in the 8 symmetries of the square (--tta)" if FLAGS.tta else ""),
              flush=True)
        variants = trainer.probabilities(exp.labelled, FLAGS.tta)   # [variants, pixels, K]
    except Stopped as stopped:
        for other in [trainer, *kept.values()]:
            other.close()
        where = ("while classifying (training had finished at step %d)" % stopped.step
                 if stopped.classifying else
                 "at epoch %d step %d" % (stopped.epoch + 1, stopped.step))
        raise cli.Interrupted("interrupted %s; continue with --resume --model_dir=%s"
                              % (where, model_dir), signals.signum) from None
    except BaseException:   # e.g. a lost worker: no session outlives the workers it used
        for other in [trainer, *kept.values()]:
            with contextlib.suppress(tf.errors.OpError):   # the error to report is raised
                other.close()
        raise
    predicted_map, scores, paired = _scores(exp, variants, leakage)
    pictures = report.save_pictures(model_dir, exp.scene, predicted_map, scores)
    events.add_scalars(trainer.writer, step, events.test_scalars(scores))
    events.add_image(trainer.writer, step, "classification_map",
                     maps.map_with_legend(predicted_map, exp.scene.class_names))
    trainer.close()
    results = {"flags": {**{f.name: f.value for f in
                            FLAGS.get_key_flags_for_module(sys.modules[__name__])},
                         "seed": seed},
               "plan": dataclasses.asdict(plan),
               "plans": record.plans,
               "history": record.epochs,
               "invocations": record.invocations,
               "trial": record.trial,
               "step": step,
               "best_epoch": None if best.epoch is None else best.epoch + 1,
               "nodata_pixels": exp.nodata_pixels,
               "split": exp.split.description,
               "leakage": leakage,
               "test": report.scores_dict(scores, exp.scene.class_names),
               **paired,
               "pictures": list(pictures),
               "seconds": time.time() - started}
    files.write_json(os.path.join(model_dir, "results.json"), results)
    print("results, maps and checkpoints in %s" % model_dir)


def main(argv):
    if len(argv) > 1:
        raise cli.UsageError("unexpected arguments %s (flags start with --)" % argv[1:])
    tf.disable_eager_execution()
    tf.logging.set_verbosity(tf.logging.ERROR)
    with _cluster() as cluster:
        hint = LOCAL_RESUME_HINT if FLAGS.local_workers else RESUME_HINT
        with cluster.failures(hint) if cluster else contextlib.nullcontext():
            run(cluster)


if __name__ == "__main__":
    cli.run(main, "hmp.train")
