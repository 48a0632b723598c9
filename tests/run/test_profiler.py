"""hmp.run.profiler: busy times and step parts of a traced step."""

import pytest
import tensorflow.compat.v1 as tf

from hmp.graph.graph import TrainingGraph
from hmp.graph.graph_config import Placement
from hmp.measure.speeds import random_batch
from hmp.run import profiler
from hmp.run.profiler import busy_times, run_traced
from models import model_config

# patch 5, 4 bands, 3 classes, width 2: filters 4, channels 2, hidden 8.
TINY = model_config("cnn2d", patch=5, bands=4, n_classes=3, width=2)


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


@pytest.mark.parametrize("steps_per_run", [1, 2])
def test_step_parts_name_what_wraps_the_model(steps_per_run):
    """On a batch split with Adam, the parts are the graph's: the bucketed all-reduce,
    every update after the ordered step's barrier, the cut patches, the metric sums;
    the layers (forward and backward) are the model's. In each step of a graph of two
    (the second's operations in its own scope, after the first's updates)."""
    batch = random_batch(TINY, 8)
    graph = TrainingGraph(TINY, Placement("batch:2", "batch:batch", ("/cpu:0", "/cpu:1"),
                                          {"batch": [5, 3]}), 8, batch.image_shape,
                          steps_per_run=steps_per_run)
    parts = profiler.step_parts(graph.tf_graph)
    names = [op.name for op in graph.tf_graph.get_operations()]
    for step in ["", *("step_%d/" % k for k in range(2, steps_per_run + 1))]:
        # this step's mtf operations, each with the step's scope
        scoped = [n for n in names if n.startswith(step) and (step or "step_" not in n[:5])]
        operations = {step + n[len(step):].split("/")[0] for n in scoped}
        plain = {o[len(step):]: o for o in operations}
        updates = {o for p, o in plain.items() if p.startswith("adam_update")}
        assert len(updates) == len(graph.mtf_graph.trainable_variables), step
        assert {parts[o] for o in updates | {plain["all_gradients"]}} == {profiler.OPTIMIZER}
        assert parts[plain["gradient_sums"]] == profiler.EXCHANGE
        assert parts[plain["cut_patches"]] == profiler.INPUT
        assert {parts[o] for p, o in plain.items() if p.startswith("metric_sums")} == {
            profiler.METRICS}
        layers = {o for p, o in plain.items() if p.startswith(("block", "hidden", "logits"))}
        assert layers and not layers & set(parts), step
