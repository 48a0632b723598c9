"""Training from Python (``hmp.fit``, ``hmp.Settings``) against the command line.

References: conftest's tiny run of ``python -m hmp.train`` (its results.json,
flags.txt, split.npz), the flag parser itself (absl, for the settings the program
builds) and the README's example run as written.
"""

import json
import os
import pathlib
import re
import signal
import subprocess
import sys

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

import hmp
from cli_batch import HUNG_S
from hmp.cli import Interrupted
from hmp.errors import InvalidInput
from hmp.evaluation.metrics import evaluate
from hmp.run import experiment, run_folder, seed_training
from hmp.run.fit import Fitted, _how_to_continue
from hmp.run.settings import DEFAULT, FLAG_FIELDS, Settings
from hmp.run.trainer import Trainer
from models import get_model

REPO = pathlib.Path(__file__).resolve().parents[2]


def _given(model_dir):
    """The flag names a run's flags.txt lists (the flags its command line gave; a
    boolean's --noname: name)."""
    lines = (model_dir / "flags.txt").read_text().splitlines()
    names = [line[2:].partition("=")[0] for line in lines if line.startswith("--")]
    return [name if name in FLAG_FIELDS else name[2:] for name in names]


@pytest.fixture(scope="module")
def fitted(tiny_run, tmp_path_factory):
    """(the CLI's run folder and results.json, hmp.fit's Fitted) of the same flags."""
    run, cli_dir = tiny_run
    assert run.returncode == 0, run.stderr[-2000:]
    cli_results = json.loads((cli_dir / "results.json").read_text())
    given = {name: cli_results["flags"][name] for name in _given(cli_dir)
             if name != "model_dir"}
    assert given and "model" in given and "devices" in given
    model_dir = tmp_path_factory.mktemp("fit") / "run"
    return cli_dir, cli_results, hmp.fit(Settings.of(**given, model_dir=str(model_dir)),
                                         get_model)


def test_fit_writes_what_the_command_line_writes_for_the_same_settings(fitted):
    cli_dir, cli_results, run = fitted
    results = json.loads(pathlib.Path(run.model_dir, "results.json").read_text())
    assert run.results == results and run.test == results["test"]
    for key in ("plan", "step", "best_epoch", "split", "leakage"):
        assert results[key] == cli_results[key], key
    # Same seed and devices: the same training, up to the order in which TensorFlow's CPU
    # kernels sum on a loaded machine (the two runs ran in separate processes, one of
    # them beside other tests): the losses agree to float rounding, and at most two test
    # pixels at a decision boundary may take another class.
    history, cli_history = results["history"], cli_results["history"]
    assert [h["epoch"] for h in history] == [h["epoch"] for h in cli_history]
    assert [h["loss"] for h in history] == pytest.approx([h["loss"] for h in cli_history],
                                                         rel=1e-4)
    confusion = np.array(results["test"]["confusion_matrix"])
    moved = np.abs(confusion - np.array(cli_results["test"]["confusion_matrix"])).sum() // 2
    assert moved <= 2 and confusion.sum() == np.sum(cli_results["test"]["confusion_matrix"])
    assert results["flags"] == {**cli_results["flags"], "model_dir": run.model_dir}
    assert list(results["flags"]) == list(cli_results["flags"])   # results.json's order
    lines = [[line for line in pathlib.Path(folder, "flags.txt").read_text().splitlines()
              if line.startswith("--") and not line.startswith("--model_dir=")]
             for folder in (cli_dir, run.model_dir)]
    assert lines[0] == lines[1] and "--notta" in lines[0]   # the same flags, same order
    assert results["invocations"] == [{"start_step": 0, "argv": []}]


def test_a_fitted_run_predicts_the_test_pixels_as_it_scored_them(fitted):
    """Unsmoothed as the run scored them (smoothed, a map reads every pixel's output, the
    run's scores none of its training pixels': test_scoring)."""
    _, _, run = fitted
    config, split = experiment.load(run.model_dir)   # the run's scene and split
    scene = experiment.load_scene(config)
    probabilities = run.predict(scene.cube)
    assert probabilities.shape == (*scene.labels.shape, 10)
    np.testing.assert_allclose(probabilities.sum(axis=-1), 1, rtol=1e-5)
    predicted = run.predict(scene.cube, smoothing=1).argmax(axis=-1).ravel()[split.test]
    truth = scene.labels.ravel()[split.test] - 1
    confusion = evaluate(truth, predicted, 10).confusion
    with open(os.path.join(run.model_dir, "results.json")) as f:
        unsmoothed = json.load(f)["test_without_smoothing"]
    np.testing.assert_array_equal(confusion, unsmoothed["confusion_matrix"])
    holed = scene.cube.copy()
    holed[7, 9, 3] = np.nan   # a no-data pixel: zeros, as hmp.predict writes them
    probabilities = run.predict(holed)
    assert not probabilities[7, 9].any()
    np.testing.assert_allclose(np.delete(probabilities.reshape(-1, 10), 7 * 145 + 9, axis=0)
                               .sum(axis=-1), 1, rtol=1e-5)


def test_a_fitted_run_refuses_a_cube_or_devices_it_cannot_classify(fitted):
    """As hmp.predict refuses them (one message, naming what is wrong), not numpy's or
    TensorFlow's errors from deep inside; devices also as --devices's string."""
    _, _, run = fitted
    cube = experiment.load_scene(experiment.load(run.model_dir)[0]).cube[:12, :12]
    for args, message in [
            ((cube[:, :, :50],), "the cube has 50 bands; the run in %s was trained on 100"
                                 % run.model_dir),
            ((cube[:, :, 0],), "cube: a cube must be 3-D [H, W, B], got shape (12, 12)"),
            ((cube, ","), "devices=',': give at least one TensorFlow device, e.g. /cpu:0"),
            ((cube, ["/gpu:7"]), "devices=['/gpu:7']: /gpu:7 is not a device of this machine"),
            ((cube, "/cpu:0", 16, None, 4), "smoothing=4: give an odd number of pixels"),
            ((cube, "/cpu:0", 16, None, "3"), "smoothing='3': "),
            ((cube[:0],), "cube: the cube is empty, shape (0, 12, 100) [H, W, B]; it needs "
                          "at least one row, column and band"),
            ((cube, "/cpu:0", 0), "batch_size must be a whole number >= 1, got 0"),
            # "no" would count as on
            ((cube, "/cpu:0", 16, "no"), "tta='no': give True, False or None (as the run)"),
            ((cube, "/cpu:0", 16, None, None, 1),
             "smoothing_guide=1: give True, False or None (as the run)")]:
        with pytest.raises(InvalidInput) as refused:
            run.predict(*args)
        assert str(refused.value).startswith(message), str(refused.value)
    np.testing.assert_array_equal(run.predict(cube, " /cpu:0,"), run.predict(cube))


# Run in a child: hmp.train's flags would clash with a script's in this interpreter.
FROM_FLAGS = """
import json, sys
from absl import flags
from hmp import train
from hmp.run import experiment
from hmp.run.settings import DEFAULT, FLAG_FIELDS, Settings
flags.FLAGS(["hmp.train"])
default = train.settings_from_flags()
flags.FLAGS.unparse_flags()
flags.FLAGS(["hmp.train", *sys.argv[1:]])
given = train.settings_from_flags()
print(json.dumps({
    "default": default == Settings(),
    "given": given == Settings.of(epochs=3, pca=0, pca_in_graph=False, labels="gt.npy",
                                  synthetic_layout="generated"),
    "values": [given.recipe.epochs, given.data.pca, given.data.labels_path],
    "chosen": [given.chosen("synthetic_layout"), given.chosen("mesh")],
    "other_defaults": [name for name in FLAG_FIELDS
                       if flags.FLAGS[name].default != DEFAULT.flag_value(name)],
    "flags": [flag.name for flag in flags.FLAGS.get_key_flags_for_module(train)]}))
"""


def test_settings_of_the_default_flags_are_the_default_settings(flag_children):
    child = flag_children
    assert child.returncode == 0, child.stderr[-2000:]
    found = json.loads(child.stdout.splitlines()[-2])
    found.pop("flags")
    assert found == {"default": True, "given": True, "values": [3, 0, "gt.npy"],
                     "chosen": [True, False], "other_defaults": []}
    assert DEFAULT.data.pca is None   # not given: the model's own (hybridsn: 45)


def test_the_readme_names_every_flag_of_hmp_train(flag_children):
    names = json.loads(flag_children.stdout.splitlines()[-2])["flags"]
    assert len(names) > 50 and "batch_size" in names and "dataset" in names   # scene_flags'
    readme = (REPO / "README.md").read_text()
    assert [name for name in names
            if not re.search(r"--(\[no\])?%s\b" % name, readme)] == []


BALANCING_FROM_FLAGS = """
import json
from absl import flags
from hmp import train
seen = []
for argv in ([], ["--class_balanced"], ["--noclass_balanced"], ["--class_balanced=sqrt"]):
    flags.FLAGS.unparse_flags()
    flags.FLAGS(["hmp.train", *argv])
    settings = train.settings_from_flags()
    seen.append([settings.recipe.class_balanced, settings.flag_lines()])
print(json.dumps(seen))
"""


@pytest.fixture(scope="module")
def flag_children():
    """FROM_FLAGS (its flags given on the command line), then BALANCING_FROM_FLAGS, in one
    fresh interpreter (hmp.train's flags parsed in a process of their own, not this
    one's): one TensorFlow import, not one a script. FROM_FLAGS runs first, on flags
    never parsed; BALANCING_FROM_FLAGS unparses them before each parse, as between its
    own. Each prints its JSON as its last line."""
    return subprocess.run([sys.executable, "-c", FROM_FLAGS + BALANCING_FROM_FLAGS,
                           "--epochs=3", "--pca=0", "--nopca_in_graph", "--labels=gt.npy",
                           "--synthetic_layout=generated"],
                          cwd=REPO, capture_output=True, text=True, timeout=HUNG_S)


def test_class_balanced_alone_keeps_its_meaning_and_takes_values(flag_children):
    """--class_balanced was a switch (inverse-frequency weights): alone it still means
    those, --noclass_balanced none; flags.txt writes the value."""
    child = flag_children
    assert child.returncode == 0, child.stderr[-2000:]
    always = ["--batch_norm=%s" % DEFAULT.model.batch_norm]   # settings.ALWAYS_WRITTEN
    assert json.loads(child.stdout.splitlines()[-1]) == [
        [DEFAULT.recipe.class_balanced, always],
        ["inverse", always + ["--class_balanced=inverse"]],
        ["off", always + ["--class_balanced=off"]],
        ["sqrt", always + ["--class_balanced=sqrt"]]]


@pytest.mark.parametrize("epochs, max_steps", [(60, 4000), (60, 0), (3, 30), (60, 5),
                                               (7, 10 ** 6)])
def test_max_steps_leaves_the_whole_epochs_that_fit(epochs, max_steps):
    for steps_per_epoch in (1, 22, 28, 120, 4001):
        fit = [e for e in range(1, epochs + 1)
               if not max_steps or e * steps_per_epoch <= max_steps]
        expected = max(fit) if fit else 1   # at least one epoch
        recipe = Settings.of(epochs=epochs, max_steps=max_steps).recipe
        assert recipe.epochs_within(steps_per_epoch) == expected, steps_per_epoch


def test_without_takes_settings_back_to_their_defaults_and_not_given():
    """A base of settings made for devices given, then a plan: --devices left out, as the
    command line would (a plan gives its devices)."""
    base = Settings.of(devices="/cpu:0,/cpu:1", epochs=3, split="disjoint")
    planned = base.without("devices", "split").replace(plan="p.json")
    assert planned.given == {"epochs", "plan"}
    assert (planned.placement.devices, planned.data.split) == (None, DEFAULT.data.split)
    # FLAG_FIELDS order; --batch_norm always (settings.ALWAYS_WRITTEN)
    assert planned.flag_lines() == ["--batch_norm=local", "--plan=p.json", "--epochs=3"]
    planned.check(get_model)   # --devices beside --plan would be refused
    with pytest.raises(InvalidInput, match="^epoch: not a setting"):
        base.without("epoch")


def test_numpy_numbers_are_taken_as_the_numbers_they_are():
    """From Python a size may be a numpy integer (the graph's dimensions would refuse
    it): the settings hold Python's, as the flags do."""
    settings = Settings.of(batch_size=np.int64(32), width=np.int32(4), patch_size=np.int64(5),
                           learning_rate=np.float32(0.5))
    assert [(type(v), v) for v in (settings.recipe.batch_size, settings.model.width,
                                   settings.data.patch_size, settings.recipe.learning_rate)] == [
        (int, 32), (int, 4), (int, 5), (float, 0.5)]
    assert settings.flag_lines() == ["--width=4", "--batch_norm=local", "--batch_size=32",
                                     "--learning_rate=0.5", "--patch_size=5"]


def test_a_setting_given_as_none_is_left_out_of_flags_txt():
    assert Settings.of(devices=None, epochs=3).flag_lines() == ["--batch_norm=local",
                                                                 "--epochs=3"]


@pytest.mark.parametrize("values, message", [
    ({"width": -3}, "--width=-3: width must be a whole number >= 0, got -3"),
    ({"batch_size": 0}, "--batch_size=0: batch_size must be a whole number >= 1, got 0"),
    ({"max_steps": -1}, "--max_steps=-1: max_steps must be a whole number >= 0, got -1"),
    ({"model": "nope"}, "--model=nope: model 'nope' is not known"),
    ({"model": "json.decoder"}, "--model=json.decoder: model 'json.decoder': the lookup gave a "
                                "module without logits and SPLIT_DIMS; a model defines"),
    ({"dataset": "paviau", "synthetic_layout": "generated"},
     "--synthetic_layout=generated: only for --dataset=synthetic, not --dataset=paviau"),
    ({"spectral_gain": "1.5"}, "--spectral_gain=1.5: give auto or a number from 0 to 1"),
    ({"seed": -1}, "--seed=-1: seed must be a whole number >= 0, got -1"),
    ({"precision": "float64"}, "--precision=float64: choose one of float32,"),
    ({"class_balanced": "yes"}, "--class_balanced=yes: choose one of off, sqrt, inverse"),
    ({"val_split": "stripes"}, "--val_split=stripes: choose one of random, spatial, auto"),
    ({"brightness_norm": "yes"}, "--brightness_norm=yes: choose one of auto, on, off"),
    ({"epoch": 3}, "epoch: not a setting; allowed: hmp.train's flag names (model, "),
    # from Python, a number as text or a fraction of a whole number: not a TypeError
    ({"learning_rate": "0.1"}, "--learning_rate='0.1': give a number"),
    ({"val_fraction": True}, "--val_fraction=True: give a number"),
    ({"tta": "yes"}, "--tta='yes': give True or False"),
    ({"augment": 0}, "--augment=0: give True or False"),
    ({"devices": ["/cpu:0"]}, "--devices=['/cpu:0']: give a string, as the flag's text"),
    ({"dataset": 3}, "--dataset=3: give a string, as the flag's text"),
    ({"patience": 2.5}, "--patience=2.5: patience must be a whole number >= 0, got 2.5"),
    ({"epochs": "3"}, "--epochs=3: epochs must be a whole number >= 1, got '3' (a str)"),
    # refused as any value, also with no cluster to use them
    ({"cluster_timeout": -5.0}, "--cluster_timeout=-5.0: the timeout must be a finite number "
                                "of seconds > 0 and at most 1e+09, got -5.0"),
    # TensorFlow holds it in milliseconds, an int64: no traceback after the workers answer
    ({"cluster_timeout": 1e16}, "--cluster_timeout=1e+16: the timeout must be a finite "),
    ({"port_base": 70000}, "--port_base=70000: a port is a whole number from 1 to 65535, "
                           "got 70000"),
])
def test_refused_settings_raise_the_command_lines_message(values, message, tmp_path,
                                                         monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidInput) as refused:
        hmp.fit(Settings.of(**values), get_model)
    assert str(refused.value).startswith(message), str(refused.value)
    assert list(tmp_path.iterdir()) == []   # nothing written


def test_a_lost_worker_says_how_to_continue_from_the_checkpoints_written_or_without_any(
        tmp_path):
    """With checkpoints of this run (written since it started, or a resumed run's), the
    command that continues it; without (the worker lost while profiling, or an
    --overwrite's old run not yet replaced), the same command again: --resume would be
    refused, or would continue the old run. Which checkpoint a folder held when the run
    started is told by the file (``run_folder.checkpoint_identity``), not by a clock."""
    run = tmp_path / "run"
    run.mkdir()
    cluster = Settings.of(cluster="127.0.0.1:2222,127.0.0.1:2223")
    local = Settings.of(local_workers="0:1,1:1")
    at_start = {str(run): run_folder.checkpoint_identity(str(run))}   # None: no checkpoint
    assert _how_to_continue(cluster, str(run), at_start) == (
        "; no checkpoint was written yet: restart the worker, then run the same command "
        "again")
    (run / "ckpt-5.index").write_bytes(b"")
    (run / "checkpoint").write_text('model_checkpoint_path: "ckpt-5"\n')
    (run / "flags.txt").write_text("--epochs=3\n")
    assert _how_to_continue(local, str(run), at_start) == (
        "; the checkpoints so far are kept in %s: continue with --flagfile=%s --resume (it "
        "starts the local workers anew)" % (run, run / "flags.txt"))
    # an old run's checkpoints (there when this invocation started): not this run's
    old_run = {str(run): run_folder.checkpoint_identity(str(run))}
    overwrite = cluster.replace(overwrite=True)
    assert _how_to_continue(overwrite, str(run), old_run).startswith(
        "; no checkpoint was written yet")
    resumed = cluster.replace(resume=True)
    assert _how_to_continue(resumed, str(run), old_run) == (
        "; the checkpoints so far are kept in %s: restart the worker, then continue with "
        "--flagfile=%s --resume" % (run, run / "flags.txt"))


def test_a_resumed_run_past_its_epochs_says_it_trains_no_further(capsys):
    seed_training._say_past_the_end(414, 415, "--epochs=5")   # one step to go: silent
    seed_training._say_past_the_end(415, 123, "--epochs=3")   # --epochs lowered on --resume
    assert capsys.readouterr().out == (
        "the run is at step 415 and --epochs=3 asks for 123: it trains no further, and is "
        "scored now\n")


def test_settings_held_as_text_that_hold_numbers_take_numbers_from_python():
    settings = Settings.of(spectral_shift=2, spectral_gain=0.5, smoothing=5)
    settings.check(get_model)
    assert (settings.field_look_strength("spectral_shift"),
            settings.field_look_strength("spectral_gain"), settings.smoothing_window()) == (
                2.0, 0.5, 5)
    assert settings.flag_lines() == ["--batch_norm=local", "--spectral_shift=2",
                                     "--spectral_gain=0.5", "--smoothing=5"]


def test_arguments_of_another_kind_are_a_type_error_naming_what_is_expected():
    with pytest.raises(TypeError, match=r"^hmp.fit: settings must be an hmp.Settings, e.g. "
                                        r"hmp.Settings.of\(epochs=3\), got dict$"):
        hmp.fit({"epochs": 3}, get_model)
    with pytest.raises(TypeError, match=r"^hmp.fit: get_model must be a function of a model "
                                        r"name, e.g. models.get_model, got str$"):
        hmp.fit(Settings.of(epochs=3), "models.get_model")


def test_hmp_fit_loads_tensorflow_without_its_log_lines_unless_asked_for():
    """As the programs do (``hmp.cli.import_tensorflow_quietly``): TensorFlow's C++
    start-up lines hidden, its later INFO and WARNING lines (one per traced step) off by
    default; a log level the user set is kept."""
    probe = "import os, hmp; hmp.fit; print(os.environ['TF_CPP_MIN_LOG_LEVEL'])"
    environment = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    quiet, asked = (subprocess.run([sys.executable, "-c", probe], capture_output=True,
                                   text=True, timeout=HUNG_S, env={**environment, **extra})
                    for extra in ({}, {"TF_CPP_MIN_LOG_LEVEL": "1"}))
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (0, "2\n", "")
    assert (asked.returncode, asked.stdout) == (0, "1\n"), asked.stderr[-2000:]


def test_readme_python_api_example_runs_as_written(tmp_path, monkeypatch):
    """The example marked ``python-api`` (README.md, docs/python_api.md) trains and
    predicts as written: its scores are its results.json's, and its class map, unsmoothed,
    scores the run's test pixels as results.json does without the smoothing."""
    blocks = {text.split("<!-- example:python-api -->")[1].split("```python")[1]
              .split("```")[0]
              for text in ((REPO / name).read_text() for name in ("README.md",
                                                                  "docs/python_api.md"))
              if "<!-- example:python-api -->" in text}
    assert blocks
    monkeypatch.chdir(tmp_path)
    for block in sorted(blocks):
        namespace = {}
        exec(compile(block, "python-api example", "exec"), namespace)   # noqa: S102
        run = namespace["run"]
        results = json.loads(pathlib.Path(run.model_dir, "results.json").read_text())
        assert run.test == results["test"]
        class_map = namespace["class_map"]
        assert class_map.shape == (145, 145)
        scene = namespace["scene"]
        np.testing.assert_array_equal(class_map, run.predict(scene.cube).argmax(axis=-1) + 1)
        _, split = experiment.load(run.model_dir)   # the run's own split
        truth = scene.labels.ravel()[split.test] - 1
        unsmoothed = run.predict(scene.cube, smoothing=1).argmax(axis=-1)
        confusion = evaluate(truth, unsmoothed.ravel()[split.test], 10).confusion
        np.testing.assert_array_equal(confusion,
                                      results["test_without_smoothing"]["confusion_matrix"])


# two seeds of a tiny run on one device: the runs of hmp.fit itself (of a small model: the
# model is incidental here)
TINY_SERIES = dict(model="spectral", width=2, patch_size=5, batch_size=64, train_fraction=0.05,
                   epochs=1, tta=False, devices="/cpu:0", runs=2)


def test_a_signal_before_a_later_seed_trains_stops_at_once(tmp_path):
    """Ctrl-C while the second of two seeds loads its data: it stops at once, nothing to
    save (as before the first seed trained), not after the second seed's first step."""
    model_dir = tmp_path / "runs"
    signalled = []

    def get_model_then_ctrl_c(name):   # called as each seed builds its model
        if (model_dir / "seed-0" / "results.json").exists() and not signalled:
            signalled.append(name)
            os.kill(os.getpid(), signal.SIGINT)
        return get_model(name)

    with pytest.raises(Interrupted, match="^interrupted before training started; nothing "
                                          "to save$"):
        hmp.fit(Settings.of(**TINY_SERIES, model_dir=str(model_dir)), get_model_then_ctrl_c)
    assert signalled
    assert (model_dir / "seed-0" / "checkpoint").exists()
    assert not (model_dir / "seed-1" / "checkpoint").exists()


def test_a_signal_while_a_seed_is_scored_stops_before_the_next(tmp_path, monkeypatch):
    """Ctrl-C while seed 0 is scored (after its training): its run is finished and
    written, and the series stops there, saying how to continue it, before seed 1."""
    model_dir = tmp_path / "runs"
    training_fit = seed_training.scoring.training_fit

    def fit_then_ctrl_c(*args):
        if not (model_dir / "seed-0" / "results.json").exists():
            os.kill(os.getpid(), signal.SIGINT)
        return training_fit(*args)

    monkeypatch.setattr(seed_training.scoring, "training_fit", fit_then_ctrl_c)
    with pytest.raises(Interrupted) as interrupted:
        hmp.fit(Settings.of(**TINY_SERIES, model_dir=str(model_dir)), get_model)
    assert str(interrupted.value) == (
        "interrupted after the run of seed 0; continue the series with --flagfile=%s --resume"
        % (model_dir / "flags.txt"))
    assert (model_dir / "seed-0" / "results.json").exists()
    assert not (model_dir / "seed-1").exists()


def _validation_accuracies(monkeypatch, accuracies):
    """Each epoch's validation accuracy from ``accuracies`` in turn (then the last):
    ``Trainer.predict`` of the validation pixels gets that share of them right."""
    left = list(accuracies)

    def predict(trainer, dataset):
        accuracy = left.pop(0) if len(left) > 1 else left[0]
        predicted = dataset.class_ids.copy()
        wrong = len(predicted) - int(round(accuracy * len(predicted)))
        predicted[:wrong] = -1
        return predicted

    monkeypatch.setattr(Trainer, "predict", predict)


def test_a_run_that_stopped_early_is_finished_when_resumed(tmp_path, monkeypatch):
    """A run stopped early by --patience trains no more epochs on --resume, scored or
    stopped while it classified (whose line names the step training ended at, not the
    best epoch's); resumed with a larger --patience it trains on, and the checkpoints of
    before the resume are pruned with the new ones (CHECKPOINTS_KEPT, one best)."""
    _validation_accuracies(monkeypatch, [0.5, 0.75, 0.5, 0.5])   # best: epoch 2 of 4
    stopping = dict(TINY_SERIES, runs=1, epochs=8, patience=2, val_fraction=0.5)
    scored, interrupted = tmp_path / "scored", tmp_path / "interrupted"
    hmp.fit(Settings.of(**stopping, model_dir=str(scored)), get_model)
    results = json.loads((scored / "results.json").read_text())
    steps_per_epoch = results["step"] // 4
    assert (len(results["history"]), results["best_epoch"]) == (4, 2)
    hmp.fit(Settings.of(**stopping, model_dir=str(scored), resume=True), get_model)
    assert json.loads((scored / "results.json").read_text()) == results

    probabilities = Trainer.probabilities

    def ctrl_c_then_probabilities(trainer, *args):
        os.kill(os.getpid(), signal.SIGINT)
        return probabilities(trainer, *args)

    monkeypatch.setattr(Trainer, "probabilities", ctrl_c_then_probabilities)
    _validation_accuracies(monkeypatch, [0.5, 0.75, 0.5, 0.5])
    with pytest.raises(Interrupted, match=r"^interrupted while classifying \(training had "
                                          r"finished at step %d\)" % results["step"]):
        hmp.fit(Settings.of(**stopping, model_dir=str(interrupted)), get_model)
    monkeypatch.setattr(Trainer, "probabilities", probabilities)
    hmp.fit(Settings.of(**stopping, model_dir=str(interrupted), resume=True), get_model)
    resumed = json.loads((interrupted / "results.json").read_text())
    assert (resumed["step"], len(resumed["history"]), resumed["best_epoch"]) == (
        results["step"], 4, 2)

    _validation_accuracies(monkeypatch, [0.5])   # no better one
    hmp.fit(Settings.of(**dict(stopping, patience=8), model_dir=str(scored), resume=True),
            get_model)
    longer = json.loads((scored / "results.json").read_text())
    assert (len(longer["history"]), longer["best_epoch"]) == (8, 2)
    assert sorted(path.name for path in scored.glob("*ckpt-*.index")) == sorted(
        ["best-ckpt-%d.index" % (2 * steps_per_epoch)]
        + ["ckpt-%d.index" % (epoch * steps_per_epoch) for epoch in (6, 7, 8)])


def test_scoring_that_fails_leaves_no_session_open(tmp_path, monkeypatch):
    opened = []
    original = tf.Session.__init__

    def recorded(self, *args, **kwargs):
        opened.append(self)
        original(self, *args, **kwargs)

    def failing(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(tf.Session, "__init__", recorded)
    monkeypatch.setattr(seed_training.scoring, "save_pictures", failing)
    with pytest.raises(OSError, match="No space left on device"):
        hmp.fit(Settings.of(**{**TINY_SERIES, "runs": 1}, model_dir=str(tmp_path / "run")),
                get_model)
    assert opened and all(session._closed for session in opened)


def _old_series(model_dir, seeds):
    """A finished --runs series' folder of ``seeds``, as its runs leave it (their files,
    empty; the last seed's measured speeds; the summary)."""
    for seed in seeds:
        folder = model_dir / ("seed-%d" % seed)
        folder.mkdir(parents=True)
        for name in ("data.json", "results.json", "history.json"):
            (folder / name).write_text("{}")
    (model_dir / ("seed-%d" % seeds[-1]) / "speeds.json").write_text("{}")
    (model_dir / "summary.json").write_text(json.dumps({"seeds": list(seeds)}))


def test_overwriting_a_series_replaces_every_seed_of_the_old_one(tmp_path):
    """--overwrite of a --runs series: once the first seed's input is good, every old
    seed's run goes (seed-2, which the new series of two has not, with it; its measured
    speeds stay, as a run's do) and the old summary with them."""
    model_dir = tmp_path / "series"
    _old_series(model_dir, (0, 1, 2))
    fitted = hmp.fit(Settings.of(**TINY_SERIES, overwrite=True, model_dir=str(model_dir)),
                     get_model)
    assert [pathlib.Path(seed.model_dir).name for seed in fitted.seeds] == ["seed-0", "seed-1"]
    assert json.loads((model_dir / "summary.json").read_text())["seeds"] == [0, 1]
    assert sorted(p.name for p in (model_dir / "seed-2").iterdir()) == ["speeds.json"]
    assert run_folder.seed_folders(str(model_dir)) == [str(model_dir / "seed-0"),
                                                       str(model_dir / "seed-1")]
    for seed in (0, 1):
        assert json.loads((model_dir / ("seed-%d" % seed) / "history.json").read_text())


def test_a_single_runs_overwrite_of_a_series_replaces_the_whole_series(tmp_path):
    """The old seeds' runs and summary go with the series (the measured speeds stay, as
    a run's do); the folder then holds the single run alone."""
    model_dir = tmp_path / "series"
    _old_series(model_dir, (0, 1))
    single = {**TINY_SERIES, "runs": 1}
    fitted = hmp.fit(Settings.of(**single, overwrite=True, model_dir=str(model_dir)), get_model)
    assert fitted.model_dir == str(model_dir) and (model_dir / "results.json").exists()
    assert not (model_dir / "summary.json").exists() and not (model_dir / "seed-0").exists()
    assert sorted(p.name for p in (model_dir / "seed-1").iterdir()) == ["speeds.json"]
    assert run_folder.seed_folders(str(model_dir)) == []


def test_a_run_of_several_seeds_names_its_seeds_for_scores_and_prediction():
    seeds = tuple(Fitted("runs/x/seed-%d" % i, {"test": {"overall_accuracy": 0.5 + i}}, None)
                  for i in (0, 1))
    several = Fitted("runs/x", {"overall_accuracy": {"mean": 1.0}}, None, seeds)
    assert several.seeds[1].test == {"overall_accuracy": 1.5}
    with pytest.raises(InvalidInput, match=r"^test: this run trained 2 seeds; use its "
                                           r"seeds\[i\]\.test$"):
        several.test
    with pytest.raises(InvalidInput, match=r"^predict: this run trained 2 seeds"):
        several.predict(np.zeros((4, 4, 3), np.float32))
