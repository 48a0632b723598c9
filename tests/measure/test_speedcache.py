"""hmp.measure.speedcache: measured speeds and link kept per setting; hit, miss, corrupt, key."""

import dataclasses
import importlib.metadata
import json
import os

import pytest
import tensorflow as tf

import hmp
from hmp.measure import speedcache
from hmp.measure.linkprobe import with_hosts
from hmp.planning import DeviceSpec, LinkSpec
from models import model_config

CONFIG = model_config("cnn2d", patch=5, bands=4, n_classes=3, width=2)
DEVICES = ["/cpu:0", "/cpu:1"]
LINK = LinkSpec(2e9, 3e-5, local=LinkSpec(8e9, 1e-5))


class Measurer:
    """A stand-in for profiling: fixed speeds and link, counting its calls."""

    def __init__(self, op_size=()):
        self.calls = 0
        self.devices = DEVICES
        self.op_size = op_size   # per device (half_rate_flops, elementwise_s_per_element)

    def __call__(self):
        """DeviceSpecs as the profiler returns them: on their hosts, op-size figures
        None when not measured."""
        self.calls += 1
        speeds = [DeviceSpec(self.devices[0], 3e9, overhead_s=2e-3, samples_per_s=100.0,
                             min_samples_per_s=90.0, max_samples_per_s=110.0,
                             half_rate_flops=None, elementwise_s_per_element=None,
                             channel_block=16),
                  DeviceSpec(self.devices[1], 1.5e9 * self.calls, samples_per_s=50.0 * self.calls,
                             min_samples_per_s=40.0, max_samples_per_s=60.0 * self.calls,
                             half_rate_flops=None, elementwise_s_per_element=None)]
        if self.op_size:
            speeds = [dataclasses.replace(s, half_rate_flops=h, elementwise_s_per_element=e)
                      for s, (h, e) in zip(speeds, self.op_size)]
        return with_hosts(speeds), LINK


@pytest.fixture
def paths(tmp_path):
    return [str(tmp_path / "run" / "speeds.json"), str(tmp_path / "user" / "speeds.json")]


def key(**changes):
    args = dict(config=CONFIG, batch_size=8, optimizer="adam", devices=DEVICES)
    args.update(changes)
    return speedcache.cache_key(**args)


def get(key_, paths, measure, force=False, op_size=False):
    said, warned = [], []
    entry, path = speedcache.measured_or_cached(key_, paths, measure, force, said.append,
                                                warned.append, op_size)
    return entry, path, said, warned


def flops(entry):
    return [s.flops_per_s for s in entry.speeds]


def test_miss_measures_and_stores_everywhere_then_hits(paths):
    measure = Measurer()
    entry, path, said, warned = get(key(), paths, measure)
    assert (measure.calls, path, said, warned) == (1, None, [], [])
    assert flops(entry) == [3e9, 1.5e9] and entry.link == LINK
    assert [s.overhead_s for s in entry.speeds] == [2e-3, 0.0]
    assert [s.channel_block for s in entry.speeds] == [16, 1]
    assert not entry.has_op_size   # measured without them: None
    for p in paths:
        data = json.loads(open(p).read())
        assert data["format"] == "hmp-speeds/6" and len(data["entries"]) == 1
        assert data["entries"][0]["key"]["devices"] == DEVICES
        assert data["entries"][0]["link"]["local"]["latency_s"] == 1e-5
        assert data["entries"][0]["speeds"][0] == {   # the keys of hmp-speeds/6, in order
            "device": "/cpu:0", "samples_per_s": 100.0, "min_samples_per_s": 90.0,
            "max_samples_per_s": 110.0, "flops_per_s": 3e9, "overhead_s": 2e-3,
            "channel_block": 16, "half_rate_flops": None, "elementwise_s_per_element": None}
        assert list(data["entries"][0]["speeds"][0]) == list(speedcache.SPEED_FIELDS)
    again, path, said, warned = get(key(), paths, measure)
    assert measure.calls == 1 and path == paths[0] and warned == []
    assert again == entry
    assert said == ["speeds: reusing the measurement of %s from %s (--speeds=measure "
                    "measures again)" % (entry.measured_at, paths[0])]
    assert not [f for f in os.listdir(os.path.dirname(paths[0])) if f.endswith(".tmp")]


def test_op_size_figures_round_trip_and_serve_both_kinds_of_run(paths):
    get(key(), paths, Measurer())   # a batch-only run's entry: no op-size figures
    measure = Measurer(op_size=[(2e5, 7e-10), (0.0, 1.5e-9)])
    entry, path, _, _ = get(key(), paths, measure, op_size=True)   # it will not do
    assert measure.calls == 1 and path is None and entry.has_op_size
    for p in paths:   # it replaced the entry without them
        assert speedcache.load(p, pytest.fail) == [entry]
    again, path, _, _ = get(key(), paths, measure, op_size=True)
    batch_only, _, _, _ = get(key(), paths, measure)   # one with them serves a run without
    assert measure.calls == 1 and path == paths[0] and again == batch_only == entry
    specs = again.speeds   # the planner's DeviceSpecs, on their host
    assert [(s.host, s.host_cores) for s in specs] == [("localhost", 1)] * 2
    assert [(s.half_rate_flops, s.elementwise_s_per_element, s.overhead_s) for s in specs] \
        == [(2e5, 7e-10, 2e-3), (0.0, 1.5e-9, 0.0)]
    assert [s.flops_per_s for s in specs] == [3e9, 1.5e9]


def test_an_entry_written_before_reads_as_device_specs_on_their_hosts(paths):
    """A file as hmp-speeds/6 has always been written: each speed its figures by name."""
    os.makedirs(os.path.dirname(paths[0]))
    worker = "/job:worker/task:%d/device:CPU:0"
    speed = ('{"device": "%s", "samples_per_s": 80.0, "min_samples_per_s": 70.0, '
             '"max_samples_per_s": 90.0, "flops_per_s": 2e9, "overhead_s": 0.001, '
             '"channel_block": %d, "half_rate_flops": %s, "elementwise_s_per_element": %s}')
    with open(paths[0], "w", encoding="utf-8") as f:
        f.write('{"format": "hmp-speeds/6", "entries": [{"key": {"devices": ["%s", "%s"]}, '
                '"measured_at": "2025-01-01T00:00:00+00:00", "speeds": [%s, %s], '
                '"link": {"bandwidth_bytes_per_s": 1e9, "latency_s": 1e-4}}]}'
                % (worker % 0, worker % 1, speed % (worker % 0, 16, "null", "null"),
                   speed % (worker % 1, 8, "200000.0", "1e-09")))
    (entry,) = speedcache.load(paths[0], pytest.fail)
    assert entry.speeds == [
        DeviceSpec(worker % 0, 2e9, overhead_s=1e-3, host="/job:worker/replica:0/task:0",
                   half_rate_flops=None, elementwise_s_per_element=None, channel_block=16,
                   samples_per_s=80.0, min_samples_per_s=70.0, max_samples_per_s=90.0),
        DeviceSpec(worker % 1, 2e9, overhead_s=1e-3, host="/job:worker/replica:0/task:1",
                   half_rate_flops=2e5, elementwise_s_per_element=1e-9, channel_block=8,
                   samples_per_s=80.0, min_samples_per_s=70.0, max_samples_per_s=90.0)]
    assert entry.link == LinkSpec(1e9, 1e-4) and not entry.has_op_size


def test_user_cache_serves_a_new_run_folder_and_is_copied_there(paths):
    measure = Measurer()
    get(key(), paths[1:], measure)  # measured by another run: only the user cache has it
    entry, path, said, _ = get(key(), paths, measure)
    assert measure.calls == 1 and path == paths[1] and paths[1] in said[0]
    assert speedcache.load(paths[0], pytest.fail) == [entry]


def test_force_measures_again_and_replaces_the_entry(paths):
    measure = Measurer()
    get(key(), paths, measure)
    entry, path, said, _ = get(key(), paths, measure, force=True)
    assert measure.calls == 2 and path is None and said == []
    assert flops(entry) == [3e9, 3e9]
    assert [flops(e) for e in speedcache.load(paths[1], pytest.fail)] == [[3e9, 3e9]]


@pytest.mark.parametrize("change", [
    dict(batch_size=16), dict(optimizer="sgd"), dict(devices=["/cpu:1", "/cpu:0"]),
    dict(config=model_config("cnn2d", patch=5, bands=4, n_classes=3, width=4)),
    dict(workers=["10.0.0.1:2222", "10.0.0.2:2222"]),
    # the barrier wait measured on a batch split counts the sync batch norms' barriers
    dict(config=dataclasses.replace(CONFIG, batch_norm="local")),
])
def test_another_setting_is_a_miss(paths, change):
    measure = Measurer()
    get(key(), paths, measure)
    measure.devices = change.get("devices", DEVICES)
    get(key(**change), paths, measure)
    assert measure.calls == 2
    assert len(speedcache.load(paths[1], pytest.fail)) == 2  # both kept


def test_the_key_names_versions_and_setting():
    k = key(workers=["h:1"])
    assert {k_: k[k_] for k_ in ("model", "width", "patch", "bands", "classes", "batch_size",
                                 "optimizer", "devices", "workers")} == {
        "model": "cnn2d", "width": 2, "patch": 5, "bands": 4, "classes": 3, "batch_size": 8,
        "optimizer": "adam", "devices": DEVICES, "workers": ["h:1"]}
    assert k["tensorflow"] == tf.__version__
    # the source's version, which setup.py installs
    assert k["hmp"] == hmp.__version__ == importlib.metadata.version("hmp")


def test_a_file_of_another_hmp_version_says_so(paths):
    os.makedirs(os.path.dirname(paths[0]))
    with open(paths[0], "w", encoding="utf-8") as f:
        f.write('{"format": "hmp-speeds/5", "entries": []}')
    _, _, _, warned = get(key(), paths, Measurer())
    assert warned == ["warning: ignoring the speed cache %s (hmp-speeds/5, written by another "
                      "version of hmp; this one reads hmp-speeds/6)" % paths[0]]


@pytest.mark.parametrize("content", [
    "{not json", "[]", '{"format": "other", "entries": []}',
    '{"format": "hmp-speeds/6", "entries": {}}',
    '{"format": "hmp-speeds/6", "entries": [{"key": {"devices": ["/cpu:0"]}, '
    '"measured_at": "x", "speeds": [{"device": "/cpu:0", "samples_per_s": -1, '
    '"min_samples_per_s": 1, "max_samples_per_s": 1, "flops_per_s": 1, "overhead_s": 0, '
    '"channel_block": 1, "half_rate_flops": null, "elementwise_s_per_element": null}], '
    '"link": null}]}',
    '{"format": "hmp-speeds/6", "entries": [{"key": {"devices": ["/cpu:0"]}, '
    '"measured_at": "x", "speeds": [{"device": "/cpu:0", "samples_per_s": 1, '
    '"min_samples_per_s": 1, "max_samples_per_s": 1, "flops_per_s": 1, "overhead_s": -1, '
    '"channel_block": 1, "half_rate_flops": null, "elementwise_s_per_element": null}], '
    '"link": null}]}',
    '{"format": "hmp-speeds/6", "entries": [{"key": {"devices": ["/cpu:0"]}, '
    '"measured_at": "x", "speeds": [{"device": "/cpu:0", "samples_per_s": 1, '
    '"min_samples_per_s": 1, "max_samples_per_s": 1, "flops_per_s": 1, "overhead_s": 0, '
    '"channel_block": 0, "half_rate_flops": null, "elementwise_s_per_element": null}], '
    '"link": null}]}',
    '{"format": "hmp-speeds/2", "entries": []}',  # before op-size figures
    '{"format": "hmp-speeds/6", "entries": [{"key": {"devices": []}, "measured_at": "x", '
    '"speeds": [], "link": {"bandwidth_bytes_per_s": 0}}]}',
    "\udcff",
])
def test_a_corrupt_file_is_ignored_with_one_warning_and_replaced(paths, content):
    os.makedirs(os.path.dirname(paths[0]))
    with open(paths[0], "w", encoding="utf-8", errors="surrogateescape") as f:
        f.write(content)
    measure = Measurer()
    entry, path, _, warned = get(key(), paths, measure)
    assert measure.calls == 1 and path is None
    assert len(warned) == 1 and warned[0].startswith(
        "warning: ignoring the speed cache %s (" % paths[0])
    assert "\n" not in warned[0]
    assert speedcache.load(paths[0], pytest.fail) == [entry]  # rewritten whole


def test_an_unwritable_cache_warns_and_the_run_goes_on(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    measure = Measurer()
    entry, path, _, warned = get(key(), [str(blocker / "speeds.json")], measure)
    assert measure.calls == 1 and flops(entry) == [3e9, 1.5e9]
    assert len(warned) == 1 and warned[0].startswith("warning: cannot write the speed cache")


def test_user_cache_path_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("HMP_CACHE_DIR", str(tmp_path))
    assert speedcache.user_cache_path() == str(tmp_path / "speeds.json")
    monkeypatch.delenv("HMP_CACHE_DIR")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert speedcache.user_cache_path() == str(tmp_path / "home" / ".cache" / "hmp" /
                                               "speeds.json")


def test_a_measurement_serves_only_a_step_with_the_same_work_before_the_model(paths):
    """The in-graph projection and the augmentation change the step: no shared entry."""
    measure = Measurer()
    plain = {"scene_bands": 4, "projection": False, "augmentation": {"flips": False}}
    projected = {**plain, "scene_bands": 6, "projection": True}
    get(key(input_work=plain), paths, measure)
    entry, path, _, _ = get(key(input_work=projected), paths, measure)
    assert measure.calls == 2 and path is None and entry.key["input"] == projected
    get(key(input_work=plain), paths, measure)
    assert measure.calls == 2
