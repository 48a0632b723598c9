"""hmp.run.epoch_loop: a seed's epochs on its plans, with stand-in trainers and a
scripted rebalancer (no graphs): a new plan builds a trainer, a switch back reuses the
graph kept, a plan waited for is made ready by a standby and then switched to by a
restore; early stop; every spare trainer is closed before classifying."""

import dataclasses
import types

import pytest

from hmp.cluster.sessions import CLOSE_WAIT_S
from hmp.run import epoch_loop, look_yield, rebalance, run_files, run_folder
from hmp.run.alone_trial import AloneTrial
from hmp.run.settings import Settings
from hmp.run.standby import Standby
from hmp.run.trainer import MEASURED_STEPS, EpochStats, Stopped


@dataclasses.dataclass(frozen=True)
class Plan:   # what the loop reads of a plan: rebalance.plan_key's fields
    name: str
    mesh: str = "model:2"
    layout_rules: str = ""
    devices: tuple = ("/cpu:0", "/cpu:1")

    @property
    def splits(self):
        return {"filters": self.name}


A, B, C = Plan("A"), Plan("B"), Plan("C")


class StandInTrainer:
    """Epochs of validation accuracy ``accuracies[epoch]`` (None where absent) and training
    accuracy ``fits[epoch]`` (0.5 where absent); ``looks``: the look strength each
    epoch was given."""

    def __init__(self, plan, log, accuracies=None, fits=None):
        self.plan, self.log, self.accuracies = plan, log, accuracies or {}
        self.fits, self.looks = fits or {}, []
        self.closed = False

    step = 0   # the loop asks for sums recorded at it: none are

    def validation_accuracy(self):   # of the weights it resumed with: the last epoch's
        return self.accuracies.get("resumed")

    def train_epoch(self, epoch, epochs, before_save=None, look_strength=None, **_):
        self.log.append(("epoch", epoch, self.plan.name))
        self.looks.append(look_strength)
        stats = EpochStats(epoch, 1.0, self.fits.get(epoch, 0.5), 100.0, 1.0,
                           val_accuracy=self.accuracies.get(epoch),
                           look_strength=look_strength)
        before_save(stats)
        return stats

    def save(self, **_):
        return "best-ckpt"

    def restore(self, path):
        self.log.append(("restore", self.plan.name))

    def warm_up(self, look_strength=None):
        self.log.append(("warm_up", self.plan.name))

    def close(self, wait_s=None):
        self.closed, self.close_wait_s = True, wait_s


class StandInTrainers:
    """``start`` and ``build`` as hmp.run.seed_training.Trainers, logged; ``recorded``
    as it, without memory caps."""

    def __init__(self, log, accuracies=None, fits=None):
        self.log, self.accuracies, self.fits, self.made = log, accuracies, fits, {}

    def build(self, plan):
        self.log.append(("build", plan.name))
        self.made[plan.name] = StandInTrainer(plan, self.log, self.accuracies, self.fits)
        return self.made[plan.name]

    def start(self, plan, resume, switch=False):
        self.log.append(("start", plan.name, resume) + (("switch",) if switch else ()))
        self.made[plan.name] = StandInTrainer(plan, self.log, self.accuracies, self.fits)
        return self.made[plan.name]

    def recorded(self, plan):
        return dataclasses.asdict(plan)


class ScriptedRebalancer:
    """After each epoch: the plan to switch to, or a plan to wait for."""

    CHOICES = {0: B, 1: A, 3: C}   # after epoch 2 it waits for C
    WAITING = {2: C}

    def __init__(self, spec, threshold):
        self.switches, self.message, self.waiting, self.reuse = [], "", None, []
        self.disturbed, self.steps, self.plans, self.started = [], [], [], []
        self.epoch = -1

    def measure(self, plan, stats, switch=None, disturbed=False):
        self.epoch = stats.epoch
        self.switches.append(switch and switch[0])
        self.disturbed.append(disturbed)
        self.steps.append(stats.steps)
        self.plans.append(plan.name)

    def choose(self, plan, steps, epochs_left, kept=()):
        self.waiting = self.WAITING.get(self.epoch)
        return self.CHOICES.get(self.epoch)

    def expect_reuse(self, seconds):
        self.reuse.append(seconds)

    def standby_started(self):   # after the epoch it was last told of
        self.started.append(self.epoch)

    def confirm(self, plan, rate):   # the steps run since a standby got ready: as before
        return True


def _loop(tmp_path, trainers, history=(), look_yields=False, steps_per_epoch=4, **settings):
    record = run_folder.History(str(tmp_path / run_files.HISTORY), history)
    return epoch_loop.EpochLoop(trainers, A, bool(history), record, None,
                                run_folder.Signals(), None, Settings.of(**settings),
                                str(tmp_path), steps_per_epoch=steps_per_epoch,
                                look_yields=look_yields)


class ReadyStandby(Standby):
    """A standby whose build has ended (ready or failed) before the loop first looks at
    it, as a real epoch outlasts a small build: no test waits on a clock."""

    def __init__(self, *args):
        super().__init__(*args)
        self.wait()


@pytest.fixture(autouse=True)
def ready_standbys(monkeypatch):
    monkeypatch.setattr(epoch_loop, "Standby", ReadyStandby)


def test_switches_build_a_new_plan_reuse_a_kept_one_and_take_a_standby(tmp_path,
                                                                       monkeypatch):
    monkeypatch.setattr(rebalance, "Rebalancer", ScriptedRebalancer)
    monkeypatch.setattr(epoch_loop, "Trainer", StandInTrainer)   # its warm_up
    log = []
    trainers = StandInTrainers(log)
    loop = _loop(tmp_path, trainers, epochs=6, patience=0, rebalance="epoch")

    stats = loop.train(first_epoch=0)
    assert stats.epoch == 5
    assert [entry for entry in log if entry[0] == "epoch"] == [
        ("epoch", 0, "A"), ("epoch", 1, "B"), ("epoch", 2, "A"), ("epoch", 3, "A"),
        ("epoch", 4, "C"), ("epoch", 5, "C")]
    assert [entry for entry in log if entry[0] != "epoch"] == [
        ("start", "A", False), ("start", "B", True, "switch"), ("restore", "A"),
        ("build", "C"), ("restore", "C"), ("warm_up", "C"), ("restore", "C"),   # the standby's
        ("restore", "C")]   # the switch's
    assert loop.rebalancer.switches == ["build", "build", "reuse", None, "reuse", None]
    # epoch 3 ran while C's graph was made ready: its times are left out
    assert loop.rebalancer.disturbed == [False, False, False, True, False, False]
    assert len(loop.rebalancer.reuse) == 1   # the standby's restore: a switch's estimate
    assert [plan["name"] for plan in loop.record.plans] == ["A", "B", "A", "C"]
    assert loop.plan is C and loop.trainer is trainers.made["C"]
    made = trainers.made
    assert (made["A"].closed, made["B"].closed, made["C"].closed) == (False, True, False)
    loop.standby = standby = StandInTrainer(B, log)   # a standby's build under way
    loop.close_spare()   # classifying needs only the trainer in use
    assert (made["A"].closed, made["C"].closed) == (True, False)
    assert standby.closed and standby.close_wait_s is None   # its build ended first
    assert loop.standby is None and loop.kept == {}
    assert len(run_files.read_json(str(tmp_path / run_files.HISTORY))["history"]) == 6


def test_training_stops_early_and_close_all_closes_every_trainer(tmp_path, capsys, monkeypatch):
    log = []
    trainers = StandInTrainers(log, accuracies={0: 0.5, 1: 0.4, 2: 0.3})
    loop = _loop(tmp_path, trainers, epochs=5, patience=2)
    stats = loop.train(first_epoch=0)
    assert stats.epoch == 2   # two epochs without a better one than epoch 0's
    assert (loop.best.epoch, loop.best.accuracy, loop.best.path) == (0, 0.5, "best-ckpt")
    assert "early stop: no better validation accuracy for 2 epochs" in capsys.readouterr().out
    assert loop.rebalancer is None and log[0] == ("start", "A", False)
    loop.standby = standby = StandInTrainer(B, log)   # a standby's build under way: closed too
    clock = iter([100.0, 100.0 + CLOSE_WAIT_S / 4, 100.0 + CLOSE_WAIT_S / 2])
    with monkeypatch.context() as timed:   # the first close took a quarter of the wait
        timed.setattr(epoch_loop, "time", types.SimpleNamespace(monotonic=lambda: next(clock)))
        loop.close_all(after_error=True)   # the sessions' closes wait CLOSE_WAIT_S in all
    assert trainers.made["A"].closed and trainers.made["A"].close_wait_s == CLOSE_WAIT_S * 3 / 4
    assert standby.closed and standby.close_wait_s == CLOSE_WAIT_S / 2


def test_an_epoch_stopped_while_validated_is_validated_on_resume(tmp_path, capsys):
    """Epoch 1 (better than epoch 0) was recorded without validation when a stop came while
    it was validated; the run resumes with its weights: validated, it is the best epoch,
    kept, and the early stop counts from it (patience 1: the run goes on)."""
    log = []
    trainers = StandInTrainers(log, accuracies={"resumed": 0.6, 2: 0.55, 3: 0.5})
    history = [dict(vars(EpochStats(0, 1.0, 0.5, 100.0, 1.0, val_accuracy=0.5)), steps=4),
               dict(vars(EpochStats(1, 1.0, 0.5, 100.0, 1.0)), steps=4)]
    loop = _loop(tmp_path, trainers, history, epochs=5, patience=2)
    loop.trainer.step = 2 * 4   # resumed at epoch 1's end
    stats = loop.train(first_epoch=2)
    assert "epoch 2, stopped while it was validated: val acc 0.600" in capsys.readouterr().out
    assert [e["val_accuracy"] for e in loop.record.epochs] == [0.5, 0.6, 0.55, 0.5]
    assert (loop.best.epoch, loop.best.accuracy) == (1, 0.6)
    assert stats.epoch == 3   # epochs 2 and 3 no better than epoch 1: stopped after 3
    written = run_files.read_json(str(tmp_path / run_files.HISTORY))
    assert [e["val_accuracy"] for e in written["history"]] == [0.5, 0.6, 0.55, 0.5]
    # resumed mid-epoch (a checkpoint within epoch 2), nothing is validated again
    trainers = StandInTrainers([], accuracies={"resumed": 0.9})
    loop = _loop(tmp_path, trainers, history[:1] + [dict(history[1], val_accuracy=None)],
                 epochs=5, patience=2)
    loop.trainer.step = 2 * 4 + 1
    loop._validate_resumed_epoch()
    assert loop.record.epochs[-1]["val_accuracy"] is None
    # stopped again while it validates: a stop of training at epoch 1's end (not one
    # while classifying, after training)
    loop.trainer.step = 2 * 4

    def stopped():
        raise Stopped(1, 8, classifying=True)

    loop.trainer.validation_accuracy = stopped
    with pytest.raises(Stopped) as again:
        loop.train(first_epoch=2)
    assert (again.value.epoch, again.value.step, again.value.classifying) == (1, 8, False)


class WaitingRebalancer(ScriptedRebalancer):
    """Waits for C after every epoch from the second on, and never switches."""

    CHOICES = {}
    WAITING = {1: C, 2: C, 3: C, 4: C}


class FailingTrainers(StandInTrainers):
    def build(self, plan):
        self.log.append(("build", plan.name))
        raise MemoryError()   # no message: the line names its type


def test_a_failed_standby_is_said_once_and_not_built_again(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(rebalance, "Rebalancer", WaitingRebalancer)
    log = []
    loop = _loop(tmp_path, FailingTrainers(log), epochs=5, patience=0, rebalance="epoch")

    assert loop.train(first_epoch=0).epoch == 4
    assert [entry for entry in log if entry[0] == "build"] == [("build", "C")]
    # only the epoch its graph was being made ready in is left out of the speeds; after
    # the last epoch no standby starts for the plan waited for
    assert loop.rebalancer.disturbed == [False, False, True, False, False]
    assert loop.rebalancer.started == [1]   # once, as said
    out = capsys.readouterr().out
    assert out.count("standby: building the graph of filters C") == 1
    assert ("standby: the graph of filters C could not be made ready (MemoryError); a "
            "switch to it builds it") in out
    assert loop.standby is None and loop.plan is A


class SwitchingWhenKeptRebalancer(ScriptedRebalancer):
    """Waits for C after epoch 1; chooses C whenever C's graph is kept (its switch then
    costs a restore); ``weighed``: the epochs left it was given each time."""

    CHOICES, WAITING = {}, {1: C}

    def __init__(self, spec, threshold):
        super().__init__(spec, threshold)
        self.weighed = []

    def choose(self, plan, steps, epochs_left, kept=()):
        self.waiting = self.WAITING.get(self.epoch)
        self.weighed.append(epochs_left)
        chosen = C if plan is not C and rebalance.plan_key(C) in kept else None
        self.message = "re-balancing: C %s" % ("switching" if chosen else "staying")
        return chosen


class PausingTrainer(StandInTrainer):
    """Epochs of ``STEPS`` steps: polls ``pause`` as the trainer does (after each step that
    leaves ``MEASURED_STEPS`` or more); at a pause it records the sums at its step,
    "saves" it and raises ``Paused``; a restore goes on from the step saved last;
    ``carried``: what each epoch was given."""

    STEPS = 12
    saved = 0

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.carried = []

    def train_epoch(self, epoch, epochs, before_save=None, look_strength=None, carried=None,
                    before_checkpoint=None, pause=None):
        self.carried.append((epoch, carried))
        first = self.step - self.STEPS * epoch
        for done in range(first + 1, self.STEPS - MEASURED_STEPS + 1):
            # steady: every step after the epoch's first, 0.5 s each
            if pause and pause(self.STEPS - done, done - first - 1, 0.5 * (done - first - 1)):
                self.step = self.STEPS * epoch + done
                before_checkpoint(self.step, 0.5 * done, 3.0 * done)
                PausingTrainer.saved = self.step
                raise epoch_loop.Paused(epoch, self.step,
                                        EpochStats(epoch, 1.0, 0.5, 100.0, 1.0, steps=done - first))
        self.step = PausingTrainer.saved = self.STEPS * (epoch + 1)
        stats = super().train_epoch(epoch, epochs, before_save, look_strength)
        stats.steps = self.STEPS - first
        return stats

    def restore(self, path):
        super().restore(path)
        self.step = PausingTrainer.saved


def _pausing_loop(tmp_path, monkeypatch, rebalancer):
    """(a loop of 4 epochs on PausingTrainers and ``rebalancer``, their log, the trainers)."""
    monkeypatch.setattr(rebalance, "Rebalancer", rebalancer)
    monkeypatch.setattr(epoch_loop, "Trainer", StandInTrainer)   # its warm_up
    monkeypatch.setattr(StandInTrainers, "build", lambda self, plan: self.log.append(
        ("build", plan.name)) or self.made.setdefault(plan.name, PausingTrainer(plan, self.log)))
    monkeypatch.setattr(StandInTrainers, "start", lambda self, plan, resume: self.made.setdefault(
        plan.name, PausingTrainer(plan, self.log)))
    log = []
    trainers = StandInTrainers(log)
    loop = _loop(tmp_path, trainers, steps_per_epoch=PausingTrainer.STEPS, epochs=4,
                 patience=0, rebalance="epoch")
    monkeypatch.setattr(PausingTrainer, "saved", 0)
    return loop, log, trainers


def test_a_standby_ready_within_an_epoch_is_switched_to_there(tmp_path, monkeypatch, capsys):
    """C is waited for after epoch 1; its graph, made ready during epoch 2 (seen after
    that epoch's first step), is switched to once CONFIRM_STEPS more steps ran at the
    regime's rate (the rebalancer weighing the epochs left with the share of this one
    left), and the epoch goes on on C with the sums of the step before: recorded once,
    its times not left out, the switch measured as a restore."""
    loop, log, trainers = _pausing_loop(tmp_path, monkeypatch, SwitchingWhenKeptRebalancer)

    assert loop.train(first_epoch=0).epoch == 3
    assert [entry for entry in log if entry[0] != "epoch"] == [
        ("build", "C"), ("restore", "C"), ("warm_up", "C"), ("restore", "C"),   # the standby's
        ("restore", "C")]   # the switch's
    assert [entry for entry in log if entry[0] == "epoch"] == [
        ("epoch", 0, "A"), ("epoch", 1, "A"), ("epoch", 2, "C"), ("epoch", 3, "C")]
    a, c = trainers.made["A"], trainers.made["C"]
    assert a.carried == [(0, None), (1, None), (2, None)]
    assert c.carried == [(2, (2.0, 12.0)), (3, None)]   # the sums at step 28, its checkpoint
    rebalancer = loop.rebalancer
    # after epochs 0 and 1, within epoch 2 with 8 of its 12 steps left, after epoch 2
    assert rebalancer.weighed == [3, 2, 1 + 8 / 12, 1]
    # the first start builds; the part of epoch 2 before the pause (4 steps) ran while
    # C's graph was built: measured disturbed, as the standby's cost
    assert rebalancer.switches == ["build", None, None, "reuse", None]
    assert rebalancer.disturbed == [False, False, True, False, False]
    assert rebalancer.steps == [12, 12, 4, 8, 12]
    assert rebalancer.plans == ["A", "A", "A", "C", "C"]   # the part before the pause: A's
    assert rebalancer.started == [1]   # the build's cost counted from after epoch 1
    assert [plan["name"] for plan in loop.record.plans] == ["A", "C"]
    assert len(run_files.read_json(str(tmp_path / run_files.HISTORY))["history"]) == 4
    out = capsys.readouterr().out
    assert ("standby: the graph of filters C is ready, within epoch 3\n"
            "re-balancing: C switching\n"
            "epoch 3/4  loss 1.0000  train acc 0.500  100 samples/s  1.0 s "
            "(its last 8 of 12 steps)\n") in out
    assert loop.kept == {rebalance.plan_key(A): a} and loop.plan is C


class MovedRateRebalancer(SwitchingWhenKeptRebalancer):
    """As SwitchingWhenKeptRebalancer, but the steps run since a standby got ready ran
    off the regime's rate (the machine changed since its epochs)."""

    def confirm(self, plan, rate):
        self.rates = getattr(self, "rates", []) + [rate]
        return False


def test_a_standby_ready_where_the_rate_moved_waits_for_the_epochs_end(tmp_path,
                                                                        monkeypatch, capsys):
    """C's graph is ready within epoch 2, but the CONFIRM_STEPS steps run since ran off the
    regime's rate (timed as the trainer times steady steps, here 0.5 s each: 1.5 s):
    no switch within the epoch, which says so and runs on whole; its end weighs again,
    and switches."""
    loop, log, trainers = _pausing_loop(tmp_path, monkeypatch, MovedRateRebalancer)

    assert loop.train(first_epoch=0).epoch == 3
    assert [entry for entry in log if entry[0] == "epoch"] == [
        ("epoch", 0, "A"), ("epoch", 1, "A"), ("epoch", 2, "A"), ("epoch", 3, "C")]
    assert trainers.made["A"].carried == [(0, None), (1, None), (2, None)]
    assert loop.rebalancer.rates == [epoch_loop.CONFIRM_STEPS * 32 / 1.5]
    assert loop.rebalancer.weighed == [3, 2, 1]   # not within epoch 2
    out = capsys.readouterr().out
    assert ("epoch 3/4  loss 1.0000  train acc 0.500  100 samples/s  1.0 s\n"
            "standby: the graph of filters C is ready, within epoch 3\n"
            "re-balancing: 64 samples/s over the 3 steps since, off the rate its speeds "
            "were measured at: the machine changed, its speeds are measured anew\n"
            "re-balancing: C switching\n") in out
    assert loop.plan is C


def test_a_standby_ready_within_an_epoch_whose_switch_does_not_pay_waits_for_its_end(
        tmp_path, monkeypatch, capsys):
    """C's graph is ready within epoch 2 but the rebalancer stays: the epoch runs on
    whole, says so after its line, and is left out of the speeds; C's graph is kept,
    not built again."""
    loop, log, trainers = _pausing_loop(tmp_path, monkeypatch, WaitingRebalancer)

    assert loop.train(first_epoch=0).epoch == 3
    assert [entry for entry in log if entry[0] != "epoch"] == [
        ("build", "C"), ("restore", "C"), ("warm_up", "C"), ("restore", "C")]
    assert {entry[2] for entry in log if entry[0] == "epoch"} == {"A"}
    assert trainers.made["A"].carried == [(epoch, None) for epoch in range(4)]
    assert loop.rebalancer.disturbed == [False, False, True, False]
    out = capsys.readouterr().out
    assert ("epoch 3/4  loss 1.0000  train acc 0.500  100 samples/s  1.0 s\n"
            "standby: the graph of filters C is ready, within epoch 3\n") in out
    assert list(loop.kept) == [rebalance.plan_key(C)] and loop.plan is A


def test_a_trial_of_three_layouts_keeps_the_plans_graph_for_its_verdict(tmp_path,
                                                                          monkeypatch):
    """--try_alone with a runner-up: A (the plan), B (the runner-up), C (alone) in turn;
    A ran fastest, so the run goes back to it on the graph kept through the trial."""
    original = StandInTrainer.train_epoch
    rates = {"A": 300.0, "B": 200.0, "C": 100.0}

    def train_epoch(self, epoch, epochs, before_save=None, look_strength=None, **_):
        def rated(stats):
            stats.samples_per_second = rates[self.plan.name]
            before_save(stats)
        return original(self, epoch, epochs, rated, look_strength)
    monkeypatch.setattr(StandInTrainer, "train_epoch", train_epoch)
    log = []
    trainers = StandInTrainers(log)
    trial = AloneTrial(A, C, {}, runner_up=B)
    record = run_folder.History(str(tmp_path / run_files.HISTORY), ())
    loop = epoch_loop.EpochLoop(trainers, A, False, record, trial, run_folder.Signals(), None,
                                Settings.of(epochs=5, patience=0), str(tmp_path),
                                steps_per_epoch=4)
    loop.train(first_epoch=0)
    assert trial.verdict == "split"
    assert [entry[2] for entry in log if entry[0] == "epoch"] == ["A", "B", "C", "A", "A"]
    assert [entry for entry in log if entry[0] != "epoch"] == [
        ("start", "A", False), ("start", "B", True, "switch"), ("start", "C", True, "switch"),
        ("restore", "A")]
    made = trainers.made
    assert (made["A"].closed, made["B"].closed, made["C"].closed) == (False, True, False)


def test_a_measured_field_look_yields_where_the_fit_is_checked_and_a_resume_keeps_it(
        tmp_path, capsys):
    """16 epochs: the fit is checked after epochs 4, 6, 8 and 10 (a quarter, three
    eighths, half and five eighths of the run); each check below 0.9 halves the look."""
    assert look_yield.checked_epochs(16) == [3, 5, 7, 9]
    fits = {3: 0.5, 5: 0.95, 7: 0.6, 9: 0.8, 12: 0.1}   # epoch 13 is not checked
    trainers = StandInTrainers([], fits=fits)
    loop = _loop(tmp_path, trainers, look_yields=True, epochs=16)
    loop.train(first_epoch=0)
    expected = [1.0] * 4 + [0.5] * 4 + [0.25] * 2 + [0.125] * 6
    assert trainers.made["A"].looks == expected
    out = capsys.readouterr().out
    assert ("training accuracy 0.500 after epoch 4 of 16 is below 0.90: the measured field "
            "look yields to 0.5 of its strength") in out
    assert out.count("field look yields") == 3
    history = run_files.read_json(str(tmp_path / run_files.HISTORY))["history"]
    assert [epoch["look_strength"] for epoch in history] == expected

    for first_epoch in (6, 8):   # resumed from its record: the strengths it had reached
        resumed = StandInTrainers([], fits=fits)
        _loop(tmp_path / str(first_epoch), resumed, history[:first_epoch], look_yields=True,
              epochs=16).train(first_epoch)
        assert resumed.made["A"].looks == expected[first_epoch:]
    fixed = StandInTrainers([], fits=fits)   # strengths given: nothing yields
    _loop(tmp_path / "fixed", fixed, epochs=16).train(first_epoch=0)
    assert fixed.made["A"].looks == [None] * 16


@pytest.mark.parametrize("epochs, checked", [(1, []), (2, [0]), (3, [0, 1]), (4, [0, 1, 2]),
                                             (8, [1, 2, 3, 4]), (60, [14, 22, 29, 37])])
def test_the_fit_is_checked_after_the_epochs_that_end_each_share_but_the_last(epochs,
                                                                              checked):
    assert look_yield.checked_epochs(epochs) == checked
