"""scripts/plan_layout.py run as a user would: plan JSON, a bad flag, measured speeds."""

import json
import re
import subprocess
import sys

import pytest

from cli_batch import HUNG_S, Run, run_batch_with_out
from hmp.errors import InvalidInput
from hmp.graph.from_graph import model_spec
from hmp.measure.channel_blocks import CPU_FLAGS_FILE, lanes_of
from hmp.planning import Plan, plan_layout
from models import model_config
from script_modules import SCRIPTS

SCRIPT = str(SCRIPTS / "plan_layout.py")
TINY = ["--model=cnn2d", "--width=4", "--patch_size=5", "--bands=8", "--classes=4",
        "--batch_size=12"]
MODULE_MODEL = ["--model=mymodels.small", *TINY[1:]]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, readme_models):
    """{name: (Run, its --out file)}: the runs that write a plan, in one interpreter
    (tests/cli_batch.py), and "bad_flag", a process of its own (its whole stderr,
    TensorFlow's start-up included, is under test) started beside them."""
    folder = tmp_path_factory.mktemp("plans")
    platform = folder / "platform.json"
    platform.write_text(json.dumps({   # a link no split can afford; absurd speed figures
        "devices": [{"name": d, "flops_per_s": 1e15, "half_rate_flops": 1e12}
                    for d in ("/cpu:0", "/cpu:2")],
        "link": {"bandwidth_bytes_per_s": 1e9, "latency_s": 10.0}}))
    for name, devices, link in (   # platform files refused
            ("twice", [("/cpu:0", 1e10), ("/cpu:0", 2e10)], None),
            ("no_device", [("gpu0", 1e10), ("/cpu:1", 2e10)], None),
            ("relative_link", [("/cpu:0", 1), ("/cpu:1", 2)],
             {"bandwidth_bytes_per_s": 1e9, "latency_s": 1e-4})):
        (folder / f"{name}.json").write_text(json.dumps({
            "devices": [{"name": d, "flops_per_s": f} for d, f in devices],
            **({"link": link} if link else {})}))
    (folder / "out_folder.json").mkdir()   # --out of "out_folder": a folder
    (folder / "a_file").write_text("mine")   # --out of "a_file/p": in a file
    bad_out = folder / "bad_flag.json"
    bad_flag = subprocess.Popen([sys.executable, SCRIPT, *TINY, "--mesh=model:x",
                                 f"--out={bad_out}"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    plans = run_batch_with_out(
        "scripts/plan_layout.py",
        {"given": [*TINY, "--speeds=3,2,1", "--mesh=model:3"],
         # a batch of 3: below 4, no second, smaller batch is timed for the per-step
         # overhead (platform_auto's batch of 12 times it), so two graphs fewer to build
         # and still the speeds, the link and the barrier the plan is made from (sync
         # statistics: a batch split of local ones gives each replica 8 samples or more)
         # the model is incidental to the measuring in these two: spectral's graphs are a
         # third of cnn2d's
         "auto": [*TINY, "--model=spectral", "--batch_size=3", "--speeds=auto",
                  "--devices=/cpu:0,/cpu:2", "--warmup=1", "--repeats=2", "--mesh=batch:2",
                  "--batch_norm=sync"],
         "platform_auto": [*TINY, "--model=spectral", "--speeds=auto",
                           f"--platform={platform}", "--warmup=1", "--repeats=2",
                           "--mesh=auto"],
         "bfloat16": [*TINY, "--speeds=3,2,1", "--mesh=model:3", "--precision=mixed_bfloat16",
                      "--batch_norm=local"],
         "caps": [*TINY, "--speeds=3,2,1", "--mesh=model:3",
                  "--memory_caps=.5GB,512MiB,1e9"],
         "bad_caps": [*TINY, "--speeds=3,2,1", "--memory_caps=1.2.3,1GB,1GB"],
         "even_patch": [*TINY, "--patch_size=4", "--speeds=1,1", "--devices=/cpu:0,/cpu:1"],
         # every run in conftest's readme_models: the user's model in the current folder
         "module_model": [*MODULE_MODEL, "--speeds=2,1", "--devices=/cpu:0,/cpu:1",
                          "--mesh=model:2"],
         **{f"platform_{name}": [*TINY, f"--platform={folder / name}.json"]
            for name in ("twice", "no_device", "relative_link")},
         # checked against this machine before a graph is built
         "absent_gpu": [*TINY, "--speeds=auto", "--devices=/gpu:0,/cpu:0"],
         "unknown_model": [*TINY[1:], "--model=cnn9", "--speeds=1,1,1"],
         "unknown_module": [*TINY[1:], "--model=mymodels.nosuch", "--speeds=1,1,1"],
         # --speeds=auto: refused before measuring
         "out_folder": [*TINY, "--speeds=auto", "--devices=/cpu:0,/cpu:2"],
         "a_file/p": [*TINY, "--speeds=auto", "--devices=/cpu:0,/cpu:2"]},
        folder, cwd=readme_models)
    stdout, stderr = bad_flag.communicate(timeout=HUNG_S)
    return {**plans, "bad_flag": (Run(bad_flag.returncode, stdout, stderr), bad_out)}


def test_given_speeds_give_a_plan_file(runs):
    run, out = runs["given"]
    assert run.returncode == 0, run.stderr
    plan = json.loads(out.read_text())
    assert plan["model"] == "cnn2d(width=4, input=5x5x8, classes=4, batch_norm=local)"   # hmp.train's
    assert plan["mesh"] == "model:3" and plan["devices"] == ["/cpu:0", "/cpu:1", "/cpu:2"]
    # 8 filters at 3:2:1 -> 4, 2.67, 1.33 -> [4, 3, 1]; 16 hidden -> 8, 5.33, 2.67 -> [8, 5, 3].
    assert plan["splits"] == {"filters1": [4, 3, 1], "filters2": [4, 3, 1], "hidden": [8, 5, 3]}
    assert plan["speeds"] == [3, 2, 1] and plan["time_unit"] == "relative"
    assert plan["batch_size"] == 12
    assert f"Plan for model '{plan['model']}'" in run.stdout and f"wrote {out}" in run.stdout
    Plan.from_json(out, model_spec=model_spec(model_config("cnn2d", 5, 8, 4, width=4,
                                                           batch_norm="local")))


def test_the_plan_is_priced_at_the_runs_precision_and_batch_norm(runs):
    """16-bit activations: the plan's memory is the cost model's for that model, below
    float32's; local batch norm: no barrier of a norm layer in the spec it was made for."""
    plans = {}
    for name in ("given", "bfloat16"):
        run, out = runs[name]
        assert run.returncode == 0, run.stderr
        plans[name] = json.loads(out.read_text())
    spec = model_spec(model_config("cnn2d", 5, 8, 4, width=4, batch_norm="local",
                                   precision="mixed_bfloat16"))
    assert spec.activation_bytes == 2 and spec.norm_layers == 0
    # the plan is for that model only: float32 or sync batch norm refuse it
    assert plans["bfloat16"]["model"] == ("cnn2d(width=4, input=5x5x8, classes=4, "
                                          "precision=mixed_bfloat16, batch_norm=local)")
    Plan.from_json(runs["bfloat16"][1], model_spec=spec)
    for other in ({"precision": "float32"}, {"batch_norm": "sync"}):
        config = model_config("cnn2d", 5, 8, 4, width=4, **{
            "batch_norm": "local", "precision": "mixed_bfloat16", **other})
        with pytest.raises(InvalidInput, match="is for model 'cnn2d.*, not the expected"):
            Plan.from_json(runs["bfloat16"][1], model_spec=model_spec(config))
    expected = plan_layout(spec, ["/cpu:0", "/cpu:1", "/cpu:2"], [3, 2, 1], 12, "model:3")
    assert plans["bfloat16"]["prediction"]["memory"] == pytest.approx(
        expected.prediction.memory)
    assert all(b < f for b, f in zip(plans["bfloat16"]["prediction"]["memory"],
                                     plans["given"]["prediction"]["memory"]))


def test_a_bad_flag_is_one_line_and_exit_code_2(runs):
    """A process of its own: its whole stderr, TensorFlow's start-up included, is one line."""
    run, out = runs["bad_flag"]
    assert run.returncode == 2
    assert run.stderr.splitlines() == [run.stderr.strip()]
    assert run.stderr.startswith("plan_layout: error: --mesh=model:x: bad mesh 'model:x'")
    assert "allowed" in run.stderr and not out.exists()


def test_a_model_module_path_is_planned_as_hmp_train_would(runs, readme_models, monkeypatch):
    """``--model`` takes hmp.train's module paths (the README's example model); the plan
    is the planner's for that model, and hmp.train would accept it."""
    monkeypatch.syspath_prepend(str(readme_models))
    run, out = runs["module_model"]
    assert run.returncode == 0, run.stderr
    config = model_config("mymodels.small", 5, 8, 4, width=4, batch_norm="local")
    expected = plan_layout(model_spec(config), ["/cpu:0", "/cpu:1"], [2, 1], 12, "model:2")
    plan = Plan.from_json(out, model_spec=model_spec(config))
    assert plan.model == "mymodels.small(width=4, input=5x5x8, classes=4, batch_norm=local)"
    assert plan.splits == expected.splits == {"filters1": [5, 3]}


REFUSED = {   # run: the start of its one line ("{folder}": the runs' folder)
    "unknown_model": "--model=cnn9: model 'cnn9' is not known; choose one of cnn2d, ",
    "unknown_module": "--model=mymodels.nosuch: model module 'mymodels.nosuch' cannot be "
                      "imported: No module named 'mymodels.nosuch'",
    # a platform file's devices are refused as --devices's are, naming --platform (not the
    # defaults of the flags it replaces)
    "platform_twice": "--platform={folder}/twice.json: /cpu:0 named twice",
    "platform_no_device": "--platform={folder}/no_device.json: 'gpu0' is not a TensorFlow "
                          "device string",
    "platform_relative_link": "--platform={folder}/relative_link.json, --batch_size=12: "
                              "speeds [1.0, 2.0] look relative (all below 1e+06 FLOP/s)",
    # devices to measure are looked for on this machine before any graph is built (not
    # TensorFlow's placement error)
    "absent_gpu": "--devices=/gpu:0,/cpu:0: /gpu:0 is not a device of this machine, which "
                  "has 0 GPUs",
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_refused_model_platform_or_device_is_one_line_naming_its_flag(runs, name):
    run, out = runs[name]
    message = REFUSED[name].format(folder=runs["given"][1].parent)
    assert run.returncode == 2 and not out.exists()
    assert run.stderr.startswith("plan_layout: error: " + message), run.stderr
    assert len(run.stderr.strip().splitlines()) == 1, run.stderr


def test_an_even_patch_size_is_refused_before_planning(runs):
    run, out = runs["even_patch"]
    assert run.returncode == 2 and not out.exists()
    assert run.stderr.strip() == ("plan_layout: error: --patch_size=4: patch_size must be an "
                                  "odd positive integer (e.g. 5, 7, 9), got 4")


def test_an_out_that_cannot_be_written_is_refused_before_measuring(runs):
    """--out a folder, or a file's path in a file: one line naming --out and what it is,
    before any measuring, and the file there left as it was."""
    folder = runs["out_folder"][1]
    a_file = runs["a_file/p"][1].parent
    for name, reason in (("out_folder", f"{folder} is a folder; give a file's path"),
                         ("a_file/p", f"{a_file} is not a folder")):
        run, out = runs[name]
        assert (run.returncode, run.stdout, run.stderr) == (
            2, "", f"plan_layout: error: --out={out}: {reason}\n"), name
    assert not any(folder.iterdir()) and a_file.read_text() == "mine"


def test_auto_speeds_are_measured(runs):
    run, out = runs["auto"]
    assert run.returncode == 0, run.stderr
    plan = json.loads(out.read_text())
    assert plan["devices"] == ["/cpu:0", "/cpu:2"] and plan["time_unit"] == "s"
    _assert_measured(plan["devices"], run.stdout)
    assert sum(plan["splits"]["batch"]) == plan["batch_size"] == 3
    assert "profiling /cpu:2 (2/2)" in run.stderr and "Measured speeds" in run.stdout
    assert "profiling the link between /cpu:0 and /cpu:2" in run.stderr
    # each device's channel block, this host's vector width, where it has one
    lanes = lanes_of(open(CPU_FLAGS_FILE).read())
    assert run.stdout.count("  channel block %d" % lanes) == (2 if lanes > 1 else 0)
    assert plan.get("channel_blocks", []) == ([lanes] * 2 if lanes > 1 else [])


def _assert_measured(devices, stdout):
    """Each of ``devices`` was profiled and has its line of measured figures (what they
    are rests on this machine's speed: tests/measure/test_speeds.py checks that measured
    figures replace a platform's)."""
    assert "Measured speeds" in stdout, stdout
    assert sorted(re.findall(r"^  (\S+)  .* FLOP/s ", stdout, re.MULTILINE)) == sorted(
        devices), stdout


def test_auto_speeds_replace_the_platforms_and_keep_its_link(runs):
    run, out = runs["platform_auto"]
    assert run.returncode == 0, run.stderr
    plan = json.loads(out.read_text())
    assert plan["time_unit"] == "s"
    # both devices measured (their figures replace the platform's: with_given_figures)
    _assert_measured(["/cpu:0", "/cpu:2"], run.stdout)
    # each device's profiling line gives its own measured op-size figures
    assert len(re.findall(r"half rate at [0-9.e+-]+ MFLOP per sample and op|"
                          r"no op-size effect measured", run.stdout)) == 2, run.stdout
    # the platform's link (10 s a hand-over) leaves one device alone; it is not measured
    assert plan["mesh"] == "batch:1" and "profiling the link" not in run.stderr
    assert sorted(plan["devices"] + [d["device"] for d in plan["left_out"]]) == [
        "/cpu:0", "/cpu:2"]



def test_memory_caps_are_read_with_their_units(runs):
    run, out = runs["caps"]
    assert run.returncode == 0, run.stderr
    assert json.loads(out.read_text())["memory_caps"] == [5e8, 512 * 2 ** 20, 1e9]


def test_a_malformed_byte_count_is_one_line(runs):
    run, out = runs["bad_caps"]
    assert run.returncode == 2 and not out.exists()
    assert run.stderr.startswith("plan_layout: error: --memory_caps=1.2.3,1GB,1GB: '1.2.3' is "
                                 "not a number of bytes; allowed: 3 sizes")
