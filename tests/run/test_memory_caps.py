"""--memory_caps: read by one function (hmp.measure.devices.parse_memory_caps), and in
hmp.train bounding the plan, or refusing a batch or width that fits no layout in one
line before a run folder is made."""

import functools
import json
import re

import numpy as np
import pytest

from cli_batch import run_batch
from hmp import planning
from hmp.errors import InvalidInput
from hmp.graph.from_graph import model_spec
from hmp.graph.scene_input import cube_bytes
from hmp.measure.devices import parse_memory_caps
from hmp.run.plan_choice import beside_cube, memory_caps, recorded
from hmp.run.settings import Settings
from hmp.formatting import format_bytes
from models import model_config

# cnn2d at width 4 on conftest's small scene (5x5 patches of 100 bands, 10 classes), with
# model_config's batch norm (the plans below are made for it)
TINY = ["--model=cnn2d", "--width=4", "--patch_size=5", "--batch_size=64", "--notta",
        "--batch_norm=sync", "--devices=/cpu:0"]


@pytest.mark.parametrize("text, count, caps", [
    ("2GB,512MiB", 2, [2e9, 512 * 2 ** 20]),
    (" .5gb , 1e9 ", 2, [5e8, 1e9]),
    ("1KiB", 3, [1024.0] * 3),   # one size for all
    ("", 2, None),               # each device's own memory
])
def test_memory_caps_are_bytes_per_device(text, count, caps):
    assert parse_memory_caps(text, count) == caps


@pytest.mark.parametrize("text, count, message", [
    ("1GB,2GB", 3, "2 sizes for 3 devices; allowed: 3 sizes (one per device) or one for all"),
    ("2XB", 1, "'2XB' is not a number of bytes; allowed: one size"),
    ("1.2.3", 1, "'1.2.3' is not a number of bytes"),
    ("0", 1, "'0' is not a finite number of bytes > 0"),
    ("1e999", 2, "'1e999' is not a finite number of bytes > 0"),
])
def test_bad_memory_caps_say_what_is_allowed(text, count, message):
    with pytest.raises(InvalidInput, match="^" + re.escape(message)):
        parse_memory_caps(text, count)


@functools.lru_cache
def need(batch, width=4):
    """Bytes cnn2d at ``width`` needs on one device for ``batch`` samples (the cost model)."""
    spec = model_spec(model_config("cnn2d", 5, 100, 10, width))
    return float(planning.memory_bytes(spec, [batch], np.ones((len(spec.layers), 1)))[0, 0])


# The small scene's cube, padded for 5x5 patches, on every device: 774 kB.
CUBE = cube_bytes((40, 40), 5, 100)


def split(caps=None):
    """The "caps" run's plan as the planner makes it: cnn2d width 4, model:2 at speeds
    2:1, batch 64, within ``caps`` for the model."""
    return planning.plan_layout(model_spec(model_config("cnn2d", 5, 100, 10, 4)),
                                ["/cpu:0", "/cpu:1"], [2, 1], 64, "model:2", caps)


# /cpu:1's memory in the "caps" run: the cube and 96% of what its share of the uncapped
# split needs
CAPPED = int(CUBE + 0.96 * split().prediction.memory[1])


@pytest.fixture(scope="module")
def runs(tmp_path_factory, small_scene):
    """{name: (Run, its folder)} of hmp.train runs in one interpreter (tests/cli_batch.py);
    a run writes to <folder>/run."""
    folders = {name: tmp_path_factory.mktemp(name) for name in (
        "batch", "width", "cube", "caps", "bad_unit", "bad_count", "with_plan", "plan_caps",
        "plan_over", "plan_fits")}
    # a plan made for a device of 500 kB: the cube does not fit the memory it was made for
    plan = planning.plan_layout(model_spec(model_config("cnn2d", 5, 100, 10, 4)), ["/cpu:0"],
                                [1], 64, "batch:1")
    plan.to_json(folders["plan_caps"] / "plan.json")
    written = json.loads((folders["plan_caps"] / "plan.json").read_text())
    (folders["plan_caps"] / "plan.json").write_text(json.dumps({**written,
                                                                "memory_caps": [500e3]}))
    # the same plan for a device that holds its model, or the cube, but not both
    (folders["plan_over"] / "plan.json").write_text(json.dumps({
        **written, "memory_caps": [need(64) + 1]}))
    # ... and for one that holds both
    (folders["plan_fits"] / "plan.json").write_text(json.dumps({
        **written, "memory_caps": [CUBE + need(64) + 1000]}))
    args = {
        # beside the cube (774 kB) 1 sample fits in 1.3 MB, 64 samples do not: the batch
        # is named
        "batch": [*TINY, *small_scene, "--memory_caps=1.3MB"],
        # at width 32 the weights alone (2.43 MB with gradients and slots) do not fit 1 MB
        "width": [*TINY, *small_scene, "--width=32", "--memory_caps=1MB"],
        # not even the scene's cube fits
        "cube": [*TINY, *small_scene, "--memory_caps=500KB"],
        "caps": [*TINY, *small_scene, "--devices=/cpu:0,/cpu:1", "--speeds=2,1",
                 "--mesh=model:2", "--epochs=1", "--memory_caps=2GB,%d" % CAPPED],
        "bad_unit": [*TINY, "--memory_caps=2XB"],
        "bad_count": [*TINY, "--devices=/cpu:0,/cpu:1", "--memory_caps=1GB,1GB,1GB"],
        "with_plan": [*TINY[:-1], "--memory_caps=1GB", "--plan=plan.json"],   # no --devices
        "plan_caps": [*TINY[:-1], *small_scene,
                      "--plan=%s" % (folders["plan_caps"] / "plan.json")],
        "plan_over": [*TINY[:-1], *small_scene,
                      "--plan=%s" % (folders["plan_over"] / "plan.json")],
        "plan_fits": [*TINY[:-1], *small_scene, "--epochs=1",
                      "--plan=%s" % (folders["plan_fits"] / "plan.json")],
    }
    done = run_batch("hmp.train", [
        {"args": [*flags, "--model_dir=%s" % (folders[name] / "run")]}
        for name, flags in args.items()])
    return {name: (run, folders[name]) for name, run in zip(args, done)}


def refused(run, folder):
    """The one line of a run refused before its folder was made."""
    assert run.returncode == 2, run.stderr[-2000:]
    assert len(run.stderr.splitlines()) == 1, run.stderr[-2000:]
    assert not (folder / "run").exists()
    return run.stderr.strip()


def test_a_batch_that_fits_no_memory_is_refused_in_one_line(runs):
    """The memory left for the model is the cap less the scene's cube that every device
    holds beside it: 1.3 MB holds the cube and the model with 1 sample, not with 64 (the
    cube and the model with 64 samples would each fit alone)."""
    assert CUBE + need(1) < 1.3e6 < CUBE + need(64) and max(CUBE, need(64)) < 1.3e6
    line = refused(*runs["batch"])
    assert line.startswith("hmp.train: error: --batch_size=64: the model needs %s on one "
                           "device" % format_bytes(need(64)))
    assert ("for the activations of 64 samples) and fits no layout of --mesh=auto on "
            "/cpu:0 (1.3 MB) beside the scene's cube (%s)" % format_bytes(CUBE)) in line


def test_a_model_whose_weights_fit_no_memory_names_the_width(runs):
    assert CUBE < 1e6 < need(0, width=32)
    line = refused(*runs["width"])
    assert line.startswith("hmp.train: error: --width=32: the model needs %s on one device "
                           "(%s for its weights" % (format_bytes(need(64, width=32)),
                                                    format_bytes(need(0, width=32))))


def test_a_scene_that_fits_no_memory_names_the_caps(runs):
    assert CUBE > 500e3
    line = refused(*runs["cube"])
    assert line.startswith("hmp.train: error: --dataset=")
    assert ("--devices=/cpu:0, --memory_caps=500KB: the scene's padded cube (44 x 44 pixels "
            "x 100 bands, float32) needs %s on every device" % format_bytes(CUBE)) in line


def test_a_scene_that_fits_no_memory_a_plan_was_made_for_names_the_plan(runs):
    line = refused(*runs["plan_caps"])
    assert line.startswith("hmp.train: error: --dataset=")
    assert ("--plan=%s: the scene's padded cube (44 x 44 pixels x 100 bands, float32) "
            "needs %s on every device, more than /cpu:0 has (500 kB)"
            % (runs["plan_caps"][1] / "plan.json", format_bytes(CUBE))) in line


def test_the_caps_less_the_cube_bound_the_plan(runs):
    """/cpu:1's share of the uncapped split does not fit its memory beside the cube: it
    takes fewer filters, within its cap less the cube."""
    run, folder = runs["caps"]
    assert run.returncode == 0, run.stderr[-2000:]
    plan = json.loads((folder / "run" / "results.json").read_text())["plan"]
    assert plan["memory_caps"] == [2e9, CAPPED]   # as given: --plan takes the cube off
    assert plan["splits"]["filters1"][1] < split().splits["filters1"][1]
    assert plan["prediction"]["memory"][1] <= CAPPED - CUBE
    assert plan["splits"] == split([2e9 - CUBE, CAPPED - CUBE]).splits


def test_a_given_plan_runs_within_its_caps_less_the_cube(runs):
    """A --plan file's caps are each device's whole memory: the run (and its re-plans
    under --rebalance, made within the plan's caps) has them less the cube, as a plan
    made by hmp.train has; results.json records them as the file gave them."""
    run, folder = runs["plan_fits"]
    assert run.returncode == 0, run.stderr[-2000:]
    plan = json.loads((folder / "run" / "results.json").read_text())["plan"]
    assert plan["memory_caps"] == [CUBE + need(64) + 1000]


def test_a_recorded_plan_read_back_as_plan_has_the_caps_it_was_made_within(tmp_path):
    """A run records its plan with each device's memory as given (the cube given back,
    ``plan_choice.recorded``): results.json's plan, given as --plan, is taken as a plan
    file of scripts/plan_layout.py, and its caps less the cube are those the run
    planned within, once (not the cube twice): planned again, the same splits."""
    caps = [2e9, CAPPED]
    planned = split(beside_cube(caps, CUBE))   # as hmp.train plans (_check_fits)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(recorded(planned, CUBE)))   # results.json's "plan"
    given = planning.Plan.from_json(path)
    read = memory_caps(Settings.of(plan=str(path)), given.devices, given)   # _check_fits
    assert read == caps and beside_cube(read, CUBE) == planned.memory_caps
    assert split(planned.memory_caps).splits == planned.splits != split().splits


def test_a_plan_whose_model_fits_no_memory_beside_the_cube_is_refused(runs):
    line = refused(*runs["plan_over"])
    assert line.startswith("hmp.train: error: --dataset=")
    assert ("--plan=%s: the plan does not fit: /cpu:0 needs %s for the model beside the "
            "scene's cube (%s), more than its %s"
            % (runs["plan_over"][1] / "plan.json", format_bytes(need(64)),
               format_bytes(CUBE), format_bytes(need(64) + 1))) in line


@pytest.mark.parametrize("name, message", [
    ("bad_unit", "--memory_caps=2XB: '2XB' is not a number of bytes; allowed: one size"),
    ("bad_count", "--memory_caps=1GB,1GB,1GB: 3 sizes for 2 devices; allowed: 2 sizes"),
    ("with_plan", "--memory_caps=1GB: --plan=plan.json gives the memory caps "
                  "(scripts/plan_layout.py --memory_caps); leave --memory_caps out"),
])
def test_bad_caps_are_refused_in_one_line_naming_the_flag(runs, name, message):
    assert refused(*runs[name]).startswith("hmp.train: error: " + message)
