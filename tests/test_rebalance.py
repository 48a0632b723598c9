"""--rebalance=epoch: the split moves away from a slow device, the loss does not change."""

import json

import pytest

from cli_batch import run_batch
from hmp.planning import ModelSpec, conv_layer_spec, plan_layout
from hmp.run import rebalance

# Momentum, not Adam: a new split sums in another order, and Adam's division
# by sqrt(v) magnifies those rounding differences of near-zero gradients.
FLAGS = ["--model=cnn2d", "--width=8", "--patch_size=5", "--batch_size=64",
         "--devices=/cpu:0,/cpu:1,/cpu:2",
         "--train_fraction=0.05", "--speeds=1,1,1", "--mesh=model:3", "--epochs=3",
         "--optimizer=momentum", "--learning_rate=0.01",
         "--val_fraction=0", "--noaugment", "--notta"]   # the recipe is not under test here


def spec():
    return ModelSpec("toy", [
        conv_layer_spec("conv1", "conv2d", (5, 5), 3, 10, 30, split_dim="f", split_role="output"),
        conv_layer_spec("conv2", "conv2d", (5, 5), 3, 30, 8, split_dim="f", split_role="input"),
    ], input_shape=(5, 5, 10))


def test_imbalance_and_measured_speeds():
    assert rebalance.imbalance([1.0, 1.0, 1.0]) == 0.0
    assert rebalance.imbalance([1.0, 3.0, 1.5]) == pytest.approx(2.0)
    plan = plan_layout(spec(), ["/cpu:0", "/cpu:1"], [1, 1], 8, "model:2")
    # Equal loads; device 1 took twice as long, so it is half as fast.
    assert rebalance.measured_speeds(plan, [1.0, 2.0]) == pytest.approx(
        [plan.prediction.load[0], plan.prediction.load[1] / 2])


def test_replan_moves_filters_from_slow_device_only_above_threshold():
    plan = plan_layout(spec(), ["/cpu:0", "/cpu:1", "/cpu:2"], [1, 1, 1], 8, "model:3")
    assert plan.splits["f"] == [10, 10, 10]
    assert rebalance.replan(plan, spec(), [1.0, 1.05, 1.0]) is None
    new_plan = rebalance.replan(plan, spec(), [1.0, 2.0, 1.0])
    assert new_plan.splits["f"] == [12, 6, 12]
    assert new_plan.mesh == plan.mesh


def test_rebalancing_shifts_work_and_keeps_the_loss_trajectory(tmp_path, small_scene):
    args = {"steady": [], "balanced": ["--rebalance=epoch", "--simulate_slowdown=/cpu:1=4"]}
    runs = run_batch("hmp.train", [   # one interpreter (tests/cli_batch.py)
        {"args": [*FLAGS, *small_scene, *extra, "--model_dir=%s" % (tmp_path / name)]}
        for name, extra in args.items()])
    for run in runs:
        assert run.returncode == 0, run.stderr[-2000:]
    steady, balanced = (json.loads((tmp_path / name / "results.json").read_text())
                        for name in args)
    shares = [p["splits"]["filters1"][1] for p in balanced["plans"]]
    assert len(shares) >= 2 and shares[-1] < shares[0]
    assert [p["splits"]["filters1"][1] for p in steady["plans"]] == [shares[0]]
    steady_losses = [h["loss"] for h in steady["history"]]
    balanced_losses = [h["loss"] for h in balanced["history"]]
    assert balanced_losses == pytest.approx(steady_losses, rel=1e-4)
