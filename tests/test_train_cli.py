"""``python -m hmp.train`` end to end, its errors, resume and kill/resume."""

import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

TINY = ["--model=cnn2d", "--width=4", "--patch_size=5", "--batch_size=64",
        "--train_fraction=0.05", "--devices=/cpu:0,/cpu:1", "--speeds=2,1",
        "--mesh=model:2"]


THREE = "--devices=/cpu:0,/cpu:1,/cpu:2"


def train(*args, model_dir=None, timeout=300, env=None):
    command = [sys.executable, "-m", "hmp.train", *args]
    if model_dir is not None:
        command.append("--model_dir=%s" % model_dir)
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                          env=None if env is None else {**os.environ, **env})


def test_trains_end_to_end_and_writes_everything(tiny_run):
    run, tmp_path = tiny_run   # conftest.py: TINY for 2 epochs
    assert run.returncode == 0, run.stderr[-2000:]
    assert "epoch 2/2" in run.stdout and "overall accuracy (OA)" in run.stdout
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["flags"]["model"] == "cnn2d"
    assert results["plan"]["splits"]["filters1"] == [5, 3]   # 8 filters at 2:1 = 5.3, 2.7
    assert [h["epoch"] for h in results["history"]] == [0, 1]
    assert 0.3 < results["test"]["overall_accuracy"] <= 1.0
    assert len(results["test"]["per_class_accuracy"]) == 10
    for name in ("classification_map.png", "confusion_matrix.png", "checkpoint"):
        assert (tmp_path / name).exists(), name
    assert any(p.name.startswith("events.out.tfevents") for p in tmp_path.iterdir())


BAD_FLAGS = {
    "--model=nope": "--model=nope: model 'nope' is not known; choose one of cnn2d, cnn3d",
    "--model=no.such.module": "--model=no.such.module: model module 'no.such.module' cannot",
    "--dataset=nope": "--dataset=nope",
    "--dataset=indian_pines --data_dir=/nonexistent": "Indian_pines_corrected.mat",
    "--speeds=1,x": "--speeds='1,x': give auto, measure or one number per device",
    THREE + " --speeds=1,2": "--speeds: 2 speeds for 3 devices",
    THREE + " --speeds=1,0,1": "--speeds=1,0,1: every speed must be a positive",
    THREE + " --mesh=model:5 --speeds=1,1,1": "mesh 'model:5' has 5 positions but 3 devices",
    "--mesh=foo": "--mesh=foo: use model:N",
    "--patch_size=4": "--patch_size=4: must be odd",
    THREE + " --batch_size=2 --mesh=batch:3 --speeds=1,1,1": "2 samples cannot give 3 devices",
    "--devices=/gpu:7": "--devices=/gpu:7: /gpu:7 is not a device of this machine, which has",
    "--devices=/cpu:0,/cpu:0": "--devices=/cpu:0,/cpu:0: a device is named twice",
    "--model_dir=/proc/x": "--model_dir=/proc/x: not writable",
    "--epochs=abc": "--epochs=abc",
    "--optimizer=nope": "--optimizer=nope: choose one of",
    "--rebalance=always": "--rebalance=always: choose off or epoch",
    "--split=nope": "--split=nope: choose one of random, disjoint",
    "--train_fraction=1.5": "--train_fraction=1.5: must lie strictly between 0 and 1",
}


@pytest.fixture(scope="module")
def bad_flag_runs(tmp_path_factory):
    """{flags: (exit code, stderr)} of every BAD_FLAGS run, four at a time side by side
    (each spends most of its time importing TensorFlow), in a folder of their own."""
    folder = tmp_path_factory.mktemp("bad_flags")
    results, pending = {}, sorted(BAD_FLAGS)
    while pending:
        started = {flags: subprocess.Popen(
            [sys.executable, "-m", "hmp.train", *flags.split()], cwd=folder,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            for flags in pending[:4]}
        pending = pending[4:]
        for flags, process in started.items():
            _, stderr = process.communicate(timeout=300)
            results[flags] = (process.returncode, stderr)
    return results


@pytest.mark.parametrize("flags", sorted(BAD_FLAGS))
def test_bad_flag_gives_one_line_error(flags, bad_flag_runs):
    returncode, stderr = bad_flag_runs[flags]
    assert returncode == 2
    lines = [l for l in stderr.splitlines() if l.startswith("hmp.train: error:")]
    assert len(lines) == 1 and BAD_FLAGS[flags] in lines[0], stderr[-2000:]
    assert "Traceback" not in stderr


def test_resume_without_checkpoint_is_refused(tmp_path):
    run = train(*TINY, "--resume", model_dir=tmp_path)
    assert run.returncode == 2
    assert "no checkpoint in %s to resume from" % tmp_path in run.stderr


def test_plan_for_another_model_is_refused(tmp_path):
    plan = tmp_path / "plan.json"
    subprocess.run([sys.executable, "scripts/plan_layout.py", "--model=cnn3d",
                    "--speeds=1,1", "--devices=/cpu:0,/cpu:1", "--mesh=model:2",
                    "--out=%s" % plan], check=True, capture_output=True,
                   cwd=os.path.dirname(os.path.dirname(__file__)))
    run = train(*TINY, "--plan=%s" % plan, model_dir=tmp_path / "run")
    assert run.returncode == 2
    assert "--plan=%s" % plan in run.stderr and "model" in run.stderr


def test_nan_loss_stops_with_message_and_keeps_checkpoint(tmp_path):
    run = train(*TINY, "--optimizer=sgd", "--learning_rate=1e30", "--epochs=1",
                model_dir=tmp_path)
    assert run.returncode == 1
    assert "loss became nan" in run.stderr.lower() and "Traceback" not in run.stderr
    assert (tmp_path / "checkpoint").exists()
    resumed = train(*TINY, "--resume", "--epochs=1", "--optimizer=sgd",
                    "--learning_rate=1e-3", model_dir=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    other_optimizer = train(*TINY, "--resume", "--epochs=2", model_dir=tmp_path)
    assert other_optimizer.returncode == 2
    assert "written by another model or optimizer" in other_optimizer.stderr


def _losses(model_dir):
    return [h["loss"] for h in json.loads((model_dir / "results.json").read_text())["history"]]


def test_killed_run_resumes_from_last_checkpoint_with_same_result(tmp_path):
    """SIGKILL mid-epoch, resume, and end exactly where an uninterrupted run ends.

    On the default devices: this CPU-only machine's one, planned without profiling.
    """
    flags = [*TINY_AUTO, "--epochs=3", "--checkpoint_every=3"]
    straight = train(*flags, model_dir=tmp_path / "straight",
                     env={"HMP_CACHE_DIR": str(tmp_path / "cache")})
    assert straight.returncode == 0, straight.stderr[-2000:]
    _check_one_default_device_without_profiling(straight, tmp_path / "straight",
                                                tmp_path / "cache")

    killed_dir = tmp_path / "killed"
    process = subprocess.Popen([sys.executable, "-m", "hmp.train", *flags,
                                "--model_dir=%s" % killed_dir],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.time() + 240
    while time.time() < deadline and not list(killed_dir.glob("ckpt-6.index")):
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert list(killed_dir.glob("ckpt-6.index")), "no checkpoint before the kill"

    resumed = train(*flags, "--resume", model_dir=killed_dir)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resumed from" in resumed.stdout
    straight_results = json.loads((tmp_path / "straight" / "results.json").read_text())
    resumed_results = json.loads((killed_dir / "results.json").read_text())
    assert resumed_results["test"]["overall_accuracy"] == pytest.approx(
        straight_results["test"]["overall_accuracy"], abs=1e-9)
    assert _losses(killed_dir)[-1] == pytest.approx(_losses(tmp_path / "straight")[-1],
                                                    rel=1e-5)


def test_readme_custom_model_trains(tmp_path):
    """The README's example model, as a user would use it: --model=<module path>."""
    readme = (pathlib.Path(__file__).parents[1] / "README.md").read_text()
    block = readme.split("<!-- example:custom-model -->")[1].split("```python")[1]
    package = tmp_path / "mymodels"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "small.py").write_text(block.split("```")[0])
    run = subprocess.run(
        [sys.executable, "-m", "hmp.train", *TINY, "--model=mymodels.small", "--epochs=1",
         "--model_dir=%s" % (tmp_path / "run")],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert run.returncode == 0, run.stderr[-2000:]
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["plan"]["splits"] == {"filters1": [5, 3]}   # --width=4: 8 filters at 2:1


def test_default_devices_are_the_real_ones(monkeypatch):
    import tensorflow as tf
    from hmp.devices import default_devices
    if not tf.config.list_physical_devices("GPU"):   # this CPU-only machine
        assert default_devices() == ["/cpu:0"]
    monkeypatch.setattr(tf.config, "list_physical_devices",
                        lambda kind: ["gpu a", "gpu b"] if kind == "GPU" else [])
    assert default_devices() == ["/cpu:0", "/gpu:0", "/gpu:1"]


def test_virtual_cpus_are_the_highest_local_cpu_named():
    from hmp.devices import virtual_cpus
    assert virtual_cpus(["/cpu:0", "/gpu:0", "/cpu:3"]) == 4
    assert virtual_cpus(["/job:localhost/replica:0/task:0/device:CPU:1"]) == 2
    assert virtual_cpus(["/gpu:0", "/job:worker/task:1/device:CPU:5"]) == 0


TINY_AUTO = ["--model=cnn2d", "--width=4", "--patch_size=5", "--batch_size=64",
             "--train_fraction=0.05", "--epochs=1"]


def _check_one_default_device_without_profiling(run, model_dir, cache):
    import tensorflow as tf
    if tf.config.list_physical_devices("GPU"):
        return   # the default devices include GPUs here
    assert not [line for line in run.stdout.splitlines()
                if line.startswith(("profiling", "speeds:", "  link:"))]
    assert "1 device: mesh batch:1" in run.stdout
    assert "Why: one device (/cpu:0): the one-device layout, no profiling needed" in run.stdout
    plan = json.loads((model_dir / "results.json").read_text())["plan"]
    assert plan["devices"] == ["/cpu:0"] and plan["splits"] == {"batch": [64]}
    assert not (model_dir / "speeds.json").exists() and not cache.exists()


def test_auto_speeds_measure_speeds_and_link_once_then_reuse_them(tmp_path):
    cache = {"HMP_CACHE_DIR": str(tmp_path / "cache")}
    flags = [*TINY_AUTO, "--devices=/cpu:0,/cpu:1"]
    first = train(*flags, model_dir=tmp_path / "a", env=cache)
    assert first.returncode == 0, first.stderr[-2000:]
    assert "profiling /cpu:1 (2/2)" in first.stdout
    assert "profiling the link between /cpu:0 and /cpu:1" in first.stdout
    assert "  link: " in first.stdout and "speeds: reusing" not in first.stdout
    plan = json.loads((tmp_path / "a" / "results.json").read_text())["plan"]
    assert "communication not priced" not in plan["reason"]
    assert len(plan["devices"]) + len(plan["left_out"]) == 2
    assert {c["devices"] for c in plan["candidates"]} == {1, 2}
    for path in (tmp_path / "a" / "speeds.json", tmp_path / "cache" / "speeds.json"):
        (entry,) = json.loads(path.read_text())["entries"]
        assert entry["key"]["devices"] == ["/cpu:0", "/cpu:1"] and entry["link"]

    second = train(*flags, model_dir=tmp_path / "b", env=cache)
    assert second.returncode == 0, second.stderr[-2000:]
    assert not [line for line in second.stdout.splitlines() if line.startswith("profiling")]
    assert ("speeds: reusing the measurement of %s from %s" % (
        entry["measured_at"], tmp_path / "cache" / "speeds.json")) in second.stdout
    assert json.loads((tmp_path / "b" / "results.json").read_text())["plan"]["speeds"] == [
        s["flops_per_s"] for s in entry["speeds"] if s["device"] in plan["devices"]]


def test_relative_speeds_say_communication_is_not_priced(tmp_path):
    run = train(*TINY_AUTO, "--devices=/cpu:0,/cpu:1", "--speeds=2,1", model_dir=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    assert ("communication not priced: --speeds=2,1 gives the speeds, so no link was "
            "measured (--speeds=auto measures both)") in run.stdout
    assert not [line for line in run.stdout.splitlines() if line.startswith("profiling")]


def test_a_plan_on_virtual_cpus_runs_without_naming_them(tmp_path):
    """--plan brings its own devices: the default --devices (/cpu:0) must not hide /cpu:1."""
    from hmp.graph import ModelConfig
    from hmp.planning import plan_layout
    from hmp.planning.from_graph import model_spec
    spec = model_spec(ModelConfig("cnn2d", 5, 100, 10, 4))   # TINY_AUTO on the synthetic scene
    plan_layout(spec, ["/cpu:0", "/cpu:1"], [2, 1], 64, "model:2").to_json(tmp_path / "p.json")
    run = train(*TINY_AUTO, "--plan=%s" % (tmp_path / "p.json"), model_dir=tmp_path / "run")
    assert run.returncode == 0, run.stderr[-2000:]
    plan = json.loads((tmp_path / "run" / "results.json").read_text())["plan"]
    assert plan["devices"] == ["/cpu:0", "/cpu:1"] and plan["splits"]["filters1"] == [5, 3]
