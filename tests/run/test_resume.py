"""What --resume requires of a run's folder (hmp.run.resume) and lets its flags be."""

import json

import numpy as np
import pytest
import scipy.io

from cli_batch import run_batch
from hmp import cli
from hmp.errors import InvalidInput
from hmp.graph.from_graph import default_width
from hmp.run import experiment, run_files, run_folder
from hmp.run.resume import check_same_data, check_resumed_flags, seed_dirs
from hmp.run.settings import RunFolderSettings, Settings
from models import get_model


def test_resume_compares_a_saved_data_json_and_refuses_a_broken_one(tmp_path):
    """No data.json: nothing to compare; a broken one: refused naming it, not skipped."""
    config = experiment.DataConfig(patch_size=3)
    split = experiment.prepare(config).split
    check_same_data(str(tmp_path), config, split)   # an empty folder
    experiment.save(tmp_path, config, split)
    check_same_data(str(tmp_path), config, split)
    (tmp_path / experiment.CONFIG_FILE).write_text('{"patch_size":')
    with pytest.raises(InvalidInput) as refused:
        check_same_data(str(tmp_path), config, split)
    assert str(refused.value) == ("%s is not a run's data settings: not JSON (Expecting "
                                  "value: line 1 column 15 (char 14))"
                                  % (tmp_path / experiment.CONFIG_FILE))


def test_resume_on_another_split_is_refused(tmp_path):
    """A run that trained on --train_set/--test_set, resumed without them (their paths are
    no data flag compared): the flags give a random split, other pixels: refused, where
    it went on and scored pixels it had trained on as test pixels."""
    config = experiment.DataConfig(patch_size=3, train_fraction=0.05)
    given = experiment.prepare(experiment.DataConfig(patch_size=3, seed=7)).split
    experiment.save(tmp_path, config, given)   # data.json as the flags left it
    with pytest.raises(cli.UsageError) as refused:
        check_same_data(str(tmp_path), config, experiment.prepare(config).split)
    assert str(refused.value) == (
        "--resume: the run in %s was trained on another split: these flags give other "
        "train and test pixels than its split.npz (%s); resume it with the data flags and "
        "files it started with, or start over with --overwrite"
        % (tmp_path, given.description))


@pytest.mark.parametrize("flags, message", [
    (dict(train_set="a.npy", test_set="b.npy", split="disjoint"),
     "--split=disjoint: --train_set and --test_set give the split; leave --split out"),
    (dict(plan="p.json", mesh="batch:2"),
     "--mesh=batch:2: --plan=p.json gives the mesh; leave --mesh out"),
])
def test_flags_that_a_first_invocation_ignored_are_refused_but_not_on_its_resume(flags,
                                                                               message):
    """A run started before they were refused keeps them in its flags.txt: its
    --resume --flagfile=flags.txt goes on ignoring them."""
    with pytest.raises(cli.UsageError) as refused:
        Settings.of(**flags).check(get_model)
    assert str(refused.value) == message
    Settings.of(resume=True, **flags).check(get_model)


def test_resume_compares_the_graph_its_flags_build_not_their_text(tmp_path):
    """The first invocation's flags.txt (here --model=cnn2d, its default width, sync batch
    norm): the same model by its module path, its default width given, and local batch
    norm (the same variables) resume; another model or width is refused, naming both."""
    (tmp_path / run_files.FLAGS_FILE).write_text("--model=cnn2d\n--batch_norm=sync\n"
                                                 "--epochs=3\n")
    width = default_width(get_model("cnn2d"))
    for same in (dict(model="cnn2d"), dict(model="models.cnn2d", width=width),
                 dict(model="cnn2d", batch_norm="local")):
        check_resumed_flags(str(tmp_path), Settings.of(**same), get_model)
    with pytest.raises(cli.UsageError) as refused:
        check_resumed_flags(str(tmp_path), Settings.of(model="cnn3d", width=width + 1),
                         get_model)
    assert str(refused.value) == (
        "--model=cnn3d, --width=%d: the run in %s was trained with --model=cnn2d, --width=0; "
        "resume it with those (--flagfile=%s gives all its flags), or start over with "
        "--overwrite" % (width + 1, tmp_path, tmp_path / run_files.FLAGS_FILE))
    # the global step counts steps of --batch_size samples: another would go on from
    # another epoch and sample (the default, 32, where flags.txt has none)
    with pytest.raises(cli.UsageError) as refused:
        check_resumed_flags(str(tmp_path), Settings.of(model="cnn2d", batch_size=16), get_model)
    assert str(refused.value) == (
        "--batch_size=16: the run in %s was trained with --batch_size=32; resume it with "
        "that (--flagfile=%s gives all its flags), or start over with --overwrite"
        % (tmp_path, tmp_path / run_files.FLAGS_FILE))


def test_a_run_whose_flags_name_no_batch_norm_trained_with_sync_and_resumes_as_told(tmp_path):
    """A flags.txt without --batch_norm is a run started while sync was the default
    (settings.ALWAYS_WRITTEN): its resume at today's default is refused, naming both;
    with --batch_norm given it goes on; a run of today names its own."""
    (tmp_path / run_files.FLAGS_FILE).write_text("--model=cnn2d\n--epochs=3\n")
    with pytest.raises(cli.UsageError) as refused:
        check_resumed_flags(str(tmp_path), Settings.of(model="cnn2d"), get_model)
    assert str(refused.value) == (
        "--resume: the run in %s trained with sync batch-norm statistics, the default when "
        "it started; give --batch_norm=sync to go on as it trained, or --batch_norm=local"
        % tmp_path)
    for mode in ("sync", "local"):
        check_resumed_flags(str(tmp_path), Settings.of(model="cnn2d", batch_norm=mode),
                         get_model)
    today = Settings.of(model="cnn2d", epochs=3)
    assert "--batch_norm=local" in today.flag_lines()
    (tmp_path / run_files.FLAGS_FILE).write_text("\n".join(today.flag_lines()) + "\n")
    check_resumed_flags(str(tmp_path), Settings.of(model="cnn2d"), get_model)


def test_a_single_run_and_a_series_replace_each_other_only_with_overwrite(tmp_path):
    """A single run into a --runs series' folder, or a series into a single run's, would
    go among the other's files: refused unless --overwrite (which replaces the old one
    as a whole, ``hmp.run.fit``); --resume of a series needs its --runs."""
    series, single = tmp_path / "series", tmp_path / "single"
    for seed in (0, 1):
        (series / ("seed-%d" % seed)).mkdir(parents=True)
        (series / ("seed-%d" % seed) / "history.json").write_text("{}")
    single.mkdir()
    (single / "results.json").write_text("{}")
    for asked in ({}, dict(resume=True)):
        with pytest.raises(cli.UsageError) as refused:
            seed_dirs(RunFolderSettings(**asked), str(series), [0])
        assert str(refused.value) == (
            "--model_dir=%s holds a --runs series (seed-0, seed-1); continue it with --runs=2 "
            "--resume, start over with --overwrite, or give another --model_dir" % series)
    for asked in ({}, dict(resume=True)):
        with pytest.raises(cli.UsageError) as refused:
            seed_dirs(RunFolderSettings(**asked), str(single), [0, 1])
        assert str(refused.value) == (
            "--runs=2: --model_dir=%s holds a single run (results.json); continue it without "
            "--runs, start over with --overwrite, or give another --model_dir" % single)
    overwrite = RunFolderSettings(overwrite=True)
    assert seed_dirs(overwrite, str(series), [0]) == [str(series)]
    assert seed_dirs(overwrite, str(single), [0, 1]) == [str(single / "seed-0"),
                                                         str(single / "seed-1")]


def test_the_seeds_folder_of_several_runs_holds_only_runs(tmp_path):
    """--runs=2 --model_dir=<a folder of data>: the seeds' folders and summary.json would go
    among the user's files (--overwrite too: it deletes runs' files only)."""
    (tmp_path / "seed-0").mkdir()
    (tmp_path / "summary.json").write_text("{}")
    for overwrite in (False, True):
        folder = RunFolderSettings(overwrite=overwrite)
        assert seed_dirs(folder, str(tmp_path), [0, 1]) == [
            str(tmp_path / "seed-0"), str(tmp_path / "seed-1")]
    (tmp_path / "cube.mat").write_text("")
    for overwrite in (False, True):
        with pytest.raises(cli.UsageError) as refused:
            seed_dirs(RunFolderSettings(overwrite=overwrite), str(tmp_path), [0, 1])
        assert str(refused.value) == ("--model_dir=%s holds no run but other files (cube.mat); "
                                      "give a new or empty folder" % tmp_path)
    assert seed_dirs(RunFolderSettings(), str(tmp_path / "seed-0"), [0]) == [
        str(tmp_path / "seed-0")]   # one seed: the folder itself, a new one
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cube.mat", "seed-0", "summary.json"]
    # once it holds a seed's run it is a series' folder, as a run's is with others' files
    # beside it: resumed or overwritten when asked
    (tmp_path / "seed-0" / "history.json").write_text("{}")
    for asked in (dict(resume=True), dict(overwrite=True)):
        assert seed_dirs(RunFolderSettings(**asked), str(tmp_path), [0, 1]) == [
            str(tmp_path / "seed-0"), str(tmp_path / "seed-1")]
    with pytest.raises(cli.UsageError, match="seed-0 holds a run"):
        seed_dirs(RunFolderSettings(), str(tmp_path), [0, 1])


def _ground_truth_folder(folder):
    """``folder`` made, holding a small Indian Pines ground truth (24 x 24, 16 classes of
    36 pixels): the files of --synthetic_layout=indian_pines."""
    folder.mkdir()
    labels = (np.arange(24 * 24).reshape(24, 24) // 36 % 16 + 1).astype(np.uint8)
    scipy.io.savemat(folder / "Indian_pines_gt.mat", {"indian_pines_gt": labels})
    return folder


def test_a_run_records_the_folder_it_read_its_files_from_and_resumes_without_it(
        tmp_path, monkeypatch):
    """data.json keeps the data folder the scene was read from, absolute (here the default
    one: a relative $HMP_DATA_DIR), also when no data_dir was given; flags.txt keeps the
    flags as given. Its data_dir is no data setting a resume compares: none given, in a
    shell without the variable, or the folder itself. A folder moved since is read as
    none recorded: the default one."""
    data = _ground_truth_folder(tmp_path / "mydata")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HMP_DATA_DIR", "mydata")
    config = experiment.DataConfig(synthetic_layout="indian_pines", patch_size=3)
    split = experiment.prepare(config).split
    run = tmp_path / "run"
    run.mkdir()
    experiment.save(run, config, split)
    assert json.loads((run / experiment.CONFIG_FILE).read_text())["data_dir"] == str(data)
    assert experiment.recorded_data_dir(run) == str(data)
    assert experiment.load_as_trained(run)[0].data_dir == str(data)
    run_folder.save_flags(str(run), ["--synthetic_layout=indian_pines"])
    assert run_folder.saved_flags(str(run)) == {"synthetic_layout": "indian_pines"}
    monkeypatch.delenv("HMP_DATA_DIR")
    monkeypatch.chdir(run)
    for data_dir in (None, str(data)):
        check_same_data(str(run), experiment.DataConfig(
            synthetic_layout="indian_pines", patch_size=3, data_dir=data_dir), split)
    generated = tmp_path / "generated"   # a scene read from no folder records none
    generated.mkdir()
    experiment.save(generated, experiment.DataConfig(patch_size=3), split)
    assert json.loads((generated / experiment.CONFIG_FILE).read_text())["data_dir"] is None
    assert experiment.recorded_data_dir(generated) is None
    moved = tmp_path / "moved"   # the run's data moved: the default folder
    data.rename(moved)
    assert experiment.recorded_data_dir(run) is None
    monkeypatch.setenv("HMP_DATA_DIR", str(moved))
    config, saved = experiment.load_as_trained(run)
    assert config.data_dir is None   # the default folder, here $HMP_DATA_DIR: found there
    np.testing.assert_array_equal(experiment.prepare(config, saved).split.train, split.train)


def test_a_run_of_the_default_data_folder_resumes_and_predicts_from_a_shell_without_it(
        tmp_path):
    """Trained with $HMP_DATA_DIR and no --data_dir; continued with the command it prints
    (--flagfile=RUN/flags.txt --resume) and with its flags typed again, and predicted
    where the variable names no folder of the files (as in a shell without it, whose
    ./data has none): each reads the folder the run read. A --data_dir given still wins;
    the folder moved, the default one is read."""
    data = _ground_truth_folder(tmp_path / "data")
    shell = tmp_path / "shell"
    shell.mkdir()
    # the model is incidental to where the files are read: spectral's graph is a third of
    # cnn2d's
    flags = ["--synthetic_layout=indian_pines", "--model=spectral", "--width=4",
             "--patch_size=5", "--batch_size=64", "--train_fraction=0.5", "--devices=/cpu:0",
             "--speeds=1", "--epochs=1", "--model_dir=run"]
    without = {"HMP_DATA_DIR": str(tmp_path / "none")}
    trained, resumed, typed = run_batch("hmp.train", [
        {"args": flags, "cwd": str(shell), "env": {"HMP_DATA_DIR": str(data)}},
        {"args": ["--flagfile=run/flags.txt", "--resume", "--epochs=2"], "cwd": str(shell),
         "env": without},
        {"args": [*flags, "--resume", "--epochs=3"], "cwd": str(shell), "env": without}])
    assert trained.returncode == 0, trained.stderr[-2000:]
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "epoch 2/2" in resumed.stdout
    assert typed.returncode == 0, typed.stderr[-2000:]   # its flags typed again, no flagfile
    assert "epoch 3/3" in typed.stdout
    predicted, refused = run_batch("hmp.predict", [
        {"args": ["--model_dir=run"], "cwd": str(shell), "env": without},
        {"args": ["--model_dir=run", "--out=other", "--data_dir=%s" % (tmp_path / "gone")],
         "cwd": str(shell), "env": without}])
    assert predicted.returncode == 0, predicted.stderr[-2000:]
    assert (shell / "run" / "prediction" / "class_map.npy").exists()
    assert refused.returncode == 2
    assert refused.stderr.startswith(
        "hmp.predict: error: --data_dir=%s: Indian_pines_gt.mat (any upper/lower case) not "
        "found because folder %s does not exist" % (tmp_path / "gone", tmp_path / "gone"))
    data.rename(tmp_path / "moved")   # the folder the run read, gone: the default one
    gone, = run_batch("hmp.predict", [{"args": ["--model_dir=run", "--out=other"],
                                       "cwd": str(shell), "env": without}])
    assert gone.returncode == 2
    assert gone.stderr.startswith(
        "hmp.predict: error: --model_dir=run: Indian_pines_gt.mat (any upper/lower case) not "
        "found because folder %s does not exist; give the folder that holds it with "
        "--data_dir or the environment variable HMP_DATA_DIR (now %s)"
        % (tmp_path / "none", tmp_path / "none"))


def test_a_seeds_folder_of_a_series_resumed_alone_is_checked_with_the_series_flags(tmp_path):
    """flags.txt of --runs is the series' own: a seed's folder given as --model_dir reads
    it (as hmp.predict's hint names it), so another model is refused there too, naming
    that file. A folder only named like a seed's (in no series, under a single run, not
    seed-<number>) reads none."""
    series = tmp_path / "series"
    seed = series / (run_files.SEED_PREFIX + "1")
    seed.mkdir(parents=True)
    run_folder.save_flags(str(series), ["--model=cnn2d", "--batch_norm=local", "--runs=2"])
    assert run_folder.saved_flags(str(seed)) == run_folder.saved_flags(str(series)) == {
        "model": "cnn2d", "batch_norm": "local", "runs": "2"}
    assert run_folder.continuing_flags(str(seed)) == run_folder.resume_flags(str(series))
    check_resumed_flags(str(seed), Settings.of(model="cnn2d"), get_model)
    with pytest.raises(cli.UsageError) as refused:
        check_resumed_flags(str(seed), Settings.of(model="cnn3d"), get_model)
    assert str(refused.value) == (
        "--model=cnn3d, --width=0: the run in %s was trained with --model=cnn2d, --width=0; "
        "resume it with those (--flagfile=%s gives all its flags), or start over with "
        "--overwrite"
        % (seed, series / run_files.FLAGS_FILE))
    other = tmp_path / (run_files.SEED_PREFIX + "1")   # a seed's name, in no series
    other.mkdir()
    single = tmp_path / "single" / (run_files.SEED_PREFIX + "2")   # under a single run's
    single.mkdir(parents=True)
    run_folder.save_flags(str(single.parent), ["--model=cnn2d"])
    for folder in (other, single, series / (run_files.SEED_PREFIX + "x")):
        folder.mkdir(exist_ok=True)
        assert run_folder.saved_flags(str(folder)) is None, folder
        check_resumed_flags(str(folder), Settings.of(model="cnn3d"), get_model)
