"""Test setup: TF1 graph mode (Mesh-TensorFlow builds graphs, not eager code), and one
tiny run of ``python -m hmp.train`` that several test files read (in the session's
hmp.train interpreter, tests/cli_batch.py; once a session, also under xdist)."""

import fcntl
import importlib.util
import json
import os
import pathlib

# TensorFlow 2.21 imports Keras at its own import (keras.src.optimizers, and with Keras
# scikit-learn when it is installed): 0.8 s of CPU a process without scikit-learn, 2.2 s
# with it, in every xdist worker, tests/cli_batch.py child and process a test starts
# (they inherit this environment). Neither hmp, its models nor its scripts use Keras or
# tf.keras. With TF_USE_LEGACY_KERAS and no tf_keras installed, TensorFlow's eager load
# of Keras fails on the missing package and is skipped (tf.keras would fail; nothing of
# hmp touches it). Not where tf_keras is installed (it would load that instead), nor
# where TF_USE_LEGACY_KERAS is set already.
if importlib.util.find_spec("tf_keras") is None:
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import numpy as np  # pylint: disable=wrong-import-position
import pytest  # pylint: disable=wrong-import-position

from hmp.cli import import_tensorflow_quietly  # pylint: disable=wrong-import-position

import_tensorflow_quietly()   # no C++ start-up lines from each xdist worker
import tensorflow.compat.v1 as tf  # pylint: disable=wrong-import-position

from cli_batch import HUNG_S, Run, run_batch
from hmp.data import synthetic_scene

tf.disable_eager_execution()
tf.logging.set_verbosity(tf.logging.ERROR)

# The test files that take longest (40-120 s of CPU each, docs/benchmarks.md "Test suite
# time"), longest first: they start before the rest (pytest.ini: --no-loadscope-reorder,
# else xdist orders files by their number of tests), so that no xdist worker is left with
# one of them while the other has finished.
SLOW_FIRST = ("cluster/test_launch.py", "programs/test_train_cli.py",
              "scripts/test_bench_hetero.py", "cluster/test_cluster.py", "run/test_fit.py",
              "layers/test_models.py", "programs/test_train_runs.py",
              "programs/test_predict.py", "run/test_steps_per_run.py", "run/test_precision.py",
              "measure/test_speeds.py")


def pytest_collection_modifyitems(items):
    """The files of ``SLOW_FIRST`` first, in its order; the others after them, as
    collected (each file's tests keep their order)."""
    def rank(item):
        path = item.nodeid.split("::")[0]
        return next((i for i, slow in enumerate(SLOW_FIRST) if path.endswith(slow)),
                    len(SLOW_FIRST))
    items.sort(key=rank)

# test_train_cli.py's TINY for 2 epochs: a small CNN on a 2-device filter split of the
# synthetic scene (its end-to-end test and tests/programs/test_predict.py read this run),
# its class probabilities smoothed over a window given (not chosen: so that hmp.predict
# smooths too, whatever the validation pixels say).
TINY_RUN = ["--model=cnn2d", "--width=4", "--patch_size=5", "--batch_size=64",
            "--train_fraction=0.05", "--devices=/cpu:0,/cpu:1", "--speeds=2,1",
            "--mesh=model:2", "--epochs=2", "--notta", "--smoothing=5"]


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory):
    """(the ``cli_batch.Run`` of hmp.train with TINY_RUN, its --model_dir). Its readers only
    read its folder (they copy it to write), so one run serves the whole test session:
    under xdist, the first worker to need it runs it in the session's folder above the
    workers' own, and a worker that needs it meanwhile waits for it (a file lock)."""
    def train(model_dir):
        run, = run_batch("hmp.train", [{"args": [*TINY_RUN, "--model_dir=%s" % model_dir]}],
                         timeout=HUNG_S)
        return run

    if "PYTEST_XDIST_WORKER" not in os.environ:
        model_dir = tmp_path_factory.mktemp("tiny_run")
        return train(model_dir), model_dir
    shared = tmp_path_factory.getbasetemp().parent   # this session's, above popen-gwN
    model_dir, answer = shared / "tiny_run", shared / "tiny_run.json"
    with open(shared / "tiny_run.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)   # released when the file closes
        if not answer.exists():
            answer.write_text(json.dumps(train(model_dir)))
        return Run(*json.loads(answer.read_text())), model_dir


@pytest.fixture(scope="session")
def small_scene(tmp_path_factory):
    """hmp.train flags of a 40 x 40 synthetic scene with the built-in scene's 100 bands
    and 10 classes (saved in a folder of the session), half of its pixels for training:
    for the runs whose checks need no 145 x 145 scene. Given after flags with a
    --train_fraction, they replace it."""
    folder = tmp_path_factory.mktemp("small_scene")
    scene = synthetic_scene(height=40, width=40, n_classes=10, n_bands=100, seed=0,
                            field_size=10, region_smoothness=2)
    np.save(folder / "cube.npy", scene.cube)
    np.save(folder / "labels.npy", scene.labels)
    return ["--dataset=%s" % (folder / "cube.npy"), "--labels=%s" % (folder / "labels.npy"),
            "--train_fraction=0.5"]


@pytest.fixture(scope="session")
def readme_models(tmp_path_factory):
    """A folder holding the README's example model as a user would save it,
    ``mymodels/small.py``: the folder to put on a run's ``sys.path``
    (``--model=mymodels.small``)."""
    readme = (pathlib.Path(__file__).parents[1] / "README.md").read_text()
    block = readme.split("<!-- example:custom-model -->")[1].split("```python")[1]
    folder = tmp_path_factory.mktemp("readme_models")
    package = folder / "mymodels"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "small.py").write_text(block.split("```")[0])
    return folder
