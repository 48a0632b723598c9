"""Runs that never lose work or print a traceback (issue 14), in-process.

Stopping on a signal with a checkpoint, the run folder (--resume/--overwrite,
history.json), unreadable files and keys, NaN pixels, the progress line, and
which errors are blamed on flags. The CLI ends of these are in
tests/programs/test_train_runs.py.
"""

import io
import json
import os
import re
import signal

import numpy as np
import pytest
import scipy.io
import tensorflow.compat.v1 as tf

import harness
from hmp import cli, files
from hmp.data import load_scene_files, read_array
from hmp.errors import InvalidInput
from hmp.graph.graph import TrainingGraph
from hmp.graph.graph_config import Placement
from hmp.graph.graph import CHECKPOINTS_KEPT
from hmp.run import experiment, run_folder
from hmp.run.progress import ProgressLine
from hmp.run.settings import Settings
from hmp.run.trainer import EpochStats, Stopped, Trainer, traced_steps
from models import model_config


@pytest.fixture(scope="module")
def tiny_experiment():
    return experiment.prepare(experiment.DataConfig(patch_size=5, train_fraction=0.05,
                                                    pca=8, seed=1))


def make_trainer(exp, model_dir, **options):
    config = model_config("cnn2d", 5, exp.bands, exp.n_classes, width=2)
    graph = TrainingGraph(config, Placement("", "", ("/cpu:0",), {}), 64,
                          exp.scene.labels.shape, "adam", 1e-3, seed=1)
    return Trainer(graph, exp, str(model_dir), seed=1, session_config=harness.session_config(),
                   log=lambda line: None, **options)


# -- 1. a signal stops after the step, with a checkpoint ---------------------------------

def test_each_step_is_checkpointed_once(tiny_experiment, tmp_path, monkeypatch):
    saved = []
    original = Trainer.save
    monkeypatch.setattr(Trainer, "save", lambda self, step=None, **kw: (
        saved.append((step, kw.get("prefix", "ckpt"))), original(self, step, **kw))[1])
    # every step, the epoch's last one too: it is saved at the epoch's end, once
    trainer = make_trainer(tiny_experiment, tmp_path, checkpoint_every=1)
    trainer.initialise(resume=False)
    trainer.train_epoch(0, 1)
    trainer.close()
    steps = [step for step, prefix in saved if prefix == "ckpt" and step]
    assert steps == list(range(1, trainer.steps_per_epoch + 1))

@pytest.mark.parametrize("start, steps, expected", [
    (0, 100, {1, 50, 99}), (0, 4, {1, 2, 3}), (0, 3, {1, 2}), (0, 2, {1}), (0, 1, set()),
    (95, 100, {1, 2, 4})])
def test_traced_steps_spread_from_the_second_to_the_last(start, steps, expected):
    assert traced_steps(start, steps) == expected


def test_an_epochs_busy_times_are_the_median_of_its_traced_steps(tiny_experiment, tmp_path,
                                                                  monkeypatch):
    traced, original = [], Trainer._traced_step
    def fake_busy(self, fetches, feed):   # a real step, made-up busy seconds
        traced.append(self.step)
        return original(self, fetches, feed)[0], [float(len(traced)), 10.0 - len(traced)]
    monkeypatch.setattr(Trainer, "_traced_step", fake_busy)
    trainer = make_trainer(tiny_experiment, tmp_path)
    trainer.initialise(resume=False)
    stats = trainer.train_epoch(0, 1)
    trainer.close()
    assert traced == sorted(traced_steps(0, trainer.steps_per_epoch))   # steps before each
    assert stats.busy_seconds == [2.0, 8.0]   # medians of 1, 2, 3 and of 9, 8, 7
    assert stats.steps == trainer.steps_per_epoch


def test_trainer_stops_after_the_running_step_with_a_checkpoint(tiny_experiment, tmp_path):
    steps = []
    trainer = make_trainer(tiny_experiment, tmp_path, stop=lambda: len(steps) >= 3,
                           progress=lambda text: steps.append(text) if text else None)
    trainer.initialise(resume=False)
    with pytest.raises(Stopped) as stopped:
        trainer.train_epoch(0, 2)
    assert (stopped.value.epoch, stopped.value.step) == (0, 4)   # 3 progress lines, 4th step
    assert trainer.step == 4
    trainer.close()
    assert run_folder.checkpoint_step(str(tmp_path)) == 4


def test_signals_ask_to_stop_once_armed_and_interrupt_before(tmp_path):
    # what the process had before (the default, or SIG_IGN when started in the background)
    before = signal.getsignal(signal.SIGINT)
    with run_folder.Signals() as signals:
        assert not signals()
        with pytest.raises(cli.Interrupted) as interrupted:
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1000):   # the handler runs between bytecodes
                pass
        assert interrupted.value.signum == signal.SIGTERM
    with run_folder.Signals() as signals:
        signals.armed = True
        os.kill(os.getpid(), signal.SIGINT)
        assert signals() and signals.signum == signal.SIGINT
    assert signal.getsignal(signal.SIGINT) is before   # restored


def test_a_program_without_checkpoints_stops_on_a_signal_leaving_no_half_written_file(
        tmp_path):
    """``cli.stop_on_signals`` (hmp.predict): the signal ends the block with Interrupted,
    whose atomic write removes its temporary file; the handlers are restored."""
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(cli.Interrupted) as interrupted:
        with cli.stop_on_signals("interrupted; run it again"):
            with files.atomic_path(str(tmp_path / "probabilities.npy")) as temporary:
                with open(temporary, "wb") as f:
                    f.write(b"the first rows")
                    os.kill(os.getpid(), signal.SIGTERM)
                    for _ in range(1000):   # the handler runs between bytecodes
                        pass
    assert (str(interrupted.value), interrupted.value.signum) == (
        "interrupted; run it again", signal.SIGTERM)
    assert os.listdir(tmp_path) == []
    assert signal.getsignal(signal.SIGTERM) is before


# -- 2. a used --model_dir needs --resume or --overwrite ---------------------------------

def test_a_used_model_dir_is_refused_without_resume_or_overwrite(tmp_path):
    run_folder.check_model_dir(str(tmp_path))            # empty: fine
    (tmp_path / "events.out.tfevents.1.x").write_text("")
    run_folder.check_model_dir(str(tmp_path))            # event files alone: not a run
    (tmp_path / "ckpt-7.data-00000-of-00001").write_text("")   # a save killed half-way
    run_folder.check_model_dir(str(tmp_path))
    (tmp_path / "ckpt-7.index").write_text("")
    (tmp_path / "checkpoint").write_text('model_checkpoint_path: "ckpt-7"\n')
    with pytest.raises(cli.UsageError, match=r"holds a run \(a checkpoint at step 7\); "
                                             r"continue it with --resume, start over with "
                                             r"--overwrite"):
        run_folder.check_model_dir(str(tmp_path))
    (tmp_path / "ckpt-8_temp").mkdir()
    (tmp_path / "prediction").mkdir()   # hmp.predict's maps of the old run's weights
    (tmp_path / "prediction" / "class_map.npy").write_text("")
    for name in ("results.json", "history.json", "classification_map.png", "notes.txt"):
        (tmp_path / name).write_text("{}")
    with pytest.raises(cli.UsageError, match="step 7, results.json, history.json"):
        run_folder.check_model_dir(str(tmp_path))
    with pytest.raises(cli.UsageError, match="--resume, --overwrite: give one"):
        run_folder.check_model_dir(str(tmp_path), resume=True, overwrite=True)
    run_folder.check_model_dir(str(tmp_path), resume=True)
    run_folder.check_model_dir(str(tmp_path), overwrite=True)
    assert len(list(tmp_path.iterdir())) == 10   # checking deletes nothing
    run_folder.prepare_model_dir(str(tmp_path), overwrite=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]   # only hmp's files go


def test_a_folder_of_other_files_than_a_runs_is_refused_for_a_new_run(tmp_path):
    """--model_dir=/etc, or a folder of data: a new run would scatter its checkpoints among
    the files there (and replace a data.json or flags.txt of its own names)."""
    (tmp_path / "seed-0").mkdir()   # --runs's seeds, hmp.predict's default --out
    (tmp_path / "prediction").mkdir()
    for name in ("speeds.json", "events.out.tfevents.1.x", ".DS_Store"):
        (tmp_path / name).write_text("")
    run_folder.check_model_dir(str(tmp_path))   # what a run leaves, hidden files: fine
    for name in ("notes.txt", "cube.mat", "gt.npy", "data", "b.txt"):
        (tmp_path / name).write_text("")
    message = ("--model_dir=%s holds no run but other files (b.txt, cube.mat, data and 2 "
               "more); give a new or empty folder" % tmp_path)
    for overwrite in (False, True):   # --overwrite deletes a run's files, and only those
        with pytest.raises(cli.UsageError) as refused:
            run_folder.check_model_dir(str(tmp_path), overwrite=overwrite)
        assert str(refused.value) == message
    (tmp_path / "results.json").write_text("{}")   # a run, among the user's files
    with pytest.raises(cli.UsageError, match="holds a run"):
        run_folder.check_model_dir(str(tmp_path))
    run_folder.check_model_dir(str(tmp_path), overwrite=True)
    run_folder.check_model_dir(str(tmp_path), resume=True)


def test_a_model_dir_under_a_file_is_refused_before_anything_is_made(tmp_path):
    (tmp_path / "afile").write_text("")
    for model_dir in (tmp_path / "afile", tmp_path / "afile" / "run"):
        with pytest.raises(cli.UsageError, match="^--model_dir=%s: %s is not a folder$"
                           % (re.escape(str(model_dir)), re.escape(str(tmp_path / "afile")))):
            run_folder.check_model_dir(str(model_dir))
    run_folder.check_model_dir(str(tmp_path / "new" / "run"))
    assert not (tmp_path / "new").exists()
    run_folder.prepare_model_dir(str(tmp_path / "new" / "run"))
    assert (tmp_path / "new" / "run").is_dir()


def test_a_new_series_in_a_folder_named_like_a_seed_is_made_under_overwrite(tmp_path):
    """--runs with --overwrite in a folder not there yet, whose name starts as a seed's
    does: the first seed's folder is made in it, nothing else is taken for an old seed."""
    series = str(tmp_path / "seed-sweep")
    folders = [run_folder.seed_folder(series, seed) for seed in (0, 1)]
    replaced = run_folder.series_replaced(series, folders)
    assert replaced == [series]
    run_folder.prepare_model_dir(folders[0], overwrite=True, replaced=replaced)
    assert os.listdir(series) == ["seed-0"] and os.path.isdir(folders[0])


# -- 2b. no session outlives a trainer that fails to start ----------------------------------

def test_a_trainer_whose_scene_fails_to_load_leaves_no_session_open(tiny_experiment,
                                                                    tmp_path, monkeypatch):
    opened = []
    original = tf.Session.__init__

    def recorded(self, *args, **kwargs):
        opened.append(self)
        original(self, *args, **kwargs)

    def lost_worker(self, session, padded_cube):
        raise tf.errors.UnavailableError(None, None, "worker 1 is gone")

    monkeypatch.setattr(tf.Session, "__init__", recorded)
    monkeypatch.setattr(TrainingGraph, "load_scene", lost_worker)
    with pytest.raises(tf.errors.UnavailableError, match="worker 1 is gone"):
        make_trainer(tiny_experiment, tmp_path)
    assert len(opened) == 1 and opened[0]._closed


# -- 3. the history of every invocation --------------------------------------------------

def stats(epoch):
    return EpochStats(epoch, 1.0 / (epoch + 1), 0.5, 100.0, 1.0, [1.0], 10)


def test_history_keeps_every_invocation_and_drops_unsaved_epochs(tmp_path):
    first = run_folder.History.open(str(tmp_path), False, 0, 0, ["--epochs=5"])
    for epoch in range(3):
        first.add_epoch(stats(epoch))
    first.add_plan({"mesh": "model:1"})
    # killed after epoch 2 was recorded but before its checkpoint: resume from epoch 2
    second = run_folder.History.open(str(tmp_path), True, 2, 20, ["--epochs=5", "--resume"])
    assert [e["epoch"] for e in second.epochs] == [0, 1]
    second.add_epoch(stats(2))
    saved = json.loads((tmp_path / "history.json").read_text())
    assert [e["epoch"] for e in saved["history"]] == [0, 1, 2]
    assert [i["start_step"] for i in saved["invocations"]] == [0, 20]
    assert saved["plans"] == [{"mesh": "model:1"}]
    fresh = run_folder.History.open(str(tmp_path), False, 0, 0, [])   # not resumed: starts over
    assert fresh.epochs == [] and len(fresh.invocations) == 1


# -- 4, 5. keys and unreadable files ------------------------------------------------------

def scene_files(tmp_path, cube):
    labels = np.arange(cube.shape[0] * cube.shape[1]).reshape(cube.shape[:2]) % 3 + 1
    scipy.io.savemat(tmp_path / "scene.mat", {"cube": cube, "other": cube[..., :2]})
    np.save(tmp_path / "gt.npy", labels.astype(np.int32))
    return tmp_path / "scene.mat", tmp_path / "gt.npy"


def test_two_arrays_need_the_cube_key_and_a_truncated_file_is_named(tmp_path):
    cube_path, labels_path = scene_files(tmp_path, np.ones((6, 5, 4), np.float32))
    with pytest.raises(InvalidInput, match=r"cube file .*scene.mat: holds 2 arrays "
                                           r"\['cube', 'other'\]; name the one to use with "
                                           r"--cube_key$"):
        load_scene_files(cube_path, labels_path)
    assert load_scene_files(cube_path, labels_path, cube_key="cube").cube.shape == (6, 5, 4)
    truncated = tmp_path / "truncated.npy"
    truncated.write_bytes(labels_path.read_bytes()[:150])
    with pytest.raises(InvalidInput, match="truncated.npy: cannot be read"):
        read_array(truncated)
    with pytest.raises(InvalidInput, match="^labels file .*truncated.npy: cannot be read"):
        load_scene_files(cube_path, truncated, cube_key="cube")
    text = tmp_path / "text.npy"   # numpy would take it for pickled objects
    text.write_text("0 1 2\n")
    with pytest.raises(InvalidInput, match="^labels file %s: not a numpy array file \\(no "
                                           "\\.npy header\\)$" % re.escape(str(text))):
        load_scene_files(cube_path, text, cube_key="cube")
    (tmp_path / "empty.mat").write_bytes(b"")
    with pytest.raises(InvalidInput, match="empty.mat: empty file \\(0 bytes\\)$"):
        read_array(tmp_path / "empty.mat")
    for name, content in (("short.mat", b"MATLAB 5"), ("half.mat", cube_path.read_bytes()[:200])):
        (tmp_path / name).write_bytes(content)
        with pytest.raises(InvalidInput, match="%s: cannot be read as a .mat file" % name):
            read_array(tmp_path / name)


# -- 6. NaN pixels ------------------------------------------------------------------------

def test_pixels_holding_nan_are_masked_as_no_data(tmp_path):
    rng = np.random.RandomState(0)
    cube = rng.rand(12, 10, 6).astype(np.float32)
    cube[2, 3, 1] = np.nan
    cube[5, 5, :] = np.inf
    cube_path, labels_path = scene_files(tmp_path, cube)
    exp = experiment.prepare(experiment.DataConfig(
        dataset=str(cube_path), labels_path=str(labels_path), cube_key="cube", patch_size=3,
        train_fraction=0.5))
    assert exp.nodata_pixels == 2
    assert exp.scene.labels[2, 3] == 0 and exp.scene.labels[5, 5] == 0
    assert 2 * 10 + 3 not in exp.labelled.indices
    assert np.isfinite(exp.train.extractor.padded).all()


def test_a_scene_of_no_finite_pixel_is_refused_naming_it(tmp_path):
    cube = np.full((4, 5, 3), np.nan, np.float32)
    cube[1, 2, 0] = np.inf   # inf counts as no data too
    cube_path, labels_path = scene_files(tmp_path, cube)
    with pytest.raises(InvalidInput) as refused:
        experiment.prepare(experiment.DataConfig(
            dataset=str(cube_path), labels_path=str(labels_path), cube_key="cube",
            patch_size=3, train_fraction=0.5))
    # a scene file's name: the file's, without its suffix
    assert str(refused.value) == "scene 'scene': every pixel holds NaN or infinite values"


# -- 8. progress ---------------------------------------------------------------------------

class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_line_updates_on_a_terminal_and_is_quiet_elsewhere(tiny_experiment,
                                                                     tmp_path):
    screen = Terminal()
    trainer = make_trainer(tiny_experiment, tmp_path, progress=ProgressLine(screen, 0))
    trainer.initialise(resume=False)
    trainer.train_epoch(0, 1)
    steps = trainer.steps_per_epoch
    updates = screen.getvalue().split("\r")
    assert any("epoch 1/1  step 1/%d" % steps in u for u in updates)
    assert any("step %d/%d" % (steps, steps) in u and "samples/s  ETA 0 s" in u
               for u in updates)
    trainer.predict(tiny_experiment.test)
    assert "classifying  batch 1/" in screen.getvalue()
    assert screen.getvalue().endswith("\r")   # cleared at the end
    trainer.close()
    quiet = io.StringIO()
    line = ProgressLine(quiet, 0)
    line("step 1/2")
    line(None)
    assert quiet.getvalue() == ""


# -- 7. only validation errors are blamed on flags -----------------------------------------

def test_blame_turns_only_invalid_input_into_a_flag_error():
    from absl import flags
    name = "runs_test_flag"
    if name not in flags.FLAGS:
        flags.DEFINE_string(name, "x", "for this test")
    with pytest.raises(cli.UsageError, match="--runs_test_flag=x: bad value"):
        with cli.blame(name):
            raise InvalidInput("bad value")
    with pytest.raises(ValueError, match="cannot reshape") as raised:
        with cli.blame(name):
            raise ValueError("cannot reshape")   # a bug, e.g. in a custom model
    assert not isinstance(raised.value, cli.UsageError)
    with pytest.raises(cli.UsageError, match="no such file"):
        with cli.blame(name, also=(OSError,)):
            raise FileNotFoundError("no such file")
    listed = "runs_test_list_flag"
    if listed not in flags.FLAGS:
        flags.DEFINE_list(listed, ["model:2", "foo"], "for this test")
    with pytest.raises(cli.UsageError, match="^--runs_test_list_flag=model:2,foo: bad mesh$"):
        with cli.blame(listed):   # a list flag as typed, not as a Python list
            raise InvalidInput("bad mesh")
    unset = "runs_test_unset_flag"   # a flag left at its default None: no value to name
    if unset not in flags.FLAGS:
        flags.DEFINE_string(unset, None, "for this test")
    with pytest.raises(cli.UsageError, match="^--runs_test_flag=x: no such scene$"):
        with cli.blame(name, unset):
            raise InvalidInput("no such scene")
    with pytest.raises(cli.UsageError, match=r"^--runs_test_unset_flag \(not given\): none$"):
        with cli.blame(unset):
            raise InvalidInput("none")
    flags.FLAGS[listed].present = 1   # given on the command line: named alone
    try:
        with pytest.raises(cli.UsageError, match="^--runs_test_list_flag=model:2,foo: bad$"):
            with cli.blame(name, listed):
                raise InvalidInput("bad")
    finally:
        flags.FLAGS[listed].present = 0


def test_settings_blame_the_flags_the_user_chose_among_those_named():
    settings = Settings.of(synthetic_layout="salinas", data_dir="/nowhere")
    with pytest.raises(cli.UsageError,   # --dataset left at its default: not named
                       match="^--synthetic_layout=salinas, --data_dir=/nowhere: no file$"):
        with settings.blame("dataset", "synthetic_layout", "data_dir"):
            raise InvalidInput("no file")
    with pytest.raises(cli.UsageError, match="^--dataset=synthetic, --epochs=60: too few$"):
        with Settings().blame("dataset", "epochs"):   # none chosen: every one with a value
            raise InvalidInput("too few")


def test_data_dir_is_refused_where_nothing_is_read_from_it_but_on_resume():
    for scene, named in (({}, "--dataset=synthetic (--synthetic_layout=generated)"),
                         ({"dataset": "cube.npy", "labels": "gt.npy"}, "--dataset=cube.npy")):
        with pytest.raises(cli.UsageError, match=re.escape(
                "--data_dir=/gt: only for a benchmark scene or a --synthetic_layout of one; "
                "%s reads no file from it" % named)):
            Settings.of(data_dir="/gt", **scene).check_data()
        # a run whose flags.txt holds it (accepted before) resumes with its flags
        Settings.of(data_dir="/gt", resume=True, **scene).check_data()
    for scene in ({"synthetic_layout": "salinas"}, {"dataset": "paviau"}):   # read there
        Settings.of(data_dir="/gt", **scene).check_data()


def test_files_written_atomically_are_readable_as_any_new_file(tmp_path):
    files.write_json(tmp_path / "a.json", {"x": 1})
    (tmp_path / "b.txt").write_text("")   # the mode this process gives a new file
    assert (tmp_path / "a.json").stat().st_mode == (tmp_path / "b.txt").stat().st_mode


def test_an_epochs_partial_sums_are_kept_for_the_latest_checkpoints_of_the_same_batch(
        tmp_path):
    """History's partials: the sums at the last ``CHECKPOINTS_KEPT`` checkpoints within an
    epoch, read back on a resume only at the same step and batch size; an epoch recorded
    after them keeps them (a kill before its checkpoint resumes from theirs)."""
    history = run_folder.History.open(str(tmp_path), False, 0, 0, ["hmp.train"])
    for step in (5, 10, 15, 20):
        history.add_partial(step, loss_sum=step / 10, correct=step * 3, batch_size=32)
    assert sorted(history.partials, key=int) == ["10", "15", "20"] == [
        str(s) for s in (5, 10, 15, 20)[-CHECKPOINTS_KEPT:]]
    history.add_epoch(stats(0))
    resumed = run_folder.History.open(str(tmp_path), True, 0, 15, ["hmp.train", "--resume"])
    assert resumed.carried(15, 32) == (1.5, 45.0)
    assert resumed.carried(15, 64) is None and resumed.carried(5, 32) is None
