"""``python -m hmp.selfcheck`` on this machine (with no GPU: /cpu:0 and a virtual /cpu:1),
and how its checks are run and reported (hmp.checklist)."""

import re

import pytest

from cli_batch import run_batch
from hmp.checklist import Check, report, run_checks
from hmp.graph.from_graph import model_spec
from hmp.measure.devices import default_devices
from hmp.planning import plan_layout
from hmp.run.settings import DEFAULT
from models import model_config

CHECKS = ("devices", "split", "float32", "plan", "train", "repeat")


@pytest.fixture(scope="module")
def runs():
    """(the self-check with its default devices, one with a single device, one with a
    GPU the machine lacks), in one interpreter (tests/cli_batch.py)."""
    gpus = len(default_devices()) - 1
    return run_batch("hmp.selfcheck", [{"args": []}, {"args": ["--devices=/cpu:0"]},
                                       {"args": ["--devices=/cpu:0,/gpu:%d" % gpus]}])


def test_every_check_passes_on_this_machine(runs):
    run = runs[0]
    assert run.returncode == 0, run.stdout + run.stderr[-3000:]
    devices = default_devices() if len(default_devices()) > 1 else ["/cpu:0", "/cpu:1"]
    lines = run.stdout.splitlines()
    assert lines[0] == "hmp self-check on %s" % ", ".join(devices)
    verdicts = [re.match(r"^(\w+) +(PASS|FAIL|SKIP)  ", line) for line in lines]
    assert [m.groups() for m in verdicts if m] == [(name, "PASS") for name in CHECKS]
    assert lines[-1] == "6 of 6 checks passed"
    assert "selfcheck: split ..." in run.stderr   # progress: stderr, not the report


def test_the_split_check_is_exact_mode_and_training_is_the_default(runs):
    """The split check compares with sync statistics (where a split equals one device);
    plan, train and repeat run hmp.train's default batch norm, the path users train on."""
    text = runs[0].stdout
    assert re.search(r"^split +PASS  3 SGD steps of cnn2d \(width \d+, batch \d+, sync batch "
                     r"norm\) on uneven splits", text, re.M), text
    assert re.search(r"^train +PASS  10 Adam steps on the plan, %s batch norm, one batch: "
                     r"loss " % DEFAULT.model.batch_norm, text, re.M), text


def test_the_split_check_compares_uneven_splits_with_one_device(runs):
    """The report names the splits the planner gives speeds 2:1 (uneven), and figures
    within the engine's 1e-5."""
    devices = default_devices() if len(default_devices()) > 1 else ["/cpu:0", "/cpu:1"]
    spec = model_spec(model_config("cnn2d", 5, 8, 4, width=max(4, len(devices))))
    batch = 8 * (len(devices) + 1)
    speeds = [2.0 ** (len(devices) - 1 - i) for i in range(len(devices))]
    for mesh in ("model:%d" % len(devices), "batch:%d" % len(devices)):
        splits = plan_layout(spec, devices, speeds, batch, mesh).splits
        assert all(len(set(sizes)) > 1 for sizes in splits.values())
        named = "%s %s: losses within " % (mesh, " ".join(
            "%s %s" % (dim, sizes) for dim, sizes in sorted(splits.items())))
        (line,) = [line for line in runs[0].stdout.splitlines() if named in line]
        errors = re.search(r"losses within (\S+), weights within (\S+) of the largest", line)
        assert all(float(e) <= 1e-5 for e in errors.groups()), line


@pytest.mark.parametrize("index, message", [
    (1, "--devices=/cpu:0: give at least 2 TensorFlow devices, e.g. /cpu:0,/cpu:1"),
    (2, "is not a device of this machine"),
])
def test_bad_devices_are_one_line(runs, index, message):
    run = runs[index]
    assert run.returncode == 2
    assert len(run.stderr.splitlines()) == 1 and message in run.stderr, run.stderr
    assert run.stderr.startswith("hmp.selfcheck: error: --devices=") and not run.stdout


def test_a_failed_check_is_named_and_the_others_still_run():
    made = []

    def boom():
        raise ValueError("no room\nsecond line")

    results = run_checks([
        Check("first", lambda: (True, ["fine", "detail"])),
        Check("broken", boom),
        Check("builds_on_it", lambda: made.append(1), needs=("broken",)),
        Check("low", lambda: (False, ["1 of 2 below"])),
        Check("last", lambda: (True, ["fine too"]))])
    assert made == []   # skipped: what it builds on failed
    assert results == [("first", "PASS", ["fine", "detail"]),
                       ("broken", "FAIL", ["ValueError: no room"]),
                       ("builds_on_it", "SKIP", ["needs broken, which did not pass"]),
                       ("low", "FAIL", ["1 of 2 below"]),
                       ("last", "PASS", ["fine too"])]
    text, passed = report("title", results)
    assert not passed
    assert text.splitlines() == [
        "title",
        "first         PASS  fine",
        "                    detail",
        "broken        FAIL  ValueError: no room",
        "builds_on_it  SKIP  needs broken, which did not pass",
        "low           FAIL  1 of 2 below",
        "last          PASS  fine too",
        "3 of 5 checks did not pass: broken, builds_on_it, low"]


def test_checks_that_all_pass_say_so():
    text, passed = report("t", run_checks([Check("a", lambda: (True, ["x"]))]))
    assert passed and text.splitlines() == ["t", "a  PASS  x", "1 of 1 checks passed"]
