"""The training loop: epochs of ordered steps, checkpoints, evaluation.

A run is a sequence of global steps; epoch ``e`` visits the training set in
the order fixed by (seed, e), dropping the last partial batch (the next
epoch's shuffle reaches those pixels). Checkpoints hold the whole tensors
(the master variables and the global step), so a run resumes at the exact
step, with the same data order, under any plan or device set.
"""

import dataclasses
import itertools
import math
import os
import tempfile
import time

import numpy as np
import tensorflow.compat.v1 as tf

from hmp.cli import TrainingError
from hmp.cluster.sessions import CLOSE_WAIT_S, close_session
from hmp.data.patches import padded_batches
from hmp.errors import InvalidInput, op_error_line
from hmp.graph.augment import SYMMETRIES, symmetry_probabilities
from hmp.run import events, run_files
from hmp.run.look_yield import FIT_ACCURACY
from hmp.run.profiler import run_traced
from hmp.run.progress import rate_and_eta


# Steps of an epoch traced for the devices' busy times (``traced_steps``).
TRACED_STEPS = 3
# The fewest steps a part of an epoch needs for its busy times and a steady rate (one
# step's graph optimisation, the traced steps, and two more): a pause (``train_epoch``)
# leaves at least as many.
MEASURED_STEPS = TRACED_STEPS + 3
# Steps between two reads of the loss and accuracy, which the devices keep summing
# (``hmp.graph.graph.DeviceMetrics``); also read at the epoch's end and before a checkpoint.
METRICS_EVERY = 20


def traced_steps(start_step, steps_per_epoch):
    """The 0-based indices, among the steps an epoch runs from ``start_step`` on, of those
    to trace: the second, then up to ``TRACED_STEPS - 1`` more evenly spread to its
    last (fewer on a short epoch)."""
    total = steps_per_epoch - start_step
    if total < 2:
        return set()
    return {1 + (total - 2) * k // max(1, TRACED_STEPS - 1) for k in range(TRACED_STEPS)}


def block_size(done, total, steps_per_run, traced):
    """How many steps the next ``session.run`` of an epoch runs, ``done`` of its
    ``total`` steps run: ``steps_per_run`` where the block fits in the epoch and holds
    no step to be traced (``traced``: indices among the epoch's steps; each is traced
    alone), else 1. Two sizes only: each size's first run optimises its graph once."""
    if (steps_per_run == 1 or done + steps_per_run > total
            or any(n in traced for n in range(done, done + steps_per_run))):
        return 1
    return steps_per_run


def passes(before, after, every):
    """Whether counting from ``before`` to ``after`` reaches a multiple of ``every`` (0:
    never): a block's end at or past a step where a read or checkpoint is due."""
    return bool(every) and after // every > before // every


class Stopped(Exception):
    """Training stopped because ``stop()`` asked for it; a checkpoint at ``step`` is saved.

    ``epoch`` is 0-based; ``step`` the global step; ``classifying``: the stop
    came while predicting (training had finished).
    """

    def __init__(self, epoch, step, classifying=False):
        super().__init__("stopped at epoch %d step %d" % (epoch + 1, step))
        self.epoch, self.step, self.classifying = epoch, step, classifying


class Paused(Exception):
    """Training paused within epoch ``epoch`` (0-based) because ``pause()`` asked for it,
    with a checkpoint of global step ``step`` saved: another trainer goes on from it
    (a plan made ready during the epoch, ``hmp.run.epoch_loop``). ``stats``: the
    :class:`EpochStats` of the steps this trainer ran of the epoch (``steps``: how many;
    its time up to the pause's checkpoint; no validation accuracy)."""

    def __init__(self, epoch, step, stats):
        super().__init__("paused at epoch %d step %d" % (epoch + 1, step))
        self.epoch, self.step, self.stats = epoch, step, stats


@dataclasses.dataclass
class EpochStats:
    epoch: int
    loss: float
    train_accuracy: float
    samples_per_second: float
    seconds: float
    busy_seconds: list = None   # per device: the median of the epoch's traced steps
    # steps run: the epoch's last ones only, after a resume or a switch within it
    # (``Paused.stats``: the first ones, before the pause)
    steps: int = None
    val_accuracy: float = None  # overall accuracy on the validation pixels, if any
    # samples/s after the first two steps (one-off graph optimisation, the first traced
    # step), the later traced steps and the first block of several steps a run left out:
    # what the epoch's layout sustains; None when the epoch ran fewer than 3 steps
    steady_samples_per_second: float = None
    # the share of the measured field look's strength drawn (hmp.run.look_yield); None:
    # the whole, or no field look that yields
    look_strength: float = None

    @property
    def busy_share(self):
        total = sum(self.busy_seconds or [])
        return [b / total for b in self.busy_seconds] if total else []

    def fit_warning(self, augmentation):
        """One line when this epoch's training accuracy (augmented patches, dropout on)
        stays below ``FIT_ACCURACY``: the network does not fit its training pixels;
        else None."""
        if self.train_accuracy >= FIT_ACCURACY:
            return None
        share = 1.0 if self.look_strength is None else self.look_strength
        hint = ("; try more --epochs, or, if the scene's fields do not differ as much, weaken "
                "the field look below this epoch's --spectral_shift=%.3g --spectral_gain=%.3g"
                % (share * augmentation.spectral_shift, share * augmentation.spectral_gain)
                if augmentation.field_look else "; try more --epochs or a wider model")
        return ("training accuracy %.3f at epoch %d: the network does not fit its training "
                "pixels%s" % (self.train_accuracy, self.epoch + 1, hint))

    def line(self, epochs, steps_per_epoch):
        """The epoch's line; the speed and time are those of the steps it ran, which a
        resume or a switch within the epoch makes the last of its ``steps_per_epoch``."""
        busy = ("  busy " + " ".join("%.0f%%" % (100 * s) for s in self.busy_share)
                if self.busy_share else "")
        val = "" if self.val_accuracy is None else "  val acc %.3f" % self.val_accuracy
        part = ("" if self.steps is None or self.steps >= steps_per_epoch
                else " (its last %d of %d steps)" % (self.steps, steps_per_epoch))
        return ("epoch %d/%d  loss %.4f  train acc %.3f%s  %.0f samples/s  %.1f s%s%s"
                % (self.epoch + 1, epochs, self.loss, self.train_accuracy, val,
                   self.samples_per_second, self.seconds, part, busy))


class _EpochCount:
    """What the steps of an epoch run so far add up to: their count, the loss and
    accuracy sums last read off the devices, the busy times of the traced ones and the
    time of the steady ones (``EpochStats``).

    ``earlier``: the epoch's steps before this part of it that ``carried``, the sums at
    the checkpoint it resumes from, counts (0 at the epoch's start: nothing carried)."""

    def __init__(self, epoch, batch_size, look_strength, earlier, carried):
        self.epoch, self.batch_size, self.look_strength = epoch, batch_size, look_strength
        self.earlier = earlier
        self.carried = carried if earlier else (0.0, 0.0)
        self.loss_sum, self.correct = self.carried   # as last read
        self.counted = earlier   # the steps the sums cover
        self.steps = 0   # run here
        self.busy = []   # each traced step's busy seconds per device
        self.steady_steps, self.steady_seconds = 0, 0.0
        self.started = self._last_ended = time.perf_counter()

    def seconds(self):
        return time.perf_counter() - self.started

    def ran(self, size, steady):
        """``size`` more steps ran, just now; ``steady``: they count towards
        ``steady_samples_per_second``."""
        ended = time.perf_counter()
        self.steps += size
        if steady:
            self.steady_steps += size
            self.steady_seconds += ended - self._last_ended
        self._last_ended = ended

    def read(self, loss_sum, correct):
        """The sums read off the devices, over this part's steps so far."""
        self.loss_sum = loss_sum + self.carried[0]
        self.correct = correct + self.carried[1]
        self.counted = self.earlier + self.steps

    def loss_text(self):
        """The mean loss as the progress line shows it ("  loss 0.1234"; nothing until
        the sums are first read, ``METRICS_EVERY``)."""
        return "  loss %.4f" % (self.loss_sum / self.counted) if self.counted else ""

    def stats(self):
        """The ``EpochStats`` of the steps so far."""
        seconds = self.seconds()
        stats = EpochStats(
            self.epoch, self.loss_sum / self.counted if self.counted else float("nan"),
            self.correct / (self.counted * self.batch_size) if self.counted else float("nan"),
            self.steps * self.batch_size / seconds if seconds else 0.0, seconds,
            [float(np.median(b)) for b in zip(*self.busy)] if self.busy else None,
            self.steps, look_strength=self.look_strength)
        if self.steady_steps:
            stats.steady_samples_per_second = (self.steady_steps * self.batch_size
                                               / self.steady_seconds)
        return stats


class BestEpoch:
    """Keeps a checkpoint of the epoch with the best validation accuracy; early stopping.

    The checkpoint is ``best-ckpt-<step>`` in ``model_dir`` (its index file is
    ``best_checkpoint``: ``run_files.BEST_PREFIX``, ``BEST_CHECKPOINT``), apart from the
    run's own checkpoints, so ``--resume`` still continues from the last epoch.
    ``history``: the epochs recorded so far (dicts of :class:`EpochStats`), to carry the
    best one across a resume: the epoch whose last step (``steps_per_epoch`` an epoch)
    the best checkpoint holds, so that a tie, or a stop between an epoch's checkpoint and
    its best one, names the weights kept. ``patience``: stop after this many epochs
    without a better one (0: never).
    """

    def __init__(self, model_dir, steps_per_epoch, patience=0, history=()):
        self.model_dir = model_dir
        self.steps_per_epoch = steps_per_epoch
        self.patience = patience
        self.path = tf.train.latest_checkpoint(model_dir,
                                                latest_filename=run_files.BEST_CHECKPOINT)
        step = run_files.checkpoint_path_step(self.path)
        kept = None if step is None else step // steps_per_epoch - 1
        best = next((e for e in history
                     if e["epoch"] == kept and e.get("val_accuracy") is not None), None)
        self.epoch = best["epoch"] if best else None
        self.accuracy = best["val_accuracy"] if best else None

    def update(self, trainer, stats):
        """Saves ``trainer``'s weights if ``stats`` (just trained) has the best validation
        accuracy so far; returns whether it had. Of equal ones the later is kept: a
        validation share of a hundred pixels ties often, and the later epoch has
        trained longer (at a lower learning rate)."""
        if stats.val_accuracy is None or (self.accuracy is not None
                                          and stats.val_accuracy < self.accuracy):
            return False
        self._keep(trainer, stats.epoch, stats.val_accuracy)
        return True

    def catch_up(self, trainer, history):
        """On resume: keeps the weights ``trainer`` resumed with (the checkpoint at the end
        of ``history``'s last epoch) when that epoch is the best and its best checkpoint
        is not: the run stopped between the two saves (a kill). Returns whether it kept
        them."""
        last = history[-1] if history else None
        if (last is None or last.get("val_accuracy") is None or last["epoch"] == self.epoch
                or trainer.step != (last["epoch"] + 1) * self.steps_per_epoch
                or self.accuracy is not None and last["val_accuracy"] < self.accuracy):
            return False
        self._keep(trainer, last["epoch"], last["val_accuracy"])
        return True

    def _keep(self, trainer, epoch, accuracy):
        self.epoch, self.accuracy = epoch, accuracy
        self.path = trainer.save(prefix=run_files.BEST_PREFIX,
                                 latest_filename=run_files.BEST_CHECKPOINT, max_to_keep=1)

    def should_stop(self, epoch):
        """True when ``patience`` epochs have passed since the best one."""
        return bool(self.patience) and self.epoch is not None and (
            epoch - self.epoch >= self.patience)


class Trainer:
    """Trains one ``TrainingGraph`` on an :class:`hmp.run.experiment.Experiment`.

    Args:
      graph: the lowered model (a ``TrainingGraph``).
      experiment: the datasets.
      model_dir: where checkpoints and event files go.
      seed: fixes the data order of every epoch.
      session_config: ``tf.ConfigProto`` (e.g. the virtual CPU devices).
      target: session target (a gRPC address for cluster runs) or "".
      checkpoint_every: also checkpoint every this many steps (0: only at epochs); with
        several steps a run, at the first block's end at or past each multiple.
      log: function receiving progress lines.
      slowdown: {device: factor} multiplying that device's measured busy time,
        a stand-in for a slower device when all devices are virtual CPUs of
        one process (tests of re-balancing); real speed differences need
        separate worker processes.
      stop: callable polled after every step (every block of several steps a run); when
        it returns true, the trainer finishes that step, saves a checkpoint and raises
        :class:`Stopped` (e.g. on Ctrl-C). None: never.
      progress: callable receiving a progress text after every step (block) and
        prediction batch, and None when the work ends (see
        :class:`hmp.run.progress.ProgressLine`). None: no progress.
    """

    def __init__(self, graph, experiment, model_dir, seed=0, session_config=None, target="",
                 checkpoint_every=0, log=print, slowdown=None, stop=None, progress=None):
        self.graph = graph
        self.experiment = experiment
        self.model_dir = model_dir
        self.seed = seed
        self.checkpoint_every = checkpoint_every
        self.log = log
        self.slowdown = dict(slowdown or {})
        self.stop = stop or (lambda: False)
        self.progress = progress or (lambda text: None)
        self.batch_size = graph.batch_size
        self.steps_per_epoch = experiment.steps_per_epoch(self.batch_size)
        self.session = tf.Session(target, graph=graph.tf_graph, config=session_config)
        self._savers = {}   # latest_filename -> tf.train.Saver, for other checkpoint series
        self._synced = (None, set())   # (a global step, what _sync did at it)
        try:   # a failed load (memory, a lost worker) leaves no session open
            graph.load_scene(self.session, (experiment.all_bands if graph.projection is not None
                                             else experiment.train.extractor).padded)
            with graph.tf_graph.as_default():
                self.writer = tf.summary.FileWriter(model_dir, graph.tf_graph)
        except BaseException:
            close_session(self.session)
            raise

    # -- state ---------------------------------------------------------------
    def initialise(self, resume, switch=False):
        """Fresh weights, or the latest checkpoint when ``resume``; returns the step.
        ``switch``: the run goes on on another plan (the line says so, not "resumed")."""
        checkpoint = tf.train.latest_checkpoint(self.model_dir)
        if resume and checkpoint is None:
            raise InvalidInput("no checkpoint in %s to resume from" % self.model_dir)
        with self.graph.tf_graph.as_default():
            if resume:
                try:
                    self.graph.saver.restore(self.session, checkpoint)
                except tf.errors.NotFoundError as error:
                    raise InvalidInput(
                        "checkpoint %s was written by another model or optimizer (%s); "
                        "resume with the same --model, --width and --optimizer"
                        % (checkpoint, op_error_line(error, limit=300))) from None
                self.log(("the plan's graph goes on from %s" if switch else "resumed from %s")
                         % checkpoint)
                self.session.run(self.graph.metrics.reset)
            else:
                self.session.run(self.graph.init)
        self.session.run(self.graph.copy_masters_to_slices)
        self._synced = (None, set())
        if not resume:
            self.save()   # step 0: a run that fails at once still has a good checkpoint
        return self.step

    @property
    def step(self):
        return int(self.session.run(self.graph.global_step))

    def save(self, step=None, prefix="ckpt", latest_filename=None, max_to_keep=None):
        """Writes a checkpoint of the whole tensors at the current step; returns its path.

        ``step``: the global step if the caller knows it (saves reading it
        from the session); None reads it. ``prefix``, ``latest_filename`` and
        ``max_to_keep``: another series of checkpoints than the run's own
        (:class:`BestEpoch`'s), with its own saver.
        """
        step = self.step if step is None else int(step)
        self._sync(step, masters=True)
        saver = self.graph.saver
        if latest_filename is not None:
            if latest_filename not in self._savers:
                self._savers[latest_filename] = self.graph.series_saver(max_to_keep)
            saver = self._savers[latest_filename]
        # the series so far, whichever trainer wrote it (before a resume or a plan switch:
        # each graph has its saver), so that this saver keeps only its newest max_to_keep
        state = tf.train.get_checkpoint_state(self.model_dir, latest_filename)
        if state is not None:
            saver.recover_last_checkpoints(list(state.all_model_checkpoint_paths))
        # no .meta file: hmp.predict and the export build the graph from the model's code
        return saver.save(self.session, os.path.join(self.model_dir, prefix),
                          global_step=step,
                          latest_filename=latest_filename, write_meta_graph=False)

    def restore(self, path):
        """Loads the weights (and step) of the checkpoint ``path`` onto the devices."""
        self.graph.saver.restore(self.session, path)
        self.session.run(self.graph.copy_masters_to_slices)
        self._synced = (None, set())

    def _sync(self, step, masters=False):
        """Averages the batch replicas' local statistics (``average_replicas``) and, with
        ``masters``, copies the slices to the master variables a checkpoint holds; each
        once at global ``step`` (the weights change only with it, or by a restore, which
        starts over): an epoch's validation, its checkpoint and its best epoch's save
        share the round trips."""
        at, done = self._synced
        done = done if at == step else set()
        if "averaged" not in done:
            self.graph.average_replicas(self.session)
            done.add("averaged")
        if masters and "masters" not in done:
            self.session.run(self.graph.copy_slices_to_masters)
            done.add("masters")
        self._synced = (step, done)

    def warm_up(self, look_strength=None):
        """Runs once each what an epoch runs, so that the devices have prepared each part
        before it counts (a session prepares each set of fetched and fed tensors at its
        first run): one training step (and one block of ``steps_per_run``, when more
        than one), the read of the metrics, a batch classified as validation classifies,
        and a checkpoint saved, into a scratch folder. It changes the weights and the
        step: restore a checkpoint after it. ``look_strength`` as for ``train_epoch``
        (fed or not as training will)."""
        batches = self.experiment.epoch_batches(self.batch_size, self.seed)
        pairs = [(b.indices, b.labels)
                 for b in itertools.islice(batches, self.graph.steps_per_run)]
        self.session.run(self.graph.metrics.reset)   # local: a restore does not set them
        self.graph.load_batches(self.session, pairs)   # taken as an epoch's steps take theirs
        sizes = {1, self.graph.steps_per_run}   # the blocks an epoch runs (block_size)
        for size in sorted(n for n in sizes if n <= len(pairs)):
            self.session.run(*self.graph.kept_steps(size, look_strength))
        step = self.step
        self.graph.metrics.read(self.session)
        self._classify(pairs[0][0])
        self._sync(step, masters=True)
        with tempfile.TemporaryDirectory(prefix="hmp-warm-up-") as scratch:
            self.graph.series_saver(None).save(self.session, os.path.join(scratch, "ckpt"),
                                               write_meta_graph=False)

    # -- training ------------------------------------------------------------
    def train_epoch(self, epoch, epochs, before_save=None, look_strength=None, carried=None,
                    before_checkpoint=None, pause=None):
        """Runs the rest of epoch ``epoch``; returns its :class:`EpochStats`.

        Up to ``TRACED_STEPS`` steps spread over the epoch, from its second on, are
        traced to measure each device's busy time (the median of each device's; the
        first step may still include one-off graph optimisation). A graph of several
        steps per run (``TrainingGraph.steps_per_run``) runs them in blocks
        (:func:`block_size`): a traced step runs alone, the metrics are read and a
        checkpoint saved at the first block's end at or past each step they are due,
        and ``stop()`` is polled after each block.
        ``before_save(stats)`` is called before the epoch's checkpoint is
        written (a record of the epoch then never lags its checkpoint);
        ``before_checkpoint(step, loss_sum, correct)`` before a checkpoint within the
        epoch (``checkpoint_every``, a stop), with the sums of the epoch's steps so far.
        ``carried``: those sums at the checkpoint this part of the epoch resumes from,
        so that its loss and accuracy count every step of the epoch (None: the steps
        run here only). ``look_strength``: the share of the field look's strength drawn
        (None: all; ``hmp.run.look_yield``).
        Raises :class:`Stopped` after the block during which ``stop()`` became
        true, with a checkpoint of its last step saved (in the epoch's last block or
        its validation: the epoch recorded first, ``before_save``, without validation).
        ``pause(steps_left, steady_steps, steady_seconds)``: polled after each block that
        leaves ``MEASURED_STEPS`` or more of the epoch (None: never), with the steps and
        seconds so far that ``steady_samples_per_second`` counts (so a caller times steps
        as the epoch's rate is timed); when it returns true the trainer calls
        ``before_checkpoint``, saves a checkpoint of its last step and raises
        :class:`Paused`.
        """
        start_step = self.step - epoch * self.steps_per_epoch
        batches = list(self.experiment.epoch_batches(self.batch_size, self.seed, epoch,
                                                     start_step))
        # the devices keep the epoch's batches: its steps feed nothing
        self.graph.load_batches(self.session, [(b.indices, b.labels) for b in batches])
        self.session.run(self.graph.metrics.reset)
        count = _EpochCount(epoch, self.batch_size, look_strength,
                            start_step if carried is not None else 0, carried)
        traced = traced_steps(start_step, self.steps_per_epoch)
        compiled = set()   # the block sizes run once already (the first one optimises)
        step, total = None, len(batches)
        while count.steps < total:
            size = block_size(count.steps, total, self.graph.steps_per_run, traced)
            if count.steps in traced:
                step, step_busy = self._traced_step(*self.graph.kept_steps(1, look_strength))
                count.busy.append(step_busy)
            else:
                step = self.session.run(*self.graph.kept_steps(size, look_strength))
            count.ran(size, steady=count.steps not in traced and size in compiled)
            compiled.add(size)
            last = start_step + count.steps == self.steps_per_epoch   # the epoch's end saves it
            checkpoint = passes(step - size, step, self.checkpoint_every) and not last
            stopping = self.stop()
            pausing = (not stopping and pause is not None and total - count.steps >= MEASURED_STEPS
                       and pause(total - count.steps, count.steady_steps, count.steady_seconds))
            if (passes(count.steps - size, count.steps, METRICS_EVERY) or last or checkpoint
                    or stopping or pausing):
                count.read(*self._read_metrics(step, epoch))   # before any save
            part = count.stats() if pausing else None   # the steps, not the pause's save
            if (checkpoint or stopping or pausing) and not last and before_checkpoint is not None:
                before_checkpoint(int(step), count.loss_sum, count.correct)
            if checkpoint or pausing:
                self.save(step)
            if pausing:
                self.progress(None)
                raise Paused(epoch, int(step), part)
            if stopping:
                self.progress(None)
                if last and before_save is not None:
                    before_save(count.stats())
                if not checkpoint:
                    self.save(step)
                raise Stopped(epoch, int(step))
            self.progress("epoch %d/%d  step %d/%d%s  %s" % (
                epoch + 1, epochs, start_step + count.steps, self.steps_per_epoch,
                count.loss_text(), rate_and_eta(count.steps, total, count.seconds(),
                                                self.batch_size)))
        self.progress(None)
        return self._end_epoch(count.stats(), self.step if step is None else int(step),
                               before_save)

    def _end_epoch(self, stats, step, before_save):
        """Validates (``stats.val_accuracy``), calls ``before_save``, saves the checkpoint of
        ``step`` (the epoch's last) and writes the summaries; returns ``stats``. A stop while
        validating records the epoch without it, then raises :class:`Stopped`."""
        stopped = False
        try:
            stats.val_accuracy = self.validation_accuracy()
        except Stopped:   # while validating: the epoch is whole, recorded without it
            stopped = True
        if before_save is not None:
            before_save(stats)
        self.save(step)
        if stopped:
            raise Stopped(stats.epoch, step)
        self._summaries(stats, step)
        return stats

    def validation_accuracy(self):
        """The share of the validation pixels the weights classify right (None: the run
        holds none out); :class:`Stopped` when a stop is asked meanwhile."""
        val = self.experiment.val
        return None if val is None else float(np.mean(self.predict(val) == val.class_ids))

    def _read_metrics(self, step, epoch):
        """(sum of the steps' mean losses, samples classified right) over the epoch's
        steps so far, read off the devices (``hmp.graph.graph.DeviceMetrics``); a
        loss that is no longer finite stops the run before anything is saved."""
        loss_sum, correct = self.graph.metrics.read(self.session)
        if not math.isfinite(loss_sum):
            raise TrainingError(
                "loss became %s by step %d (epoch %d); the last good checkpoint in %s "
                "is kept: lower --learning_rate or change --optimizer"
                % (loss_sum, step, epoch + 1, self.model_dir))
        return float(loss_sum), float(correct)

    def _traced_step(self, fetches, feed):
        """One step with TensorFlow tracing; returns its values and per-device busy seconds."""
        values, busy = run_traced(self.session, fetches, feed, list(self.graph.placement.devices))
        return values, [b * self.slowdown.get(d, 1.0)
                        for b, d in zip(busy, self.graph.placement.devices)]

    def _summaries(self, stats, step):
        events.add_scalars(self.writer, step,
                           events.epoch_scalars(stats, self.graph.placement.devices))

    # -- inference -----------------------------------------------------------
    def predict(self, dataset):
        """Predicted 0-based class of every pixel of ``dataset``, in its order (its patches
        as they are)."""
        return self.probabilities(dataset.indices)[0].argmax(axis=1)

    def probabilities(self, pixels, tta=False):
        """Class probabilities [variants, pixels, classes] of the scene's ``pixels`` (flat
        indices, labelled or not), in their order: of each patch as it is and, with
        ``tta``, in each other symmetry of the square
        (``hmp.graph.augment.symmetry_probabilities``)."""
        self._sync(self.step)
        variants = []
        batches, started = -(-len(pixels) // self.batch_size), time.perf_counter()
        for start, count, indices in padded_batches(pixels, self.batch_size):
            if self.stop():
                self.progress(None)
                raise Stopped(self.step // self.steps_per_epoch, self.step, classifying=True)
            variants.append(self._classify(indices, tta)[:, :count])
            done = start // self.batch_size + 1
            self.progress("classifying  batch %d/%d  %s" % (
                done, batches, rate_and_eta(done, batches, time.perf_counter() - started,
                                            self.batch_size)))
        self.progress(None)
        if not variants:
            return np.zeros((SYMMETRIES if tta else 1, 0, self.experiment.n_classes), np.float32)
        return np.concatenate(variants, axis=1)

    def _classify(self, indices, tta=False):
        """Class probabilities [variants, batch_size, classes] of one batch of flat pixel
        ``indices`` (``batch_size`` of them)."""
        labels = np.zeros(self.batch_size, np.int32)
        return symmetry_probabilities(
            self.session, self.graph.probabilities,
            lambda k: self.graph.feed(indices, labels, training=False, symmetry=k), tta)

    def close(self, wait_s=CLOSE_WAIT_S):
        """Closes the event file and the session (``close_session``: a session whose
        step failed on a lost worker is left to close on its own after ``wait_s``)."""
        self.writer.close()
        close_session(self.session, wait_s)

