"""``python -m hmp.train`` interrupted, resumed, refused (issue 14), end to end.

The in-process parts (trainer stop, run folder, history, data errors,
progress) are in tests/run/test_run_folder.py.
"""

import json
import shutil
import signal
import subprocess
import sys
import threading

import numpy as np
import pytest
import scipy.io

from cli_batch import HUNG_S, run_batch, wait_for_file

TINY = ["--model=cnn2d", "--width=2", "--patch_size=5", "--batch_size=16", "--pca=8",
        "--devices=/cpu:0", "--speeds=1", "--mesh=model:1"]
EPOCHS = 3
RESUMABLE = ["--model=cnn2d", "--width=4", "--patch_size=5", "--batch_size=64",
             "--train_fraction=0.05", "--epochs=%d" % EPOCHS, "--checkpoint_every=3",
             "--notta"]


def command(*args):
    return [sys.executable, "-m", "hmp.train", *args]


def interrupt_after_first_epoch(signum, *args, process=None):
    """Runs hmp.train, sends ``signum`` once an epoch has ended; returns (rc, stdout, stderr)."""
    process = process or subprocess.Popen(command(*args), stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True)
    out = []
    for line in process.stdout:
        out.append(line)
        if line.startswith("epoch "):
            process.send_signal(signum)
            break
    stdout, stderr = process.communicate(timeout=HUNG_S)
    return process.returncode, "".join(out) + stdout, stderr


def kill_at_checkpoint(process, checkpoint):
    """SIGKILLs ``process`` once ``checkpoint`` exists (or once it has ended)."""
    wait_for_file(checkpoint, lambda: process.poll() is not None)
    process.send_signal(signal.SIGKILL)
    process.wait()


def test_interrupted_and_killed_runs_resume_where_they_stopped(tmp_path, small_scene):
    """SIGINT after an epoch stops with a checkpoint and one line; a run SIGKILLed mid-epoch
    resumes from its last checkpoint and ends exactly where an uninterrupted run ends.

    Every run on the default devices (this CPU-only machine's one, planned without
    profiling) and conftest's small scene. The two signalled runs are processes of
    their own, run side by side (a thread kills one at its checkpoint while the other
    is interrupted); the rest share one interpreter (tests/cli_batch.py).
    """
    interrupted, killed, straight = (tmp_path / name for name in
                                     ("interrupted", "killed", "straight"))
    resumable = [*RESUMABLE, *small_scene]
    killer = threading.Thread(target=kill_at_checkpoint, args=(
        subprocess.Popen(command(*resumable, "--model_dir=%s" % killed),
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
        killed / "ckpt-6.index"))
    killer.start()
    rc, _, stderr = interrupt_after_first_epoch(signal.SIGINT, *resumable,
                                                "--model_dir=%s" % interrupted)
    killer.join()
    assert (killed / "ckpt-6.index").exists(), "no checkpoint before the kill"
    lines = [l for l in stderr.splitlines() if l.startswith("hmp.train: ")]
    assert rc == 130 and len(lines) == 1, stderr[-2000:]
    assert "Traceback" not in stderr
    assert lines[0].startswith("hmp.train: interrupted at epoch ")
    hint = "--flagfile=%s --resume" % (interrupted / "flags.txt")
    assert lines[0].endswith("; continue with " + hint)
    step = int(lines[0].split(" step ")[1].split(";")[0])
    assert (interrupted / ("ckpt-%d.index" % step)).exists()


    cache = {"HMP_CACHE_DIR": str(tmp_path / "cache")}
    moved = tmp_path / "moved"   # the interrupted run, moved: resumed there, one epoch longer
    shutil.copytree(interrupted, moved)
    again, done, finished, resumed, uninterrupted, moved_on = run_batch("hmp.train", [
        {"args": [*resumable, "--model_dir=%s" % interrupted]},
        {"args": hint.split()},   # as the line says
        # finished: it says the epochs it trained, not the fewer asked for now
        {"args": [*resumable, "--model_dir=%s" % interrupted, "--resume",
                  "--epochs=%d" % (EPOCHS - 1)]},
        {"args": [*resumable, "--model_dir=%s" % killed, "--resume"]},
        {"args": [*resumable, "--model_dir=%s" % straight], "env": cache},
        {"args": ["--flagfile=%s" % (moved / "flags.txt"), "--model_dir=%s" % moved,
                  "--resume", "--epochs=%d" % (EPOCHS + 1)]}])
    assert again.returncode == 2 and "--resume" in again.stderr   # no silent start-over

    assert done.returncode == 0, done.stderr[-2000:]
    assert "resumed from %s" % (interrupted / ("ckpt-%d" % step)) in done.stdout
    results = json.loads((interrupted / "results.json").read_text())
    assert [h["epoch"] for h in results["history"]] == list(range(EPOCHS))
    assert [i["start_step"] for i in results["invocations"]] == [0, step]

    assert finished.returncode == 0, finished.stderr[-2000:]
    assert "is finished (%d epochs, step %d)" % (EPOCHS, results["step"]) in finished.stdout
    assert json.loads((interrupted / "results.json").read_text()) == results
    # the moved run went on in its new folder, and its flag file now continues it there
    assert moved_on.returncode == 0, moved_on.stderr[-2000:]
    assert "resumed from %s" % (moved / ("ckpt-%d" % step)) in moved_on.stdout
    assert [h["epoch"] for h in json.loads((moved / "results.json").read_text())[
        "history"]] == list(range(EPOCHS + 1))
    flags = (moved / "flags.txt").read_text().splitlines()
    assert "--model_dir=%s" % moved in flags and "--epochs=%d" % (EPOCHS + 1) in flags
    assert "--resume" not in flags

    assert uninterrupted.returncode == 0, uninterrupted.stderr[-2000:]
    _check_one_default_device_without_profiling(uninterrupted, straight, tmp_path / "cache")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resumed from" in resumed.stdout
    straight_results = json.loads((straight / "results.json").read_text())
    resumed_results = json.loads((killed / "results.json").read_text())
    assert resumed_results["test"]["overall_accuracy"] == pytest.approx(
        straight_results["test"]["overall_accuracy"], abs=1e-9)
    assert _losses(killed)[-1] == pytest.approx(_losses(straight)[-1], rel=1e-5)


def _losses(model_dir):
    return [h["loss"] for h in json.loads((model_dir / "results.json").read_text())["history"]]


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


BAD_MODEL = '''
from hmp import layers
from hmp.compat import import_mesh_tensorflow

mtf = import_mesh_tensorflow()
SPLIT_DIMS = ("filters1",)


def logits(x, classes, width=8):
    h = layers.filter_split_block(x, mtf.Dimension("filters1", 2 * width),
                                  mtf.Dimension("channels1", width))
    h = mtf.reshape(h, mtf.Shape([h.shape.dims[0], mtf.Dimension("wrong", 7)]))
    return layers.dense(h, classes, reduced_dims=h.shape.dims[1:])
'''


def test_input_errors_name_file_and_flag_and_bugs_keep_their_traceback(tmp_path):
    rng = np.random.RandomState(0)
    labels = (np.arange(24 * 20).reshape(24, 20) // 160 + 1).astype(np.int32)
    cube = (labels[..., None] + 0.3 * rng.randn(24, 20, 10)).astype(np.float32)
    cube[3, 4, 2] = np.nan
    scipy.io.savemat(tmp_path / "scene.mat", {"cube": cube, "white": cube[0]})
    np.save(tmp_path / "gt.npy", labels)
    (tmp_path / "short.npy").write_bytes((tmp_path / "gt.npy").read_bytes()[:200])
    (tmp_path / "text.npy").write_text("0 1 2\n")   # numpy takes it for pickled objects
    (tmp_path / "mymodels").mkdir()
    (tmp_path / "mymodels" / "__init__.py").write_text("")
    (tmp_path / "mymodels" / "bad.py").write_text(BAD_MODEL)
    scene = ["--dataset=%s" % (tmp_path / "scene.mat"), "--labels=%s" % (tmp_path / "gt.npy"),
             "--train_fraction=0.3", "--epochs=1"]
    cases = {
        "nan_sigterm": (143, [*scene, "--cube_key=cube", "--epochs=1000"],
                        ["24x20 pixels, 10 bands (the model sees 8 PCA components), 3 classes;",
                         "1 pixel holds NaN or infinite values: masked as no-data (label 0)",
                         "hmp.train: interrupted at epoch "]),
        # a flag not given is not named beside those given (not "--cube_key=None")
        "no_key": (2, scene, ["--dataset=%s, --labels=%s, --pca=8: " % (
            tmp_path / "scene.mat", tmp_path / "gt.npy"), "holds 2 arrays ['cube', 'white']; "
                              "name the one to use with --cube_key"]),
        "text_npy": (2, ["--dataset=%s" % (tmp_path / "text.npy"), *scene[1:]],
                     ["--dataset=%s, --labels=%s, --pca=8: cube file %s: not a numpy array "
                      "file (no .npy header)" % (tmp_path / "text.npy", tmp_path / "gt.npy",
                                        tmp_path / "text.npy")]),
        # --train_set has no key flag: its .mat file holds one array
        "two_array_train_set": (2, [*scene[:2], "--cube_key=cube", "--epochs=1",
                                    "--train_set=%s" % (tmp_path / "scene.mat"),
                                    "--test_set=%s" % (tmp_path / "gt.npy")],
                                ["--test_set=%s, --pca=8: train_set %s: holds 2 arrays ['cube', "
                                 "'white']; it must hold a single array"
                                 % (tmp_path / "gt.npy", tmp_path / "scene.mat")]),
        "short": (2, [*scene, "--cube_key=cube", "--labels=%s" % (tmp_path / "short.npy")],
                  ["--labels=%s" % (tmp_path / "short.npy"),
                   "labels file %s: cannot be read" % (tmp_path / "short.npy")]),
        "bug": (1, [*scene, "--cube_key=cube", "--model=mymodels.bad"],
                ["Traceback", "ValueError"]),
    }
    args = {name: [*TINY, *flags, "--model_dir=%s" % (tmp_path / name)]
            for name, (_, flags, _) in cases.items()}
    # a custom .mat scene trains, and SIGTERM stops it: a process of its own, which
    # starts while the others run in one interpreter
    training = subprocess.Popen(command(*args["nan_sigterm"]), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    others = [name for name in cases if name != "nan_sigterm"]
    ran = dict(zip(others, run_batch("hmp.train", [   # mymodels.bad from tmp_path
        {"args": args[name], "pythonpath": str(tmp_path)} for name in others])))
    ran["nan_sigterm"] = interrupt_after_first_epoch(signal.SIGTERM, process=training)
    for name, (returncode, stdout, stderr) in ran.items():
        code, _, expected = cases[name]
        assert returncode == code, (name, stderr[-2000:])
        errors = [l for l in stderr.splitlines() if l.startswith("hmp.train: error:")]
        for text in expected:
            assert text in (errors[0] if code == 2 else stdout + stderr), (name, stderr[-2000:])
        if code == 2:
            assert len(errors) == 1 and "Traceback" not in stderr, (name, stderr[-2000:])
        else:
            assert not errors and "--devices=" not in stderr, (name, stderr[-2000:])
    # a process of its own prints its lines only: none of TensorFlow's start-up lines
    own_lines = ran["nan_sigterm"][2].splitlines()
    assert own_lines and own_lines == [l for l in own_lines if l.startswith("hmp.train: ")]
