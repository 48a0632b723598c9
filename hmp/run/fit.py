"""A training run from its settings: ``fit(settings, get_model)``, what ``python -m
hmp.train`` does and ``hmp.fit`` offers to Python.

For each seed (``--runs``): load and split the scene, build the model, plan
its layout on the devices (measured, or from ``--speeds`` or ``--plan``),
train epoch by epoch (best epoch, early stop, ``--try_alone``'s trial,
``--rebalance=epoch``'s re-plans), classify the labelled pixels and those around them,
smooth the class probabilities (``--smoothing``) and write
results.json, maps and events to the run's folder (``hmp.run.seed_training``);
with several seeds, summary.json. Input it refuses raises
:class:`hmp.cli.UsageError` (an :class:`hmp.errors.InvalidInput`) naming the
flag, before anything is written. The model comes from the caller
(``get_model``: the application's lookup, ``models.get_model``).
"""

import contextlib
import dataclasses
import functools
import os

import numpy as np
import tensorflow.compat.v1 as tf

from hmp import cli, files
from hmp.cluster import launch, runtime, sources
from hmp.data.raster import ArrayRaster
from hmp.errors import InvalidInput, whole_number
from hmp.evaluation import report
from hmp.evaluation.smoothing import check_window, smooth
from hmp.measure.devices import check_local, device_list, session_config_for
from hmp.run import inference, run_files, run_folder
from hmp.run.progress import say
from hmp.run.hardware import Hardware
from hmp.run.resume import check_resumed_flags, seed_dirs
from hmp.run.seed_training import Shared, train_seed
from hmp.run.settings import Settings


@contextlib.contextmanager
def _naming(keyword, value):
    """An InvalidInput within, as one naming the keyword and its value: "smoothing=4: ..."."""
    try:
        yield
    except InvalidInput as error:
        raise InvalidInput("%s=%r: %s" % (keyword, value, error)) from None


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
        """The test pixels' scores (results.json's ``test``; one seed's run only)."""
        self._one_seed("test")
        return self.results["test"]

    def predict(self, cube, devices=("/cpu:0",), batch_size=1024, tta=None,
                smoothing=None, smoothing_guide=None):
        """Class probabilities (float32 [H, W, classes]) of every pixel of ``cube`` (a
        scene's raw cube [H, W, bands], as the run's scene file holds it; zeros for no-data
        pixels) by the run's best weights, with TTA or not (None: as the run) and smoothed
        over ``smoothing`` x ``smoothing`` pixels (None: the run's window), guided by the
        scene's edges or not (``smoothing_guide``; None: as the run), as
        ``python -m hmp.predict`` does (one seed's run only). ``devices``: names, or one
        comma-separated string as ``--devices``. InvalidInput for a cube of other bands,
        a device this machine lacks or named twice, a batch_size below 1."""
        self._one_seed("predict")
        run = inference.TrainedRun.open(self.model_dir, lambda name: self.model)
        run.check_bands(ArrayRaster(cube).shape[2])   # a cube [H, W, bands] of the run's bands
        with _naming("devices", devices):
            devices = device_list(devices)
            check_local(devices)
        batch_size = whole_number(batch_size, "batch_size")
        if smoothing is not None:
            with _naming("smoothing", smoothing):
                check_window(smoothing)
        tta, window = run.classifying(tta, smoothing)
        guide = run.guide_for(window, smoothing_guide)
        prepared, scaled, nodata = run.prepare_and_scale(np.asarray(cube, np.float32))
        probabilities = inference.classify(run, prepared, devices, batch_size,
                                           session_config_for(devices), tta=tta,
                                           scaled=None if run.prior is None else scaled)
        return smooth(probabilities, window, ~nodata,
                      None if guide is None else guide.image(prepared))

    def _one_seed(self, what):
        if self.seeds:
            raise InvalidInput("%s: this run trained %d seeds; use its seeds[i].%s"
                               % (what, len(self.seeds), what))


def fit(settings, get_model, argv=()):
    """Trains as ``python -m hmp.train`` with ``settings`` (a
    :class:`hmp.run.settings.Settings`) does; returns the :class:`Fitted` run.

    ``get_model(name)``: the model module of ``settings.model.name``
    (``models.get_model``); ``argv``: the command line that asked for it (history.json).
    Graph mode: turns TensorFlow's eager execution off. A TypeError for arguments of
    another kind.
    """
    if not isinstance(settings, Settings):
        raise TypeError("hmp.fit: settings must be an hmp.Settings, e.g. "
                        "hmp.Settings.of(epochs=3), got %s" % type(settings).__name__)
    if not callable(get_model):
        raise TypeError("hmp.fit: get_model must be a function of a model name, e.g. "
                        "models.get_model, got %s" % type(get_model).__name__)
    tf.disable_eager_execution()
    tf.logging.set_verbosity(tf.logging.ERROR)
    settings.check(get_model)
    model_dir, folders = _run_folders(settings, get_model)   # before any worker starts
    before = {folder: run_folder.checkpoint_identity(folder) for folder in (model_dir, *folders)}
    with _cluster(settings) as cluster:
        hint = functools.partial(_how_to_continue, settings, model_dir, before)
        with cluster.failures(hint) if cluster else contextlib.nullcontext():
            return _seeds(settings, get_model, list(argv), cluster, model_dir, folders)


def _how_to_continue(settings, model_dir, before):
    """What to do after a lost worker: continue from the run's checkpoints (its own, or
    those written since this invocation started, whose identity differs from ``before``'s
    ({folder: ``run_folder.checkpoint_identity``} then): with --overwrite, the old run's
    are not this run's), or, with none yet, run the same command again."""
    again = "" if settings.placement.local_workers else "restart the worker, then "
    anew = " (it starts the local workers anew)" if settings.placement.local_workers else ""
    now = {folder: run_folder.checkpoint_identity(folder) for folder in before}
    kept = [folder for folder, identity in now.items()
            if identity is not None and (settings.folder.resume or identity != before[folder])]
    if kept:
        return "; the checkpoints so far are kept in %s: %scontinue with %s%s" % (
            kept[0], again, run_folder.continuing_flags(model_dir), anew)
    return "; no checkpoint was written yet: %srun the same command again%s" % (again, anew)


def _run_folders(settings, get_model):
    """(the run's folder, each seed's), checked (``hmp.run.resume``: a used one needs
    --resume or --overwrite; --resume goes on with the run's graph). On a cluster
    absolute paths, as the saver's ops (in this process's server) take them."""
    placement = settings.placement
    model_dir = settings.model_dir
    if placement.cluster is not None or placement.local_workers is not None:
        model_dir = os.path.abspath(model_dir)
    folders = seed_dirs(settings.folder, model_dir, settings.seeds)
    if settings.folder.resume:
        check_resumed_flags(model_dir, settings, get_model)
    return model_dir, folders


@contextlib.contextmanager
def _cluster(settings):
    """The workers of --cluster (checked: every one answers), or those --local_workers
    starts here (stopped on leaving), or None."""
    placement = settings.placement
    if placement.local_workers is not None or placement.cluster is not None:
        runtime.client_server()   # HMP_TRAINER_PORT's server, before any worker is waited for
    if placement.local_workers is None:
        cluster = None
        if placement.cluster is not None:
            # (--cluster_timeout is checked with the other flags: no fault of the list)
            with settings.blame("cluster", *(("port_base",) if placement.cluster ==
                                             sources.SLURM else ())):
                cluster, _ = sources.resolve(placement.cluster, placement.cluster_timeout,
                                             placement.port_base)
            cluster.check_answers(say=say)
        yield cluster
        return
    if placement.cluster is not None:
        raise cli.UsageError("--cluster=%s, --local_workers=%s: give one of them (workers "
                             "running already, or started here)"
                             % (placement.cluster, placement.local_workers))
    with contextlib.ExitStack() as stack:
        # the input, not the run (--cluster_timeout is checked with the other flags)
        with settings.blame("local_workers"):
            cluster = stack.enter_context(launch.local_workers(
                launch.parse_worker_list(placement.local_workers), placement.cluster_timeout,
                say))
        cluster.check_reach()   # HMP_TRAINER_HOST, if set, is an address they reach
        yield cluster


def _seeds(settings, get_model, argv, cluster, model_dir, folders):
    """Trains every seed of ``settings`` on ``cluster`` (or this machine: None), each in
    its folder of ``folders`` (several: in ``model_dir``); returns the :class:`Fitted`
    run (several seeds: their summary)."""
    hardware = Hardware.of(settings, cluster)
    seeds = settings.seeds
    # an old series goes as a whole, once the first seed's input is known good (also
    # under a single run's --overwrite)
    replaced = (run_folder.series_replaced(model_dir, folders) if settings.folder.overwrite
                and (len(seeds) > 1 or run_folder.seed_folders(model_dir)) else [])
    with run_folder.Signals() as signals:
        shared = Shared(settings, get_model, argv, hardware, signals)
        for number, (seed, folder) in enumerate(zip(seeds, folders), 1):
            if len(seeds) > 1:
                print("run %d/%d: seed %d in %s" % (number, len(seeds), seed, folder),
                      flush=True)
            try:
                train_seed(shared, folder, seed, replaced if number == 1 else ())
            finally:   # the next seed's loading and planning: a signal stops at once
                signals.armed = False
            if signals() and number < len(seeds):   # one came as the seed was scored
                raise cli.Interrupted("interrupted after the run of seed %d; continue the "
                                      "series with %s" % (seed, run_folder.resume_flags(
                                          settings.model_dir)), signals.signum)
    model = get_model(settings.model.name)
    fitted = tuple(Fitted(folder, run_files.read_results(folder), model)
                   for folder in folders)
    if len(seeds) == 1:
        return fitted[0]
    return Fitted(model_dir, _summarise(model_dir, seeds, folders), model, fitted)


def _summarise(model_dir, seeds, folders):
    """summary.json and a table: every seed's OA, AA, kappa, and their mean and std;
    returns summary.json's dict."""
    results = [run_files.read_results(folder) for folder in folders]
    summary = report.summarise_runs([result["test"] for result in results])
    print(report.summary_table(summary, ["seed %d" % seed for seed in seeds]))
    written = {"seeds": seeds, "model_dirs": folders,
               "leakage": [result["leakage"] for result in results],
               "smoothing": [inference.smoothed_over(result) for result in results],
               **summary}
    files.write_json(os.path.join(model_dir, run_files.SUMMARY), written)
    print("summary of %d runs in %s" % (len(seeds), os.path.join(model_dir, run_files.SUMMARY)))
    return written
