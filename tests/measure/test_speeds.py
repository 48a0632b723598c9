"""hmp.measure.speeds: measured speeds as the planner's DeviceSpecs (structure only, no
timing assertions)."""

import dataclasses

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from hmp.graph.from_graph import model_spec
from hmp.graph.graph_config import Augmentation, Projection, Recipe
from hmp.measure.channel_blocks import CPU_FLAGS_FILE, lanes_of
from hmp.measure.speeds import (DeviceStep, SplitStep, affine_fit, barrier_devices,
                                barrier_wait, in_turns, measure_platform, measure_speeds,
                                overhead_text, relative_speeds, small_batch,
                                with_given_figures)
from hmp.planning import DeviceSpec, plan_layout
from hmp.planning.costmodel import alone_flops_per_s
from models import model_config

# patch 5, 4 bands, 3 classes, width 2: filters 4, channels 2, hidden 8.
TINY = model_config("cnn2d", patch=5, bands=4, n_classes=3, width=2)
# Forward FLOPs per sample by hand: two blocks, a 2x2 SAME pool 5x5 -> 3x3, two dense layers.
TINY_FLOPS = (2 * 25 * 9 * 4 * 4 + 2 * 25 * 9 * 4 * 2 + 4 * 9 * 2 + 2 * 9 * 9 * 2 * 4
              + 2 * 9 * 9 * 4 * 2 + 2 * 18 * 8 + 2 * 8 * 3)


def test_measure_speeds_reports_every_device_and_its_op_size_figures():
    messages = []
    speeds = measure_speeds(TINY, ["/cpu:0", "/cpu:1"], 8, warmup=1, repeats=3,
                            session_config=tf.ConfigProto(device_count={"CPU": 2}),
                            progress=messages.append, op_size=True)
    assert [s.name for s in speeds] == ["/cpu:0", "/cpu:1"]
    tiny_spec = model_spec(TINY)
    for s in speeds:
        # The planner's DeviceSpecs, on their host: two CPUs of one process share its cores,
        # and its vector width (hmp.measure.channel_blocks)
        assert (s.host, s.host_cores) == ("localhost", 1)
        assert s.channel_block == lanes_of(open(CPU_FLAGS_FILE).read())
        # The peak rate, op-size terms and overhead reproduce the median step: overhead
        # + batch x (3 (F + L h) / peak + E e), F = 3 x forward FLOPs per sample.
        assert s.overhead_s + 8 * 3 * TINY_FLOPS / alone_flops_per_s(tiny_spec, s) \
            == pytest.approx(8 / s.samples_per_s, rel=1e-9)
    relative = relative_speeds(speeds)
    assert sum(relative) == pytest.approx(1.0)
    assert relative[0] / relative[1] == pytest.approx(
        speeds[0].samples_per_s / speeds[1].samples_per_s)
    assert messages == [
        "profiling /cpu:0 (1/2): building and warming up",
        "profiling /cpu:1 (2/2): building and warming up",
        "profiling: timing 3 steps per device and batch size, at half width (1 for 2), "
        "element-wise work (bias add + ReLU), round-robin"]


def test_the_profiled_step_is_the_runs_step_with_its_augmentation_and_projection():
    """A run's recipe reaches the profiled step: with an in-graph projection of 6 raw
    bands onto TINY's 4, the scene holds the raw bands and the step projects and looks."""
    rng = np.random.RandomState(0)
    projection = Projection(rng.randn(6).astype(np.float32),
                            rng.randn(6, 4).astype(np.float32))
    look = Augmentation(noise=0.1, spectral_shift=1.0, band_offset=(0.0,) * 6,
                        band_scale=(1.0,) * 6)
    recipe = Recipe(augmentation=look, projection=projection)
    assert recipe.input_work(TINY) == {
        "scene_bands": 6, "projection": True,
        "augmentation": {"flips": True, "brightness": False, "noise": True,
                         "field_look": True}}
    assert Recipe().input_work(TINY)["scene_bands"] == 4
    step = DeviceStep(TINY, "/cpu:0", 8, recipe=recipe)
    try:
        step.run()
        names = {op.name.partition("/")[0] for op in step.session.graph.get_operations()}
        assert {"pca_projection", "field_look"} <= names
        cube = step.session.graph.get_tensor_by_name("scene_cube:0")   # padded 32 x 32
        assert cube.shape.as_list() == [36, 36, 6]
    finally:
        step.close()
    plain = DeviceStep(TINY, "/cpu:0", 8)
    names = {op.name.partition("/")[0] for op in plain.session.graph.get_operations()}
    plain.close()
    assert not {"pca_projection", "field_look"} & names


def test_measured_figures_replace_a_platforms_and_its_memory_and_host_stay():
    given = [DeviceSpec("/cpu:0", 1e15, half_rate_flops=1e12, mem_bytes=2e9, mem_bw=1e10,
                        host="h0", host_cores=4), "/cpu:1"]
    measured = [DeviceSpec("/cpu:0", 5e10, overhead_s=1e-3, half_rate_flops=2e5,
                           host="localhost", host_cores=2),
                DeviceSpec("/cpu:1", 4e10, host="localhost", host_cores=2)]
    assert with_given_figures(measured, given) == [
        DeviceSpec("/cpu:0", 5e10, overhead_s=1e-3, half_rate_flops=2e5, mem_bytes=2e9,
                   mem_bw=1e10, host="h0", host_cores=4),
        measured[1]]   # a device given by name: all measured
    unhosted = dataclasses.replace(given[0], host=None, host_cores=None)
    assert with_given_figures(measured[:1], [unhosted])[0].host == "localhost"


def test_barrier_wait_spreads_the_excess_over_the_barriers():
    # 10 ms split, shares 4 and 6 ms alone, 1 ms of hand-overs: 3 ms over 3 barriers
    assert barrier_wait(0.010, [0.004, 0.006], 0.001, 3) == pytest.approx(0.001)
    assert barrier_wait(0.006, [0.004, 0.006], 0.001, 3) == 0.0   # no longer
    assert barrier_wait(0.010, [0.004, 0.006], 0.001, 0) == 0.0   # no barrier


def test_an_overhead_the_fit_did_not_find_is_said_in_words_not_as_0_ms():
    """Given figures (nothing is timed): affine_fit's 0.0, no overhead found, in words."""
    assert overhead_text(0.00268) == "2.68 ms of every step"
    assert overhead_text(0.0) == ("no fixed time a step (the step's time fits its samples "
                                  "alone)")


def test_the_barrier_is_timed_on_the_fastest_devices_the_batch_can_split_over():
    """Local batch norms need 8 samples a replica: at batch 20 a split of two of the five
    devices, the fastest two (in the given order); sync ones split over every device."""
    speeds = [DeviceSpec("/cpu:%d" % i, 1e9, samples_per_s=rate)
              for i, rate in enumerate((300, 900, 100, 700, 500))]
    local, sync = (model_spec(model_config("cnn2d", 5, 8, 4, width=4, batch_norm=mode))
                   for mode in ("local", "sync"))
    assert barrier_devices(local, speeds, 20) == [1, 3]
    assert barrier_devices(local, speeds, 40) == [0, 1, 2, 3, 4]
    assert barrier_devices(local, speeds, 15) == [1]   # one: no split to time
    assert barrier_devices(sync, speeds, 5) == [0, 1, 2, 3, 4]


def test_measure_platform_prices_the_split_steps_excess_per_barrier(monkeypatch):
    # every split step takes 0.25 s, every one-device step 0.1 s (also each share's); no
    # step is built (nothing would run its graph): each is recorded as (its devices, batch)
    built = []
    monkeypatch.setattr(DeviceStep, "_build", lambda self, config, placement, batch, *_:
                        built.append((placement.devices, batch)))
    monkeypatch.setattr(DeviceStep, "close", lambda self: None)
    monkeypatch.setattr(SplitStep, "run", lambda self: 0.25)
    monkeypatch.setattr(DeviceStep, "run", lambda self: 0.1)
    messages = []
    devices = ["/cpu:0", "/cpu:1"]
    speeds, link = measure_platform(
        TINY, devices, 8, warmup=1, repeats=2, progress=messages.append,
        session_config=tf.ConfigProto(device_count={"CPU": 2}))
    spec = model_spec(TINY)
    plan = plan_layout(spec, speeds, None, 8, "batch:2",
                       link=dataclasses.replace(link, barrier_s=0.0))
    assert plan.splits["batch"] == [4, 4]   # equal speeds
    assert spec.norm_layers == 4   # two blocks of two convolutions, each normalised
    assert link.barrier_s == pytest.approx((0.25 - 0.1 - plan.prediction.comm) / (2 * 4 + 1))
    assert "the batch split [4, 4] and each device on its share, 2 steps each" in messages[-1]
    # each device at the batch and a quarter of it, then the split and each share
    assert built == [(("/cpu:0",), 8), (("/cpu:0",), 2), (("/cpu:1",), 8), (("/cpu:1",), 2),
                     (("/cpu:0", "/cpu:1"), 8), (("/cpu:0",), 4), (("/cpu:1",), 4)]
    alone, no_link = measure_platform(TINY, ["/cpu:0"], 8, warmup=1, repeats=1)
    assert len(alone) == 1 and no_link is None


def test_measure_speeds_runs_on_a_session_target():
    server = tf.train.Server.create_local_server()
    device = "/job:localhost/task:0/device:CPU:0"
    (speed,) = measure_speeds(TINY, [device], 4, warmup=0, repeats=1, target=server.target)
    assert speed.name == device
    assert speed.channel_block == lanes_of(open(CPU_FLAGS_FILE).read())
    assert relative_speeds([speed]) == [1.0]
    # Without op_size: the FLOP rate is the slope's, no op-size figures.
    assert speed.half_rate_flops is speed.elementwise_s_per_element is None
    assert 4 * 3 * TINY_FLOPS / speed.flops_per_s + speed.overhead_s == pytest.approx(
        4 / speed.samples_per_s, rel=1e-9)


@pytest.mark.parametrize("warmup, repeats", [(-1, 3), (1, 0)])
def test_measure_speeds_refuses_bad_counts(warmup, repeats):
    with pytest.raises(ValueError, match="warmup"):
        measure_speeds(TINY, ["/cpu:0"], 4, warmup=warmup, repeats=repeats)


@pytest.mark.parametrize("batch, step, small, small_step", [
    (512, 0.116, 128, 0.050), (256, 0.0346, 64, 0.0121), (8, 0.9, 2, 0.3)])
def test_affine_fit_is_the_line_through_both_steps(batch, step, small, small_step):
    slope, intercept = np.polyfit([small, batch], [small_step, step], 1)
    per_sample, overhead = affine_fit(batch, step, small, small_step)
    assert per_sample == pytest.approx(slope, rel=1e-9)
    assert overhead == pytest.approx(intercept, rel=1e-9)
    assert overhead + batch * per_sample == pytest.approx(step, rel=1e-12)


@pytest.mark.parametrize("small, small_step", [
    (None, None),   # batch too small for a second size
    (128, 0.010),   # the line would cross below zero: noise, not an overhead
    (128, 0.200),   # the small batch took longer: noise
])
def test_affine_fit_without_a_valid_line_has_no_overhead(small, small_step):
    assert affine_fit(512, 0.1, small, small_step) == (0.1 / 512, 0.0)


def test_the_second_batch_is_a_quarter():
    assert [small_batch(b) for b in (1, 3, 4, 512)] == [None, None, 1, 128]


def test_steps_run_in_turns_and_each_turn_counts_its_median():
    """Round-robin (a, b, a, b, ...: a change of the machine's load hits both alike),
    ``per_turn`` runs of a step a turn, the turn's seconds their median."""
    calls = []

    class Scripted:
        def __init__(self, key, seconds):
            self.key, self.seconds = key, iter(seconds)

        def run(self):
            calls.append(self.key)
            return next(self.seconds)

    steps = {"a": Scripted("a", [3, 1, 2, 9, 9, 9]), "b": Scripted("b", [5, 4, 6, 1, 2, 3])}
    assert in_turns(steps, repeats=2, per_turn=3) == {"a": [2, 9], "b": [5, 2]}
    assert calls == ["a"] * 3 + ["b"] * 3 + ["a"] * 3 + ["b"] * 3
