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

    ``after_epoch(samples_per_s)`` is called after each epoch; it returns the
    plan to switch to (``alone`` after the first, ``plan`` after the second if
    that ran faster) or None to keep the current one, and sets ``message``.
    """

    def __init__(self, plan, alone):
        self.plans = {"split": plan, "alone": alone}
        self.rates = {}
        self.message = ""

    @property
    def done(self):
        return len(self.rates) == 2

    def after_epoch(self, samples_per_s):
        if self.done:
            return None
        device = self.plans["alone"].devices[0]
        if not self.rates:
            self.rates["split"] = samples_per_s
            self.message = ("trial: the plan ran %.0f samples/s; the next epoch runs on the "
                            "fastest device alone (%s)" % (samples_per_s, device))
            return self.plans["alone"]
        self.rates["alone"] = samples_per_s
        if samples_per_s >= self.rates["split"]:
            self.message = ("trial: %s alone ran %.0f samples/s against %.0f for the plan; "
                            "training goes on there alone"
                            % (device, samples_per_s, self.rates["split"]))
            return None
        self.message = ("trial: the plan ran %.0f samples/s against %.0f for %s alone; "
                        "back to the plan" % (self.rates["split"], samples_per_s, device))
        return self.plans["split"]
