"""Re-planning between epochs: re-balancing, and the trial of the fastest device alone.

Re-balancing (DBS, Ye et al.; see BACKGROUND.md).

After an epoch the trainer knows how long each device was busy in a real
step (from TensorFlow's step statistics). A device's effective speed is the
work it was given (its predicted share of the step's FLOPs under the current
plan) divided by that busy time. If the busiest device took clearly longer
than the least busy one, the same mesh is planned again from those speeds;
the trainer then rebuilds its graph and carries the weights over through the
checkpoint (whole tensors), so only the splits change.

The trial of the fastest device alone. A plan over several devices is chosen
from a cost model, which can be wrong; the one-device layout of the fastest
device is the alternative a user would fall back to. ``AloneTrial`` trains
one epoch on each and keeps whichever ran more samples per second: a plan
that loses to the fastest device alone costs one epoch, not the run.
"""

import dataclasses

from hmp.planning import plan_layout

DEFAULT_THRESHOLD = 0.10


def imbalance(busy_seconds):
    """max/min busy time - 1: 0 when perfectly balanced."""
    busy = [b for b in busy_seconds if b > 0]
    if len(busy) < 2:
        return 0.0
    return max(busy) / min(busy) - 1.0


def measured_speeds(plan, busy_seconds):
    """Work per busy second of each device: its planned load / its busy time."""
    return [load / busy for load, busy in zip(plan.prediction.load, busy_seconds)]


def replan(plan, model_spec, busy_seconds, threshold=DEFAULT_THRESHOLD):
    """A new plan on the same mesh if the imbalance exceeds ``threshold``, else None.

    Returns None as well when re-planning gives the same splits (the shares
    are already as even as whole filters and samples allow).
    """
    if len(busy_seconds) != len(plan.devices) or min(busy_seconds) <= 0:
        return None
    if imbalance(busy_seconds) <= threshold:
        return None
    new_plan = plan_layout(model_spec, plan.devices, measured_speeds(plan, busy_seconds),
                           plan.batch_size, plan.mesh, replicated=plan.replicated_dims())
    if new_plan.splits == plan.splits:
        return None
    # still left out, still replicated
    return dataclasses.replace(new_plan, left_out=plan.left_out, replicated=plan.replicated)


class AloneTrial:
    """Epoch ``e`` on ``plan``, epoch ``e + 1`` on ``alone`` (the fastest device's
    one-device plan), then the faster of the two for the rest of the run.

    ``plan`` is the layout the next epoch runs on; ``measure(epoch, samples_per_s)``
    takes the rate of the epoch that just ran on it and sets ``message``. ``record()``
    is the trial as the run folder keeps it (``history.json``, written with each epoch
    before its checkpoint; ``results.json``), and ``take_up`` reads it back on a resume,
    so that a decided trial is not run again and a measured epoch is not lost.
    ``key``: what the rates depend on (model, batch, devices, the plan's layout, as
    JSON values); a record made under another key is not taken up.
    """

    def __init__(self, plan, alone, key):
        self.plans = {"split": plan, "alone": alone}
        self.key = key
        self.rates, self.epochs = {}, {}   # "split", "alone": samples/s, the epoch measured
        self.message = ""

    @property
    def device(self):
        return self.plans["alone"].devices[0]

    @property
    def done(self):
        return len(self.rates) == 2

    @property
    def verdict(self):
        """"alone" (also on a tie: one device is the simpler layout) or "split" once
        both have run, else None."""
        if not self.done:
            return None
        return "alone" if self.rates["alone"] >= self.rates["split"] else "split"

    @property
    def plan(self):
        """The plan the next epoch runs on: the plan, then the device alone, then the faster."""
        return self.plans[self.verdict or ("alone" if self.rates else "split")]

    def measure(self, epoch, samples_per_s):
        """Takes the samples/s of ``epoch``, which ran on ``plan``."""
        which = "alone" if self.rates else "split"
        self.rates[which], self.epochs[which] = samples_per_s, epoch
        if not self.done:
            self.message = self._alone_next("")
        elif self.verdict == "alone":
            self.message = ("trial: %s alone ran %.0f samples/s against %.0f for the plan; "
                            "training goes on there alone"
                            % (self.device, samples_per_s, self.rates["split"]))
        else:
            self.message = ("trial: the plan ran %.0f samples/s against %.0f for %s alone; "
                            "back to the plan" % (self.rates["split"], samples_per_s,
                                                  self.device))

    def record(self):
        """The trial as JSON values: its key, device, rates, their epochs and the verdict."""
        return {"key": self.key, "device": self.device, "rates": dict(self.rates),
                "epochs": dict(self.epochs), "verdict": self.verdict}

    def take_up(self, record, first_epoch):
        """Takes up the rates that ``record`` (a ``record()`` saved before a resume) holds
        of epochs before ``first_epoch``, the resumed run's first (a later epoch was not
        checkpointed, and runs again). Returns the line to print, or None when there
        is nothing to take up."""
        if not record:
            return None
        key = record.get("key") or {}
        if key != self.key:
            name = next(name for name in sorted({*key, *self.key})
                        if key.get(name) != self.key.get(name))
            return ("trial: the one before the resume is not taken up: it was for %s %s, "
                    "this run is for %s" % (name, key.get(name), self.key.get(name)))
        for which in ("split", "alone"):   # in the order they ran
            if which not in record["rates"] or record["epochs"][which] >= first_epoch:
                break
            self.rates[which] = record["rates"][which]
            self.epochs[which] = record["epochs"][which]
        if self.done:
            return ("trial: decided before the resume: the plan (%.0f samples/s) against %s "
                    "alone (%.0f); training on %s"
                    % (self.rates["split"], self.device, self.rates["alone"],
                       "the plan" if self.verdict == "split" else self.device + " alone"))
        if self.rates:
            return self._alone_next(" before the resume")
        return None

    def _alone_next(self, when):
        """The line after the plan's epoch (``when`` it ran: "" or " before the resume")."""
        return ("trial: the plan ran %.0f samples/s%s; the next epoch runs on the fastest "
                "device alone (%s)" % (self.rates["split"], when, self.device))

    @property
    def epochs_needed(self):
        """Epochs the trial still needs: one per layout not yet measured, one on the faster."""
        return 3 - len(self.rates)
