"""A training run from its settings: ``fit(settings, get_model)``, what ``python -m
hmp.train`` does and ``hmp.fit`` offers to Python.

For each seed (``--runs``): load and split the scene, build the model, plan
its layout on the devices (measured, or from ``--speeds`` or ``--plan``),
train epoch by epoch (best epoch, early stop, ``--try_alone``'s trial,
``--rebalance=epoch``'s re-plans), classify the labelled pixels and write
results.json, maps and events to the run's folder. Input it refuses raises
:class:`hmp.cli.UsageError` (an :class:`hmp.errors.InvalidInput`) naming the
flag, before anything is written. The model comes from the caller
(``get_model``: the application's lookup, ``models.get_model``).
"""

import contextlib
import dataclasses
import os
import sys
import time

import numpy as np
import tensorflow.compat.v1 as tf

from hmp import cli, data, files, planning
from hmp.cluster import launch, sources
from hmp.data.field_look import measure_field_look
from hmp.errors import InvalidInput
from hmp.evaluation import maps, report
from hmp.evaluation.metrics import evaluate
from hmp.mesh.numerics import require_determinism
from hmp.planning.plan import format_bytes
from hmp.run import (calibration, events, experiment, fitted_preprocessing, inference,
                     linkprobe, rebalance, runs, scene_input, speedcache)
from hmp.run.augment import Augmentation
from hmp.run.devices import (check_local, default_devices, memory_bytes, parse_memory_caps,
                             session_config_for)
from hmp.run.from_graph import model_spec
from hmp.run.graph import ModelConfig, Placement, Recipe, TrainingGraph
from hmp.run.profiler import measure_platform
from hmp.run.projection import Projection
from hmp.run.progress import ProgressLine
from hmp.run.settings import AUTO, DEFAULT, model_recipe
from hmp.run.standby import Standby
from hmp.run.trainer import BestEpoch, Stopped, Trainer

RESUME_HINT = ("; the checkpoints so far are kept: restart the worker, then run again "
               "with --resume")
LOCAL_RESUME_HINT = ("; the checkpoints so far are kept: run again with --resume (it starts "
                     "the local workers anew)")

# The data settings a resumed run must share with its first invocation (data.json).
RESUMED_DATA = ("dataset", "synthetic_layout", "synthetic_kind", "patch_size", "pca",
                "train_fraction", "train_per_class", "split", "seed", "val_fraction")


@dataclasses.dataclass(frozen=True)
class Fitted:
    """A finished run: its folder, its results.json (``results``; with several seeds,
    summary.json, and each seed's run in ``seeds``) and its model."""

    model_dir: str
    results: dict
    model: object   # the model module
    seeds: tuple = ()

    @property
    def test(self):
        """The test pixels' scores (results.json's ``test``)."""
        return self.results["test"]

    def predict(self, cube, devices=("/cpu:0",), batch_size=1024, tta=False):
        """Class probabilities (float32 [H, W, classes]) of every pixel of ``cube`` (a
        scene's raw cube [H, W, bands], as the run's scene file holds it; no-data pixels
        classified as 0s) by the run's best weights, as ``python -m hmp.predict`` does."""
        run = inference.Run.open(self.model_dir, lambda name: self.model)
        prepared, _ = run.prepare(np.asarray(cube, np.float32))
        return inference.classify(run, prepared, list(devices), batch_size,
                                  session_config_for(list(devices)), tta=tta)


def fit(settings, get_model, argv=()):
    """Trains as ``python -m hmp.train`` with ``settings`` (a
    :class:`hmp.run.settings.Settings`) does; returns the :class:`Fitted` run.

    ``get_model(name)``: the model module of ``settings.model.name``
    (``models.get_model``); ``argv``: the command line that asked for it (history.json).
    Graph mode: turns TensorFlow's eager execution off.
    """
    tf.disable_eager_execution()
    tf.logging.set_verbosity(tf.logging.ERROR)
    with _cluster(settings) as cluster:
        hint = LOCAL_RESUME_HINT if settings.placement.local_workers else RESUME_HINT
        with cluster.failures(hint) if cluster else contextlib.nullcontext():
            settings.check(get_model)
            return _Fit(settings, get_model, list(argv)).run(cluster)


def _say(line):
    print(line, flush=True)


@contextlib.contextmanager
def _cluster(settings):
    """The workers of --cluster (checked: every one answers), or those --local_workers
    starts here (stopped on leaving), or None."""
    placement = settings.placement
    if placement.local_workers is None:
        cluster = None
        if placement.cluster is not None:
            with settings.blame("cluster", "cluster_timeout",
                                *(("port_base",) if placement.cluster == sources.SLURM
                                  else ())):
                cluster, _ = sources.resolve(placement.cluster, placement.cluster_timeout,
                                             placement.port_base)
            cluster.check_answers(say=_say)
        yield cluster
        return
    if placement.cluster is not None:
        raise cli.UsageError("--cluster=%s, --local_workers=%s: give one of them (workers "
                             "running already, or started here)"
                             % (placement.cluster, placement.local_workers))
    with contextlib.ExitStack() as stack:
        with settings.blame("local_workers", "cluster_timeout"):   # the input, not the run
            cluster = stack.enter_context(launch.local_workers(
                launch.parse_worker_list(placement.local_workers), placement.cluster_timeout,
                _say))
        yield cluster


class _Fit:
    """One fit: the settings, and what every seed's run shares (devices, plan or speeds,
    sessions, signals)."""

    def __init__(self, settings, get_model, argv):
        self.settings, self.get_model, self.argv = settings, get_model, argv
        self.data, self.model = settings.data, settings.model
        self.recipe, self.placement = settings.recipe, settings.placement
        self.folder = settings.folder

    def run(self, cluster):
        settings, placement = self.settings, self.placement
        self.cluster = cluster
        self.devices = self._devices()
        if placement.memory_caps and placement.plan:
            raise cli.UsageError("--memory_caps=%s: a --plan file holds its own memory caps "
                                 "(scripts/plan_layout.py --memory_caps); give one of them"
                                 % placement.memory_caps)
        with settings.blame("memory_caps"):   # before any work
            parse_memory_caps(placement.memory_caps, len(self.devices))
        if placement.deterministic:   # before any graph runs
            require_determinism()
        self.given_plan, self.speeds = None, None
        if placement.plan:
            with settings.blame("plan"):   # its model: once it is built
                self.given_plan = planning.Plan.from_json(placement.plan)
        else:
            if placement.mesh != AUTO:   # before any profiling
                with settings.blame("mesh", "devices"):
                    planning.check_mesh_size(planning.parse_mesh(placement.mesh),
                                             len(self.devices))
            self.speeds = self._speeds()
        with settings.blame("simulate_slowdown"):
            self.slowdown = self._slowdown()
        model_dir = settings.model_dir
        if cluster:   # task 0 writes the checkpoints: no path relative to its folder
            model_dir = os.path.abspath(model_dir)
        seeds = settings.seeds
        run_dirs = self._run_dirs(model_dir, seeds)
        if self.folder.resume:
            self._check_same_precision(model_dir)
        # the plan's devices, not (only) --devices' default
        self.session_config = session_config_for(
            self.devices + (self.given_plan.devices if self.given_plan else []))
        self.target = ""
        if cluster:
            self.session_config, self.target = cluster.session_config(), cluster.target
        with runs.Signals() as self.signals:
            for number, (seed, run_dir) in enumerate(zip(seeds, run_dirs), 1):
                if len(seeds) > 1:
                    print("run %d/%d: seed %d in %s" % (number, len(seeds), seed, run_dir),
                          flush=True)
                self._train(run_dir, seed)
        model = self.get_model(self.model.name)
        fitted = tuple(Fitted(run_dir, runs.read_json(os.path.join(run_dir, "results.json")),
                              model) for run_dir in run_dirs)
        if len(seeds) == 1:
            return fitted[0]
        return Fitted(model_dir, self._summarise(model_dir, seeds, run_dirs), model, fitted)

    def _devices(self):
        given, cluster = self.placement.devices, self.cluster
        if given is None:
            return list(cluster.devices) if cluster else default_devices()   # hmp.run.devices
        devices = [d.strip() for d in given.split(",") if d.strip()]
        if not devices:
            raise cli.UsageError("--devices=%s: give at least one TensorFlow device, e.g. "
                                 "/cpu:0" % given)
        if not cluster:
            with self.settings.blame("devices"):
                check_local(devices)
            return devices
        if len(set(devices)) != len(devices):
            raise cli.UsageError("--devices=%s: a device is named twice" % given)
        with self.settings.blame("devices", "local_workers" if self.placement.local_workers
                                 else "cluster"):
            cluster.check_devices(devices)
        return devices

    def _speeds(self):
        given = self.placement.speeds
        if given in ("auto", "measure"):
            return None
        try:
            speeds = [float(s) for s in given.split(",")]
        except ValueError:
            raise cli.UsageError("--speeds=%r: give auto, measure or one number per device, "
                                 "e.g. 70,25,5" % given) from None
        with self.settings.blame("speeds"):
            return list(planning.check_speeds(speeds, self.devices))

    def _slowdown(self):
        """{device: factor} from --simulate_slowdown=/cpu:1=3,..."""
        slowdown = {}
        for item in filter(None, self.placement.simulate_slowdown.split(",")):
            device, _, factor = item.rpartition("=")
            if (device not in self.devices or not factor.replace(".", "", 1).isdigit()
                    or not float(factor) > 0):
                raise InvalidInput("use DEVICE=FACTOR with a device of --devices and a "
                                   "positive number, got %r" % item)
            slowdown[device] = float(factor)
        return slowdown

    def _run_dirs(self, model_dir, seeds):
        """The folder of each seed's run, checked (a used one needs --resume or
        --overwrite; nothing is made or deleted yet). One run: ``model_dir`` itself;
        several: its ``seed-<seed>`` folders."""
        folders = ([model_dir] if len(seeds) == 1 else
                   [os.path.join(model_dir, "seed-%d" % seed) for seed in seeds])
        for folder in folders:
            runs.check_model_dir(folder, self.folder.resume, self.folder.overwrite)
        if (self.folder.resume and len(folders) == 1
                and runs.checkpoint_step(model_dir) is None):
            raise cli.UsageError("--resume: %s holds no checkpoint to resume from; start the "
                                 "run without --resume" % model_dir)
        return folders

    def _check_same_precision(self, model_dir):
        """UsageError when --resume would go on in another --precision than the run's
        first invocation (its flags.txt; a folder without one has nothing to compare):
        the same weights, but another graph."""
        started = runs.saved_flags(model_dir)
        if started is None:
            return
        precision = started.get("precision", DEFAULT.model.precision)
        if precision != self.model.precision:
            raise cli.UsageError(
                "--precision=%s: the run in %s was trained with --precision=%s; resume it "
                "with that (--flagfile=%s gives all its flags), or start over with "
                "--overwrite" % (self.model.precision, model_dir, precision,
                                 os.path.join(model_dir, runs.FLAGS_FILE)))

    def _summarise(self, model_dir, seeds, run_dirs):
        """summary.json and a table: every run's OA, AA, kappa, and their mean and std;
        returns summary.json's dict."""
        results = [runs.read_json(os.path.join(run_dir, "results.json"))
                   for run_dir in run_dirs]
        summary = report.summarise_runs([result["test"] for result in results])
        print(report.summary_table(summary, ["seed %d" % seed for seed in seeds]))
        written = {"seeds": seeds, "model_dirs": run_dirs,
                   "leakage": [result["leakage"] for result in results], **summary}
        files.write_json(os.path.join(model_dir, runs.SUMMARY), written)
        print("summary of %d runs in %s" % (len(seeds), os.path.join(model_dir,
                                                                     runs.SUMMARY)))
        return written

    # -- the data ------------------------------------------------------------------------

    def _pca(self):
        """--pca: as given, else the model's ``RECIPE`` value, else 0 (all bands)."""
        if self.data.pca is not None:
            return self.data.pca
        return model_recipe(self.get_model(self.model.name)).get("pca",
                                                                 DEFAULT.flag_value("pca"))

    def _load_experiment(self, seed):
        """The scene loaded, split and preprocessed for seed ``seed``, its split's leakage
        and its DataConfig; says what it holds (and writes nothing)."""
        settings = self.settings
        print("loading %s ..." % self.data.dataset, flush=True)
        data_config = dataclasses.replace(self.data, seed=seed, pca=self._pca())
        pca_given = self.data.pca is not None
        with settings.blame(*settings.scene_flags(), *(("pca",) if pca_given else ()),
                            also=(OSError,)):
            try:
                exp = experiment.prepare(data_config)
            except data.TooFewBands as error:
                if pca_given:
                    raise
                raise data.TooFewBands("%s (%d: the default of --model=%s; give --pca=N with "
                                       "fewer components, or --pca=0 for all bands)"
                                       % (error, data_config.pca, self.model.name)) from None
        patch = self.data.patch_size
        leakage = data.split_leakage(exp.split, patch)
        print("%s: %dx%d pixels, %d bands, %d classes; %d training / %d test pixels"
              % (exp.scene.name, *exp.scene.labels.shape, exp.bands, exp.n_classes,
                 len(exp.train), len(exp.test)), flush=True)
        print("split: %s; leakage %.1f%% (test pixels with a training pixel in their %dx%d "
              "patch)" % (exp.split.description, 100 * leakage, patch, patch), flush=True)
        if exp.nodata_pixels:
            print(experiment.nodata_summary(exp.nodata_pixels, exp.scene.raster), flush=True)
        return exp, leakage, data_config

    def _check_same_data(self, model_dir, data_config):
        """UsageError when --resume would go on with other pixels or patches than the
        run's first invocation used (its data.json); a folder without one has nothing to
        compare."""
        try:
            saved, _ = experiment.load(model_dir)
        except InvalidInput:
            return
        changed = [name for name in RESUMED_DATA
                   if getattr(saved, name) != getattr(data_config, name)]
        if changed:
            raise cli.UsageError(
                "--resume: the run in %s was trained with %s, not %s; resume it with the "
                "same data flags, or start over with --overwrite"
                % (model_dir, ", ".join("%s=%s" % (n, getattr(saved, n)) for n in changed),
                   ", ".join("%s=%s" % (n, getattr(data_config, n)) for n in changed)))

    # -- the recipe ----------------------------------------------------------------------

    def _recipe(self, exp):
        """The training recipe (schedule over the run, decay, augmentation, loss)."""
        recipe = self.recipe
        steps_per_epoch = exp.train.steps_per_epoch(recipe.batch_size, drop_remainder=True)
        weights = None
        if recipe.class_balanced:   # n / (K n_c): the mean weight over the training pixels is 1
            counts = np.bincount(exp.train.class_ids, minlength=exp.n_classes)
            weights = tuple(float(len(exp.train) / (exp.n_classes * c)) if c else 0.0
                            for c in counts)
        return Recipe(weight_decay=recipe.weight_decay, schedule=recipe.schedule,
                      warmup_steps=int(round(recipe.warmup_epochs * steps_per_epoch)),
                      total_steps=recipe.epochs * steps_per_epoch,
                      augmentation=Augmentation(recipe.augment, recipe.brightness,
                                                recipe.noise, **self._field_look(exp)),
                      class_weights=weights, projection=self._projection(exp))

    def _projection(self, exp):
        """The PCA done in the graph (--pca_in_graph), or None."""
        if self.recipe.pca_in_graph and exp.preprocessor.pca is not None:
            return Projection.of(exp.preprocessor.pca)
        return None

    def _field_look(self, exp):
        """The field-look augmentation's settings (on with --augment); it works on the raw
        bands, so after PCA only with --pca_in_graph."""
        names = ("spectral_shift", "spectral_gain")
        strengths = {name: self.settings.field_look_strength(name) for name in names}
        if not self.recipe.augment or strengths == {name: 0.0 for name in names}:
            return {}
        if exp.preprocessor.pca is not None and not self.recipe.pca_in_graph:
            given = [name for name in names if self.settings.chosen(name)]
            if given:
                raise cli.UsageError("--%s=%s: the field-look augmentation needs all bands, "
                                     "but this run keeps %d PCA components (give --pca=0 or "
                                     "--pca_in_graph)"
                                     % (given[0], self.settings.value(given[0]), exp.bands))
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

    # -- the plan ------------------------------------------------------------------------

    def _measurement_key(self, model_config, devices, recipe):
        """What a speed measured on ``devices`` depends on (``speedcache.cache_key``)."""
        return speedcache.cache_key(model_config, self.recipe.batch_size, self.recipe.optimizer,
                                    devices, self.cluster.identity if self.cluster else None,
                                    recipe.input_work(model_config))

    def _measured(self, model_config, spec, model_dir, recipe):
        """The speed-cache entry (per device: samples/s at --batch_size, FLOP/s, per-step
        overhead, and the op-size figures when --mesh may split the model) and the link
        (a LinkSpec): cached, or measured now (and stored there). See
        hmp.run.speedcache."""
        devices = self.devices
        key = self._measurement_key(model_config, devices, recipe)
        op_size = planning.splits_the_model(self.placement.mesh)
        paths = [os.path.join(model_dir, speedcache.FILE_NAME), speedcache.user_cache_path()]
        warn = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731

        def measure():
            return measure_platform(model_config, devices, self.recipe.batch_size,
                                    target=self.target, session_config=self.session_config,
                                    optimizer=self.recipe.optimizer, progress=_say, spec=spec,
                                    op_size=op_size, recipe=recipe)

        entry, _ = speedcache.measured_or_cached(key, paths, measure,
                                                 force=self.placement.speeds == "measure",
                                                 say=_say, warn=warn, op_size=op_size)
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

    def _plan(self, spec, model_config, caps, model_dir, recipe):
        """(the plan made now from the speeds (--speeds's numbers; None: measured on the
        step of ``recipe``, with the link), the device fastest alone at --batch_size as
        the plan priced each alone (``Plan.fastest_alone``)); ``spec``: the model's. Each
        device's memory (``caps``: ``_memory_caps``) bounds the plan."""
        devices, speeds = self.devices, self.speeds
        batch_size, mesh = self.recipe.batch_size, self.placement.mesh
        if len(devices) == 1:   # nothing to split: no profiling
            plan = planning.plan_layout(spec, devices, speeds or [1.0], batch_size, mesh, caps)
            if mesh == AUTO:
                plan = dataclasses.replace(plan, reason="one device (%s): the one-device "
                                           "layout, no profiling needed" % devices[0])
            return plan, devices[0]
        if speeds is not None:
            plan = planning.plan_layout(spec, devices, speeds, batch_size, mesh, caps)
            if mesh == AUTO:
                plan = dataclasses.replace(plan, reason=plan.reason.replace(
                    "communication not priced (no link given)",
                    "communication not priced: --speeds=%s gives the speeds, so no link was "
                    "measured (--speeds=auto measures both)" % self.placement.speeds))
            return plan, plan.fastest_alone()
        entry, link = self._measured(model_config, spec, model_dir, recipe)
        platform = linkprobe.platform_specs(devices, entry.speeds)
        plan = planning.plan_layout(spec, platform, None, batch_size, mesh, caps, link=link)
        return plan, plan.fastest_alone()

    def _fits(self, spec, caps, batch_size):
        """Whether the planner finds a layout of --mesh for ``batch_size`` samples on the
        devices within the memory ``caps`` (at equal speeds: memory moves work between
        devices, speeds do not make room). True too when it refuses for another reason
        than memory: that is said where the plan is made, as before."""
        devices = self.devices

        def plans(memory_caps):
            try:
                planning.plan_layout(spec, devices, [1.0] * len(devices), batch_size,
                                     self.placement.mesh, memory_caps)
                return True
            except InvalidInput:
                return False
        return plans(caps) or not plans(None)

    def _memory_caps(self):
        """Each device's memory in bytes (None: not known): --memory_caps, else as found
        (``memory_bytes``)."""
        with self.settings.blame("memory_caps"):
            return (parse_memory_caps(self.placement.memory_caps, len(self.devices))
                    or memory_bytes(self.devices))

    def _check_memory(self, spec, caps):
        """UsageError, before any folder is made, when the model at --batch_size fits no
        layout of --mesh on the devices within each one's memory (``caps``): naming
        --batch_size when fewer samples would fit, else --width, and the memory a device
        alone needs (``planning.memory_bytes``: weights with their gradients and
        optimizer slots, and the activations of the batch)."""
        batch_size, mesh = self.recipe.batch_size, self.placement.mesh
        if all(cap is None for cap in caps) or self._fits(spec, caps, batch_size):
            return
        fewest = 1 if mesh == AUTO else planning.parse_mesh(mesh).batch
        flag = "batch_size" if self._fits(spec, caps, fewest) else "width"
        whole = np.ones((len(spec.layers), 1))
        need, weights = (float(planning.memory_bytes(spec, [batch], whole)[0, 0])
                         for batch in (batch_size, 0))
        raise cli.UsageError(
            "--%s=%d: the model needs %s on one device (%s for its weights, their gradients "
            "and optimizer slots, %s for the activations of %d samples) and fits no layout "
            "of --mesh=%s on %s; allowed: a smaller --width or --batch_size, or devices with "
            "more memory" % (flag, self.settings.value(flag), format_bytes(need),
                             format_bytes(weights), format_bytes(need - weights), batch_size,
                             mesh, ", ".join("%s (%s)" % (d, "?" if c is None
                                                          else format_bytes(c))
                                             for d, c in zip(self.devices, caps))))

    def _alone_trial(self, spec, plan, fastest, model_config, recipe, first_epoch, recorded):
        """The trial of the fastest device alone (``--try_alone``), with what
        ``recorded`` (its record before a resume) measured, or None when it does not
        apply: a mesh or plan given, a plan on one device, fewer epochs left than it
        still needs (3 fresh)."""
        if (not self.placement.try_alone or self.placement.mesh != AUTO or fastest is None
                or len(plan.devices) < 2):
            return None
        alone = planning.plan_layout(spec, [fastest], [1.0], self.recipe.batch_size, AUTO)
        alone = dataclasses.replace(alone, reason="the fastest device alone (%s), on trial "
                                    "against the plan (--try_alone)" % fastest)
        # what the rates depend on: what a speed measurement does, and the two layouts
        key = {**self._measurement_key(model_config, plan.devices, recipe), "mesh": plan.mesh,
               "splits": plan.splits, "alone": fastest}
        trial = rebalance.AloneTrial(plan, alone, key)
        line = trial.take_up(recorded, first_epoch)
        if self.recipe.epochs - first_epoch < trial.epochs_needed:
            return None
        if line:
            print(line, flush=True)
        return trial

    @staticmethod
    def _standby_done(standby, plan, kept, rebalancer):
        """Takes a finished ``standby``'s trainer into ``kept`` (a switch to its plan then
        restores a checkpoint, at about what its own restore took), unless the run is on
        that plan or keeps its graph already, or says in one line why it failed (the run
        goes on, a switch to that plan builds its graph anew). Returns None: no standby
        is under way."""
        if standby.failed is not None:
            print("standby: the graph of %s could not be made ready (%s); a switch to "
                  "it builds it" % (rebalance.describe_splits(standby.plan),
                                    str(standby.failed).splitlines()[0]), flush=True)
            standby.close()
            return None
        key = rebalance.plan_key(standby.plan)
        if key == rebalance.plan_key(plan) or key in kept:
            standby.close()
            return None
        kept[key] = standby.take()
        rebalancer.expect_reuse(standby.restore_seconds)
        return None

    def _next_plan(self, plan, trial, epoch, rebalancer, steps, kept):
        """The plan to go on with after ``epoch`` when it changes: the alone trial's
        choice after one of its epochs, or (--rebalance=epoch: ``rebalancer``) a plan
        whose switch is predicted to pay back (epochs of ``steps`` steps; ``kept``: the
        plan keys whose graphs are open); else None."""
        epochs = self.recipe.epochs
        if trial is not None and epoch in trial.epochs.values():   # a trial epoch
            print(trial.message, flush=True)
            return trial.plan if trial.plan is not plan else None
        if rebalancer is not None and epoch + 1 < epochs:
            new_plan = rebalancer.choose(plan, steps, epochs - epoch - 1, kept)
            if rebalancer.message:
                print(rebalancer.message, flush=True)
            return new_plan
        return None

    # -- scores --------------------------------------------------------------------------

    @staticmethod
    def _classified(exp, probabilities):
        """(class map, test scores) of the labelled pixels' class ``probabilities``
        [pixels, K]."""
        class_map = report.prediction_map(exp.scene.labels.shape, exp.labelled.indices,
                                          probabilities.argmax(axis=1))
        return class_map, evaluate(exp.test.class_ids,
                                   class_map.ravel()[exp.test.indices] - 1, exp.n_classes)

    def _scores(self, exp, variants, leakage):
        """The test pixels' scores from the labelled pixels' class probabilities
        ``variants`` [variants, pixels, K] (their mean: the class map) and, with --tta,
        those of the patches as they are ({"test_without_tta": ...}); prints both.
        Returns (class map, scores, that dict)."""
        predicted_map, scores = self._classified(exp, variants.mean(axis=0))
        print(report.score_table(scores, exp.scene.class_names, leakage))
        if not self.recipe.tta:
            return predicted_map, scores, {}
        _, plain = self._classified(exp, variants[0])
        print("without --tta (the patches as they are): OA %.2f, AA %.2f, kappa %.4f"
              % (100 * plain.overall_accuracy, 100 * plain.average_accuracy, plain.kappa))
        return predicted_map, scores, {
            "test_without_tta": report.scores_dict(plain, exp.scene.class_names)}

    # -- one seed's run ------------------------------------------------------------------

    def _train(self, model_dir, seed):
        """One seed's run in ``model_dir``: --plan's plan (checked against the model
        here), else planned from the speeds (--speeds as numbers, or None: measured)."""
        settings, recipe_settings, folder = self.settings, self.recipe, self.folder
        epochs, batch_size = recipe_settings.epochs, recipe_settings.batch_size
        given_plan, signals = self.given_plan, self.signals
        started = time.time()
        exp, leakage, data_config = self._load_experiment(seed)
        # --runs with --resume: a seed the series had not reached yet starts afresh
        resume = folder.resume and runs.checkpoint_step(model_dir) is not None
        if folder.resume and not resume:
            print("%s holds no checkpoint yet: this seed's run starts" % model_dir, flush=True)
        if resume:
            self._check_same_data(model_dir, data_config)
        steps_per_epoch = exp.train.steps_per_epoch(batch_size, drop_remainder=True)
        if not steps_per_epoch:
            raise cli.UsageError("--batch_size=%d: larger than the %d training pixels; "
                                 "allowed: at most %d"
                                 % (batch_size, len(exp.train), len(exp.train)))
        steps = epochs * steps_per_epoch
        if resume and runs.finished(model_dir, steps):
            print("the run in %s is finished (%d epochs, step %d); its results are in %s; "
                  "to train longer, resume with a larger --epochs"
                  % (model_dir, epochs, runs.checkpoint_step(model_dir),
                     os.path.join(model_dir, "results.json")), flush=True)
            return
        model_config = ModelConfig(self.model.name, self.data.patch_size, exp.bands,
                                   exp.n_classes, self.model.width, self.model.batch_norm,
                                   self.model.precision,
                                   model=self.get_model(self.model.name))
        recipe = self._recipe(exp)
        with settings.blame("model", "patch_size", "width"):
            spec = model_spec(model_config)
        caps = self._memory_caps()   # found once: bounds the scene, the model and the plan
        with settings.blame(*settings.scene_flags(), "devices",   # every device holds the cube
                            *(("memory_caps",) if self.placement.memory_caps else ())):
            scene_input.check_cube_fits(exp.scene.image_shape, self.data.patch_size,
                                        recipe.scene_bands(model_config), self.devices, caps)
        if given_plan is None:   # memory before work: before any folder or profiling
            self._check_memory(spec, caps)
        if given_plan is not None:   # the device fastest alone is not known
            with settings.blame("plan"):
                given_plan.check_model(spec, "plan file %s" % self.placement.plan)
            plan, fastest = given_plan, None
        # the input is good: now the folder is made (an old run deleted with --overwrite)
        runs.prepare_model_dir(model_dir, folder.overwrite)
        experiment.save(model_dir, data_config, exp.split)   # for hmp.predict and baselines.py
        fitted_preprocessing.save(model_dir, exp.preprocessor, exp.scene.raster.wavelengths)
        if not folder.resume:   # a resumed run keeps the flags it started with
            runs.save_flags(settings.model_dir, settings.flag_lines())
        if given_plan is None:
            with settings.blame("devices", "speeds", "mesh"):
                plan, fastest = self._plan(spec, model_config, caps, model_dir, recipe)
        print(plan.explain(), flush=True)
        progress = ProgressLine(log_every=folder.log_every)

        def trainer_of(plan):   # its graph, a session on the devices, the scene on them
            graph = TrainingGraph(model_config, Placement.from_plan(plan), batch_size,
                                  exp.scene.labels.shape, recipe_settings.optimizer,
                                  recipe_settings.learning_rate, seed, recipe)
            return Trainer(graph, exp, model_dir, seed, self.session_config, self.target,
                           checkpoint_every=folder.checkpoint_every,
                           slowdown=self.slowdown, stop=signals, progress=progress)

        def start(plan, resume):
            trainer = trainer_of(plan)
            try:
                with settings.blame("resume", "model_dir"):
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
        record = runs.History.open(model_dir, resume, first_epoch, start_step, self.argv)
        trial = self._alone_trial(spec, plan, fastest, model_config, recipe, first_epoch,
                                  record.trial)
        if trial is not None:   # a trial taken up may start on the device alone or the winner
            plan, record.trial = trial.plan, trial.record()
        started_at = time.perf_counter()
        trainer = start(plan, resume)
        # The switch into the next epoch and its seconds: the first start is a new graph's.
        switched = ("build", time.perf_counter() - started_at)
        kept = {}   # plan_key -> the open trainer of the plan before: a switch back reuses it
        standby = None   # the graph of the plan the rebalancer waits for, made ready meanwhile
        rebalancer = (rebalance.Rebalancer(spec, self.placement.rebalance_threshold)
                      if self.placement.rebalance == "epoch" else None)
        signals.armed = True   # from now on a signal stops after the step, with a checkpoint
        record.add_plan(dataclasses.asdict(plan))
        best = BestEpoch(model_dir, recipe_settings.patience, record.epochs)

        def record_epoch(stats):   # the trial's rate goes with its epoch, before the checkpoint
            if trial is not None and not trial.done:
                trial.measure(stats.epoch, stats.steady_samples_per_second
                              or stats.samples_per_second)
                record.trial = trial.record()
            record.add_epoch(stats)

        stats = None
        try:
            for epoch in range(first_epoch, epochs):
                stats = trainer.train_epoch(epoch, epochs, before_save=record_epoch)
                best.update(trainer, stats)
                print(stats.line(epochs), flush=True)
                if best.should_stop(epoch):
                    print("early stop: no better validation accuracy for %d epochs"
                          % recipe_settings.patience, flush=True)
                    break
                if rebalancer is not None:
                    rebalancer.measure(plan, stats, switched)
                switched = None
                if standby is not None and (standby.ready or standby.failed):
                    standby = self._standby_done(standby, plan, kept, rebalancer)
                new_plan = self._next_plan(plan, trial, epoch, rebalancer, steps_per_epoch,
                                           kept)
                waiting = rebalancer and rebalancer.waiting
                if new_plan is None and waiting and standby is None:
                    print("standby: building the graph of %s while training goes on"
                          % rebalance.describe_splits(waiting), flush=True)
                    standby = Standby(waiting, trainer_of,
                                      lambda: tf.train.latest_checkpoint(model_dir),
                                      Trainer.warm_up)
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
            for other in [*kept.values(), *([standby] if standby else [])]:
                other.close()   # classifying needs only the trainer in use
            kept, standby = {}, None
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
                     ", each in the 8 symmetries of the square (--tta)"
                     if recipe_settings.tta else ""), flush=True)
            variants = trainer.probabilities(exp.labelled, recipe_settings.tta)
        except Stopped as stopped:
            for other in [trainer, *kept.values(), *([standby] if standby else [])]:
                other.close()
            where = ("while classifying (training had finished at step %d)" % stopped.step
                     if stopped.classifying else
                     "at epoch %d step %d" % (stopped.epoch + 1, stopped.step))
            raise cli.Interrupted("interrupted %s; continue with --resume --model_dir=%s"
                                  % (where, model_dir), signals.signum) from None
        except BaseException:   # e.g. a lost worker: no session outlives the workers it used
            for other in [trainer, *kept.values(), *([standby] if standby else [])]:
                with contextlib.suppress(tf.errors.OpError):   # the error to report is raised
                    other.close()
            raise
        predicted_map, scores, paired = self._scores(exp, variants, leakage)
        pictures = report.save_pictures(model_dir, exp.scene, predicted_map, scores)
        events.add_scalars(trainer.writer, step, events.test_scalars(scores))
        events.add_image(trainer.writer, step, "classification_map",
                         maps.map_with_legend(predicted_map, exp.scene.class_names))
        trainer.close()
        results = {"flags": {**settings.flag_values(), "seed": seed},
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
