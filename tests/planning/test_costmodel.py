"""Cost model: formulas checked by hand on tiny cases; proportional beats even splits."""

import dataclasses
import json

import numpy as np
import pytest

from hmp.errors import InvalidInput
from hmp.planning import (DeviceSpec, LinkSpec, ModelSpec, apportion, conv_layer_spec,
                          dense_layer_spec, load_platform, memory_bytes, parse_mesh, predict,
                          ring_allgather_time, ring_allreduce_time)
from hmp.planning.costmodel import (allreduce_pricer, barriers, concurrent_groups_time,
                                    model_axis_collectives)

LINK = LinkSpec(bandwidth_bytes_per_s=1e9, latency_s=1e-5)


def two_conv_model():
    """conv1 splits its 8 output filters, conv2 its 8 input channels; 4x4 images, 3 bands."""
    return ModelSpec("pair", [
        conv_layer_spec("conv1", "conv2d", (4, 4), 3, 3, 8, split_dim="filters1",
                        split_role="output"),
        conv_layer_spec("conv2", "conv2d", (4, 4), 1, 8, 2, split_dim="filters1",
                        split_role="input"),
    ], (4, 4, 3))


def devices(*rates):
    return [DeviceSpec(f"/device:{i}", r) for i, r in enumerate(rates)]


def gradient_allreduces(byte_sizes, n, link):
    """hmp's bucketed gradient sum: one ring all-reduce over n devices of all the bytes."""
    return ring_allreduce_time(sum(byte_sizes), n, link)


def test_layer_spec_helpers_count_by_hand():
    conv1, conv2 = two_conv_model().layers
    # conv1: 3x3 kernel, 3 -> 8 channels, 'same' on 4x4: 2 * 9*3*8 * 16 FLOPs, 9*3*8 + 8 params.
    assert conv1.flops_per_sample == 2 * 9 * 3 * 8 * 16
    assert conv1.params == 9 * 3 * 8 + 8
    assert conv1.output_elems_per_sample == 16 * 8
    assert (conv1.split_size, conv2.split_size) == (8, 8)  # outputs of conv1, inputs of conv2
    dense = dense_layer_spec("fc", 10, 4)
    assert (dense.flops_per_sample, dense.params, dense.output_elems_per_sample) == (80, 44, 4)


def test_single_device_time_is_flops_over_rate():
    spec = two_conv_model()
    flops = sum(l.flops_per_sample for l in spec.layers)
    p = predict(spec, devices(1e9), parse_mesh("model:1"), 10, {"filters1": [8]}, LINK)
    assert p.step == pytest.approx(3 * flops * 10 / 1e9)
    assert p.comm == 0 and p.load == [1.0]


def test_ring_collective_formulas():
    # all-reduce: 2 (n-1)/n * B/bw + 2 (n-1) latency
    assert ring_allreduce_time(1e6, 4, LINK) == pytest.approx(2 * 3 / 4 * 1e-3 + 6e-5)
    assert ring_allreduce_time(1e6, 1, LINK) == 0
    # two devices exchange their whole tensors once (collectives.ring_allreduce): the
    # ring's bytes, one latency
    assert ring_allreduce_time(1e6, 2, LINK) == pytest.approx(1e-3 + 1e-5)
    # all-gather of even pieces: (n-1)/n * B/bw + (n-1) latency; uneven: the largest piece.
    assert ring_allgather_time([250e3] * 4, LINK) == pytest.approx(3 / 4 * 1e-3 + 3e-5)
    assert ring_allgather_time([700e3, 100e3, 100e3, 100e3], LINK) == pytest.approx(3 * 7e-4 + 3e-5)


def test_model_parallel_by_hand():
    spec = two_conv_model()
    conv1, conv2 = spec.layers
    batch = 10
    p = predict(spec, devices(3e9, 1e9), parse_mesh("model:2"), batch, {"filters1": [6, 2]},
                LINK)
    busy0 = 3 * batch * (conv1.flops_per_sample + conv2.flops_per_sample) * 6 / 8 / 3e9
    busy1 = 3 * batch * (conv1.flops_per_sample + conv2.flops_per_sample) * 2 / 8 / 1e9
    assert p.busy == pytest.approx([busy0, busy1])
    # conv2's partial sums (its whole output) are all-reduced; conv1 reads the input data,
    # whose gradient is not needed, so there is no backward all-reduce.
    comm = ring_allreduce_time(4 * batch * conv2.output_elems_per_sample, 2, LINK)
    assert p.comm == pytest.approx(comm)
    assert p.step == pytest.approx(max(busy0, busy1) + comm)
    assert p.load == pytest.approx([0.75, 0.25])


def test_model_axis_collectives_follow_the_layer_pattern():
    stem = conv_layer_spec("stem", "conv2d", (4, 4), 3, 3, 3)
    pair = two_conv_model().layers
    head = dense_layer_spec("fc", 32, 4, split_dim="filters2", split_role="output")
    spec = ModelSpec("m", [stem, *pair, head], (4, 4, 3))
    assert model_axis_collectives(spec) == [
        ("allreduce", 16 * 3, None, True),  # backward: gradient of conv1's input (stem has weights)
        ("allreduce", 16 * 2, None, False),  # forward: conv2's partial sums
        ("allreduce", 16 * 2, None, True),  # backward: gradient of fc's input, summed over columns
        ("allgather", 4, "filters2", False),  # forward: the split logits are joined for the loss
    ]


def test_data_parallel_by_hand():
    spec = two_conv_model()
    params = sum(l.params for l in spec.layers)
    flops = sum(l.flops_per_sample for l in spec.layers)
    p = predict(spec, devices(3e9, 1e9), parse_mesh("batch:2"), 8, {"batch": [6, 2]}, LINK)
    assert p.busy == pytest.approx([3 * flops * 6 / 3e9, 3 * flops * 2 / 1e9])
    # one bucketed all-reduce of every weight: two devices exchange it whole, 1 hand-over
    comm = gradient_allreduces([4 * l.params for l in spec.layers], 2, LINK)
    assert comm == pytest.approx(2 / 2 * 4 * params / 1e9 + 1e-5)
    assert p.comm == pytest.approx(comm)


def test_hybrid_by_hand():
    spec = two_conv_model()
    conv1, conv2 = spec.layers
    flops = conv1.flops_per_sample + conv2.flops_per_sample
    rates = [4e9, 2e9, 2e9, 1e9]  # (batch row, model column): (0,0) (0,1) (1,0) (1,1)
    splits = {"filters1": [5, 3], "batch": [7, 3]}
    p = predict(spec, devices(*rates), parse_mesh("batch:2;model:2"), 10, splits, LINK)
    expected = [3 * flops * b * f / 8 / r for (b, f), r in
                zip([(7, 5), (7, 3), (3, 5), (3, 3)], rates)]
    assert p.busy == pytest.approx(expected)
    # model axis: conv2's all-reduce for the larger batch row (7 samples); batch axis: each
    # model column all-reduces the weight gradients it holds (column 0 holds 5/8 of them).
    model_comm = ring_allreduce_time(4 * 7 * conv2.output_elems_per_sample, 2, LINK)
    batch_comm = gradient_allreduces([4 * 5 / 8 * conv1.params, 4 * 5 / 8 * conv2.params],
                                     2, LINK)
    assert p.comm == pytest.approx(model_comm + batch_comm)


def test_memory_bandwidth_roofline():
    spec = ModelSpec("one", [dense_layer_spec("fc", 100, 10)], (100,))
    slow_memory = [DeviceSpec("/cpu:0", 1e12, mem_bw=1e3)]
    p = predict(spec, slow_memory, parse_mesh("batch:1"), 2, {"batch": [2]})
    traffic = 3 * 4 * (1010 + 2 * 10)  # 3 x (weights + outputs of the batch), float32
    assert p.step == pytest.approx(traffic / 1e3)


def test_memory_estimate_by_hand():
    spec = two_conv_model()
    conv1, conv2 = spec.layers
    mem = memory_bytes(spec, [10], np.array([[0.75, 0.25], [0.75, 0.25]]))
    # 4 copies of the weights held (weights, gradients, Adam's two moments) + per sample:
    # input, conv1's outputs held, conv2's whole output (partial sums).
    expected = [4 * (4 * f * (conv1.params + conv2.params)
                     + 10 * (48 + f * conv1.output_elems_per_sample
                             + conv2.output_elems_per_sample)) for f in (0.75, 0.25)]
    assert mem[0] == pytest.approx(expected)


@pytest.mark.parametrize("mesh, dim", [("model:3", "filters1"), ("batch:3", "batch")])
def test_proportional_split_beats_even_on_unequal_devices(mesh, dim):
    spec = ModelSpec("wide", [
        conv_layer_spec("conv1", "conv2d", (9, 9), 3, 16, 60, split_dim="filters1",
                        split_role="output"),
        conv_layer_spec("conv2", "conv2d", (9, 9), 3, 60, 16, split_dim="filters1",
                        split_role="input"),
    ], (9, 9, 16))
    size = 60

    def step(rates, sizes):
        return predict(spec, devices(*rates), parse_mesh(mesh), size, {dim: sizes}, LINK).step

    unequal = [7e10, 2.5e10, 5e9]
    assert step(unequal, apportion(size, unequal)) < 0.5 * step(unequal, [20, 20, 20])
    equal = [3e10] * 3
    assert apportion(size, equal) == [20, 20, 20]
    assert step(equal, apportion(size, equal)) == step(equal, [20, 20, 20])


def test_bad_layouts_are_refused():
    spec = two_conv_model()
    with pytest.raises(ValueError, match=r"sizes of 'filters1' are \[6, 1\]; need 2 numbers "
                                         r"\(axis 'model'\) summing to 8"):
        predict(spec, devices(1e9, 1e9), parse_mesh("model:2"), 4, {"filters1": [6, 1]})
    with pytest.raises(ValueError, match="mesh model:2 has 2 positions but 3 devices"):
        predict(spec, devices(1e9, 1e9, 1e9), parse_mesh("model:2"), 4, {"filters1": [4, 4]})
    with pytest.raises(ValueError, match="flops_per_s of device '/gpu:0' is 0"):
        DeviceSpec("/gpu:0", 0)


def test_load_platform(tmp_path):
    path = tmp_path / "platform.json"
    path.write_text(json.dumps({
        "devices": [{"name": "/gpu:0", "flops_per_s": 1e13, "mem_bytes": 8e9},
                    {"name": "/cpu:0", "flops_per_s": 5e11}],
        "link": {"bandwidth_bytes_per_s": 1e10, "latency_s": 5e-6}}))
    found, link = load_platform(path)
    assert found == [DeviceSpec("/gpu:0", 1e13, 8e9), DeviceSpec("/cpu:0", 5e11)]
    assert link == LinkSpec(1e10, 5e-6)
    path.write_text('{"devices": [{"name": "/gpu:0", "flops_per_s": -1}]}')
    with pytest.raises(ValueError, match=r"^platform file .*platform.json: flops_per_s of "
                                         r"device '/gpu:0' is -1"):
        load_platform(path)
    path.write_text("{devices")
    with pytest.raises(ValueError, match=r"platform file .*platform.json is not JSON \(Expecting"):
        load_platform(path)
    structure = (f'platform file {path}: give an object {{"devices": [{{"name": ..., '
                 '"flops_per_s": ...}, ...], "link": {...} (optional)}')
    fields = ("name, flops_per_s, mem_bytes, mem_bw, overhead_s, host, host_cores, "
              "half_rate_flops, elementwise_s_per_element, samples_per_s, min_samples_per_s, "
              "max_samples_per_s, channel_block")
    for text, message in [
            ('{"a": 1}', structure), ('[{"name": "/cpu:0"}]', structure),
            ('{"devices": ["/cpu:0"]}', structure),
            ('{"devices": []}', f"platform file {path}: no devices"),
            ('{"devices": [{"name": "/cpu:0"}]}',
             f"platform file {path}: device 0 lacks 'flops_per_s'; allowed: {fields}"),
            ('{"devices": [{"name": "/cpu:0", "flops_per_s": 1, "bogus": 2, "fast": 3}]}',
             f"platform file {path}: device 0 has the unknown keys 'bogus', 'fast'; "
             f"allowed: {fields}"),
            ('{"devices": [{"name": "/cpu:0", "flops_per_s": 1}], "link": 5}',
             f"platform file {path}: link must be an object of its figures, got 5"),
            ('{"devices": [{"name": "/cpu:0", "flops_per_s": 1}], "link": {'
             '"bandwidth_bytes_per_s": 1e9, "local": {"latency_s": 1e-6}}}',
             f"platform file {path}: link local lacks 'bandwidth_bytes_per_s'; allowed: "
             "bandwidth_bytes_per_s, latency_s, local, feed, cpu_share, loaded, barrier_s"),
            # a nested link's figure is named where it is
            ('{"devices": [{"name": "/cpu:0", "flops_per_s": 1}], "link": {'
             '"bandwidth_bytes_per_s": 1e9, "local": {"bandwidth_bytes_per_s": 1e9, '
             '"loaded": {"bandwidth_bytes_per_s": "x"}}}}',
             f"platform file {path}: link local loaded bandwidth_bytes_per_s is 'x'; must be "
             "a finite number > 0")]:
        path.write_text(text)
        with pytest.raises(ValueError) as refused:
            load_platform(path)
        assert str(refused.value) == message
    with pytest.raises(ValueError) as refused:
        load_platform(tmp_path / "none.json")
    assert str(refused.value) == ("platform file %s cannot be read (No such file or directory)"
                                  % (tmp_path / "none.json"))


# -- overhead, synchronisation per layer, shared hosts, local and feed links ------------

def three_layer_model():
    """two_conv_model plus an unsplit dense head, which every model column computes whole."""
    conv1, conv2 = two_conv_model().layers
    return ModelSpec("trio", [conv1, conv2, dense_layer_spec("fc", 32, 4)], (4, 4, 3))


def test_overhead_is_paid_in_full_by_every_device():
    spec = two_conv_model()
    flops = sum(l.flops_per_sample for l in spec.layers)
    one = [DeviceSpec("/cpu:0", 1e9, overhead_s=2e-3)]
    p = predict(spec, one, parse_mesh("model:1"), 10, {"filters1": [8]})
    assert p.step == pytest.approx(3 * flops * 10 / 1e9 + 2e-3)
    two = [DeviceSpec("/cpu:0", 1e9, overhead_s=2e-3), DeviceSpec("/cpu:1", 1e9, overhead_s=1e-3)]
    p = predict(spec, two, parse_mesh("batch:2"), 10, {"batch": [5, 5]})
    assert p.busy == pytest.approx([3 * flops * 5 / 1e9 + 2e-3, 3 * flops * 5 / 1e9 + 1e-3])
    assert p.compute == pytest.approx(p.busy[0])


def test_slowest_device_gates_every_layer():
    spec = three_layer_model()
    conv1, conv2, fc = spec.layers
    rates, overhead, batch = (3e9, 1e9), 6e-6, 10
    specs = [DeviceSpec("/cpu:0", rates[0], overhead_s=overhead), DeviceSpec("/cpu:1", rates[1])]
    p = predict(spec, specs, parse_mesh("model:2"), batch, {"filters1": [6, 2]})
    # conv layers: both devices need the same compute (proportional split), device 0 also
    # a third of its overhead per layer; fc (unsplit): device 1 takes 3x as long.
    conv = [3 * batch * l.flops_per_sample * 6 / 8 / rates[0] for l in (conv1, conv2)]
    fc_times = [3 * batch * fc.flops_per_sample / r for r in rates]
    per_layer = [conv[0] + overhead / 3, conv[1] + overhead / 3,
                 max(fc_times[0] + overhead / 3, fc_times[1])]
    assert fc_times[1] > fc_times[0] + overhead / 3  # so device 1 is slowest on fc only
    assert p.busy == pytest.approx([sum(conv) + fc_times[0] + overhead,
                                    sum(conv) + fc_times[1]])
    assert p.compute == pytest.approx(sum(per_layer))
    assert p.compute > max(p.busy)  # the per-step maximum would be too optimistic


def test_batch_rows_meet_only_at_barriers_so_a_data_split_costs_its_slowest_busy_time():
    """A device of a large per-step overhead beside one of none: however each spreads its
    busy time over the layers, a data split's compute is the slowest busy time (the
    batch norms' and the gradient sum's waits are the link's barrier_s); a hybrid mesh's,
    its slowest row's, each row gated layer by layer as a model split alone."""
    spec = three_layer_model()
    flops = sum(l.flops_per_sample for l in spec.layers)
    fast, slow = DeviceSpec("/gpu:0", 4e9, overhead_s=5e-5), DeviceSpec("/cpu:0", 1e9)
    p = predict(spec, [fast, slow], parse_mesh("batch:2"), 10, {"batch": [6, 4]})
    busy = [3 * flops * 6 / 4e9 + 5e-5, 3 * flops * 4 / 1e9]
    assert p.busy == pytest.approx(busy)
    assert p.compute == pytest.approx(max(busy))
    # the slow device the slower on conv1 only: gated layer by layer it would cost more
    per_layer = [max(3 * l.flops_per_sample * 6 / 4e9 + 5e-5 / 3,
                     3 * l.flops_per_sample * 4 / 1e9) for l in spec.layers]
    assert sum(per_layer) > 1.2 * max(busy)
    other = DeviceSpec("/cpu:1", 2e9)
    rows = ([fast, slow], [other, dataclasses.replace(other, name="/cpu:2")])
    hybrid = predict(spec, [*rows[0], *rows[1]], parse_mesh("batch:2;model:2"), 10,
                     {"batch": [6, 4], "filters1": [5, 3]})
    alone = [predict(spec, row, parse_mesh("model:2"), share, {"filters1": [5, 3]}).compute
             for row, share in zip(rows, (6, 4))]
    assert hybrid.compute == pytest.approx(max(alone))


@pytest.mark.parametrize("cores", [1, 1.5, 2])
def test_devices_sharing_a_host_share_its_cores(cores):
    spec = two_conv_model()
    flops = np.array([l.flops_per_sample for l in spec.layers], dtype=float)
    specs = [DeviceSpec(f"/cpu:{i}", 1e9, host="h", host_cores=cores) for i in range(2)]
    p = predict(spec, specs, parse_mesh("batch:2"), 10, {"batch": [6, 4]})
    per_device = 3 * flops[:, None] * np.array([6, 4])[None, :] / 1e9  # (layers, devices)
    expected = np.maximum(per_device.max(axis=1), per_device.sum(axis=1) / cores).sum()
    assert p.compute == pytest.approx(expected)
    assert p.busy == pytest.approx(per_device.sum(axis=0))
    independent = predict(spec, [DeviceSpec(f"/cpu:{i}", 1e9) for i in range(2)],
                          parse_mesh("batch:2"), 10, {"batch": [6, 4]})
    assert independent.compute == pytest.approx(per_device[:, 0].sum())


def test_local_link_inside_a_host_and_link_between_hosts():
    spec = two_conv_model()
    conv1, conv2 = spec.layers
    local = LinkSpec(1e10, 1e-6)
    link = LinkSpec(1e9, 1e-4, local=local)
    # batch row r on host r: the model axis stays inside a host, the batch axis crosses.
    specs = [DeviceSpec(f"/cpu:{i}", 1e9, host=f"h{i // 2}") for i in range(4)]
    splits = {"filters1": [4, 4], "batch": [6, 4]}
    p = predict(spec, specs, parse_mesh("batch:2;model:2"), 10, splits, link)
    model_comm = ring_allreduce_time(4 * 6 * conv2.output_elems_per_sample, 2, local)
    batch_comm = gradient_allreduces([4 * 0.5 * conv1.params, 4 * 0.5 * conv2.params], 2, link)
    assert p.comm == pytest.approx(model_comm + batch_comm)
    # Without hosts every device is its own: the link everywhere.
    plain = predict(spec, devices(1e9, 1e9, 1e9, 1e9), parse_mesh("batch:2;model:2"), 10,
                    splits, link)
    assert plain.comm == pytest.approx(
        ring_allreduce_time(4 * 6 * conv2.output_elems_per_sample, 2, link) + batch_comm)
    assert link.between(["h0", "h0"]) is local and link.between(["h0", "h1"]) is link
    assert LinkSpec(1e9).between(["h0", "h0"]) == LinkSpec(1e9)


@pytest.mark.parametrize("mesh, splits, other_samples", [
    ("batch:2", {"batch": [6, 4]}, 4),  # host h1 receives its 4 samples
    ("model:2", {"filters1": [4, 4]}, 10),  # both columns compute every sample
])
def test_feed_to_the_first_host_then_to_the_others(mesh, splits, other_samples):
    spec = two_conv_model()
    feed = LinkSpec(5e8, 2e-4)
    link = LinkSpec(1e9, 1e-4, feed=feed)
    specs = [DeviceSpec("/cpu:0", 1e9, host="h0"), DeviceSpec("/cpu:1", 1e9, host="h1")]
    with_feed = predict(spec, specs, parse_mesh(mesh), 10, splits, link)
    without = predict(spec, specs, parse_mesh(mesh), 10, splits, LinkSpec(1e9, 1e-4))
    sample = 4 + 4  # an int32 pixel index and an int32 label: patches are cut on the devices
    expected = (2e-4 + 10 * sample / 5e8) + (1e-4 + other_samples * sample / 1e9)
    assert with_feed.comm - without.comm == pytest.approx(expected)
    same_host = [DeviceSpec(f"/cpu:{i}", 1e9, host="h0") for i in range(2)]
    p = predict(spec, same_host, parse_mesh(mesh), 10, splits, link)
    q = predict(spec, same_host, parse_mesh(mesh), 10, splits, LinkSpec(1e9, 1e-4))
    assert p.comm - q.comm == pytest.approx(2e-4 + 10 * sample / 5e8)


def test_load_platform_with_hosts_overhead_and_links(tmp_path):
    path = tmp_path / "platform.json"
    path.write_text(json.dumps({
        "devices": [{"name": "/job:worker/task:0/device:CPU:0", "flops_per_s": 1e11,
                     "overhead_s": 3e-4, "host": "worker0", "host_cores": 1}],
        "link": {"bandwidth_bytes_per_s": 1e9, "latency_s": 2e-4,
                 "local": {"bandwidth_bytes_per_s": 5e10, "latency_s": 1e-6},
                 "feed": {"bandwidth_bytes_per_s": 9e8}}}))
    found, link = load_platform(path)
    assert found == [DeviceSpec("/job:worker/task:0/device:CPU:0", 1e11, overhead_s=3e-4,
                                host="worker0", host_cores=1)]
    assert link == LinkSpec(1e9, 2e-4, local=LinkSpec(5e10, 1e-6), feed=LinkSpec(9e8))
    path.write_text(json.dumps({"devices": [{"name": "/cpu:0", "flops_per_s": 1e9,
                                             "overhead_s": -1}]}))
    with pytest.raises(ValueError, match="overhead_s of device '/cpu:0' is -1"):
        load_platform(path)
    path.write_text(json.dumps({"devices": [{"name": "/cpu:0", "flops_per_s": 1e9}],
                                "link": {"bandwidth_bytes_per_s": 1e9, "local": 5}}))
    with pytest.raises(ValueError, match="link local must be a LinkSpec, a dict or None"):
        load_platform(path)


def test_host_cores_below_one_are_refused():
    with pytest.raises(ValueError, match=r"host_cores of device '/cpu:0' is 0.5; must be >= 1"):
        DeviceSpec("/cpu:0", 1e9, host="h", host_cores=0.5)


# -- per-tensor collectives, two-level all-reduce, op-size efficiency, CPU links --------

def test_op_size_efficiency_is_a_fixed_cost_per_sample_and_layer():
    spec = two_conv_model()
    flops = np.array([l.flops_per_sample for l in spec.layers], dtype=float)
    peak, half, batch = 1e9, 500.0, 10
    one = [DeviceSpec("/cpu:0", peak, half_rate_flops=half)]
    p = predict(spec, one, parse_mesh("model:1"), batch, {"filters1": [8]})
    # rate(s) = peak * s / (s + half) per layer: time = 3 * batch * s / rate(s)
    rate = peak * flops / (flops + half)
    assert p.step == pytest.approx(np.sum(3 * batch * flops / rate))
    assert p.step == pytest.approx(3 * batch * (flops.sum() + 2 * half) / peak)
    # split over two equal devices: each computes half of every layer's FLOPs, but pays
    # the whole fixed cost of both layers, so the split is slower than half the step.
    two = [DeviceSpec(f"/cpu:{i}", peak, half_rate_flops=half) for i in range(2)]
    q = predict(spec, two, parse_mesh("model:2"), batch, {"filters1": [4, 4]})
    each = 3 * batch * (flops.sum() / 2 + 2 * half) / peak
    assert q.busy == pytest.approx([each, each])
    assert q.compute == pytest.approx(each) and q.compute > p.compute / 2
    # default 0: the plain rate
    plain = predict(spec, devices(peak), parse_mesh("model:1"), batch, {"filters1": [8]})
    assert plain.step == pytest.approx(3 * batch * flops.sum() / peak)


def test_layers_without_flops_have_no_fixed_cost():
    spec = ModelSpec("pool", [conv_layer_spec("c", "conv2d", (4, 4), 1, 3, 2),
                              dense_layer_spec("fc", 32, 4)], (4, 4, 3))
    zero = ModelSpec("zero", [*spec.layers, dense_layer_spec("empty", 4, 0)], (4, 4, 3))
    assert zero.layers[-1].flops_per_sample == 0
    dev = [DeviceSpec("/cpu:0", 1e9, half_rate_flops=100.0)]
    a = predict(spec, dev, parse_mesh("batch:1"), 4, {"batch": [4]})
    b = predict(zero, dev, parse_mesh("batch:1"), 4, {"batch": [4]})
    assert b.step == pytest.approx(a.step)  # the layer without FLOPs adds nothing


@pytest.mark.parametrize("n", [2, 4])
def test_all_weight_gradients_are_one_allreduce(n):
    spec = three_layer_model()  # 3 layers with weights: 6 tensors (kernels and biases)
    link = LinkSpec(1e15, 1e-4)  # latency only
    p = predict(spec, devices(*[1e9] * n), parse_mesh(f"batch:{n}"), 4 * n,
                {"batch": [4] * n}, link)
    hand_overs = 1 if n == 2 else 2 * (n - 1)   # two devices exchange once; a ring 2 (n-1)
    assert p.comm == pytest.approx(hand_overs * 1e-4, rel=1e-6)   # one all-reduce, not six


@pytest.mark.parametrize("mesh, splits, rings", [
    ("batch:2", {"batch": [5, 3]}, [2]),
    ("batch:2;model:2", {"batch": [5, 3], "filters1": [5, 3]}, [2, 2]),   # a ring per column
])
def test_norm_layers_add_two_allreduces_each_forward_idle_backward_loaded(mesh, splits, rings):
    loaded = LinkSpec(1e15, 3e-4)
    link = LinkSpec(1e15, 1e-4, loaded=loaded)   # latency only
    plain = two_conv_model()
    normed = dataclasses.replace(plain, norm_layers=3)
    n = len(rings) * 2
    base, more = (predict(spec, devices(*[1e9] * n), parse_mesh(mesh), 8, splits, link)
                  for spec in (plain, normed))
    # per column: 3 layers x (one forward all-reduce at 1e-4 + one backward at 3e-4 per
    # hand-over), each one hand-over (M = 2 devices exchange once); the columns run at once
    assert more.comm - base.comm == pytest.approx(3 * (1e-4 + 3e-4))
    assert more.compute == base.compute
    single = [predict(spec, devices(1e9), parse_mesh("batch:1"), 8, {"batch": [8]}, link)
              for spec in (plain, normed)]
    assert single[0].step == single[1].step   # one device: no all-reduce


@pytest.mark.parametrize("mesh, splits, per_step", [
    ("batch:2", {"batch": [5, 3]}, 2 * 3 + 1),   # two per norm layer, the gradient sum
    ("model:2", {"filters1": [5, 3]}, 1),   # conv2's all-reduce (conv1 has no input grad)
    ("batch:2;model:2", {"batch": [5, 3], "filters1": [5, 3]}, 1 + 2 * 3 + 1),
    ("batch:1", {"batch": [8]}, 0),
])
def test_every_barrier_waits_the_links_barrier_s(mesh, splits, per_step):
    spec = dataclasses.replace(two_conv_model(), norm_layers=3)
    parsed = parse_mesh(mesh)
    assert sum(barriers(spec, parsed)) == per_step
    link = LinkSpec(1e9, 1e-4, loaded=LinkSpec(5e8, 3e-4))
    n = parsed.batch * parsed.model
    base, waiting = (predict(spec, devices(*[1e9] * n), parsed, 8, splits, l)
                     for l in (link, dataclasses.replace(link, barrier_s=2e-3)))
    assert waiting.comm - base.comm == pytest.approx(per_step * 2e-3)
    assert waiting.compute == base.compute
    with pytest.raises(ValueError, match="link barrier_s is -1"):
        LinkSpec(1e9, barrier_s=-1)


def test_a_barrier_within_one_host_waits_the_local_links():
    spec = dataclasses.replace(two_conv_model(), norm_layers=1)
    specs = [DeviceSpec("/cpu:0", 1e9, host="h0"), DeviceSpec("/cpu:1", 1e9, host="h0")]
    local = LinkSpec(1e10, 1e-6, barrier_s=1e-4)
    link = LinkSpec(1e9, 1e-4, local=local, barrier_s=5e-3)
    base = predict(spec, specs, parse_mesh("batch:2"), 8, {"batch": [4, 4]},
                   dataclasses.replace(link, local=dataclasses.replace(local, barrier_s=0.0)))
    p = predict(spec, specs, parse_mesh("batch:2"), 8, {"batch": [4, 4]}, link)
    assert p.comm - base.comm == pytest.approx(3 * 1e-4)   # the local figure, not 5e-3


def test_norm_layers_must_be_a_whole_number():
    with pytest.raises(InvalidInput, match="norm_layers must be a whole number >= 0"):
        dataclasses.replace(two_conv_model(), norm_layers=-1)


def test_two_level_allreduce_across_hosts_by_hand():
    local = LinkSpec(1e10, 1e-6)
    link = LinkSpec(1e9, 1e-4, local=local)
    size = 8e6
    # 2 hosts x 2 devices: reduce onto each leader and copy back (2 hand-overs of the
    # whole tensor on the local link), the 2 leaders exchange once over the link.
    two_level = 2 * (1e-6 + size / 1e10) + (size / 1e9 + 1e-4)
    assert allreduce_pricer(["h0", "h0", "h1", "h1"], link)(size) == pytest.approx(two_level)
    # 3 devices on h0, 1 on h1: the larger host counts
    assert allreduce_pricer(["h0", "h0", "h0", "h1"], link)(size) == pytest.approx(
        4 * (1e-6 + size / 1e10) + (size / 1e9 + 1e-4))
    # one host: a ring on the local link; all on different hosts: a ring on the link
    assert allreduce_pricer(["h0"] * 4, link)(size) == pytest.approx(
        ring_allreduce_time(size, 4, local))
    assert allreduce_pricer(["a", "b", "c", "d"], link)(size) == pytest.approx(
        ring_allreduce_time(size, 4, link))
    assert allreduce_pricer(["h0"], link)(size) == 0
    # in predict: batch:4 over 2 hosts of 2 devices
    spec = two_conv_model()
    specs = [DeviceSpec(f"/cpu:{i}", 1e9, host=f"h{i // 2}") for i in range(4)]
    p = predict(spec, specs, parse_mesh("batch:4"), 8, {"batch": [2] * 4}, link)
    hosts = ["h0", "h0", "h1", "h1"]
    expected = allreduce_pricer(hosts, link)(4 * sum(l.params for l in spec.layers))
    assert p.comm == pytest.approx(expected)


@pytest.mark.parametrize("share", [0.0, 0.5, 1.0])
def test_groups_sharing_a_host_share_its_cores_for_communication(share):
    link = LinkSpec(1e9, 1e-4, cpu_share=share)
    # two groups on the same two hosts (the columns of batch:2;model:2, rows on hosts)
    groups = [["h0", "h1"], ["h0", "h1"]]
    t = [3e-3, 2e-3]
    assert concurrent_groups_time(t, groups, link) == pytest.approx(3e-3 + share * 2e-3)
    # groups on disjoint hosts overlap whatever the share
    assert concurrent_groups_time(t, [["h0"], ["h1"]], link) == pytest.approx(3e-3)
    # in predict: the batch-axis all-reduces of the two model columns add up with share 1
    spec = two_conv_model()
    conv1, conv2 = spec.layers
    specs = [DeviceSpec(f"/cpu:{i}", 1e9, host=f"h{i // 2}") for i in range(4)]
    local = LinkSpec(1e10, 1e-6)
    full = LinkSpec(1e9, 1e-4, local=local, cpu_share=share)
    splits = {"filters1": [4, 4], "batch": [4, 4]}
    p = predict(spec, specs, parse_mesh("batch:2;model:2"), 8, splits, full)
    model_comm = ring_allreduce_time(4 * 4 * conv2.output_elems_per_sample, 2, local)
    column = gradient_allreduces([4 * 0.5 * conv1.params, 4 * 0.5 * conv2.params], 2, full)
    assert p.comm == pytest.approx(model_comm + column * (1 + share))


def test_new_fields_are_checked_and_loaded(tmp_path):
    with pytest.raises(ValueError, match="link cpu_share is 1.5; must be between 0 and 1"):
        LinkSpec(1e9, cpu_share=1.5)
    with pytest.raises(ValueError, match="half_rate_flops of device '/cpu:0' is -1"):
        DeviceSpec("/cpu:0", 1e9, half_rate_flops=-1)
    path = tmp_path / "platform.json"
    path.write_text(json.dumps({
        "devices": [{"name": "/cpu:0", "flops_per_s": 1e11, "half_rate_flops": 2e5}],
        "link": {"bandwidth_bytes_per_s": 1e9, "latency_s": 2e-4, "cpu_share": 0.8}}))
    found, link = load_platform(path)
    assert found == [DeviceSpec("/cpu:0", 1e11, half_rate_flops=2e5)]
    assert link == LinkSpec(1e9, 2e-4, cpu_share=0.8)



def test_link_under_load_prices_backward_model_axis_and_input_hand_overs_only():
    spec = two_conv_model()
    conv1, conv2 = spec.layers
    idle = LinkSpec(1e9, 1e-4, feed=LinkSpec(5e8, 2e-4))
    loaded = dataclasses.replace(idle, loaded=LinkSpec(4e8, 7e-4))
    specs = [DeviceSpec("/cpu:0", 1e9, host="h0"), DeviceSpec("/cpu:1", 1e9, host="h1")]
    sample = 4 + 4  # an int32 pixel index and an int32 label
    feed = 2e-4 + 10 * sample / 5e8

    # model:2 -- conv2's forward all-reduce (10 samples) at the idle figures, the input
    # to h1 under load.
    splits = {"filters1": [4, 4]}
    p = predict(spec, specs, parse_mesh("model:2"), 10, splits, loaded)
    assert p.comm == pytest.approx(
        ring_allreduce_time(4 * 10 * conv2.output_elems_per_sample, 2, idle)
        + feed + 7e-4 + 10 * sample / 4e8)

    # A stem with weights before the pair: conv1's input gradient is all-reduced in the
    # backward pass, beside conv1's weight gradient: under load.
    stem = conv_layer_spec("stem", "conv2d", (4, 4), 1, 3, 3)
    deep = ModelSpec("deep", [stem, *spec.layers], (4, 4, 3))
    p = predict(deep, specs, parse_mesh("model:2"), 10, splits, loaded)
    by_hand = (4 * 10 * 16 * 3 / 4e8 + 7e-4  # backward, 16x3 per sample, loaded, 1 hand-over
               + 4 * 10 * 16 * 2 / 1e9 + 1e-4  # forward, 16x2 per sample, idle
               + feed + 7e-4 + 10 * sample / 4e8)
    assert p.comm == pytest.approx(by_hand)

    # batch:2 -- gradient all-reduces keep the idle figures; h1's 4 samples go under load.
    splits = {"batch": [6, 4]}
    p = predict(spec, specs, parse_mesh("batch:2"), 10, splits, loaded)
    assert p.comm == pytest.approx(
        gradient_allreduces([4 * conv1.params, 4 * conv2.params], 2, idle)
        + feed + 7e-4 + 4 * sample / 4e8)


def test_under_load_swaps_only_bandwidth_and_latency_of_link_and_local_link():
    local = LinkSpec(1e10, 1e-6, loaded=LinkSpec(5e9, 3e-6))
    feed = LinkSpec(5e8, 2e-4)
    link = LinkSpec(1e9, 1e-4, local=local, feed=feed, cpu_share=0.4,
                    loaded={"bandwidth_bytes_per_s": 4e8, "latency_s": 7e-4})
    assert link.loaded == LinkSpec(4e8, 7e-4)
    assert link.under_load() == LinkSpec(4e8, 7e-4, local=LinkSpec(5e9, 3e-6), feed=feed,
                                         cpu_share=0.4)
    assert LinkSpec(1e9, 1e-4).under_load() == LinkSpec(1e9, 1e-4)
    with pytest.raises(ValueError, match="link loaded must be a LinkSpec, a dict or None"):
        LinkSpec(1e9, loaded=3)


def test_load_platform_reads_the_link_under_load(tmp_path):
    path = tmp_path / "platform.json"
    path.write_text(json.dumps({
        "devices": [{"name": "/cpu:0", "flops_per_s": 1e11}],
        "link": {"bandwidth_bytes_per_s": 1e9, "latency_s": 2e-4,
                 "loaded": {"bandwidth_bytes_per_s": 5e8, "latency_s": 9e-4}}}))
    assert load_platform(path)[1] == LinkSpec(1e9, 2e-4, loaded=LinkSpec(5e8, 9e-4))
    path.write_text(json.dumps({
        "devices": [{"name": "/cpu:0", "flops_per_s": 1e11}],
        "link": {"bandwidth_bytes_per_s": 1e9, "loaded": {"latency_s": 9e-4}}}))
    with pytest.raises(ValueError, match="platform file .*bandwidth_bytes_per_s"):
        load_platform(path)

# -- element-wise work on replicated activations -----------------------------------------

def test_elementwise_work_on_replicated_outputs_is_not_divided():
    spec = two_conv_model()  # conv1: 8 filters split (output), conv2: 2 outputs, input-split
    conv1, conv2 = spec.layers
    assert (conv1.output_elems_per_sample, conv2.output_elems_per_sample) == (128, 32)
    rate, e, batch = 1e9, 2e-9, 10
    flops = conv1.flops_per_sample + conv2.flops_per_sample
    one = predict(spec, [DeviceSpec("/cpu:0", rate, elementwise_s_per_element=e)],
                  parse_mesh("model:1"), batch, {"filters1": [8]})
    # one device: every output element once, 10 * (128 + 32) * 2 ns = 3.2 us
    assert one.step == pytest.approx(3 * batch * flops / rate + batch * (128 + 32) * e)
    # model:2 with filters 6 + 2: conv1's output is split (6/8, 2/8 of 128), conv2's
    # output (partial sums, all-reduced) is whole on both devices: 32 each.
    two = [DeviceSpec(f"/cpu:{i}", rate, elementwise_s_per_element=e) for i in range(2)]
    p = predict(spec, two, parse_mesh("model:2"), batch, {"filters1": [6, 2]})
    assert p.busy == pytest.approx([3 * batch * flops * 6 / 8 / rate + batch * (96 + 32) * e,
                                    3 * batch * flops * 2 / 8 / rate + batch * (32 + 32) * e])
    # together they do conv2's 10 * 32 elements twice, conv1's once
    assert sum(p.busy) - 3 * batch * flops / rate == pytest.approx(
        batch * (128 + 2 * 32) * e)
    # batch:2 divides everything, replicated or not: each device its samples' elements
    q = predict(spec, two, parse_mesh("batch:2"), batch, {"batch": [4, 6]})
    assert q.busy == pytest.approx([b * (3 * flops / rate + (128 + 32) * e) for b in (4, 6)])
    # default 0: unchanged
    plain = predict(spec, devices(rate, rate), parse_mesh("model:2"), batch,
                    {"filters1": [6, 2]})
    assert plain.busy == pytest.approx([3 * batch * flops * f / rate for f in (6 / 8, 2 / 8)])


def test_elementwise_field_is_checked_and_loaded(tmp_path):
    with pytest.raises(ValueError, match="elementwise_s_per_element of device '/cpu:0' is -1"):
        DeviceSpec("/cpu:0", 1e9, elementwise_s_per_element=-1)
    path = tmp_path / "platform.json"
    path.write_text(json.dumps({"devices": [
        {"name": "/cpu:0", "flops_per_s": 1e11, "elementwise_s_per_element": 1.5e-9}]}))
    found, _ = load_platform(path)
    assert found == [DeviceSpec("/cpu:0", 1e11, elementwise_s_per_element=1.5e-9)]
    assert DeviceSpec("/cpu:0", 1e11).elementwise_s_per_element == 0.0


def blocked_pair(filters=64):
    """conv1 splits its output filters, conv2 its input channels, fc its outputs."""
    return ModelSpec("blocked", [
        conv_layer_spec("conv1", "conv2d", (4, 4), 3, 3, filters, split_dim="filters1",
                        split_role="output"),
        conv_layer_spec("conv2", "conv2d", (4, 4), 1, filters, 2, split_dim="filters1",
                        split_role="input"),
        dense_layer_spec("fc", 32, filters, split_dim="hidden", split_role="output"),
    ], (4, 4, 3))


def test_an_output_split_convolution_costs_its_whole_channel_blocks():
    spec = blocked_pair()
    conv1, conv2, fc = (l.flops_per_sample for l in spec.layers)
    batch, splits = 10, {"filters1": [41, 23], "hidden": [41, 23]}
    blocked = [dataclasses.replace(d, channel_block=16) for d in devices(2e9, 1e9)]
    plain = predict(spec, devices(2e9, 1e9), parse_mesh("model:2"), batch, splits)
    p = predict(spec, blocked, parse_mesh("model:2"), batch, splits)
    # conv1: 41 of 64 filters are 3 of 4 blocks, 23 are 2; conv2 and fc follow the share
    for busy, rate, blocks, share in ((p.busy[0], 2e9, 3, 41), (p.busy[1], 1e9, 2, 23)):
        assert busy == pytest.approx(3 * batch * (conv1 * blocks / 4 + (conv2 + fc) * share / 64)
                                     / rate)
    assert plain.busy == pytest.approx([3 * batch * (conv1 + conv2 + fc) * s / 64 / r
                                        for s, r in ((41, 2e9), (23, 1e9))])
    # each device's load is its blocked FLOPs over the whole model's by single filters, the
    # same for every split (a re-plan divides it by its busy time and prices other splits
    # with it: hmp.run.rebalance.measured_speeds)
    work = [conv1 * blocks / 4 + (conv2 + fc) * share / 64 for blocks, share in ((3, 41), (2, 23))]
    assert p.load == pytest.approx([w / (conv1 + conv2 + fc) for w in work])
    assert plain.load == pytest.approx([41 / 64, 23 / 64])
    # one device computes the whole layer at its measured rate, blocks or not
    alone = predict(spec, blocked[:1], parse_mesh("model:1"), batch, {"filters1": [64],
                                                                     "hidden": [64]})
    assert alone.busy == pytest.approx([3 * batch * (conv1 + conv2 + fc) / 2e9])


def test_a_share_under_one_block_costs_the_block():
    spec = blocked_pair(filters=12)   # under one block of 16: each device computes all
    blocked = [dataclasses.replace(d, channel_block=16) for d in devices(1e9, 1e9)]
    p = predict(spec, blocked, parse_mesh("model:2"), 10, {"filters1": [8, 4], "hidden": [8, 4]})
    conv1, conv2, fc = (l.flops_per_sample for l in spec.layers)
    assert p.busy == pytest.approx([3 * 10 * (conv1 + (conv2 + fc) * s / 12) / 1e9
                                    for s in (8, 4)])


def test_a_channel_block_is_a_whole_number():
    with pytest.raises(InvalidInput, match="channel_block of device 'x' must be a whole "
                                           "number >= 1, got 0"):
        DeviceSpec("x", 1e9, channel_block=0)
