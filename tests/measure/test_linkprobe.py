"""hmp.measure.linkprobe: the measured link is a LinkSpec (structure only, no timing assertions)."""

import dataclasses
import math

import pytest
import tensorflow.compat.v1 as tf

from hmp.planning import DeviceSpec, LinkSpec
from hmp.measure.linkprobe import (link_from_handovers, link_pairs, measure_link,
                                   no_faster_than, with_hosts)


def test_link_between_two_virtual_cpus_is_a_positive_linkspec():
    messages = []
    link = measure_link(["/cpu:0", "/cpu:1"], repeats=3, progress=messages.append,
                        session_config=tf.ConfigProto(device_count={"CPU": 2}))
    assert isinstance(link, LinkSpec) and link.local is None  # one host: one link
    for figure in (link.bandwidth_bytes_per_s, link.latency_s):
        assert math.isfinite(figure) and figure > 0
    assert messages == ["profiling the link between /cpu:0 and /cpu:1"]


def test_one_device_has_no_link():
    assert measure_link(["/cpu:0"]) is None


def test_hosts_and_pairs():
    worker = "/job:worker/task:%d/device:CPU:%d"
    specs = with_hosts([DeviceSpec(d, 1e9) for d in ["/cpu:1", "/gpu:0", worker % (1, 0)]])
    assert specs[0].host == specs[1].host == "localhost"
    assert specs[2].host == "/job:worker/replica:0/task:1"
    # one device per task: only the link between tasks
    assert link_pairs([worker % (0, 0), worker % (1, 0)]) == {
        "link": (worker % (0, 0), worker % (1, 0)), "local": None}
    # two tasks with two devices each: between tasks, and within task 0
    assert link_pairs([worker % (0, 0), worker % (0, 1), worker % (1, 0), worker % (1, 1)]) \
        == {"link": (worker % (0, 0), worker % (1, 0)),
            "local": (worker % (0, 0), worker % (0, 1))}
    assert link_pairs(["/cpu:0", "/gpu:0"]) == {"link": None, "local": ("/cpu:0", "/gpu:0")}


def test_measured_devices_share_a_host_and_its_cores():
    # Measured figures stay as they are (None: not measured).
    specs = with_hosts([
        DeviceSpec("/cpu:0", 1e9),
        DeviceSpec("/cpu:1", 2e9, overhead_s=1e-3, half_rate_flops=None,
                   elementwise_s_per_element=None, samples_per_s=50.0),
        DeviceSpec("/gpu:0", 1e12, half_rate_flops=2e5, elementwise_s_per_element=7e-10)])
    assert specs == [DeviceSpec("/cpu:0", 1e9, host="localhost", host_cores=1),
                     DeviceSpec("/cpu:1", 2e9, host="localhost", host_cores=1,
                                overhead_s=1e-3, half_rate_flops=None,
                                elementwise_s_per_element=None, samples_per_s=50.0),
                     DeviceSpec("/gpu:0", 1e12, host="localhost", host_cores=None,
                                half_rate_flops=2e5, elementwise_s_per_element=7e-10)]
    worker = "/job:worker/task:%d/device:CPU:0"
    assert [s.host_cores for s in with_hosts([DeviceSpec(worker % 0, 1e9),
                                              DeviceSpec(worker % 1, 1e9)])] == [None, None]


def test_link_under_load_is_measured_while_the_busy_functions_run():
    calls = []
    link = measure_link(["/cpu:0", "/cpu:1"], repeats=3, busy=[lambda: calls.append(1)],
                        session_config=tf.ConfigProto(device_count={"CPU": 2}))
    assert isinstance(link.loaded, LinkSpec) and link.loaded.loaded is None
    assert calls   # the busy function ran (in a thread of its own) during the timing
    # the loaded figures, clamped to the idle ones (no_faster_than: tested below on given
    # numbers; measured times are not compared here)
    assert link.loaded == no_faster_than(link.loaded, dataclasses.replace(link, loaded=None))
    assert link.under_load().latency_s == link.loaded.latency_s


def test_a_loaded_figure_faster_than_idle_is_taken_as_idle():
    idle = LinkSpec(2e9, 1e-4)
    assert no_faster_than(LinkSpec(1e15, 1e-9), idle) == idle   # the fit's floors: noise
    assert no_faster_than(LinkSpec(1e9, 3e-4), idle) == LinkSpec(1e9, 3e-4)
    assert no_faster_than(LinkSpec(5e9, 3e-4), idle) == LinkSpec(2e9, 3e-4)


def test_a_link_is_the_small_tensors_hop_and_the_slope_to_the_large_ones():
    """256 B in 10 us, 1 MiB in 1058.576 us: latency 10 us, (2**20 - 256) B over 1048.576
    us of difference = 1.0e9 B/s; a large tensor no slower than the small one (timing
    noise) is taken at the floor of 1 ns, not divided by zero or a negative time."""
    link = link_from_handovers((10e-6, 10e-6 + 1048.576e-6))
    assert link.latency_s == 10e-6
    assert link.bandwidth_bytes_per_s == pytest.approx((2**20 - 256) / 1048.576e-6)
    noisy = link_from_handovers((10e-6, 9e-6))
    assert noisy.bandwidth_bytes_per_s == pytest.approx((2**20 - 256) / 1e-9)


def test_two_hosts_give_a_link_and_a_local_link_each_no_faster_under_load(monkeypatch):
    """Two tasks of two devices each: the link between the tasks and the link within one,
    each timed idle and under load (scripted per-hop seconds here); a loaded figure
    faster than the idle one is taken as the idle one."""
    from hmp.measure import linkprobe
    timed = {   # (pair, under load): per-hop seconds of the small and the large tensor
        (("/job:worker/task:0/device:CPU:0", "/job:worker/task:1/device:CPU:0"), False):
            (100e-6, 1100e-6),
        (("/job:worker/task:0/device:CPU:0", "/job:worker/task:1/device:CPU:0"), True):
            (300e-6, 900e-6),   # a faster slope under load: noise, clamped
        (("/job:worker/task:0/device:CPU:0", "/job:worker/task:0/device:CPU:1"), False):
            (1e-6, 101e-6),
        (("/job:worker/task:0/device:CPU:0", "/job:worker/task:0/device:CPU:1"), True):
            (2e-6, 202e-6)}
    monkeypatch.setattr(linkprobe, "handover_seconds",
                        lambda pair, target, config, repeats, busy=(): timed[
                            tuple(pair), bool(busy)])
    devices = ["/job:worker/task:%d/device:CPU:%d" % (t, d) for t in (0, 1) for d in (0, 1)]
    link = measure_link(devices, busy=[lambda: None])
    slope = lambda seconds: (2**20 - 256) / seconds   # noqa: E731
    expected_local = LinkSpec(slope(100e-6), 1e-6, loaded=LinkSpec(slope(200e-6), 2e-6))
    assert link == LinkSpec(slope(1000e-6), 100e-6, local=expected_local,
                            loaded=LinkSpec(slope(1000e-6), 300e-6))
