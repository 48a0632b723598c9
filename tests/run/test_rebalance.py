"""--rebalance=epoch: the split moves away from a slow device when that pays back its
switch, a switch that lost is undone, and the loss does not change."""

import dataclasses
import json
import re

import numpy as np
import pytest

import hmp
from hmp.graph.from_graph import model_spec
from hmp.planning import DeviceSpec, ModelSpec, Plan, conv_layer_spec, plan_layout
from hmp.planning.costmodel import predict
from hmp.planning.layout import parse_mesh
from hmp.run import rebalance, trainer
from hmp.run.settings import Settings
from hmp.run.trainer import EpochStats
from models import get_model, model_config

# Momentum, not Adam: a new split sums in another order, and Adam's division
# by sqrt(v) magnifies those rounding differences of near-zero gradients.
SETTINGS = dict(model="spectral", width=8, patch_size=5, batch_size=64,
                devices="/cpu:0,/cpu:1,/cpu:2", speeds="1,1,1", mesh="model:3", epochs=3,
                optimizer="momentum", learning_rate=0.01,
                val_fraction=0.0, augment=False, tta=False)   # the recipe is not under test


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


def test_a_replan_keeps_the_plans_memory_caps():
    devices = ["/cpu:0", "/cpu:1", "/cpu:2"]
    even = plan_layout(spec(), devices, [1, 1, 1], 8, "model:3")
    caps = [even.prediction.memory[0] * 1.01, None, None]   # device 0 holds 10 filters, no more
    plan = plan_layout(spec(), devices, [1, 1, 1], 8, "model:3", memory_caps=caps)
    assert plan.splits == even.splits and plan.memory_caps == caps
    uncapped = rebalance.replan(even, spec(), [1.0, 2.0, 1.0]).splits["f"]
    new_plan = rebalance.replan(plan, spec(), [1.0, 2.0, 1.0])
    assert uncapped[0] > 10 and new_plan.splits["f"][0] == 10
    assert new_plan.prediction.memory[0] <= caps[0] and new_plan.memory_caps == caps


def test_a_replan_keeps_the_plans_channel_blocks():
    wide = ModelSpec("wide", [
        conv_layer_spec("conv1", "conv2d", (5, 5), 3, 10, 64, split_dim="f", split_role="output"),
        conv_layer_spec("conv2", "conv2d", (5, 5), 3, 64, 8, split_dim="f", split_role="input"),
    ], (5, 5, 10))
    names = ["/cpu:0", "/cpu:1"]
    plan = plan_layout(wide, [DeviceSpec(d, 1.0, channel_block=16) for d in names], None, 8,
                       "model:2")
    assert plan.splits["f"] == [32, 32] and plan.channel_blocks == [16, 16]
    # device 1 took twice as long: 4 blocks at 2:1 are [3, 1]; single filters [43, 21]
    assert rebalance.replan(plan, wide, [1.0, 2.0]).splits["f"] == [48, 16]
    # a plan's own predicted busy times give back its speeds, the partial block
    # included (the load is its blocked work): 40 filters are [24, 16] at 2:1
    uneven_spec = dataclasses.replace(wide, layers=[
        conv_layer_spec("conv1", "conv2d", (5, 5), 3, 10, 40, split_dim="f", split_role="output"),
        conv_layer_spec("conv2", "conv2d", (5, 5), 3, 40, 8, split_dim="f", split_role="input")])
    uneven = plan_layout(
        uneven_spec, [DeviceSpec(d, s, channel_block=16) for d, s in zip(names, (2.0, 1.0))], None, 8,
        "model:2")
    assert uneven.splits["f"] == [24, 16]
    speeds = rebalance.measured_speeds(uneven, uneven.prediction.busy)
    assert speeds[0] / speeds[1] == pytest.approx(2.0)
    # and price another split as the cost model does (Rebalancer.choose: load / speed),
    # however many blocks it wastes: [20, 20] is 2 blocks each, 4 where [24, 16] is 3
    other = predict(uneven_spec, [DeviceSpec(d, s, channel_block=16)
                                  for d, s in zip(names, (2.0, 1.0))],
                    parse_mesh("model:2"), 8, {"f": [20, 20]})
    assert [load / speed for load, speed in zip(other.load, speeds)] == pytest.approx(
        other.busy)
    plain = plan_layout(wide, names, [1, 1], 8, "model:2")
    assert plain.channel_blocks == []
    assert rebalance.replan(plain, wide, [1.0, 2.0]).splits["f"] == [43, 21]


DEVICES = ["/cpu:0", "/cpu:1"]


def batch_plan(speeds):
    return plan_layout(spec(), DEVICES, speeds, 64, "batch:2")


def epoch(busy_seconds, seconds=1.0, startup=0.0):
    """The EpochStats of an epoch of 10 steps of 64 samples whose first two steps took
    ``startup`` seconds beyond its steady rate."""
    return EpochStats(0, 1.0, 0.5, 640 / (seconds + startup), seconds + startup,
                      busy_seconds, steps=10, steady_samples_per_second=640 / seconds)


def measured(rebalancer, plan, busy_seconds, samples_per_second):
    rebalancer.measure(plan, epoch(busy_seconds, seconds=640 / samples_per_second))


def test_a_regime_averages_speeds_until_a_plan_runs_at_another_rate():
    """The speeds of a regime: its first epoch's (the one the machine changed in) until a
    second comes, then the mean of the epochs after the first."""
    even = batch_plan([1, 1])   # loads 0.5, 0.5
    rebalancer = rebalance.Rebalancer(spec(), threshold=0.1)
    measured(rebalancer, even, [1.0, 1.0], 100.0)
    assert rebalancer.regime.speeds == pytest.approx([0.5, 0.5])
    measured(rebalancer, even, [1.0, 1.5], 105.0)   # 5% faster: the same machine
    regime = rebalancer.regime
    assert regime.epochs == 2
    assert regime.speeds == pytest.approx([0.5, 0.5 / 1.5])   # the first left out
    measured(rebalancer, even, [1.0, 1.25], 102.0)
    assert regime.epochs == 3
    assert regime.speeds == pytest.approx([0.5, (0.5 / 1.5 + 0.5 / 1.25) / 2])
    measured(rebalancer, even, [1.0, 3.0], 80.0)    # 22% slower than 102: it changed
    regime = rebalancer.regime
    assert regime.epochs == 1
    assert regime.rates == {rebalance.plan_key(even): (even, pytest.approx(80.0))}
    assert regime.speeds == pytest.approx([0.5, 0.5 / 3])
    measured(rebalancer, even, None, 50.0)          # no traced step: nothing taken
    assert rebalancer.regime.rates[rebalance.plan_key(even)][1] == pytest.approx(80.0)


def test_a_few_steps_off_the_regimes_rate_end_it():
    """Within twice the threshold the regime holds; off it, the regime ends and nothing
    is weighed until an epoch is measured again."""
    even, other = batch_plan([1, 1]), batch_plan([3, 1])
    rebalancer = rebalance.Rebalancer(spec(), threshold=0.1)
    assert rebalancer.confirm(even, 10.0)   # no regime: nothing to compare with
    measured(rebalancer, even, [1.0, 3.0], 100.0)
    assert rebalancer.confirm(even, 119.0) and rebalancer.confirm(even, 81.0)
    assert rebalancer.confirm(other, 10.0)   # no rate of that plan in the regime
    assert rebalancer.choose(even, 10, 5) is not None   # device 1 is slow: away from it
    assert not rebalancer.confirm(even, 79.0)
    assert rebalancer.regime is None and rebalancer.choose(even, 10, 5) is None
    measured(rebalancer, even, [1.0, 1.0], 79.0)   # a new regime from the next epoch
    assert rebalancer.regime.epochs == 1 and rebalancer.choose(even, 10, 5) is None
    measured(rebalancer, even, [1.0, 1.0], 79.0)
    assert not rebalancer.confirm(even, 121.0 * 79 / 100)


def test_a_switch_costs_its_seconds_and_the_extra_start_of_the_epoch_after_it():
    even = batch_plan([1, 1])
    rebalancer = rebalance.Rebalancer(spec(), threshold=0.1)
    rebalancer.measure(even, epoch([1.0, 1.0], startup=0.5), ("build", 4.0))
    assert rebalancer.cost == {"build": pytest.approx(4.5)}   # the run's first start
    rebalancer.measure(even, epoch([1.0, 1.0], startup=0.25))   # a traced step's
    rebalancer.measure(even, epoch([1.0, 1.0], startup=1.0), ("reuse", 0.5))
    assert rebalancer.cost == {"build": pytest.approx(4.5), "reuse": pytest.approx(1.25)}
    stats = epoch([1.0, 1.0])
    stats.steady_samples_per_second = None   # too few steps to tell
    assert rebalance.startup_seconds(stats, 64) == 0.0


def test_a_new_plan_is_chosen_only_when_it_pays_back_its_switch():
    even = batch_plan([1, 1])
    rebalancer = rebalance.Rebalancer(spec(), threshold=0.1)
    measured(rebalancer, even, [1.0, 3.0], 64.0)    # 1 s a step: 10 s an epoch of 10 steps
    # Device 1 is a third as fast: [48, 16], loads 0.75, 0.25; the busiest device's
    # time goes from 3 s to max(0.75 / 0.5, 0.25 / (0.5 / 3)) = 1.5 s: an epoch of 5 s.
    saved = 10.0 - 10.0 * 1.5 / 3.0
    rebalancer.cost["build"] = saved + 0.01
    assert rebalancer.choose(even, 10, epochs_left=5) is None
    assert rebalancer.message == (
        "re-balancing: batch [48, 16] predicted 5.00 s an epoch against 10.00 s on "
        "batch [32, 32]; switch 5.01 s (new graph), saved over 1 epoch: staying")
    rebalancer.cost["build"] = saved - 0.01
    assert rebalancer.choose(even, 10, epochs_left=5).splits == {"batch": [48, 16]}
    # A switch that costs more waits until the slowdown has lost as much (ski rental),
    # and never beyond the epochs left.
    rebalancer.cost["build"] = 2 * saved - 0.01
    assert rebalancer.choose(even, 10, epochs_left=5) is None
    measured(rebalancer, even, [1.0, 3.0], 64.0)
    assert rebalancer.choose(even, 10, epochs_left=1) is None
    assert rebalancer.waiting is None and rebalancer.message.endswith("staying")   # last epoch
    assert rebalancer.choose(even, 10, epochs_left=5).splits == {"batch": [48, 16]}


def test_a_plan_kept_off_by_its_graphs_cost_is_waited_for_then_switched_to_when_ready():
    even = batch_plan([1, 1])
    rebalancer = rebalance.Rebalancer(spec(), threshold=0.1)
    measured(rebalancer, even, [1.0, 3.0], 64.0)   # as above: 10 s an epoch against 5 s
    rebalancer.cost["build"] = 20.0
    assert rebalancer.choose(even, 10, epochs_left=5) is None
    assert rebalancer.waiting.splits == {"batch": [48, 16]}
    ready = {rebalance.plan_key(rebalancer.waiting)}
    # the epoch its graph was made ready in ran slowly on both devices: left out
    rebalancer.measure(even, epoch([4.0, 3.5], seconds=640 / 30.0), disturbed=True)
    assert rebalancer.regime.epochs == 1 and rebalancer.regime.rates[
        rebalance.plan_key(even)][1] == 64.0
    assert rebalancer.choose(even, 10, epochs_left=5, kept=ready) is None   # no reuse cost yet
    rebalancer.expect_reuse(0.5)
    assert rebalancer.choose(even, 10, epochs_left=5, kept=ready).splits == {"batch": [48, 16]}
    assert rebalancer.waiting is None and rebalancer.message.endswith(
        "switch 0.50 s (kept graph), saved over 1 epoch: switching")
    rebalancer.expect_reuse(9.0)   # a measured (or earlier) cost stays
    assert rebalancer.cost["reuse"] == 0.5
    # a plan waited for stays in play while its graph is kept, beside a fresh one
    rebalancer = rebalance.Rebalancer(spec(), threshold=0.1)
    measured(rebalancer, even, [1.0, 3.0], 64.0)
    rebalancer.cost["build"] = 20.0
    assert rebalancer.choose(even, 10, epochs_left=5) is None
    waited = rebalancer.waiting   # batch [48, 16]
    measured(rebalancer, even, [1.0, 2.5], 70.0)   # the regime's mean: [1.0, 2.75]
    assert rebalancer.choose(even, 10, epochs_left=5) is None   # a new graph for the fresh
    fresh = rebalancer.waiting
    assert fresh.splits != waited.splits
    rebalancer.expect_reuse(0.1)
    assert rebalancer.choose(even, 10, epochs_left=5,
                             kept={rebalance.plan_key(waited)}) is waited
    # a plan that would not save the threshold of an epoch is not waited for
    rebalancer = rebalance.Rebalancer(spec(), threshold=0.6)
    measured(rebalancer, even, [1.0, 3.0], 64.0)
    rebalancer.cost["build"] = 20.0
    assert rebalancer.choose(even, 10, epochs_left=5) is None and rebalancer.waiting is None


def test_a_plan_without_a_graph_is_waited_for_beside_a_kept_one_that_saves_nothing():
    """The plan kept from before is slower on today's speeds (it loads the device now slowed
    yet more): the plan off that device, whose new graph does not pay back within the
    regime's epoch, is still the one built meanwhile."""
    even, skewed = batch_plan([1, 1]), batch_plan([3, 1])   # [32, 32], [48, 16]
    rebalancer = rebalance.Rebalancer(spec(), threshold=0.1)
    measured(rebalancer, even, [1.0, 1.0], 100.0)
    measured(rebalancer, skewed, [1.5, 0.5], 95.0)   # kept, within 5% of the even plan
    measured(rebalancer, even, [3.0, 1.0], 64.0)     # device 0 a third as fast: a new regime
    rebalancer.cost.update(build=20.0, reuse=0.5)
    assert rebalancer.choose(even, 10, epochs_left=5, kept={rebalance.plan_key(skewed)}) is None
    assert rebalancer.waiting.splits == {"batch": [16, 48]}
    assert rebalancer.message == (   # the kept plan: 10 s x 4.5 / 3 = 15 s (net -5.5 s)
        "re-balancing: batch [16, 48] predicted 5.00 s an epoch against 10.00 s on "
        "batch [32, 32]; switch 20.00 s (new graph), saved over 1 epoch: staying")


def steady(steps, seconds):
    """The EpochStats of a disturbed part of ``steps`` steps of 64 samples, steady over
    ``seconds`` (its start left out: 3 s beyond)."""
    return EpochStats(1, 1.0, 0.5, 0.0, seconds + 3.0, [4.0, 4.0], steps=steps,
                      steady_samples_per_second=steps * 64 / seconds)


def test_a_standby_costs_what_its_epochs_lost_and_must_pay_that_back():
    """The time the steady steps of the epochs a graph was built in (and of the part of
    one before a pause) took beyond their rate in the regime is the standby's cost, once
    the next epoch shows the regime went on; a plan is waited for only when its saving
    over the epochs after the next pays that and a restore (a standby is free until
    priced)."""
    even = batch_plan([1, 1])
    rebalancer = rebalance.Rebalancer(spec(), threshold=0.1)
    measured(rebalancer, even, [1.0, 3.0], 64.0)   # 10 s an epoch: [48, 16] takes 5 s
    rebalancer.cost["build"] = 20.0
    assert rebalancer.choose(even, 10, epochs_left=2) is None
    assert rebalancer.waiting.splits == {"batch": [48, 16]}   # 5 s after the next: free
    rebalancer.standby_started()
    rebalancer.measure(even, steady(10, 16.0), disturbed=True)   # 6 s lost
    rebalancer.measure(even, steady(4, 4.5), disturbed=True)     # 0.5 s lost
    assert rebalancer.regime.epochs == 1 and "standby" not in rebalancer.cost
    assert rebalancer.standby_lost == pytest.approx(6.5)
    measured(rebalancer, even, [1.0, 3.0], 64.0)   # the regime went on
    assert rebalancer.regime.epochs == 2
    assert rebalancer.cost["standby"] == pytest.approx(6.5) and rebalancer.standby_lost is None
    rebalancer.expect_reuse(1.0)
    assert rebalancer.choose(even, 10, epochs_left=2) is None and rebalancer.waiting is None
    assert rebalancer.message.endswith(
        "switch 20.00 s (new graph), saved over 2 epochs: staying; its graph built meanwhile "
        "would save 5.00 s after the next epoch, against 7.50 s (what a build took from "
        "training, and a restore): not built")
    assert rebalancer.choose(even, 10, epochs_left=3) is None
    assert rebalancer.waiting.splits == {"batch": [48, 16]}   # 10 s after the next


def test_a_build_whose_regime_ends_is_not_priced():
    """A build's loss stays unpriced when the machine changed meanwhile: the next epoch
    starts a new regime, ``confirm`` ends it, or a part has no rate to compare with."""
    even = batch_plan([1, 1])
    rebalancer = rebalance.Rebalancer(spec(), threshold=0.1)
    measured(rebalancer, even, [1.0, 3.0], 64.0)
    rebalancer.standby_started()
    rebalancer.measure(even, steady(10, 16.0), disturbed=True)
    measured(rebalancer, even, [1.0, 3.0], 80.0)   # 25% faster: a new regime
    assert rebalancer.regime.epochs == 1
    assert "standby" not in rebalancer.cost and rebalancer.standby_lost is None
    rebalancer.standby_started()
    rebalancer.measure(even, steady(10, 16.0), disturbed=True)
    assert not rebalancer.confirm(even, 40.0)   # the regime ends within the epoch
    assert rebalancer.standby_lost is None
    rebalancer.measure(even, steady(10, 16.0), disturbed=True)   # no regime: nothing
    assert rebalancer.standby_lost is None
    measured(rebalancer, even, [1.0, 3.0], 80.0)
    for unpriced in (batch_plan([3, 1]), even):   # another plan's rate; too few steps
        rebalancer.standby_started()
        stats = steady(10, 16.0) if unpriced is not even else EpochStats(
            1, 1.0, 0.5, 0.0, 2.0, None, steps=2)
        rebalancer.measure(unpriced, stats, disturbed=True)
        assert rebalancer.standby_lost is None
        measured(rebalancer, even, [1.0, 3.0], 80.0)
        assert "standby" not in rebalancer.cost


def test_kept_plans_on_other_devices_or_meshes_are_not_in_play():
    """A kept plan is priced from the regime's speeds only on its devices and mesh: the
    alone trial's one-device plan, or a filter split, would be mispriced."""
    even = batch_plan([1, 1])
    alone = plan_layout(spec(), DEVICES[:1], [1], 64, "batch:1")
    filters = plan_layout(spec(), DEVICES, [3, 1], 64, "model:2")   # off device 1 too
    rebalancer = rebalance.Rebalancer(spec(), threshold=0.1)
    measured(rebalancer, alone, [1.0], 64.0)
    measured(rebalancer, filters, [1.0, 1.0], 64.0)
    measured(rebalancer, even, [1.0, 3.0], 100.0)
    measured(rebalancer, even, [1.0, 3.0], 64.0)   # a regime of its own
    assert list(rebalancer.regime.rates) == [rebalance.plan_key(even)]
    rebalancer.cost.update(build=20.0, reuse=0.5)
    # priced from these speeds, each would pay back a restore: alone (zip would pair
    # its one load with device 0's speed) 6.67 s, the filter split 5.3 s, against 10 s
    kept = {rebalance.plan_key(alone), rebalance.plan_key(filters)}
    assert rebalancer.choose(even, 10, epochs_left=5, kept=kept) is None
    assert rebalancer.message.startswith("re-balancing: batch [48, 16] predicted")
    assert rebalancer.waiting.splits == {"batch": [48, 16]}


def test_once_the_machine_changes_back_the_plan_left_is_a_restore_away():
    """After a switch away from a slowed device, the device is fast again: the plan left
    (kept, measured in an earlier regime) is priced from the new regime's speeds and
    switched back to at a kept graph's cost, where the fresh plan, a little faster on
    paper, would cost a new graph and would only be waited for."""
    even, skewed = batch_plan([1, 1]), batch_plan([3, 1])   # [32, 32], [48, 16]
    rebalancer = rebalance.Rebalancer(spec(), threshold=0.1)
    measured(rebalancer, even, [1.0, 3.0], 64.0)      # device 1 a third as fast
    measured(rebalancer, skewed, [1.5, 1.5], 128.0)   # the switch paid
    # 25% faster on the same plan: a new regime, device 1 at 0.52 against 0.5
    measured(rebalancer, skewed, [1.5, 0.25 / 0.52], 160.0)
    assert rebalancer.regime.epochs == 1
    assert rebalancer.regime.speeds == pytest.approx([0.5, 0.52])
    rebalancer.cost.update(build=5.0, reuse=0.5)
    assert rebalancer.choose(skewed, 10, 5, kept={rebalance.plan_key(even)}) is even
    assert rebalancer.message == (   # 10 x 64 / 160 = 4 s; 4 s x 1.0 / 1.5
        "re-balancing: batch [32, 32] predicted 2.67 s an epoch against 4.00 s on "
        "batch [48, 16]; switch 0.50 s (kept graph), saved over 1 epoch: switching")
    # without its graph the plan left is not in play: the fresh one is waited for
    assert rebalancer.choose(skewed, 10, 5) is None
    assert rebalancer.waiting.splits == {"batch": [31, 33]}
    assert rebalancer.message.endswith("switch 5.00 s (new graph), saved over 1 epoch: staying")


def test_a_plan_that_ran_slower_is_undone_cheaply_and_noise_flips_nothing():
    even, skewed = batch_plan([1, 1]), batch_plan([3, 1])   # [32, 32], [48, 16]
    rebalancer = rebalance.Rebalancer(spec(), threshold=0.1)
    measured(rebalancer, even, [1.0, 1.0], 100.0)
    measured(rebalancer, skewed, [1.5, 0.5], 80.0)   # equal speeds again: the even plan
    kept = {rebalance.plan_key(even)}
    # ... as measured (10 x 64 / 100 = 6.4 s against 8 s), over the regime's 2 epochs
    rebalancer.cost.update(build=3.3, reuse=3.1)
    assert rebalancer.choose(skewed, 10, epochs_left=5, kept=kept) is even
    assert rebalancer.message.endswith("6.40 s an epoch against 8.00 s on batch [48, 16]; "
                                       "switch 3.10 s (kept graph), saved over 2 epochs: "
                                       "switching")
    assert rebalancer.choose(skewed, 10, epochs_left=5) is None   # a new graph: 3.3 s
    rebalancer = rebalance.Rebalancer(spec(), threshold=0.1)
    measured(rebalancer, even, [1.0, 1.0], 100.0)
    measured(rebalancer, skewed, [1.5, 0.5], 95.0)   # 5% slower: under the threshold
    assert rebalancer.choose(skewed, 10, epochs_left=5, kept=kept) is None
    assert rebalancer.message.endswith("switch 0.00 s (kept graph), saved over 2 epochs: "
                                       "staying")


def test_rebalancing_weighs_the_plan_of_the_busy_times_and_keeps_the_losses(
        tmp_path, small_scene, monkeypatch, capsys):
    """hmp.fit in this process, each traced step's busy times given (1 s a device, times
    --simulate_slowdown's 4 on /cpu:1): the first epoch weighs the plan re-planned from
    [1, 4, 1] s, which puts fewer of the hidden units on /cpu:1; the plans run are those
    the lines chose (whether a switch pays back depends on the measured samples/s and
    switch costs: nothing here does); the losses are the steady run's."""
    real = trainer.run_traced
    monkeypatch.setattr(trainer, "run_traced", lambda session, fetches, feed, devices: (
        real(session, fetches, feed, devices)[0], [1.0] * len(devices)))
    scene = dict(flag[2:].split("=", 1) for flag in small_scene)
    scene["train_fraction"] = float(scene["train_fraction"])
    extra = {"steady": {}, "balanced": {"rebalance": "epoch",
                                        "simulate_slowdown": "/cpu:1=4"}}
    said = {}
    for name, settings in extra.items():
        hmp.fit(Settings.of(**SETTINGS, **scene, **settings,
                            model_dir=str(tmp_path / name)), get_model)
        said[name] = capsys.readouterr().out
    steady, balanced = (json.loads((tmp_path / name / "results.json").read_text())
                        for name in extra)
    lines = [line for line in said["balanced"].splitlines() if line.startswith("re-balancing")]
    weighed = [int(re.match(r"re-balancing: hidden \[\d+, (\d+),", line).group(1))
               for line in lines]
    shares = [p["splits"]["hidden"][1] for p in balanced["plans"]]
    (tmp_path / "first_plan.json").write_text(json.dumps({"format": "hmp-plan/1",
                                                          **balanced["plans"][0]}))
    bands = np.load(scene["dataset"], mmap_mode="r").shape[-1]
    classes = int(np.load(scene["labels"]).max())
    model = model_spec(model_config(SETTINGS["model"], SETTINGS["patch_size"], bands, classes,
                                    width=SETTINGS["width"],
                                    batch_norm=Settings().value("batch_norm")))
    first = Plan.from_json(tmp_path / "first_plan.json", model_spec=model)
    assert balanced["history"][0]["busy_seconds"] == [1.0, 4.0, 1.0]
    assert weighed[0] == rebalance.replan(first, model, [1.0, 4.0, 1.0]).splits["hidden"][1]
    assert weighed[0] < shares[0]
    assert shares[1:] == [share for share, line in zip(weighed, lines)
                          if line.endswith("switching")]
    assert [p["splits"]["hidden"][1] for p in steady["plans"]] == [shares[0]]
    steady_losses = [h["loss"] for h in steady["history"]]
    balanced_losses = [h["loss"] for h in balanced["history"]]
    assert balanced_losses == pytest.approx(steady_losses, rel=1e-4)
