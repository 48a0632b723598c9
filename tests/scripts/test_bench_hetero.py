"""scripts/bench_hetero.py: its arithmetic, its competing load, its plain-TF models,
and a tiny run as a user would start it (no timed assertions)."""

import json
import os
import re

import numpy as np
import pytest

from cli_batch import run_batch_with_out
from hmp.graph.graph import build_model_graph, imported
from hmp.run.profiler import MODEL, STEP_PARTS, TRANSFERS
from models import model_config
from hmp.cli import UsageError
from hmp.planning import ModelSpec, dense_layer_spec
from script_modules import import_script

bench = import_script("bench_hetero")
plain_tf_models = import_script("plain_tf_models")

# No competing process (--slowdown=0): one would spin on a core for the whole run, taking
# it from the rest of the test session; the figures checked here hold at any speeds, and
# test_competing_processes_are_pinned_and_killed_also_on_error tests the load itself.
BATCH = 16   # a batch split of local batch norms gives each replica 8 or more
TINY = ["--models=cnn2d", "--width=1", f"--batch_size={BATCH}", "--steps=1", "--repeats=1",
        "--warmup=0", "--profile_steps=1", "--trace_steps=1", "--slowdown=0",
        "--steps_per_run=2"]


def test_ideal_times_speedup_and_efficiency():
    speeds, batch = [300.0, 100.0], 128
    ideal = bench.Ideal.from_speeds(speeds, batch)
    assert ideal.balanced == pytest.approx(batch / np.sum(speeds))        # 0.32 s
    assert ideal.even == pytest.approx(batch / 2 / np.min(speeds))        # 0.64 s
    assert ideal.speedup == pytest.approx(2.0)
    assert ideal.efficiency(0.4) == pytest.approx(0.8)
    three = bench.Ideal.from_speeds([50.0, 30.0, 20.0], 60)
    assert (three.balanced, three.even) == (pytest.approx(0.6), pytest.approx(1.0))


def test_goal_check_says_by_how_much_a_split_falls_short():
    met = bench.goal_check(efficiency=0.95, speedup=1.9, theoretical=2.0)
    assert met["efficiency_met"] and met["speedup_met"]
    assert met["speedup_share_of_theoretical"] == pytest.approx(0.95)
    short = bench.goal_check(efficiency=0.75, speedup=1.5, theoretical=2.0)
    assert not short["efficiency_met"] and not short["speedup_met"]
    assert short["efficiency_short_by"] == pytest.approx(0.15)
    assert short["speedup_short_by"] == pytest.approx(0.15)   # 75% of theoretical, goal 90%


def test_split_step_overhead_is_the_step_beyond_the_slower_workers_share():
    # worker 0: 60 ms alone, 6 of them per-step overhead; worker 1: 110 ms, 6.5. On 21
    # and 11 of 32 samples: 6 + 54 * 21/32 = 41.44 ms and 6.5 + 103.5 * 11/32 = 42.08 ms
    overhead = bench.split_step_overhead(0.048, [21 / 32, 11 / 32], [0.060, 0.110],
                                         [0.006, 0.0065])
    assert overhead == pytest.approx(0.048 - 0.042078125)
    # without per-step overheads the shares scale the whole steps: 0.75 * 40 = 30 ms
    assert bench.split_step_overhead(0.035, [0.75, 0.25], [0.040, 0.100], [0, 0]) == \
        pytest.approx(0.005)


def test_competing_processes_are_pinned_and_killed_also_on_error():
    with pytest.raises(RuntimeError):
        with bench.competing_load(0, 2) as processes:
            assert len(processes) == 2
            for process in processes:
                # pinned before its program started: no waiting, no deadline
                assert os.sched_getaffinity(process.pid) == {0} and process.poll() is None
            raise RuntimeError("the benchmark failed")
    for process in processes:
        assert process.returncode is not None   # killed and reaped
        assert not os.path.exists("/proc/%d" % process.pid)


@pytest.mark.parametrize("name", ["cnn2d", "cnn3d"])
def test_plain_tf_models_have_the_weights_of_hmps(name):
    import tensorflow.compat.v1 as tf
    config = model_config(name, patch=9, bands=40, n_classes=5, width=3)
    plain = plain_tf_models.PlainTrainingGraph(config, "/cpu:0", batch_size=2)
    with tf.Graph().as_default():
        graph = build_model_graph(config, 2, imported(tf.zeros([2, 9, 9, 40])),
                                  tf.zeros([2], tf.int32))[0]
        hmp_weights = sum(v.shape.size for v in graph.trainable_variables)
    assert plain.parameter_count() == hmp_weights > 0


def test_a_fixed_split_below_a_local_replicas_fewest_samples_is_refused():
    """--fixed_splits=30:2 of a model with local batch norms: the planner would give the
    second replica 8 samples, not 2; a row named 30:2 must time 30:2, so it is refused."""
    local = ModelSpec("m", [dense_layer_spec("fc", 4, 2)], (4,), replica_norm_layers=1)
    assert bench.fixed_split(local, ["/cpu:0", "/cpu:1"], (24, 8), 32).splits == {
        "batch": [24, 8]}
    with pytest.raises(UsageError, match="^--fixed_splits=30:2: m normalises its batch "
                                         "norms over each replica's own samples, which "
                                         "needs 8 a replica; allowed: larger shares or "
                                         "--batch_norm=sync$"):
        bench.fixed_split(local, ["/cpu:0", "/cpu:1"], (30, 2), 32)
    sync = ModelSpec("m", [dense_layer_spec("fc", 4, 2)], (4,), norm_layers=1)
    assert bench.fixed_split(sync, ["/cpu:0", "/cpu:1"], (30, 2), 32).splits == {
        "batch": [30, 2]}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """{name: (Run, its --out file)} of a tiny run and one with a bad flag, as a user
    would start them, in one interpreter (tests/cli_batch.py)."""
    return run_batch_with_out("scripts/bench_hetero.py",
                              {"tiny": TINY, "bad_flag": ["--models=cnn2d,resnet"]},
                              tmp_path_factory.mktemp("bench"))


def test_a_tiny_run_writes_every_figure(runs):
    run, out = runs["tiny"]
    assert run.returncode == 0, run.stderr[-2000:]
    result = json.loads(out.read_text())["models"]["cnn2d"]
    configs = result["configs"]
    other_bn = "data sync bn"   # the batch split with the batch norm hmp.train's is not
    assert list(configs) == ["even", "planned", "re-balanced", "per layer", "data even",
                             "data", other_bn, "hybrid", "auto", "auto, 2 a run",
                             "data, 2 a run", "worker 0 alone, 2 a run", "worker 0 alone",
                             "worker 1 alone",
                             "plain TF"]
    assert configs[other_bn]["layout"] == configs["data"]["layout"]
    assert configs["auto, 2 a run"]["layout"] == configs["auto"]["layout"]
    assert configs["data, 2 a run"]["layout"] == configs["data"]["layout"]
    assert configs["worker 0 alone, 2 a run"]["load"] == [1.0, 0.0]
    goal = result["goals"]["data"]
    assert goal["baseline"] == "data even" and goal["speedup"] == pytest.approx(
        configs["data even"]["step_s"] / configs["data"]["step_s"])
    alone = [configs["worker %d alone" % task]["step_s"] for task in (0, 1)]
    assert result["speeds"] == pytest.approx([BATCH / alone[0], BATCH / alone[1]])
    assert result["ideal"]["balanced_s"] == pytest.approx(1 / (1 / alone[0] + 1 / alone[1]))
    for name, c in configs.items():
        assert c["step_s"] > 0 and c["efficiency"] == pytest.approx(
            result["ideal"]["balanced_s"] / c["step_s"]), name
        # busy where the configuration puts work; worker 1 only there (task 0 also
        # takes the feed, so it is never quite idle)
        assert (c["busy_s"][1] > 0) == (c["load"][1] > 0), name
        assert c["busy_s"][0] > 0 or c["load"][0] == 0, name
        # each part within the worker's busy time; the model busy where it has work
        parts = c["busy_by_part_s"]
        assert list(parts) == list(STEP_PARTS), name
        for w in (0, 1):
            assert max(parts[p][w] for p in STEP_PARTS if p != TRANSFERS) <= c["busy_s"][w]
            assert parts[MODEL][w] > 0 or c["load"][w] == 0, name
    # "vs even": against the even batch split for the batch splits and auto, else model:2's
    # (by the configuration's name: no measured time is compared)
    batch_splits = {"data even", "data", other_bn, "auto", "auto, 2 a run", "data, 2 a run"}
    assert {name: bench.even_baseline(name) for name in configs} == {
        name: "data even" if name in batch_splits else "even" for name in configs}
    assert configs["even"]["speedup_over_even"] == configs["data even"]["speedup_over_even"] == 1
    # the split step's overhead: recorded and printed for the configurations on both
    # workers (its arithmetic: test_split_step_overhead_is_..., on figures given; no
    # measured time is compared here)
    split = [name for name, c in configs.items() if min(c["load"]) > 0]
    assert [name for name, c in configs.items() if "split_overhead_s" in c] == split
    [line] = [line for line in run.stdout.splitlines()
              if line.startswith("split-step overhead")]
    assert line.count(" ms") == len(split)
    for name in split:
        assert re.search(r"(: |ms, )%s -?\d+\.\d ms" % re.escape(name), line), name
    for c in configs.values():
        assert c["speedup_over_fastest_alone"] == pytest.approx(min(alone) / c["step_s"])
    assert "planned: efficiency" in run.stdout and "hmp / plain TF" in run.stdout
    assert "the step's parts" in run.stdout
    assert "auto: efficiency" in run.stdout and result["goals"]["auto"]["baseline"] == "data even"
    check = result["cost_model"]
    profiled = [s["flops_per_s"] for s in result["profiled_speeds"]]
    assert check["alone_by_ranking"]["rate"] == profiled.index(max(profiled))
    # the timed configuration of each candidate: auto's own choice is "auto"; a worker
    # alone the one its ranking takes; the batch split equals "data" only when no device
    # has a per-step overhead
    auto_mesh = configs["auto"]["layout"].split()[0]   # "batch:2 batch=[3, 1]"
    timed = {"model:2": "per layer", "batch:2": "data"}
    for r in check["candidates"]:
        if r["mesh"] == "batch:1":
            task = check["alone_by_ranking"]["alone" if r["ranking"] == "alone" else "rate"]
            assert r["configuration"] in ("worker %d alone" % task, "auto"), r
        else:
            assert r["configuration"] == ("auto" if r["mesh"] == auto_mesh else timed[r["mesh"]])
    for r in check["candidates"]:
        assert r["measured_s"] == configs[r["configuration"]]["step_s"]
        assert r["error"] == pytest.approx(r["predicted_s"] / r["measured_s"] - 1)
    assert "same ranking: " in run.stdout
    assert [r["configuration"] for r in check["splits"]] == ["planned", "per layer", "data"]
    for r in check["splits"]:
        assert r["measured_s"] == configs[r["configuration"]]["step_s"]
        assert r["error"] == pytest.approx(r["predicted_s"] / r["measured_s"] - 1)
    # the per-layer plan is auto's model:2 candidate: the same prediction
    assert [r["predicted_s"] for r in check["candidates"] if r["mesh"] == "model:2"] == [
        r["predicted_s"] for r in check["splits"] if r["configuration"] == "per layer"]
    assert "per layer: efficiency" in run.stdout
    link = result["link"]   # measured idle and while both workers train
    assert link["bandwidth_bytes_per_s"] > 0 and link["loaded"]["bandwidth_bytes_per_s"] > 0
    assert "link: %.3g us per hand-over" % (1e6 * link["latency_s"]) in run.stdout


def test_a_bad_flag_is_one_line_and_exit_code_2(runs):
    run, out = runs["bad_flag"]
    assert run.returncode == 2
    assert run.stderr.strip().splitlines()[-1] == (
        "bench_hetero: error: --models=cnn2d,resnet: choose from "
        "cnn2d,cnn3d,hybrid,hybridsn,spectral,ssrn")
    assert not out.exists()


def test_fixed_splits_are_pairs_adding_up_to_the_batch():
    assert bench.parse_fixed_splits(["20:12", "31:1"], 32) == [(20, 12), (31, 1)]
    assert bench.parse_fixed_splits([], 32) == []
    for bad in (["20:11"], ["32:0"], ["a:b"], ["20"], ["16:16", "-1:33"]):
        with pytest.raises(bench.cli.UsageError, match="^--fixed_splits=%s: give A:B pairs of "
                           "whole numbers above 0 adding up to --batch_size=32, e.g. 22:10$"
                           % ",".join(bad)):
            bench.parse_fixed_splits(bad, 32)


def test_workers_flag_gives_cpu_sets_and_threads():
    assert bench.parse_workers("0-7:8,8-9:2") == [(list(range(8)), 8), ([8, 9], 2)]
    assert bench.parse_workers("3:1,0-1:2") == [([3], 1), ([0, 1], 2)]
    assert bench.parse_workers("") is None
    for bad in ("0-7:8", "0-7,8-9", "7-0:2,1:1", "0-1:0,2:1", "a:1,1:1", "0:1,1:1,2:1"):
        with pytest.raises(bench.cli.UsageError, match="--workers=%s: " % bad):
            bench.parse_workers(bad)
