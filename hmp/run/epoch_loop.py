"""One seed's epochs: each epoch trained on the current plan, recorded (history.json,
the best epoch's weights), checked for early stop, then the plan switched when it
changes (``--try_alone``'s trial, ``--rebalance=epoch``'s re-plans:
``hmp.run.rebalance``).

A switch keeps the graph it leaves (a switch back restores the checkpoint into it
instead of building it anew); a plan the rebalancer waits for has its graph made ready
on a thread meanwhile (``hmp.run.standby``), and once it is, the rebalancer weighs the
switch again within the epoch, once ``CONFIRM_STEPS`` steps run since have kept the rate
its speeds were measured at (else the machine changed since the epochs they come from,
and they are measured anew): a switch that then pays is made there, after the block of steps then running
(``Trainer.train_epoch``'s ``pause``). Every switch goes on from the latest checkpoint:
the same weights on another plan. The epochs a graph was built in, and the part of one
before such a switch, are measured as disturbed: what they lost is what the build cost.
"""

import contextlib
import functools
import time

import tensorflow.compat.v1 as tf

from hmp.cluster.sessions import CLOSE_WAIT_S
from hmp.run import rebalance
from hmp.run.look_yield import LookYield
from hmp.run.standby import Standby
from hmp.run.trainer import BestEpoch, Paused, Stopped, Trainer

# Steady steps run after a standby is ready within an epoch, timed (as the trainer
# times an epoch's steady rate) before a switch is weighed.
CONFIRM_STEPS = 3


class EpochLoop:
    """The epochs of one seed on its plans, started on ``plan`` (its trainer from
    ``trainers.start(plan, resume)``; ``trainers.build(plan)`` makes a standby's;
    ``trainers.recorded(plan)``: each plan as ``record`` keeps it).

    ``record``: its :class:`hmp.run.run_folder.History`; ``trial``: the alone trial or None;
    ``signals``: armed once the first trainer runs (a signal then stops after a step,
    with a checkpoint); ``spec``: the model's (the rebalancer prices plans with it);
    ``look_yields``: the measured field look yields when the network does not fit
    (``hmp.run.look_yield``).
    ``plan``, ``trainer`` and ``best`` (:class:`hmp.run.trainer.BestEpoch`) are the
    current ones.
    """

    def __init__(self, trainers, plan, resume, record, trial, signals, spec, settings,
                 model_dir, steps_per_epoch, look_yields=False):
        self.trainers, self.plan, self.record, self.trial = trainers, plan, record, trial
        self.model_dir, self.steps_per_epoch = model_dir, steps_per_epoch
        self.epochs, self.patience = settings.recipe.epochs, settings.recipe.patience
        self.batch_size = settings.recipe.batch_size
        started_at = time.perf_counter()
        self.trainer = trainers.start(plan, resume)
        # The switch into the next epoch and its seconds: the first start is a new graph's.
        self.switched = ("build", time.perf_counter() - started_at)
        self.kept = {}   # plan_key -> the open trainer of a plan before: a switch back reuses it
        self.standby = None   # the graph of the plan the rebalancer waits for, made ready
        self.unready = set()   # plan_keys whose standby failed: a switch there builds anew
        self.due = None   # the plan to switch to within the epoch (_switch_due)
        self.confirming = None   # (steady steps, seconds) when a standby got ready this epoch
        self.unsaid = []   # lines of a standby taken within an epoch, said at its pause or end
        placement = settings.placement
        self.rebalancer = (rebalance.Rebalancer(spec, placement.rebalance_threshold)
                           if placement.rebalance == "epoch" else None)
        signals.armed = True   # from now on a signal stops after the step, with a checkpoint
        record.add_plan(trainers.recorded(plan))
        self.best = BestEpoch(model_dir, self.steps_per_epoch, self.patience, record.epochs)
        self.look = LookYield(self.epochs, look_yields, record.epochs)

    def train(self, first_epoch):
        """Trains from ``first_epoch`` to the last epoch or an early stop; returns the
        last epoch's :class:`hmp.run.trainer.EpochStats` (None: none was left, or the
        resumed run had stopped early)."""
        stats = None
        self._validate_resumed_epoch()
        self.best.catch_up(self.trainer, self.record.epochs)   # killed before its best save
        if first_epoch and self.best.should_stop(first_epoch - 1):   # stopped before a resume
            self._say_early_stop()
            return stats
        # the sums of the steps before a checkpoint within the first epoch, if recorded
        carried = self.record.carried(self.trainer.step, self.batch_size)
        for epoch in range(first_epoch, self.epochs):
            stats, building = self._train_epoch(epoch, carried)
            carried = None
            self.best.update(self.trainer, stats)
            self._say(stats.line(self.epochs, self.steps_per_epoch))
            yielded = self.look.after_epoch(epoch, stats.train_accuracy)
            if yielded:
                print(yielded, flush=True)
            if self.best.should_stop(epoch):
                self._say_early_stop()
                break
            self._between_epochs(epoch, stats, disturbed=building)
        return stats

    def _validate_resumed_epoch(self):
        """A run stopped while it validated its last epoch (or in that epoch's last steps)
        recorded it without validation and checkpointed its weights, which it resumes
        with: they are validated now, so that the best epoch and the early stop count it
        as an uninterrupted run does."""
        last = self.record.epochs[-1] if self.record.epochs else None
        if (last is None or last.get("val_accuracy") is not None
                or self.trainer.step != (last["epoch"] + 1) * self.steps_per_epoch):
            return
        try:
            accuracy = self.trainer.validation_accuracy()
        except Stopped:   # stopped again: a stop of training at that epoch's end, as before
            raise Stopped(last["epoch"], self.trainer.step) from None
        if accuracy is not None:
            self.record.validated(accuracy)
            print("epoch %d, stopped while it was validated: val acc %.3f"
                  % (last["epoch"] + 1, accuracy), flush=True)

    def _say_early_stop(self):
        print("early stop: no better validation accuracy for %d epochs" % self.patience,
              flush=True)

    def _train_epoch(self, epoch, carried):
        """(the ``EpochStats`` of ``epoch``, whether a graph was made ready on the devices
        while it trained: its speeds are left out, what it lost is the build's cost).
        ``carried``: the sums of its steps before the checkpoint it goes on from. While a
        standby is made ready the epoch is polled after each block; a switch due once it
        is ready (``_switch_due``) is made there (the part before it measured as
        disturbed), and the epoch goes on on the new plan, whose part alone its stats
        then time, as a resumed epoch's."""
        building, self.confirming = self.standby is not None, None
        while True:
            try:
                return self.trainer.train_epoch(
                    epoch, self.epochs, before_save=self._record,
                    look_strength=self.look.strength, carried=carried,
                    before_checkpoint=functools.partial(self.record.add_partial,
                                                        batch_size=self.batch_size),
                    pause=functools.partial(self._switch_due, epoch) if building else None,
                ), building
            except Paused as paused:   # its part ran while the standby was built
                self.rebalancer.measure(self.plan, paused.stats, disturbed=True)
                self.unsaid.append(self.rebalancer.message)
                self._say()
                carried = self.record.carried(paused.step, self.batch_size)
                self._switch(self.due)
                self.due, building = None, False   # no standby is under way any more
            except BaseException:   # a stop or an error: what the epoch took is said
                self._say()
                raise

    def _say(self, *lines):
        """Prints ``lines``, then the lines of a standby taken within the epoch."""
        said = [*lines, *self.unsaid]
        if said:
            print("\n".join(said), flush=True)
        self.unsaid = []

    def _switch_due(self, epoch, steps_left, steady_steps, steady_seconds):
        """Polled after each block of ``epoch`` that leaves ``steps_left`` of its steps
        while a standby is made ready (``steady_steps`` and ``steady_seconds``: the
        trainer's counts of the epoch's steady steps so far): once it is (or failed), it
        is taken as after an epoch (``_standby_done``; its line is said when the epoch
        pauses or ends). Once ``CONFIRM_STEPS`` more steady steps have run, at the rate
        the rebalancer's speeds hold for
        this plan (``Rebalancer.confirm``; else the machine changed, and the rebalancer
        weighs nothing until an epoch is measured again), it weighs the plans in play
        over the epochs left, the share of this one left included. Returns whether a
        switch is due (to ``due``): the epoch then pauses for it; else it goes on, and
        its end weighs again (and says so)."""
        standby = self.standby
        if self.confirming is None:
            if standby is None or not (standby.ready or standby.failed):
                return False
            self.standby, failure = None, self._standby_done(standby)
            self.unsaid.append(failure or "standby: the graph of %s is ready, within epoch %d"
                               % (rebalance.describe_splits(standby.plan), epoch + 1))
            self.confirming = (steady_steps, steady_seconds)
            return False
        steps = steady_steps - self.confirming[0]
        if steps < CONFIRM_STEPS:
            return False
        seconds, self.confirming = steady_seconds - self.confirming[1], None
        rate = steps * self.batch_size / max(seconds, 1e-9)
        if not self.rebalancer.confirm(self.plan, rate):
            self.unsaid.append("re-balancing: %.0f samples/s over the %d steps since, off "
                               "the rate its speeds were measured at: the machine changed, "
                               "its speeds are measured anew" % (rate, steps))
            return False
        self.due = self.rebalancer.choose(
            self.plan, self.steps_per_epoch,
            self.epochs - epoch - 1 + steps_left / self.steps_per_epoch, self.kept)
        return self.due is not None

    def close_spare(self):
        """Closes the kept trainers and the standby (once its build has ended: it would
        share the devices and write in the run's folder): classifying needs only the
        trainer in use."""
        for other in self.kept.values():
            other.close()
        if self.standby:
            self.standby.close(wait_s=None)
        self.kept, self.standby = {}, None

    def close_all(self, after_error=False):
        """Closes every trainer open (after an error: quietly, the error to report is
        raised, waiting ``CLOSE_WAIT_S`` in all for the trainers' sessions, which a lost
        worker holds, and a standby's build; no session outlives the workers it used)."""
        quietly = functools.partial(contextlib.suppress, tf.errors.OpError) if after_error \
            else contextlib.nullcontext
        deadline = time.monotonic() + CLOSE_WAIT_S
        standby = [self.standby] if self.standby else []
        for closing in [self.trainer, *self.kept.values(), *standby]:
            with quietly():
                closing.close(max(0.0, deadline - time.monotonic()) if after_error
                              else CLOSE_WAIT_S)

    def _record(self, stats):
        """Records an epoch before its checkpoint: the trial's rate goes with it."""
        trial = self.trial
        if trial is not None and not trial.done:
            trial.measure(stats.epoch, stats.steady_samples_per_second
                          or stats.samples_per_second)
            self.record.trial = trial.record()
        self.record.add_epoch(stats)

    def _between_epochs(self, epoch, stats, disturbed):
        """After ``epoch`` (``stats``): the rebalancer measures it (``disturbed``: a
        standby was made ready during it: its speeds are left out, what it lost is the
        build's cost), a finished standby is taken, and the plan switches when it
        changes; a plan the rebalancer waits for gets a standby."""
        rebalancer = self.rebalancer
        if rebalancer is not None:
            rebalancer.measure(self.plan, stats, self.switched, disturbed)
        self.switched = None
        if self.standby is not None and (self.standby.ready or self.standby.failed):
            self.standby, failure = None, self._standby_done(self.standby)
            if failure:
                print(failure, flush=True)
        new_plan = self._next_plan(epoch)
        waiting = rebalancer and epoch + 1 < self.epochs and rebalancer.waiting
        key = waiting and rebalance.plan_key(waiting)
        if (new_plan is None and waiting and self.standby is None
                and key not in self.kept and key not in self.unready):
            print("standby: building the graph of %s while training goes on"
                  % rebalance.describe_splits(waiting), flush=True)
            rebalancer.standby_started()
            self.standby = Standby(waiting, self.trainers.build,
                                   lambda: tf.train.latest_checkpoint(self.model_dir),
                                   functools.partial(Trainer.warm_up,
                                                     look_strength=self.look.strength))
        if new_plan is not None:
            self._switch(new_plan)

    def _standby_done(self, standby):
        """Takes a finished ``standby``'s trainer into ``kept`` (a switch to its plan then
        restores a checkpoint, at about what its timed restore took), unless the seed is
        on that plan or keeps its graph already. Returns None, or the line that says why
        it failed (training goes on, a switch to that plan builds its graph anew)."""
        if standby.failed is not None:
            error = standby.failed
            self.unready.add(rebalance.plan_key(standby.plan))
            standby.close()
            return ("standby: the graph of %s could not be made ready (%s); a switch to "
                    "it builds it" % (rebalance.describe_splits(standby.plan),
                                      (str(error).splitlines() or [type(error).__name__])[0]))
        key = rebalance.plan_key(standby.plan)
        if key == rebalance.plan_key(self.plan) or key in self.kept:
            standby.close()
            return None
        self.kept[key] = standby.take()
        self.rebalancer.expect_reuse(standby.restore_seconds)
        return None

    def _next_plan(self, epoch):
        """The plan to go on with after ``epoch`` when it changes: the alone trial's
        choice after one of its epochs, or (--rebalance=epoch) a plan whose switch is
        predicted to pay back; else None."""
        trial, rebalancer = self.trial, self.rebalancer
        if trial is not None and epoch in trial.epochs.values():   # a trial epoch
            print(trial.message, flush=True)
            return trial.plan if trial.plan is not self.plan else None
        if rebalancer is not None and epoch + 1 < self.epochs:
            new_plan = rebalancer.choose(self.plan, self.steps_per_epoch,
                                         self.epochs - epoch - 1, self.kept)
            if rebalancer.message:
                print(rebalancer.message, flush=True)
            return new_plan
        return None

    def _switch(self, new_plan):
        """Goes on with ``new_plan`` from the latest checkpoint: on its kept graph when
        there is one, else on a new one; keeps the graph left (one besides the one used,
        and while the trial runs the plan's too: a switch back to it, the usual verdict,
        then restores). The other spare graphs are closed first; the plan changes once
        its trainer is there (after a failed build or restore, every open trainer is
        where ``close_all`` finds it)."""
        started_at = time.perf_counter()
        key = rebalance.plan_key(new_plan)
        keep = {key}
        if self.trial is not None and not self.trial.done:   # the plan may win the trial
            keep.add(rebalance.plan_key(self.trial.plans["split"]))
        for spare in [other for other in self.kept if other not in keep]:
            self.kept.pop(spare).close()
        previous = self.kept.pop(key, None)
        try:
            if previous is None:
                trainer = self.trainers.start(new_plan, resume=True, switch=True)
            else:
                previous.restore(tf.train.latest_checkpoint(self.model_dir))
                trainer = previous
        except BaseException:
            if previous is not None:   # where close_all finds it
                self.kept[key] = previous
            raise
        self.kept[rebalance.plan_key(self.plan)] = self.trainer
        self.plan, self.trainer = new_plan, trainer
        self.record.add_plan(self.trainers.recorded(new_plan))
        self.switched = ("build" if previous is None else "reuse",
                         time.perf_counter() - started_at)
