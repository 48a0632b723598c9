"""Profiler: measured speeds (structure only, no timing assertions) and busy times."""

import dataclasses
import math

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from hmp.planning import plan_layout
from hmp.planning.costmodel import alone_flops_per_s
from hmp.run import profiler
from hmp.run.from_graph import model_spec
from hmp.run.augment import Augmentation
from hmp.run.graph import Placement, Recipe, TrainingGraph
from hmp.run.linkprobe import platform_specs
from hmp.run.projection import Projection
from hmp.run.profiler import busy_times, measure_speeds, random_batch, run_traced
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
    assert [s.device for s in speeds] == ["/cpu:0", "/cpu:1"]
    specs = platform_specs(["/cpu:0", "/cpu:1"], [dataclasses.asdict(s) for s in speeds])
    tiny_spec = model_spec(TINY)
    for s, device in zip(speeds, specs):
        assert math.isfinite(s.samples_per_s) and s.samples_per_s > 0
        assert s.min_samples_per_s <= s.samples_per_s <= s.max_samples_per_s
        assert s.overhead_s >= 0 and s.half_rate_flops >= 0 and s.elementwise_s_per_element >= 0
        # The planner's DeviceSpecs carry them.
        assert (device.flops_per_s, device.overhead_s, device.half_rate_flops,
                device.elementwise_s_per_element) == (s.flops_per_s, s.overhead_s,
                                                      s.half_rate_flops,
                                                      s.elementwise_s_per_element)
        # The peak rate, op-size terms and overhead reproduce the median step: overhead
        # + batch x (3 (F + L h) / peak + E e), F = 3 x forward FLOPs per sample.
        assert s.overhead_s + 8 * 3 * TINY_FLOPS / alone_flops_per_s(tiny_spec, device) \
            == pytest.approx(8 / s.samples_per_s, rel=1e-9)
    assert sum(s.relative for s in speeds) == pytest.approx(1.0)
    assert speeds[0].relative / speeds[1].relative == pytest.approx(
        speeds[0].samples_per_s / speeds[1].samples_per_s)
    assert any("/cpu:1" in m for m in messages)
    assert messages[-1] == ("profiling: timing 3 steps per device and batch size, at half "
                            "width (1 for 2), element-wise work (bias add + ReLU), round-robin")


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
    step = profiler.DeviceStep(TINY, "/cpu:0", 8, recipe=recipe)
    try:
        step.run()
        names = {op.name.partition("/")[0] for op in step.session.graph.get_operations()}
        assert {"pca_projection", "field_look"} <= names
        cube = step.session.graph.get_tensor_by_name("scene_cube:0")   # padded 32 x 32
        assert cube.shape.as_list() == [36, 36, 6]
    finally:
        step.close()
    plain = profiler.DeviceStep(TINY, "/cpu:0", 8)
    names = {op.name.partition("/")[0] for op in plain.session.graph.get_operations()}
    plain.close()
    assert not {"pca_projection", "field_look"} & names


def test_barrier_wait_spreads_the_excess_over_the_barriers():
    # 10 ms split, shares 4 and 6 ms alone, 1 ms of hand-overs: 3 ms over 3 barriers
    assert profiler.barrier_wait(0.010, [0.004, 0.006], 0.001, 3) == pytest.approx(0.001)
    assert profiler.barrier_wait(0.006, [0.004, 0.006], 0.001, 3) == 0.0   # no longer
    assert profiler.barrier_wait(0.010, [0.004, 0.006], 0.001, 0) == 0.0   # no barrier


def test_measure_platform_prices_the_split_steps_excess_per_barrier(monkeypatch):
    # every split step takes 0.25 s, every one-device step 0.1 s (also each share's)
    monkeypatch.setattr(profiler.SplitStep, "run", lambda self: 0.25)
    monkeypatch.setattr(profiler.DeviceStep, "run", lambda self: 0.1)
    messages = []
    devices = ["/cpu:0", "/cpu:1"]
    speeds, link = profiler.measure_platform(
        TINY, devices, 8, warmup=1, repeats=2, progress=messages.append,
        session_config=tf.ConfigProto(device_count={"CPU": 2}))
    spec = model_spec(TINY)
    plan = plan_layout(spec, platform_specs(devices, [dataclasses.asdict(s) for s in speeds]),
                       None, 8, "batch:2", link=dataclasses.replace(link, barrier_s=0.0))
    assert plan.splits["batch"] == [4, 4]   # equal speeds
    assert spec.norm_layers == 4   # two blocks of two convolutions, each normalised
    assert link.barrier_s == pytest.approx((0.25 - 0.1 - plan.prediction.comm) / (2 * 4 + 1))
    assert "the batch split [4, 4] and each device on its share, 2 steps each" in messages[-1]
    alone, no_link = profiler.measure_platform(TINY, ["/cpu:0"], 8, warmup=1, repeats=1)
    assert len(alone) == 1 and no_link is None


def test_measure_speeds_runs_on_a_session_target():
    server = tf.train.Server.create_local_server()
    device = "/job:localhost/task:0/device:CPU:0"
    (speed,) = measure_speeds(TINY, [device], 4, warmup=0, repeats=1, target=server.target)
    assert speed.device == device and speed.samples_per_s > 0 and speed.relative == 1.0
    # Without op_size: the FLOP rate is the slope's, no op-size figures.
    assert speed.half_rate_flops is speed.elementwise_s_per_element is None
    assert 4 * 3 * TINY_FLOPS / speed.flops_per_s + speed.overhead_s == pytest.approx(
        4 / speed.samples_per_s, rel=1e-9)


@pytest.mark.parametrize("warmup, repeats", [(-1, 3), (1, 0)])
def test_measure_speeds_refuses_bad_counts(warmup, repeats):
    with pytest.raises(ValueError, match="warmup"):
        measure_speeds(TINY, ["/cpu:0"], 4, warmup=warmup, repeats=repeats)


def add_node(dev_stats, label, start_ns, length_ns):
    dev_stats.node_stats.add(node_name=label.partition(" ")[0], timeline_label=label,
                             all_start_nanos=start_ns, all_end_rel_nanos=length_ns)


def test_busy_times_unites_intervals_and_maps_device_names():
    metadata = tf.RunMetadata()
    dev_stats = metadata.step_stats.dev_stats
    cpu1 = dev_stats.add(device="/job:localhost/replica:0/task:0/device:CPU:1")
    add_node(cpu1, "a = Conv2D(x, w)", 1000, 10000)  # [1, 11] us
    add_node(cpu1, "b = AddV2(a, c)", 5000, 15000)  # [5, 20] us, overlaps: union [1, 20]
    add_node(cpu1, "r = _Recv()", 0, 100000)  # waiting for another device: left out
    # A task's gRPC server handing a tensor to another task (waits for it): left out.
    cpu1.node_stats.add(node_name="RecvTensor", all_start_micros=0, all_end_rel_micros=90)
    # Only microseconds recorded (older TF): [100, 102] us.
    cpu1.node_stats.add(node_name="c", timeline_label="c = Relu(b)",
                        all_start_micros=100, all_end_rel_micros=2)
    add_node(dev_stats.add(device="/job:localhost/replica:0/task:0/device:CPU:0"),
             "d = MatMul(p, q)", 0, 4000)
    # A remote CPU:0 belongs to the mesh device naming that job and task, not to "/cpu:0".
    add_node(dev_stats.add(device="/job:worker/replica:0/task:1/device:CPU:0"),
             "e = Conv2D(p, q)", 0, 7000)
    # A GPU's op and stream timelines are one device.
    add_node(dev_stats.add(device="/job:localhost/replica:0/task:0/device:GPU:0/stream:all"),
             "f = Conv2D(p, q)", 0, 3000)
    add_node(dev_stats.add(device="/job:localhost/replica:0/task:0/device:GPU:0"),
             "g = Conv2D(p, q)", 2000, 4000)
    add_node(dev_stats.add(device="/job:localhost/replica:0/task:0/device:CPU:7"),
             "h = Conv2D(p, q)", 0, 9000)  # not in the mesh: ignored
    devices = ["/cpu:1", "/cpu:0", "/job:worker/task:1/device:CPU:0", "/gpu:0", "/cpu:2"]
    assert busy_times(metadata, devices, 1.0) == pytest.approx([21e-6, 4e-6, 7e-6, 6e-6, 0.0])


def test_busy_times_of_a_traced_step_cover_every_device_of_the_mesh():
    # cnn2d of width 55 split 10:1 on every split dim, on /cpu:1 and /cpu:2: a real
    # trace's device names map onto both mesh devices (the arithmetic of the intervals
    # is tested above, without timing). One inter-op thread: the virtual devices
    # share one thread pool.
    config = model_config("cnn2d", patch=9, bands=16, n_classes=4, width=55)
    devices = ("/cpu:1", "/cpu:2")
    layout = Placement("model:2", "filters1:model;filters2:model;hidden:model", devices,
                    {"filters1": [100, 10], "filters2": [100, 10], "hidden": [200, 20]})
    batch = random_batch(config, 16)
    graph = TrainingGraph(config, layout, 16, batch.image_shape, optimizer="sgd")
    session = graph.session(batch.padded_cube, tf.ConfigProto(
        device_count={"CPU": 3}, inter_op_parallelism_threads=1))
    feed = batch.feed(graph)
    session.run(graph.train_op, feed)  # warm-up
    _, busy = run_traced(session, graph.train_op, feed, devices)
    assert len(busy) == 2 and all(b > 0 for b in busy)


def test_busy_by_part_unites_each_parts_ops():
    metadata = tf.RunMetadata()
    cpu0 = metadata.step_stats.dev_stats.add(device="/job:localhost/replica:0/task:0/device:CPU:0")
    add_node(cpu0, "conv/Conv2D = Conv2D(x, w)", 0, 10000)  # model [0, 10] us
    add_node(cpu0, "conv_1/BiasAdd = BiasAdd(x, w)", 5000, 10000)  # model, overlaps: [0, 15]
    add_node(cpu0, "gradient_sums/concat = ConcatV2(a, b)", 15000, 2000)
    add_node(cpu0, "adam_update_3/Apply = ResourceApplyAdam(v)", 17000, 3000)
    # A node grappler derived from an op keeps its operation's first scope.
    add_node(cpu0, "adam_update_3/Apply/_12__cf__13 = Const()", 20000, 1000)
    add_node(cpu0, "cut_patches_1/Gather = GatherV2(c, i)", 0, 1000)
    add_node(cpu0, "gradient_sums/r = _Recv()", 21000, 9000)  # a transfer: its own part
    parts = {"gradient_sums": profiler.EXCHANGE, "adam_update_3": profiler.OPTIMIZER,
             "cut_patches_1": profiler.INPUT}
    found = profiler.busy_by_part(metadata, ["/cpu:0"], parts)
    assert list(found) == list(profiler.STEP_PARTS)
    expected = {profiler.INPUT: 1e-6, profiler.MODEL: 15e-6, profiler.EXCHANGE: 2e-6,
                profiler.OPTIMIZER: 4e-6, profiler.METRICS: 0.0, profiler.TRANSFERS: 9e-6}
    assert {part: busy for part, (busy,) in found.items()} == pytest.approx(expected)


def test_step_parts_name_what_wraps_the_model():
    """On a batch split with Adam, the parts are the graph's: the bucketed all-reduce,
    every update after the ordered step's barrier, the cut patches, the metric sums;
    the layers (forward and backward) are the model's."""
    batch = random_batch(TINY, 8)
    graph = TrainingGraph(TINY, Placement("batch:2", "batch:batch", ("/cpu:0", "/cpu:1"),
                                          {"batch": [5, 3]}), 8, batch.image_shape)
    parts = profiler.step_parts(graph.tf_graph)
    operations = {op.name.split("/")[0] for op in graph.tf_graph.get_operations()}
    updates = {o for o in operations if o.startswith("adam_update")}
    assert len(updates) == len(graph.mtf_graph.trainable_variables)
    assert {parts[o] for o in updates | {"all_gradients"}} == {profiler.OPTIMIZER}
    assert parts["gradient_sums"] == profiler.EXCHANGE
    assert parts["cut_patches"] == profiler.INPUT
    assert {parts[o] for o in operations if o.startswith("metric_sums")} == {profiler.METRICS}
    layers = {o for o in operations if o.startswith(("block", "hidden", "logits"))}
    assert layers and not layers & set(parts)


@pytest.mark.parametrize("batch, step, small, small_step", [
    (512, 0.116, 128, 0.050), (256, 0.0346, 64, 0.0121), (8, 0.9, 2, 0.3)])
def test_affine_fit_is_the_line_through_both_steps(batch, step, small, small_step):
    slope, intercept = np.polyfit([small, batch], [small_step, step], 1)
    per_sample, overhead = profiler.affine_fit(batch, step, small, small_step)
    assert per_sample == pytest.approx(slope, rel=1e-9)
    assert overhead == pytest.approx(intercept, rel=1e-9)
    assert overhead + batch * per_sample == pytest.approx(step, rel=1e-12)


@pytest.mark.parametrize("small, small_step", [
    (None, None),   # batch too small for a second size
    (128, 0.010),   # the line would cross below zero: noise, not an overhead
    (128, 0.200),   # the small batch took longer: noise
])
def test_affine_fit_without_a_valid_line_has_no_overhead(small, small_step):
    assert profiler.affine_fit(512, 0.1, small, small_step) == (0.1 / 512, 0.0)


def test_the_second_batch_is_a_quarter():
    assert [profiler.small_batch(b) for b in (1, 3, 4, 512)] == [None, None, 1, 128]
