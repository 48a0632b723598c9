"""--try_alone: a plan over several devices races the fastest device alone for one
epoch each, and the run keeps the faster; the weights carry over either way."""

import json

import pytest

from cli_batch import run_batch
from hmp.planning import plan_layout
from hmp.run import rebalance
from test_rebalance import spec

FLAGS = ["--model=cnn2d", "--width=8", "--patch_size=5", "--batch_size=64",
         "--devices=/cpu:0,/cpu:1", "--train_fraction=0.03", "--speeds=3,1", "--epochs=3",
         "--optimizer=momentum", "--learning_rate=0.01", "--val_fraction=0", "--noaugment"]


def plans():
    split = plan_layout(spec(), ["/cpu:0", "/cpu:1"], [3, 1], 8, "batch:2")
    alone = plan_layout(spec(), ["/cpu:0"], [1], 8, "auto")
    return split, alone


@pytest.mark.parametrize("split_rate, alone_rate, kept", [
    (100.0, 150.0, "alone"), (150.0, 100.0, "split"), (100.0, 100.0, "alone")])
def test_the_trial_keeps_the_layout_that_ran_more_samples(split_rate, alone_rate, kept):
    split, alone = plans()
    trial = rebalance.AloneTrial(split, alone)
    assert not trial.done
    assert trial.after_epoch(split_rate) is alone          # epoch 2 runs alone
    back = trial.after_epoch(alone_rate)
    assert trial.done
    assert back is (None if kept == "alone" else split)   # None: stay where it is
    assert trial.after_epoch(1e9) is None                  # decided once
    assert ("back to the plan" in trial.message) == (kept == "split")


def test_a_run_races_its_plan_against_the_fastest_device_alone(tmp_path):
    args = {"trial": [], "no_trial": ["--notry_alone"]}
    runs = run_batch("hmp.train", [
        {"args": [*FLAGS, *extra, "--model_dir=%s" % (tmp_path / name)]}
        for name, extra in args.items()])
    for run in runs:
        assert run.returncode == 0, run.stderr[-2000:]
    results = {name: json.loads((tmp_path / name / "results.json").read_text())
               for name in args}
    trial = results["trial"]
    meshes = [plan["mesh"] for plan in trial["plans"]]
    split_rate, alone_rate = (e["steady_samples_per_second"] for e in trial["history"][:2])
    assert meshes[:2] == ["batch:2", "batch:1"]
    assert trial["plans"][1]["devices"] == ["/cpu:0"]     # the faster by --speeds
    assert meshes[2:] == ([] if alone_rate >= split_rate else ["batch:2"])
    assert "trial: the plan ran %.0f samples/s" % split_rate in runs[0].stdout
    assert [plan["mesh"] for plan in results["no_trial"]["plans"]] == ["batch:2"]
    # The trial changes where the steps run, not what they compute.
    losses = [[e["loss"] for e in results[name]["history"]] for name in ("trial", "no_trial")]
    assert losses[0] == pytest.approx(losses[1], rel=1e-4)
