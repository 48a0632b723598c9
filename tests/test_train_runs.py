"""``python -m hmp.train`` interrupted, resumed, refused (issue 14), end to end.

The in-process parts (trainer stop, run folder, history, data errors,
progress) are in tests/test_runs.py.
"""

import json
import os
import signal
import subprocess
import sys

import numpy as np
import scipy.io

TINY = ["--model=cnn2d", "--width=2", "--patch_size=5", "--batch_size=16", "--pca=8",
        "--devices=/cpu:0", "--speeds=1", "--mesh=model:1"]


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
    stdout, stderr = process.communicate(timeout=300)
    return process.returncode, "".join(out) + stdout, stderr


def test_interrupts_save_and_resume_keeps_the_whole_history(tmp_path):
    flags = [*TINY, "--epochs=6", "--model_dir=%s" % tmp_path]
    rc, _, stderr = interrupt_after_first_epoch(signal.SIGINT, *flags)
    lines = [l for l in stderr.splitlines() if l.startswith("hmp.train: ")]
    assert rc == 130 and len(lines) == 1, stderr[-2000:]
    assert "Traceback" not in stderr
    assert lines[0].startswith("hmp.train: interrupted at epoch ")
    assert lines[0].endswith("; continue with --resume --model_dir=%s" % tmp_path)
    step = int(lines[0].split(" step ")[1].split(";")[0])
    assert (tmp_path / ("ckpt-%d.index" % step)).exists()

    again = subprocess.run(command(*flags), capture_output=True, text=True, timeout=300)
    assert again.returncode == 2 and "--resume" in again.stderr   # no silent start-over

    done = subprocess.run(command(*flags, "--resume"), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "resumed from %s" % (tmp_path / ("ckpt-%d" % step)) in done.stdout
    results = json.loads((tmp_path / "results.json").read_text())
    assert [h["epoch"] for h in results["history"]] == list(range(6))
    assert [i["start_step"] for i in results["invocations"]] == [0, step]

    finished = subprocess.run(command(*flags, "--resume"), capture_output=True, text=True,
                              timeout=300)
    assert finished.returncode == 0, finished.stderr[-2000:]
    assert "is finished (6 epochs" in finished.stdout
    assert json.loads((tmp_path / "results.json").read_text()) == results


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
    (tmp_path / "mymodels").mkdir()
    (tmp_path / "mymodels" / "__init__.py").write_text("")
    (tmp_path / "mymodels" / "bad.py").write_text(BAD_MODEL)
    scene = ["--dataset=%s" % (tmp_path / "scene.mat"), "--labels=%s" % (tmp_path / "gt.npy"),
             "--train_fraction=0.3", "--epochs=1"]
    cases = {   # the running one first: read while the others wait in their pipes
        "nan_sigterm": (143, [*scene, "--cube_key=cube", "--epochs=1000"],
                        ["1 pixels hold NaN or infinite values: masked as no-data (label 0)",
                         "hmp.train: interrupted at epoch "]),
        "no_key": (2, scene, ["--cube_key=None", "holds 2 arrays ['cube', 'white']; "
                              "name the one to use with cube_key"]),
        "short": (2, [*scene, "--cube_key=cube", "--labels=%s" % (tmp_path / "short.npy")],
                  ["--labels=%s" % (tmp_path / "short.npy"),
                   "labels file %s: cannot be read" % (tmp_path / "short.npy")]),
        "bug": (1, [*scene, "--cube_key=cube", "--model=mymodels.bad"],
                ["Traceback", "ValueError"]),
    }
    processes = {
        name: subprocess.Popen(command(*TINY, *flags, "--model_dir=%s" % (tmp_path / name)),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONPATH": str(tmp_path)})
        for name, (_, flags, _) in cases.items()}
    for name, process in processes.items():
        if name == "nan_sigterm":   # a custom .mat scene trains, and SIGTERM stops it
            _, stdout, stderr = interrupt_after_first_epoch(signal.SIGTERM, process=process)
        else:
            stdout, stderr = process.communicate(timeout=300)
        code, _, expected = cases[name]
        assert process.returncode == code, (name, stderr[-2000:])
        errors = [l for l in stderr.splitlines() if l.startswith("hmp.train: error:")]
        for text in expected:
            assert text in (errors[0] if code == 2 else stdout + stderr), (name, stderr[-2000:])
        if code == 2:
            assert len(errors) == 1 and "Traceback" not in stderr, (name, stderr[-2000:])
        else:
            assert not errors and "--devices=" not in stderr, (name, stderr[-2000:])
