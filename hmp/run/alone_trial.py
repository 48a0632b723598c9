"""The trial of the fastest device alone (``--try_alone``).

A plan over several devices is chosen from a cost model, which can be wrong; the
one-device layout of the fastest device is the alternative a user would fall back to.
``AloneTrial`` trains one epoch on each (and on a runner-up the cost model priced
close to the plan) and keeps whichever ran more samples per second: a plan that loses
to the fastest device alone costs one epoch, not the run.
"""

from hmp.run.rebalance import describe_splits


class AloneTrial:
    """Epoch ``e`` on ``plan``, then an epoch on ``runner_up`` (a layout on several devices
    that the cost model priced within its margin of the plan; None: none), then one on
    ``alone`` (the fastest device's one-device plan), then the fastest of them for the
    rest of the run (of equal rates: alone, then the plan).

    ``plan`` is the layout the next epoch runs on; ``measure(epoch, samples_per_s)``
    takes the rate of the epoch that just ran on it and sets ``message``. ``record()``
    is the trial as the run folder keeps it (``history.json``, written with each epoch
    before its checkpoint; ``results.json``), and ``take_up`` reads it back on a resume,
    so that a decided trial is not run again and a measured epoch is not lost.
    ``key``: what the rates depend on (model, batch, devices, the layouts, as JSON
    values); a record made under another key is not taken up.
    """

    ORDER = ("split", "runner-up", "alone")   # the order the layouts run in

    def __init__(self, plan, alone, key, runner_up=None):
        self.plans = {"split": plan, "alone": alone}
        if runner_up is not None:
            self.plans["runner-up"] = runner_up
        self.names = [name for name in self.ORDER if name in self.plans]
        self.key = key
        self.rates, self.epochs = {}, {}   # name: samples/s, the epoch measured
        self.message = ""

    @property
    def device(self):
        return self.plans["alone"].devices[0]

    @property
    def done(self):
        return len(self.rates) == len(self.names)

    @property
    def verdict(self):
        """The name of the layout that ran the most samples/s ("alone" of equals, then
        "split") once all have run, else None."""
        if not self.done:
            return None
        preferred = [name for name in ("alone", "split", "runner-up") if name in self.plans]
        return max(preferred, key=lambda name: self.rates[name])   # the first of equals

    @property
    def plan(self):
        """The plan the next epoch runs on: each layout in turn, then the fastest."""
        return self.plans[self.verdict or self.names[len(self.rates)]]

    def measure(self, epoch, samples_per_s):
        """Takes the samples/s of ``epoch``, which ran on ``plan``."""
        which = self.names[len(self.rates)]
        self.rates[which], self.epochs[which] = samples_per_s, epoch
        self.message = self._next_line("") if not self.done else self._verdict_line()

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
        for which in _measured_before(self.names, record, first_epoch):
            self.rates[which] = record["rates"][which]
            self.epochs[which] = record["epochs"][which]
        if self.done:
            first, *others = self.names
            return ("trial: decided before the resume: %s (%.0f samples/s) against %s; "
                    "training on %s"
                    % (self._named(first), self.rates[first],
                       " and ".join("%s (%.0f)" % (self._named(name), self.rates[name])
                                    for name in others),
                       self._named(self.verdict)))
        if self.rates:
            return self._next_line(" before the resume")
        return None

    def _named(self, name):
        """How the lines name the layout ``name``."""
        if name == "runner-up":
            runner_up = self.plans[name]
            return "the runner-up (%s %s)" % (runner_up.mesh, describe_splits(runner_up))
        return "the plan" if name == "split" else self.device + " alone"

    def _next_line(self, when):
        """The line after a trial epoch but the last (``when`` it ran: "" or " before
        the resume"). Its rate is the epoch's steady rate, without its first steps (as
        every rate the trial compares), which the epoch's line counts."""
        last = self.names[len(self.rates) - 1]
        following = self.names[len(self.rates)]
        return ("trial: %s ran %.0f samples/s at its steady rate%s; the next epoch runs on %s"
                % (self._named(last), self.rates[last], when,
                   "the fastest device alone (%s)" % self.device if following == "alone"
                   else self._named(following)))

    def _verdict_line(self):
        """The line once every layout has run: the fastest, against the others."""
        verdict, others = self.verdict, [name for name in self.names if name != self.verdict]
        return ("trial: %s ran %.0f samples/s against %s; %s"
                % (self._named(verdict), self.rates[verdict],
                   " and ".join("%.0f for %s" % (self.rates[name], self._named(name))
                                for name in others),
                   {"alone": "training goes on there alone", "split": "back to the plan",
                    "runner-up": "training goes on on the runner-up"}[verdict]))

    @property
    def epochs_needed(self):
        """Epochs the trial still needs: one per layout not yet measured, one on the
        fastest."""
        return len(self.names) + 1 - len(self.rates)

    @classmethod
    def epochs_for(cls, runner_up):
        """Epochs a fresh trial needs, with a ``runner_up`` or without: one per layout,
        one on the fastest."""
        return len([name for name in cls.ORDER if runner_up or name != "runner-up"]) + 1

    @classmethod
    def epochs_needed_after(cls, record, first_epoch):
        """The ``epochs_needed`` of a trial that takes up ``record`` (its ``record()``
        before a resume from ``first_epoch``), before the trial is made: its layouts are
        the record's (a runner-up where its key names one)."""
        names = [name for name in cls.ORDER
                 if name != "runner-up" or "runner_up" in (record.get("key") or {})]
        return len(names) + 1 - len(_measured_before(names, record, first_epoch))


def record_before(record, first_epoch):
    """``record`` (a trial's ``record()``) as it stood before ``first_epoch``: the rates of
    later epochs (recorded, not checkpointed: they run again) left out, and the verdict
    with them when one was; ``record`` itself when it holds none, or is None."""
    if not record or all(epoch < first_epoch for epoch in record["epochs"].values()):
        return record
    kept = [which for which, epoch in record["epochs"].items() if epoch < first_epoch]
    return {**record, "rates": {which: record["rates"][which] for which in kept},
            "epochs": {which: record["epochs"][which] for which in kept}, "verdict": None}


def _measured_before(names, record, first_epoch):
    """The layouts of ``names`` (in the order they run) that ``record`` holds a rate of,
    measured in an epoch before ``first_epoch``, up to the first it does not (a later
    epoch was not checkpointed, and runs again)."""
    measured = []
    for which in names:
        if which not in record["rates"] or record["epochs"][which] >= first_epoch:
            break
        measured.append(which)
    return measured
