"""scripts/baselines.py and its baseline_scores.py, called in-process on a tiny scene: same
split as a run, its features, its table and JSON, and its one line when scikit-learn is
missing."""

import json
import sys

import numpy as np
import pytest
from absl import flags
from absl.testing import flagsaver

from hmp import cli, data
from hmp.errors import InvalidInput
from hmp.run import experiment
from script_modules import import_script

baselines = import_script("baselines")
baseline_scores = import_script("baseline_scores")


@pytest.fixture(scope="module")
def scene_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny_scene")
    scene = data.synthetic_scene(height=30, width=34, n_classes=3, n_bands=8, seed=4,
                                 field_size=10, region_smoothness=4)
    np.save(folder / "cube.npy", scene.cube)
    np.save(folder / "labels.npy", scene.labels)
    return folder


@pytest.fixture
def saved_run(scene_files, tmp_path):
    """(folder, DataConfig, Split): a run folder as hmp.train leaves one, its data settings
    and split (not the config's)."""
    config = experiment.DataConfig(dataset=str(scene_files / "cube.npy"),
                                   labels_path=str(scene_files / "labels.npy"), patch_size=5,
                                   val_fraction=0.1)   # hmp.train's default
    labels = np.load(scene_files / "labels.npy")
    saved = data.stratified_split(labels, train_per_class=20, seed=7)
    experiment.save(tmp_path / "run", config, saved)
    return tmp_path / "run", config, saved


def run_script(*argv):
    with flagsaver.flagsaver():
        flags.FLAGS(["baselines", *argv])
        return baselines.main(["baselines"])


def test_window_means_are_the_means_of_the_patches():
    cube = np.random.default_rng(0).random((9, 11, 3)).astype(np.float32)
    found = baseline_scores.features(cube, [5])
    pixels = np.arange(99)
    patches = data.PatchExtractor(cube, 5)(pixels)       # reflect-padded, as hmp.train's
    np.testing.assert_allclose(found["5x5 mean"], patches.mean(axis=(1, 2)), rtol=1e-5)
    np.testing.assert_array_equal(found["pixel"], cube.reshape(99, 3))
    np.testing.assert_array_equal(found["row, column"], np.stack(np.divmod(pixels, 11), 1))


def test_scores_every_baseline_on_a_runs_saved_split(saved_run, tmp_path, capsys):
    pytest.importorskip("sklearn", reason="scikit-learn is an optional extra "
                                          "(pip install -e .[baselines])")
    folder, config, saved = saved_run
    out = tmp_path / "baselines.json"
    summary = run_script("--model_dir=%s" % folder, "--json=%s" % out)
    written = json.loads(out.read_text())
    assert list(summary) == ["lda pixel", "lda 5x5 mean", "lda 9x9 mean", "svm pixel",
                             "svm 5x5 mean", "svm 9x9 mean", "1nn-xy"]
    (run,) = written["runs"]
    assert run["split"] == saved.description
    exp = experiment.prepare(config, saved)   # the baselines fit every training pixel
    assert len(exp.train) + len(exp.val) == len(saved.train) and len(exp.val) > 0
    assert ("%s, %s: %d training / %d test pixels (hmp.train fits %d of the training pixels "
            "and validates on %d)" % (exp.scene.name, saved.description, len(saved.train),
                                      len(saved.test), len(exp.train), len(exp.val))
            ) in capsys.readouterr().out
    assert run["leakage"] == pytest.approx(data.split_leakage(saved, 5))
    for name, scores in run["scores"].items():
        confusion = np.array(scores["confusion_matrix"])
        assert confusion.sum() == len(saved.test)
        assert scores["overall_accuracy"] == pytest.approx(np.trace(confusion) / len(saved.test))
        assert written["summary"][name]["overall_accuracy"]["mean"] == scores["overall_accuracy"]
    # The same split again, from the data flags: same seed, same pixels, same scores.
    again = run_script("--dataset=%s" % config.dataset, "--labels=%s" % config.labels_path,
                       "--train_per_class=20", "--seed=7", "--patch_size=5",
                       "--json=%s" % out)
    assert again == summary


def test_a_runs_scene_is_read_from_the_folder_it_started_in(scene_files, tmp_path,
                                                             monkeypatch):
    """--model_dir of a run started in another folder, whose data.json holds paths
    relative to it (results.json's working_dir): the scene is found from here."""
    monkeypatch.chdir(scene_files)
    config = experiment.DataConfig(dataset="cube.npy", labels_path="labels.npy", patch_size=5)
    saved = data.stratified_split(np.load("labels.npy"), train_per_class=20, seed=7)
    experiment.save(tmp_path / "run", config, saved)
    (tmp_path / "run" / "results.json").write_text(json.dumps({"working_dir": str(scene_files)}))
    monkeypatch.chdir(tmp_path)
    (loaded, split), = baselines._saved_runs(str(tmp_path / "run"))
    assert (loaded.dataset, loaded.labels_path) == (str(scene_files / "cube.npy"),
                                                    str(scene_files / "labels.npy"))
    exp = experiment.prepare(loaded, split)
    np.testing.assert_array_equal(exp.scene.cube, np.load(scene_files / "cube.npy"))


def test_a_class_too_small_for_the_svms_folds_is_named_once_not_warned_per_fit(scene_files):
    pytest.importorskip("sklearn", reason="scikit-learn is an optional extra "
                                          "(pip install -e .[baselines])")
    import warnings   # pylint: disable=import-outside-toplevel
    config = experiment.DataConfig(dataset=str(scene_files / "cube.npy"),
                                   labels_path=str(scene_files / "labels.npy"), patch_size=5)
    labels = np.load(scene_files / "labels.npy").ravel()
    by_class = [np.flatnonzero(labels == c) for c in (1, 2, 3)]
    train = np.concatenate([by_class[0][:10], by_class[1][:2], by_class[2][:10]])
    test = np.setdiff1d(np.flatnonzero(labels), train)
    exp = experiment.prepare(config, data.Split(train, test, (30, 34), "given"))
    said = []
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # scikit-learn's "least populated class" would raise
        scores = baseline_scores.score_run(exp, [5], say=said.append)
    assert said[0] == ("  classes with fewer than 3 training pixels (2): the SVM's C is "
                       "chosen on folds that miss some of them")
    assert len(said) == 1 + len(scores) and all(
        np.sum(s["confusion_matrix"]) == len(test) for s in scores.values())


def test_missing_scikit_learn_is_one_line_on_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "sklearn.svm", None)   # import fails
    with pytest.raises(InvalidInput, match=r'need scikit-learn: pip install -e "\.\[baselines\]"'):
        baseline_scores.baselines([5])


@pytest.mark.parametrize("name, text, expected", [
    ("split.npz", "not a split", "{folder}/split.npz is not a saved split: not an .npz "
                                 "file of arrays"),
    ("data.json", '{"x":', "{folder}/data.json is not a run's data settings: not JSON "
                           "(Expecting value: line 1 column 6 (char 5))"),
    ("data.json", "[1]", "{folder}/data.json is not a run's data settings: not a JSON "
                         "object of dataset, data_dir, labels_path, cube_key, labels_key, "
                         "synthetic_layout, synthetic_kind, patch_size, pca, train_fraction, "
                         "train_per_class, split, seed, train_set, test_set, val_fraction, "
                         "val_split, brightness_norm"),
    ("data.json", '{"seed": 1, "sead": 2}',
     "{folder}/data.json is not a run's data settings: missing keys dataset, data_dir, "
     "labels_path, cube_key, labels_key, synthetic_layout, patch_size, pca, "
     "train_fraction, train_per_class, split, train_set, test_set; unknown keys sead"),
])
def test_a_broken_saved_run_is_one_line_naming_the_file(saved_run, name, text, expected):
    folder, _, _ = saved_run
    (folder / name).write_text(text)
    with pytest.raises(cli.UsageError) as refused:
        run_script("--model_dir=%s" % folder, "--json=%s" % (folder / "b.json"))
    assert str(refused.value) == "--model_dir=%s: %s" % (folder, expected.format(folder=folder))
    assert not (folder / "b.json").exists()


def test_a_folder_as_json_is_refused_before_any_work(saved_run):
    folder, _, _ = saved_run
    with pytest.raises(cli.UsageError) as refused:
        run_script("--model_dir=%s" % folder, "--json=%s" % folder)
    assert str(refused.value) == "--json=%s: %s is a folder; give a file's path" % (
        folder, folder)


@pytest.mark.parametrize("given, named", [
    (["--split=disjoint"], "--split=disjoint"),
    (["--runs=3", "--patch_size=7"], "--patch_size=7, --runs=3"),
    (["--seed=0", "--data_dir=elsewhere"], "--data_dir=elsewhere, --seed=0"),
])
def test_scene_split_and_runs_flags_with_a_model_dir_are_refused_naming_them(
        saved_run, given, named):
    """The run's folder gives the scene and split: such flags beside --model_dir would be
    ignored, so they are refused, even at their defaults (--seed=0), before any work."""
    folder, _, _ = saved_run
    with pytest.raises(cli.UsageError) as refused:
        run_script("--model_dir=%s" % folder, *given, "--json=%s" % (folder / "b.json"))
    assert str(refused.value) == ("%s: not with --model_dir, whose run folder gives the scene "
                                  "and split (data.json, split.npz)" % named)
    assert not (folder / "b.json").exists()
