"""One seed's training in its folder, from its data to its results.json.

In order: the data loaded for the seed (``hmp.run.seed_data``), what ``--resume``
requires (``hmp.run.resume``), the model and its recipe (``hmp.run.training_recipe``),
the checks that the scene and the model fit the devices, the plan
(``hmp.run.plan_choice``; measured speeds are cached in the folder), then the folder made
(with --overwrite, only now the old run deleted), the epochs
(``hmp.run.epoch_loop``), the labelled pixels and those around them classified, their
class probabilities smoothed and the test pixels scored (``hmp.run.scoring``),
results.json written. A signal stops after a step with a
checkpoint (:class:`hmp.cli.Interrupted` says how to go on); on any error every
trainer's session is closed.
"""

import dataclasses
import os
import time

from hmp import cli, files
from hmp.errors import InvalidInput
from hmp.evaluation import report
from hmp.evaluation.spectral_prior import SpectralPrior
from hmp.graph import scene_input
from hmp.graph.from_graph import model_spec, model_width
from hmp.graph.graph import TrainingGraph
from hmp.graph.graph_config import ModelConfig, Placement
from hmp.run import events, experiment, fitted_preprocessing, run_files, run_folder, scoring
from hmp.run.epoch_loop import EpochLoop
from hmp.run.plan_choice import (alone_trial, beside_cube, check_batch_rows, check_memory,
                                 check_plan_memory, choose_plan, memory_caps, recorded)
from hmp.run.progress import ProgressLine
from hmp.run.resume import check_same_data, resumes
from hmp.run.seed_data import load_experiment
from hmp.run.trainer import BestEpoch, Stopped, Trainer
from hmp.run.training_recipe import recipe as training_recipe


@dataclasses.dataclass(frozen=True)
class Shared:
    """What every seed of one fit shares: its ``settings``, the application's model
    lookup (``get_model``), the command line (``argv``: history.json), what it trains on
    (``hardware``: :class:`hmp.run.hardware.Hardware`) and the ``signals`` that stop it
    (:class:`hmp.run.run_folder.Signals`)."""

    settings: object
    get_model: object
    argv: list
    hardware: object
    signals: object


class Trainers:
    """A seed's trainer of a plan: its graph (the model, the recipe, the batch on the
    plan's placement), a session on the devices, the scene on them (``cube``: its bytes
    on each device, beside the model)."""

    def __init__(self, shared, model_config, exp, recipe, model_dir, seed, progress, cube):
        self.shared, self.model_config, self.exp, self.recipe = shared, model_config, exp, recipe
        self.model_dir, self.seed, self.progress, self.cube = model_dir, seed, progress, cube

    def recorded(self, plan):
        """``plan`` as the run records it (``hmp.run.plan_choice.recorded``)."""
        return recorded(plan, self.cube)

    def build(self, plan):
        """A new trainer of ``plan`` (not initialised)."""
        settings, hardware = self.shared.settings, self.shared.hardware
        given = settings.recipe
        graph = TrainingGraph(self.model_config, Placement.from_plan(plan), given.batch_size,
                              self.exp.scene.labels.shape, given.optimizer,
                              given.learning_rate, self.seed, self.recipe,
                              settings.placement.steps_per_run)
        return Trainer(graph, self.exp, self.model_dir, self.seed, hardware.session_config,
                       hardware.target, checkpoint_every=settings.folder.checkpoint_every,
                       slowdown=hardware.slowdown, stop=self.shared.signals,
                       progress=self.progress)

    def start(self, plan, resume, switch=False):
        """A trainer of ``plan`` initialised (``resume``: from the latest checkpoint;
        ``switch``: the run's, going on on this plan), the plan in its events."""
        trainer = self.build(plan)
        try:
            with self.shared.settings.blame("resume", "model_dir"):
                trainer.initialise(resume, switch)
        except BaseException:   # e.g. a checkpoint of another model: no session left open
            trainer.close()
            raise
        events.add_text(trainer.writer, trainer.step, "plan", plan.explain())
        return trainer


def train_seed(shared, model_dir, seed, replaced=()):
    """Trains seed ``seed`` in ``model_dir``: on --plan's plan (checked against the model
    here), else on one planned from the speeds (--speeds's numbers, or measured). With
    --overwrite, the runs in the folders ``replaced`` are deleted with the old run in
    ``model_dir`` (``run_folder.series_replaced``)."""
    given, folder = shared.settings, shared.settings.folder
    started = time.time()
    resume = resumes(folder, model_dir)
    exp, leakage, data_config = load_experiment(dataclasses.replace(
        given, data=experiment.with_recorded_folder(given.data, model_dir)) if resume else given,
        shared.get_model, seed)
    if resume:
        check_same_data(model_dir, data_config, exp.split)
    with given.blame("batch_size"):
        steps_per_epoch = exp.steps_per_epoch(given.recipe.batch_size)
    # the run's epochs, --max_steps applied; flags.txt and results.json keep the flags given
    settings = dataclasses.replace(given, recipe=dataclasses.replace(
        given.recipe, epochs=given.recipe.epochs_within(steps_per_epoch)))
    shared = dataclasses.replace(shared, settings=settings)
    capped = settings.recipe.epochs < given.recipe.epochs
    if resume and _finished(model_dir, settings.recipe, steps_per_epoch,
                            "--max_steps" if capped else "--epochs"):
        return
    _say_max_steps(given.recipe, settings.recipe.epochs, steps_per_epoch)
    model_config = ModelConfig(settings.model.name, settings.data.patch_size, exp.bands,
                               exp.n_classes, settings.model.width, settings.model.batch_norm,
                               settings.model.precision,
                               model=shared.get_model(settings.model.name))
    recipe = training_recipe(settings, exp)
    prior = _spectral_prior(settings, exp)
    with settings.blame("model", "patch_size", "width"):
        spec = model_spec(model_config)
    caps, cube = _check_fits(shared, exp, model_config, recipe, spec)
    # The checkpoint's step and epoch.
    start_step = (run_folder.checkpoint_step(model_dir) or 0) if resume else 0
    first_epoch = start_step // steps_per_epoch
    _say_past_the_end(start_step, settings.recipe.epochs * steps_per_epoch,
                      "--max_steps" if capped else "--epochs=%d" % given.recipe.epochs)
    # Every invocation's epochs: a resumed run keeps those before its checkpoint (read
    # here, written once an epoch ends).
    record = run_folder.History.open(model_dir, resume, first_epoch, start_step, shared.argv)
    # the plan before the folder: a mesh or split the planner refuses leaves it as it was
    plan, fastest, runner_up = _plan(shared, spec, model_config, caps, model_dir, recipe,
                                     first_epoch, record.trial)
    # the input is good: now the folder is made (an old run deleted with --overwrite)
    _make_folder(given, model_dir, data_config, exp, replaced, prior)
    print(plan.explain(), flush=True)
    trainers = Trainers(shared, model_config, exp, recipe, model_dir, seed,
                        ProgressLine(log_every=folder.log_every), cube)
    trial = alone_trial(settings, shared.hardware, spec, plan, fastest, model_config, recipe,
                        first_epoch, record.trial, runner_up)
    if trial is not None:   # a trial taken up may start on the device alone or the winner
        plan, record.trial = trial.plan, trial.record()
    loop = EpochLoop(trainers, plan, resume, record, trial, shared.signals, spec, settings,
                     model_dir, steps_per_epoch, recipe.look_yields)
    window = settings.smoothing_window()   # None: chosen on the validation pixels
    classified, step = _train_and_classify(
        loop, first_epoch, exp, recipe, settings.recipe.tta, window,
        settings.recipe.smoothing_guide, prior, shared.signals,
        run_folder.resume_flags(settings.model_dir))
    try:
        predicted_map, scored, paired, smoothed = scoring.scores(
            exp, classified, leakage, settings.recipe.tta, window)
        fit = scoring.training_fit(exp, classified)
        pictures = scoring.save_pictures(model_dir, loop.trainer.writer, step, exp,
                                         predicted_map, scored)
    finally:
        loop.trainer.close()
    best = loop.best
    results = {"flags": {**given.flag_values(), "seed": seed},
               "working_dir": os.getcwd(),   # the flags' relative paths are from here
               "epochs": settings.recipe.epochs,
               "plan": trainers.recorded(loop.plan),
               "plans": record.plans,
               "history": record.epochs,
               "invocations": record.invocations,
               "trial": record.trial,
               "step": step,
               "best_epoch": None if best.epoch is None else best.epoch + 1,
               "nodata_pixels": exp.nodata_pixels,
               "split": exp.split.description,
               "leakage": leakage,
               "validation": {"kind": experiment.validation_kind(data_config),
                              "pixels": len(exp.val) if exp.val else 0,
                              "guard_dropped": exp.guard_dropped},
               "smoothing": smoothed,
               "training_fit": fit,
               "test": report.scores_dict(scored, exp.scene.class_names, exp.train_counts),
               **paired,
               "pictures": list(pictures),
               "seconds": time.time() - started}
    files.write_json(os.path.join(model_dir, run_files.RESULTS), results)
    print("results, maps and checkpoints in %s" % model_dir)


def _say_past_the_end(step, steps, flag):
    """Says when a resumed run's checkpoint (at ``step``) is already past the ``steps``
    its ``flag`` allows (e.g. --epochs lowered on --resume): it trains no further."""
    if step >= steps:
        print("the run is at step %d and %s asks for %d: it trains no further, and is "
              "scored now" % (step, flag, steps), flush=True)


def _say_max_steps(recipe, epochs, steps_per_epoch):
    """Says when --max_steps (``recipe``: the flags given) changes the epochs trained
    (``epochs``): one whole epoch when it allows less, else the whole epochs it allows."""
    if 0 < recipe.max_steps < steps_per_epoch:
        print("training one whole epoch of %d steps: --max_steps=%d is less than one (a run "
              "trains whole epochs)" % (steps_per_epoch, recipe.max_steps), flush=True)
    elif epochs < recipe.epochs:
        print("training %d of --epochs=%d: --max_steps=%d allows %d whole epoch%s of %d steps"
              % (epochs, recipe.epochs, recipe.max_steps, epochs, "" if epochs == 1 else "s",
                 steps_per_epoch), flush=True)


def _finished(model_dir, recipe, steps_per_epoch, longer):
    """Whether the resumed run in ``model_dir`` is finished: scored at its checkpoint,
    after its ``recipe.epochs`` or an early stop under ``recipe.patience``; says so,
    where its results are, and the flag that trains it longer (``longer``, or
    --patience)."""
    results = run_folder.scored_at_checkpoint(model_dir)
    if results is None:
        return False
    where = os.path.join(model_dir, run_files.RESULTS)
    if results["step"] >= recipe.epochs * steps_per_epoch:
        trained = -(-results["step"] // steps_per_epoch)   # its epochs, the last maybe cut
        print("the run in %s is finished (%d epoch%s, step %d); its results are in %s; "
              "to train longer, resume with a larger %s"
              % (model_dir, trained, "" if trained == 1 else "s", results["step"], where,
                 longer), flush=True)
        return True
    epochs = results.get("history") or []
    best = BestEpoch(model_dir, steps_per_epoch, recipe.patience, epochs)
    if not (epochs and best.should_stop(epochs[-1]["epoch"])):
        return False
    print("the run in %s is finished: it stopped early after epoch %d (step %d), no better "
          "validation accuracy since epoch %d; its results are in %s; to train longer, "
          "resume with a larger --patience (now %d)"
          % (model_dir, epochs[-1]["epoch"] + 1, results["step"], best.epoch + 1, where,
             recipe.patience), flush=True)
    return True


def _check_fits(shared, exp, model_config, recipe, spec):
    """(each device's memory for the model: found once, or a --plan file's caps, less the
    scene's cube that every device holds beside it, the caps the plans are made within;
    the cube's bytes), after the checks that every device holds the scene's cube and
    that the model fits the devices beside it (--plan's plan: is of this model)."""
    settings, devices = shared.settings, shared.hardware.devices
    given_plan = shared.hardware.given_plan
    caps = memory_caps(settings, devices, given_plan)
    bands = recipe.scene_bands(model_config)
    with settings.blame(*settings.scene_flags(), "devices",   # every device holds the cube
                        *(("memory_caps",) if settings.placement.memory_caps else ()),
                        *(("plan",) if given_plan is not None else ())):
        scene_input.check_cube_fits(exp.scene.image_shape, settings.data.patch_size, bands,
                                    devices, caps)
    cube = scene_input.cube_bytes(exp.scene.image_shape, settings.data.patch_size, bands)
    if given_plan is None:   # memory and the mesh before work: before any folder or profiling
        check_batch_rows(settings, spec)
        check_memory(settings, devices, spec, caps, cube)
    else:
        where = "plan file %s" % settings.placement.plan
        with settings.blame("plan"):
            try:
                given_plan.check_model(spec, where)
            except InvalidInput as error:
                raise InvalidInput("%s; e.g. python scripts/plan_layout.py %s"
                                   % (error, _planning_flags(settings, model_config))) from error
        with settings.blame("plan", "batch_size"):
            given_plan.check_batch(settings.recipe.batch_size, where)
        with settings.blame(*settings.scene_flags(), "plan"):
            check_plan_memory(given_plan, caps, cube)
    return beside_cube(caps, cube), cube


def _spectral_prior(settings, exp):
    """The run's spectral prior (``--spectral_prior`` below 1: an
    ``hmp.evaluation.spectral_prior.SpectralPrior`` fitted on the training pixels'
    patch-mean spectra, all bands as scaled), or None."""
    weight = settings.recipe.spectral_prior
    if weight == 1:
        return None
    return SpectralPrior.fit(exp.all_bands, exp.train.indices, exp.train.class_ids,
                             exp.n_classes, weight)


def _make_folder(settings, model_dir, data_config, exp, replaced, prior):
    """The seed's folder made (emptied with --overwrite), with what hmp.predict and
    scripts/baselines.py read back: the data (data.json, the split), the fitted
    preprocessing (``prior`` beside it), and this invocation's flags (a resume's replace
    the earlier ones: the data and graph flags are the same, checked; its --model_dir,
    --epochs or devices may be new, and the flag file continues the run as it goes on
    now)."""
    run_folder.prepare_model_dir(model_dir, settings.folder.overwrite, replaced)
    experiment.save(model_dir, data_config, exp.split)
    fitted_preprocessing.save(model_dir, exp.preprocessor, exp.scene.raster.wavelengths,
                             exp.guide, exp.scene.raster.wavelength_units, prior)
    run_folder.save_flags(settings.model_dir, settings.flag_lines())


def _planning_flags(settings, model_config):
    """The flags of scripts/plan_layout.py that plan for this run's model
    (``model_config``), precision, batch norm and batch."""
    return ("--model=%s --width=%d --patch_size=%d --bands=%d --classes=%d --precision=%s "
            "--batch_norm=%s --batch_size=%d"
            % (settings.model.name, model_width(model_config), model_config.patch,
               model_config.bands, model_config.n_classes, model_config.precision,
               model_config.batch_norm, settings.recipe.batch_size))


def _plan(shared, spec, model_config, caps, model_dir, recipe, first_epoch, recorded_trial):
    """(the plan, the device fastest alone or None, the trial's runner-up or None):
    --plan's, else made now (a run from ``first_epoch``; ``recorded_trial``: --try_alone's
    record before a resume)."""
    settings, hardware = shared.settings, shared.hardware
    if hardware.given_plan is not None:   # the device fastest alone is not known
        # its re-plans (--rebalance) within the memory left beside the cube, as a plan
        # made here: the file's caps are each device's whole memory
        return dataclasses.replace(hardware.given_plan, memory_caps=caps), None, None
    with settings.blame("devices", "speeds", "mesh", "batch_size", "batch_norm"):
        return choose_plan(settings, hardware, spec, model_config, caps, model_dir, recipe,
                           first_epoch, recorded_trial)


def _train_and_classify(loop, first_epoch, exp, recipe, tta, window, guided, prior, signals,
                        resume_flags):
    """(``hmp.run.scoring.Classified``, the step training ended at) after
    ``loop``'s epochs from ``first_epoch``. A signal: every trainer closed and
    :class:`hmp.cli.Interrupted` naming where it stopped and the flags that continue
    the run (``resume_flags``); any other error: every trainer closed, the error raised."""
    try:
        stats = loop.train(first_epoch)
        loop.close_spare()
        warning = stats and stats.fit_warning(recipe.augmentation)
        if warning:
            print(warning, flush=True)
        return scoring.classify(loop.trainer, loop.best, exp, tta, window, guided, prior)
    except Stopped as stopped:
        loop.close_all()
        where = ("while classifying (training had finished at step %d)" % stopped.step
                 if stopped.classifying else
                 "at epoch %d step %d" % (stopped.epoch + 1, stopped.step))
        raise cli.Interrupted("interrupted %s; continue with %s" % (where, resume_flags),
                              signals.signum) from None
    except BaseException:   # e.g. a lost worker: no session outlives the workers it used
        loop.close_all(after_error=True)
        raise
