"""--try_alone: a plan over several devices races the fastest device alone for one
epoch each, and the run keeps the faster; the weights carry over either way, and a
resumed run takes the trial up where it stopped (decided: not run again)."""

import json
import types

import pytest

from cli_batch import run_batch
from hmp.planning import DeviceSpec, LinkSpec, plan_layout
from hmp.run import plan_choice, run_folder
from hmp.run.alone_trial import AloneTrial
from hmp.run.plan_choice import trial_can_run
from hmp.run.settings import Settings
from hmp.run.trainer import EpochStats
from model_specs import fc_model
from test_rebalance import spec

# the model is incidental to the trial (where the steps run and what carries over):
# spectral's graphs are a third of cnn2d's
FLAGS = ["--model=spectral", "--width=8", "--patch_size=5", "--batch_size=64",
         "--devices=/cpu:0,/cpu:1", "--train_fraction=0.03", "--speeds=3,1",
         "--optimizer=momentum", "--learning_rate=0.01", "--val_fraction=0", "--noaugment",
         "--notta", "--batch_norm=sync"]   # sync: each plan computes what one device does
                                           # (for a model with batch norms)
KEY = {"batch_size": 8, "devices": ["/cpu:0", "/cpu:1"]}   # what AloneTrial compares
RECORD = {"key": KEY, "device": "/cpu:0", "verdict": None, "rates": {"split": 150.0},
          "epochs": {"split": 3}}   # a trial recorded before a resume


def plans():
    split = plan_layout(spec(), ["/cpu:0", "/cpu:1"], [3, 1], 8, "batch:2")
    alone = plan_layout(spec(), ["/cpu:0"], [1], 8, "auto")
    return split, alone


@pytest.mark.parametrize("split_rate, alone_rate, kept", [
    (100.0, 150.0, "alone"), (150.0, 100.0, "split"), (100.0, 100.0, "alone")])
def test_the_trial_keeps_the_layout_that_ran_more_samples(split_rate, alone_rate, kept):
    split, alone = plans()
    trial = AloneTrial(split, alone, KEY)
    assert (trial.plan, trial.done, trial.epochs_needed) == (split, False, 3)
    trial.measure(0, split_rate)
    assert trial.plan is alone and trial.verdict is None      # epoch 2 runs alone
    trial.measure(1, alone_rate)
    assert trial.done and trial.verdict == kept
    assert trial.plan is (alone if kept == "alone" else split)
    assert ("back to the plan" in trial.message) == (kept == "split")
    assert trial.record() == {"key": KEY, "device": "/cpu:0", "verdict": kept,
                              "rates": {"split": split_rate, "alone": alone_rate},
                              "epochs": {"split": 0, "alone": 1}}


def test_a_resume_takes_up_the_rates_of_checkpointed_epochs_of_the_same_setting(tmp_path):
    split, alone = plans()
    first = AloneTrial(split, alone, KEY)
    record = run_folder.History.open(str(tmp_path), False, 0, 0, [])
    for epoch, rate in enumerate([150.0, 100.0]):   # as hmp.train records them
        first.measure(epoch, rate)
        record.trial = first.record()
        record.add_epoch(EpochStats(epoch, 1.0, 0.5, rate, 1.0))

    def resumed(first_epoch, key=KEY):   # the checkpoint is in epoch first_epoch
        trial = AloneTrial(split, alone, key)
        saved = run_folder.History.open(str(tmp_path), True, first_epoch, 0, []).trial
        return trial, trial.take_up(saved, first_epoch)

    decided, line = resumed(2)
    assert (decided.rates, decided.verdict, decided.plan) == (first.rates, "split", split)
    assert line == ("trial: decided before the resume: the plan (150 samples/s) against "
                    "/cpu:0 alone (100); training on the plan")
    halfway, line = resumed(1)   # stopped in the epoch alone: that epoch again, alone
    assert (halfway.rates, halfway.plan, halfway.epochs_needed) == ({"split": 150.0}, alone, 2)
    assert line == ("trial: the plan ran 150 samples/s at its steady rate before the resume; "
                    "the next epoch runs on the fastest device alone (/cpu:0)")
    fresh, line = resumed(0)     # epoch 1 recorded but not checkpointed: the trial again
    assert (fresh.rates, fresh.plan, line) == ({}, split, None)
    other, line = resumed(2, {**KEY, "batch_size": 16})
    assert (other.rates, other.plan) == ({}, split)
    assert line == ("trial: the one before the resume is not taken up: it was for "
                    "batch_size 8, this run is for 16")


@pytest.mark.parametrize("values, first_epoch, recorded, runs", [
    ({}, 0, None, True), ({"epochs": 5}, 2, None, True), ({"epochs": 5}, 3, None, False),
    # RECORD's plan measured in epoch 3: one epoch alone and one on the faster still
    ({"epochs": 6}, 4, RECORD, True), ({"epochs": 5}, 4, RECORD, False),
    ({"try_alone": False}, 0, None, False),
    ({"mesh": "batch:2"}, 0, RECORD, False)])
def test_the_trial_can_run_with_auto_and_the_epochs_it_still_needs(values, first_epoch,
                                                                     recorded, runs):
    assert trial_can_run(Settings.of(**values), first_epoch, recorded) is runs


@pytest.mark.parametrize("values, first_epoch, recorded, split", [
    ({}, 0, None, True), ({}, 4, RECORD, True), ({}, 4, None, False),
    ({"try_alone": False}, 0, None, False)])
def test_where_the_trial_runs_a_split_predicted_faster_at_all_is_planned(
        monkeypatch, values, first_epoch, recorded, split):
    # Two devices of 1e9 FLOP/s, batch 64, one dense layer 1000 -> 100: one device 38.4
    # ms, model:2 36.5 ms (19.2 ms, a 17.04 ms hand-over and a 12800 B half of the output at
    # 5e7 B/s: 5% faster, within the 10% margin); batch:2 44.2 ms (the 4e5 B of gradients).
    measured = [DeviceSpec("/gpu:0", 1e9), DeviceSpec("/gpu:1", 1e9)]
    monkeypatch.setattr(plan_choice, "_measured",
                        lambda *args: (measured, LinkSpec(5e7, 17.04e-3)))
    hardware = types.SimpleNamespace(devices=["/gpu:0", "/gpu:1"], speeds=None)
    settings = Settings.of(batch_size=64, epochs=6, **values)
    plan, fastest, runner_up = plan_choice.choose_plan(
        settings, hardware, fc_model(), None, None, None, None, first_epoch, recorded)
    assert fastest == "/gpu:0" and runner_up is None   # batch:2 priced at 44.2 ms: far
    assert (plan.mesh, len(plan.devices)) == (("model:2", 2) if split else ("batch:1", 1))
    assert plan.reason.endswith("; against one device, a layout predicted faster at all, "
                                "since --try_alone measures it against the fastest device "
                                "alone") == split
    too_few = values.get("try_alone", True) and not split   # 2 epochs left, 3 needed
    assert plan.reason.endswith("; no --try_alone trial: it needs 3 epochs, the run has 2 "
                                "left") == too_few


def test_a_plan_of_given_speeds_says_when_the_run_is_too_short_for_the_trial():
    """--speeds numbers: no profiling, but the trial runs as with measured speeds; a run
    of 2 epochs has no room for it, and its plan's reason says so (it was silent)."""
    hardware = types.SimpleNamespace(devices=["/cpu:0", "/cpu:1"], speeds=[1.0, 1.0])
    for epochs, said in ((2, True), (3, False)):
        plan, _, _ = plan_choice.choose_plan(
            Settings.of(batch_size=64, epochs=epochs, mesh="batch:2"), hardware, fc_model(),
            None, None, None, None, 0, None)
        assert plan.reason.endswith("; no --try_alone trial: it needs 3 epochs, the run "
                                    "has 2 left") is False   # batch:2 given: no trial asked
        plan, _, _ = plan_choice.choose_plan(
            Settings.of(batch_size=64, epochs=epochs), hardware, fc_model(), None, None,
            None, None, 0, None)
        assert len(plan.devices) == 2
        assert plan.reason.endswith("; no --try_alone trial: it needs 3 epochs, the run "
                                    "has 2 left") is said


@pytest.mark.parametrize("epochs, first_epoch, recorded, raced", [
    (6, 0, None, True), (4, 0, None, True), (3, 0, None, False), (6, 4, RECORD, False),
    # the plan measured in epoch 3: the runner-up, the device alone and the faster still
    (7, 4, {**RECORD, "key": {**KEY, "runner_up": {"mesh": "batch:2"}}}, True),
    (6, 4, {**RECORD, "key": {**KEY, "runner_up": {"mesh": "batch:2"}}}, False)])
def test_a_layout_priced_within_the_margin_of_the_plan_races_in_the_trial(
        monkeypatch, epochs, first_epoch, recorded, raced):
    """With a 1 ms hand-over at 4e8 B/s the same model prices model:2 at 20.2 ms (19.2 ms
    and a 12800 B half of the output) and batch:2 at 21.2 ms (the 4e5 B of gradients: 5%
    slower, within the 10% margin): batch:2 is the runner-up, planned on both
    devices, when the run has an epoch for it (4 fresh) or the trial taken up after a
    resume had one (a record without one, e.g. of an older run, is taken up as it ran)."""
    measured = [DeviceSpec("/gpu:0", 1e9), DeviceSpec("/gpu:1", 1e9)]
    monkeypatch.setattr(plan_choice, "_measured", lambda *args: (measured, LinkSpec(4e8, 1e-3)))
    hardware = types.SimpleNamespace(devices=["/gpu:0", "/gpu:1"], speeds=None)
    settings = Settings.of(batch_size=64, epochs=epochs)
    plan, fastest, runner_up = plan_choice.choose_plan(
        settings, hardware, fc_model(), None, None, None, None, first_epoch, recorded)
    assert (plan.mesh, fastest) == ("model:2", "/gpu:0")
    if not raced:
        assert runner_up is None
        return
    assert (runner_up.mesh, runner_up.devices, runner_up.splits) == (
        "batch:2", ["/gpu:0", "/gpu:1"], {"batch": [32, 32]})
    priced = {c.mesh: c.step for c in plan.candidates}
    assert runner_up.prediction.step == pytest.approx(priced["batch:2"])
    assert priced["batch:2"] / plan.prediction.step - 1 == pytest.approx(
        (4e5 - 12800) / 4e8 / (0.0192 + 12800 / 4e8 + 1e-3))


def test_a_trial_with_a_runner_up_runs_the_three_layouts_and_keeps_the_fastest(tmp_path):
    split, alone = plans()
    other = plan_layout(spec(), ["/cpu:0", "/cpu:1"], [1, 1], 8, "batch:2")
    key = {**KEY, "runner_up": {"mesh": "batch:2"}}
    trial = AloneTrial(split, alone, key, other)
    assert (trial.plan, trial.epochs_needed) == (split, 4)
    trial.measure(0, 100.0)
    assert trial.plan is other and trial.message == (
        "trial: the plan ran 100 samples/s at its steady rate; the next epoch runs on the "
        "runner-up (batch:2 batch [4, 4])")
    trial.measure(1, 180.0)
    assert trial.plan is alone and trial.message == (
        "trial: the runner-up (batch:2 batch [4, 4]) ran 180 samples/s at its steady rate; the "
        "next epoch runs on the "
        "fastest device alone (/cpu:0)")
    trial.measure(2, 150.0)
    assert trial.done and trial.verdict == "runner-up" and trial.plan is other
    assert trial.message == ("trial: the runner-up (batch:2 batch [4, 4]) ran 180 samples/s against "
                             "100 for the plan and 150 for /cpu:0 alone; training goes on on the "
                             "runner-up")
    assert trial.record()["epochs"] == {"split": 0, "runner-up": 1, "alone": 2}
    # taken up after a resume in the epoch alone: that epoch again, alone
    resumed = AloneTrial(split, alone, key, other)
    line = resumed.take_up(trial.record(), 2)
    assert (resumed.rates, resumed.plan) == ({"split": 100.0, "runner-up": 180.0}, alone)
    assert line == ("trial: the runner-up (batch:2 batch [4, 4]) ran 180 samples/s at its "
                    "steady rate before the resume; "
                    "the next epoch runs on the fastest device alone (/cpu:0)")
    decided = AloneTrial(split, alone, key, other)
    assert decided.take_up(trial.record(), 3) == (
        "trial: decided before the resume: the plan (100 samples/s) against the runner-up "
        "(batch:2 batch [4, 4]) (180) and /cpu:0 alone (150); training on the runner-up (batch:2 batch [4, 4])")
    assert decided.plan is other
    tie = AloneTrial(split, alone, key, other)   # equal rates: alone, then the plan
    for epoch, rate in enumerate([120.0, 120.0, 100.0]):
        tie.measure(epoch, rate)
    assert tie.verdict == "split"


@pytest.fixture(scope="module")
def first_runs(tmp_path_factory):
    """(folder, {name: (Run, results.json)}) of 3 epochs with the trial and without."""
    folder = tmp_path_factory.mktemp("try_alone")
    args = {"trial": [], "no_trial": ["--notry_alone"]}
    done = run_batch("hmp.train", [
        {"args": [*FLAGS, *extra, "--epochs=3", "--model_dir=%s" % (folder / name)]}
        for name, extra in args.items()])
    for run in done:
        assert run.returncode == 0, run.stderr[-2000:]
    return folder, {name: (run, json.loads((folder / name / "results.json").read_text()))
                    for name, run in zip(args, done)}


def test_a_run_races_its_plan_against_the_fastest_device_alone(first_runs):
    folder, results = first_runs
    run, trial = results["trial"]
    meshes = [plan["mesh"] for plan in trial["plans"]]
    split_rate = trial["history"][0]["steady_samples_per_second"]
    assert meshes[:2] == ["batch:2", "batch:1"]
    assert trial["plans"][1]["devices"] == ["/cpu:0"]     # the faster by --speeds
    # after its verdict (the rule on rates: test_the_trial_keeps_the_layout_that_ran_more_samples;
    # no measured time is compared here), the run stays alone or goes back to the plan
    assert meshes[2:] == ([] if trial["trial"]["verdict"] == "alone" else ["batch:2"])
    assert "trial: the plan ran %.0f samples/s at its steady rate" % split_rate in run.stdout
    # the switch to /cpu:0 alone goes on from the epoch's checkpoint; the run was not resumed
    assert "the plan's graph goes on from %s" % (folder / "trial" / "ckpt-") in run.stdout
    assert "resumed from" not in run.stdout
    assert [plan["mesh"] for plan in results["no_trial"][1]["plans"]] == ["batch:2"]
    assert results["no_trial"][1]["trial"] is None
    # The trial changes where the steps run, not what they compute.
    losses = [[e["loss"] for e in results[name][1]["history"]] for name in ("trial", "no_trial")]
    assert losses[0] == pytest.approx(losses[1], rel=1e-4)


def test_a_resumed_run_trains_on_the_recorded_winner_without_a_second_trial(first_runs):
    folder, results = first_runs
    run, first = results["trial"]
    record = first["trial"]
    split_rate, alone_rate = (e["steady_samples_per_second"] for e in first["history"][:2])
    # results.json records the rates the first run printed, and its verdict
    assert record["rates"] == {"split": split_rate, "alone": alone_rate}
    assert record["epochs"] == {"split": 0, "alone": 1}
    assert record["verdict"] in ("alone", "split")
    alone_won = record["verdict"] == "alone"
    printed = [line for line in run.stdout.splitlines() if line.startswith("trial:")]
    assert printed[1] == (
        "trial: /cpu:0 alone ran %.0f samples/s against %.0f for the plan; training goes "
        "on there alone" % (alone_rate, split_rate) if alone_won else
        "trial: the plan ran %.0f samples/s against %.0f for /cpu:0 alone; back to the "
        "plan" % (split_rate, alone_rate))

    # 3 epochs more: enough for a trial of its own, were the first run's not taken up
    resumed, = run_batch("hmp.train", [{"args": [
        *FLAGS, "--epochs=6", "--resume", "--model_dir=%s" % (folder / "trial")]}])
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert [line for line in resumed.stdout.splitlines() if line.startswith("trial:")] == [
        "trial: decided before the resume: the plan (%.0f samples/s) against /cpu:0 alone "
        "(%.0f); training on %s"
        % (split_rate, alone_rate, "/cpu:0 alone" if alone_won else "the plan")]
    after = json.loads((folder / "trial" / "results.json").read_text())
    winner = first["plans"][1 if alone_won else 0]
    assert after["plans"] == first["plans"] + [winner]   # the resume's one plan: the winner
    assert [e["epoch"] for e in after["history"]] == list(range(6))
    assert after["trial"] == record


def test_a_fresh_trial_needs_an_epoch_per_layout_and_one_on_the_fastest():
    split, alone = plans()
    for runner_up, epochs in ((False, 3), (True, 4)):
        trial = AloneTrial(split, alone, KEY, split if runner_up else None)
        assert AloneTrial.epochs_for(runner_up) == trial.epochs_needed == epochs


def test_a_resume_keeps_the_trials_rates_of_the_epochs_before_its_checkpoint(tmp_path):
    """A trial epoch recorded but not checkpointed (a kill between the two) runs again: its
    rate, and a verdict made with it, are not kept, also when the resume takes up no
    trial (its record lands in results.json)."""
    trial = {"key": KEY, "device": "/cpu:0", "rates": {"split": 900.0, "alone": 700.0},
             "epochs": {"split": 0, "alone": 1}, "verdict": "split"}
    history = [dict(vars(EpochStats(epoch, 1.0, 0.5, 100.0, 1.0))) for epoch in range(2)]
    (tmp_path / "history.json").write_text(json.dumps({"history": history, "trial": trial}))
    resumed = run_folder.History.open(str(tmp_path), True, 1, 10, ["hmp.train"])
    assert [e["epoch"] for e in resumed.epochs] == [0]
    assert resumed.trial == {**trial, "rates": {"split": 900.0}, "epochs": {"split": 0},
                             "verdict": None}
    assert run_folder.History.open(str(tmp_path), True, 2, 20, []).trial == trial   # whole
