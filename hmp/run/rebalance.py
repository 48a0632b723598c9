"""Re-balancing while training (DBS, Ye et al.; see ../shared/BACKGROUND.md).

After an epoch the trainer knows how long each device was busy in a real
step (from TensorFlow's step statistics). A device's effective speed is the
work it was given (its predicted share of the step's FLOPs under the current
plan) divided by that busy time. If the busiest device took clearly longer
than the least busy one, the same mesh is planned again from those speeds
(``replan``). ``Rebalancer`` decides whether to switch to that plan: from the
mean speeds of the epochs since the machine last changed (``Regime``), the
samples/s each plan ran at, and what a switch cost (docs/planner.md,
"Re-balancing while training").
"""

import dataclasses
import json

from hmp.planning import DeviceSpec, plan_layout

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
    """A new plan on the same mesh if the imbalance exceeds ``threshold``, else None:
    ``plan``'s devices at their measured speeds, in their channel blocks, under its
    memory caps.

    Returns None as well when re-planning gives the same splits (the shares
    are already as even as whole filters and samples allow).
    """
    if len(busy_seconds) != len(plan.devices) or min(busy_seconds) <= 0:
        return None
    if imbalance(busy_seconds) <= threshold:
        return None
    devices = [DeviceSpec(d, speed, channel_block=block) for d, speed, block in zip(
        plan.devices, measured_speeds(plan, busy_seconds), plan.device_channel_blocks())]
    new_plan = plan_layout(model_spec, devices, None, plan.batch_size, plan.mesh,
                           memory_caps=plan.memory_caps, replicated=plan.replicated_dims())
    if new_plan.splits == plan.splits:
        return None
    # still left out, still replicated
    return dataclasses.replace(new_plan, left_out=plan.left_out, replicated=plan.replicated)


def plan_key(plan):
    """What makes two plans one graph: mesh, layout rules, devices and splits."""
    return (plan.mesh, plan.layout_rules, tuple(plan.devices),
            json.dumps(plan.splits, sort_keys=True))


def startup_seconds(stats, batch_size):
    """Seconds the epoch's first two steps took beyond its steady rate (``stats``: an
    ``EpochStats``): a new graph's one-off optimisation, and the traced step. 0 when
    the epoch ran too few steps to have a steady rate."""
    if not stats.steady_samples_per_second:
        return 0.0
    return max(0.0, stats.seconds
               - stats.steps * batch_size / stats.steady_samples_per_second)


@dataclasses.dataclass
class Regime:
    """The epochs since the machine last changed under the run (a plan's samples/s
    moved by more than the threshold): their devices, their measured speeds
    (``measured_speeds``), and {plan_key: (plan, samples/s)} of the plans that ran in
    them (each plan's latest epoch).

    The speeds are the first epoch's until a second comes, then the mean of the epochs
    after the first: the first is the one the machine changed in (or the run's first),
    whose traced steps may have seen either machine."""

    devices: tuple
    speeds: list
    epochs: int = 1
    rates: dict = dataclasses.field(default_factory=dict)

    def add(self, speeds):
        averaged = self.epochs - 1   # in the mean so far (0: the first epoch's speeds)
        self.speeds = [(mean * averaged + new) / (averaged + 1)
                       for mean, new in zip(self.speeds, speeds)]
        self.epochs += 1

    def off_rate(self, key, rate, tolerance):
        """Whether ``rate`` is more than ``tolerance`` (a share) away from the rate of the
        plan of ``key`` here (False when it has none)."""
        return key in self.rates and abs(rate / self.rates[key][1] - 1) > tolerance


class Rebalancer:
    """--rebalance=epoch: after each epoch (or within one, once a plan's graph is made
    ready), whether to switch plans for the rest.

    ``measure`` takes each epoch and the switch before it. The epoch's traced busy times
    join the regime's mean speeds; its samples/s is its plan's rate in the regime, and a
    rate more than ``threshold`` away from the plan's last one there starts a new regime
    (the machine changed: a worker got busy or free). ``choose`` weighs the plans in
    play: the current one at its measured rate, the others measured in this regime at
    theirs (a re-plan that ran slower than the plan before it is undone), and the plan
    made afresh from the mean speeds, its epoch predicted as the current one scaled by
    the busiest device's busy time. A switch must save at least ``threshold`` of the
    next epoch (noise does not flip plans) and pay back its cost (``cost``: what the
    last switch of its kind took) within as many epochs as the regime has lasted and
    as are left: after one slow epoch, within the next one; a new graph that costs more
    waits until the slowdown has lost as much time as the switch costs (ski rental).
    ``waiting`` is the plan it stayed off for that cost alone (it would save the
    threshold an epoch; of such plans without a graph, the fastest, also beside a kept
    plan that weighed better for its cheap switch alone): the run builds its graph
    meanwhile (``hmp.run.standby``), and
    a switch to it then costs a kept graph's (``expect_reuse``). Every plan on the
    regime's devices and the current mesh whose graph is kept stays in play, priced from
    the mean speeds as the fresh plan is when it has not run in the regime: after the
    machine changed back, the plan it left is a restore away, where a fresh plan a
    little faster would cost a new graph.

    A standby's cost. An epoch (or the part of one before a switch within it) during
    which the run built a graph is ``disturbed``: its speeds are left out, and the time
    its steady steps took beyond its plan's rate in the regime is what the build took
    from training. The sum over the build's epochs (``standby_started`` begins it)
    becomes ``cost["standby"]`` once the next epoch not disturbed shows the regime
    went on; a regime that ends meanwhile (the machine changed) leaves it unpriced. Until
    one is priced a standby is free, as it is where the client has cores of its own. A
    plan is waited for only when its saving over the epochs after the next (the one its
    graph is built in) pays back that cost and the switch's restore: all the epochs
    left, not the regime's (ski rental weighs buying a switch; a standby is the cheap
    hedge that makes one cheap).
    """

    def __init__(self, spec, threshold=DEFAULT_THRESHOLD):
        self.spec, self.threshold = spec, threshold
        self.regime = None
        # "build" (a new graph), "reuse" (a kept one), "standby" (training time a graph
        # built meanwhile took): seconds
        self.cost = {}
        self.standby_lost = None   # the time the build under way took so far (None: none priced)
        self.startup = 0.0    # startup_seconds of the last epoch after no switch
        self.message = ""
        self.waiting = None   # the plan a new graph's cost alone kept from being chosen
        # plan_key -> plan, of every plan measured or waited for: the plans of the keys
        # that ``choose``'s ``kept`` names
        self.plans = {}

    def measure(self, plan, stats, switch=None, disturbed=False):
        """Takes an epoch that ran on ``plan`` (``stats``: its ``EpochStats``; its busy
        times and samples/s: nothing from an epoch too short to trace a step) and the
        ``switch`` before it: None, or (kind, seconds), whose cost is those seconds and
        what the epoch's start took beyond that of an epoch after no switch. A
        ``disturbed`` epoch (the run built a graph meanwhile) is left out, its switch
        unmeasured, but for the time it lost: a standby's cost (class docstring)."""
        self.plans[plan_key(plan)] = plan
        if disturbed:
            self._add_standby_loss(plan, stats)
            return
        lost, self.standby_lost = self.standby_lost, None
        startup = startup_seconds(stats, plan.batch_size)
        if switch is None:
            self.startup = startup
        else:
            kind, seconds = switch
            self.cost[kind] = seconds + max(0.0, startup - self.startup)
        busy, rate = stats.busy_seconds, (stats.steady_samples_per_second
                                          or stats.samples_per_second)
        if len(busy or ()) != len(plan.devices) or min(busy) <= 0:
            return
        speeds, key, regime = measured_speeds(plan, busy), plan_key(plan), self.regime
        if (regime is None or regime.devices != tuple(plan.devices)
                or regime.off_rate(key, rate, self.threshold)):
            self.regime = regime = Regime(tuple(plan.devices), speeds)
        else:   # the regime went on: a build's loss in it was the build's
            regime.add(speeds)
            if lost is not None:
                self.cost["standby"] = lost
        regime.rates[key] = (plan, rate)

    def choose(self, plan, steps, epochs_left, kept=()):
        """The plan for the next epoch (``steps`` steps; ``epochs_left``: those still to
        run, the next included; within an epoch, with the share of it left) when
        switching to it pays back, else None. ``kept``: the
        plan_keys whose graphs are open (a switch to them costs ``cost["reuse"]``, to
        another ``cost["build"]``). Sets ``message`` (empty when nothing was weighed) and
        ``waiting``."""
        self.message, self.waiting = "", None
        regime = self.regime
        if regime is None or plan_key(plan) not in regime.rates:
            return None
        current = steps * plan.batch_size / regime.rates[plan_key(plan)][1]
        candidates = {key: (other, steps * other.batch_size / rate)
                      for key, (other, rate) in regime.rates.items() if key != plan_key(plan)}
        busy = [load / speed for load, speed in zip(plan.prediction.load, regime.speeds)]

        def predicted(other):   # the current epoch scaled by the busiest device's time
            return current * max(load / speed for load, speed
                                 in zip(other.prediction.load, regime.speeds)) / max(busy)

        fresh = replan(plan, self.spec, busy, self.threshold)
        in_play = [other for key, other in self.plans.items()
                   if key in kept and tuple(other.devices) == regime.devices
                   and other.mesh == plan.mesh]
        for other in ([fresh] if fresh is not None else []) + in_play:
            key = plan_key(other)
            if key not in candidates and key != plan_key(plan):
                candidates[key] = (other, predicted(other))
        if not candidates:
            return None
        epochs = min(regime.epochs, epochs_left)
        rows = [((current - seconds) * epochs - self._cost(key, kept), seconds, key, other)
                for key, (other, seconds) in candidates.items()]
        net, seconds, key, best = max(   # the most saved; of equals, the fastest
            rows, key=lambda row: (row[0], -row[1]))
        fast = (1 - self.threshold) * current   # a plan must run in this to save
        pays = net > 0 and seconds <= fast
        unbuilt = [row for row in rows if row[2] not in kept and row[1] <= fast]
        if not pays and unbuilt:   # weighed for a standby: the fastest plan without a graph
            net, seconds, key, best = min(unbuilt, key=lambda row: row[1])
        saves = seconds <= fast
        standby = ""
        if saves and not pays and key not in kept:
            # made ready during the next epoch, it saves over the epochs after it
            later = (current - seconds) * (epochs_left - 1)
            price = self.cost.get("standby", 0.0) + self.cost.get("reuse", 0.0)
            if later > price:
                self.waiting = self.plans[key] = best
            elif later > 0:   # (no epoch after the next: nothing to weigh)
                standby = ("; its graph built meanwhile would save %.2f s after the next "
                           "epoch, against %.2f s (what a build took from training, and "
                           "a restore): not built" % (later, price))
        self.message = ("re-balancing: %s predicted %.2f s an epoch against %.2f s on %s; "
                        "switch %.2f s (%s), saved over %.3g epoch%s: %s%s"
                        % (describe_splits(best), seconds, current, describe_splits(plan),
                           self._cost(key, kept), "kept graph" if key in kept else "new graph",
                           epochs, "" if epochs == 1 else "s",
                           "switching" if pays else "staying", standby))
        return best if pays else None

    def confirm(self, plan, rate):
        """Whether ``rate`` (samples/s of ``plan`` over a few steps just run) is still the
        rate of ``plan`` in the regime, within twice the threshold (a few steps are
        noisier than an epoch): the speeds ``choose`` weighs with still hold. Else the
        machine changed since the regime's epochs, and the regime ends: nothing is
        weighed until an epoch is measured again. True when the regime has no rate of
        ``plan`` to compare with."""
        if self.regime is None or not self.regime.off_rate(plan_key(plan), rate,
                                                           2 * self.threshold):
            return True
        self.regime, self.standby_lost = None, None   # a build's loss is not the build's
        return False

    def standby_started(self):
        """A graph is being built while training goes on: the time lost from here on is
        its cost."""
        self.standby_lost = 0.0

    def expect_reuse(self, seconds):
        """What a switch to a kept graph costs until one is measured: ``seconds`` (what
        restoring a checkpoint into a graph made ready took)."""
        self.cost.setdefault("reuse", seconds)

    def _add_standby_loss(self, plan, stats):
        """Adds to ``standby_lost`` the time ``stats`` (a disturbed epoch or part of one)
        took beyond its steps at ``plan``'s rate in the regime, both steady rates (a
        start's first steps and the traced ones left out, as after any switch); the
        build is left unpriced when there is no such rate (no regime, another plan's,
        too few steps)."""
        if self.standby_lost is None:
            return
        regime, key = self.regime, plan_key(plan)
        if regime is None or key not in regime.rates or not stats.steady_samples_per_second:
            self.standby_lost = None
            return
        samples = stats.steps * plan.batch_size
        self.standby_lost += max(0.0, samples / stats.steady_samples_per_second
                                 - samples / regime.rates[key][1])

    def _cost(self, key, kept):
        """A switch to the plan of ``key``: its kept graph's, or a new one's (a kept
        graph's until one is measured: at most a new one's)."""
        build = self.cost.get("build", 0.0)
        return self.cost.get("reuse", build) if key in kept else build


def describe_splits(plan):
    """The plan's splits as a line: ``batch [150, 106]``."""
    return " ".join("%s %s" % (dim, sizes) for dim, sizes in plan.splits.items())
