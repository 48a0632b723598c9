"""Evaluation a reviewer can trust: a split's leakage, splits given as label maps, the
split saved in the run folder, the validation share held out as the split holds out its
test pixels, the per-class score table, and the mean/std summary of several runs."""

import dataclasses
import json

import numpy as np
import pytest
import scipy.io

from hmp import data
from hmp.data import (disjoint_split, split_from_label_maps, split_leakage, stratified_split,
                      synthetic_scene, window_counts)
from hmp.evaluation import report
from hmp.evaluation.metrics import evaluate
from hmp.run import experiment


@pytest.fixture(scope="module")
def labels():
    return synthetic_scene(height=37, width=43, n_classes=4, n_bands=6, seed=3).labels


def brute_force_leakage(split, patch_size):
    """Looks at every test pixel's window, pixel by pixel."""
    train = split.train_mask
    height, width = train.shape
    radius = patch_size // 2
    leaked = 0
    for index in split.test:
        row, col = divmod(int(index), width)
        window = train[max(row - radius, 0):row + radius + 1, max(col - radius, 0):col + radius + 1]
        leaked += bool(window.any())
    return leaked / len(split.test)


@pytest.mark.parametrize("patch_size", [1, 5, 9])
def test_window_counts_match_counting_each_window(patch_size):
    mask = np.random.default_rng(patch_size).random((11, 14)) < 0.2
    radius = patch_size // 2
    expected = np.array([[mask[max(r - radius, 0):r + radius + 1,
                               max(c - radius, 0):c + radius + 1].sum()
                          for c in range(14)] for r in range(11)])
    np.testing.assert_array_equal(window_counts(mask, patch_size), expected)


def test_leakage_matches_brute_force_and_is_zero_for_the_disjoint_split(labels):
    random_split = stratified_split(labels, train_fraction=0.05, seed=1)
    for patch_size in (1, 3, 9):
        assert split_leakage(random_split, patch_size) == pytest.approx(
            brute_force_leakage(random_split, patch_size), abs=1e-12)
    assert split_leakage(random_split, 1) == 0.0                 # a pixel is train or test
    assert 0.3 < split_leakage(random_split, 9) < 1.0
    disjoint = disjoint_split(labels, train_fraction=0.1, patch_size=7, seed=0)
    assert split_leakage(disjoint, 7) == 0.0
    assert split_leakage(disjoint, 9) == pytest.approx(brute_force_leakage(disjoint, 9))


def test_split_given_as_label_maps_round_trips(labels, tmp_path):
    split = stratified_split(labels, train_fraction=0.2, seed=4)
    for name, mask in (("train.npy", split.train_mask), ("test.npy", split.test_mask)):
        np.save(tmp_path / name, np.where(mask, labels, 0).astype(np.uint8))
    given = split_from_label_maps(labels, tmp_path / "train.npy", tmp_path / "test.npy")
    np.testing.assert_array_equal(given.train, split.train)
    np.testing.assert_array_equal(given.test, split.test)
    assert given.image_shape == labels.shape


def test_split_label_maps_that_do_not_fit_are_refused(labels, tmp_path):
    train = np.where(stratified_split(labels, train_fraction=0.2, seed=4).train_mask, labels, 0)
    np.save(tmp_path / "train.npy", train)
    np.save(tmp_path / "small.npy", train[:-1])
    np.save(tmp_path / "empty.npy", np.zeros_like(train))
    wrong = train.copy()
    wrong[wrong == 1] = 2
    np.save(tmp_path / "wrong.npy", wrong)
    one = np.zeros_like(train)
    first = np.flatnonzero(train)[0]
    one.flat[first] = train.flat[first]   # one pixel of the training set
    np.save(tmp_path / "one.npy", one)
    scipy.io.savemat(tmp_path / "two.mat", {"a": train, "b": train})   # no key to name one
    cases = {"two.mat": r"^test_set .*two.mat: holds 2 arrays \['a', 'b'\]; it must hold a "
                        r"single array$",
             "small.npy": r"test_set .*small.npy has shape \(36, 43\), but the scene is "
                          r"\(37, 43\)",
             "empty.npy": "test_set .*empty.npy labels no pixel",
             "train.npy": r"^\d+ pixels are in both the training and the test set",
             "one.npy": r"^1 pixel is in both the training and the test set \(first: row "
                        r"%d, column %d\)" % divmod(first, labels.shape[1]),
             "wrong.npy": r"test_set .*wrong.npy: \d+ pixels carry another class than the "
                          r"scene's ground truth .* is 2 there, 1 in the ground truth"}
    for name, message in cases.items():
        with pytest.raises(ValueError, match=message):
            split_from_label_maps(labels, tmp_path / "train.npy", tmp_path / name)
    with pytest.raises(FileNotFoundError, match="no such file: .*missing.npy"):
        split_from_label_maps(labels, tmp_path / "missing.npy", tmp_path / "train.npy")


def test_run_folder_keeps_its_split_and_settings(labels, tmp_path):
    scene = synthetic_scene(layout=labels, n_bands=6, seed=3)
    np.save(tmp_path / "cube.npy", scene.cube)
    np.save(tmp_path / "labels.npy", scene.labels)
    config = experiment.DataConfig(dataset=str(tmp_path / "cube.npy"),
                                   labels_path=str(tmp_path / "labels.npy"), split="disjoint",
                                   patch_size=5, seed=2)
    prepared = experiment.prepare(config)
    experiment.save(tmp_path / "run", config, prepared.split)
    loaded_config, loaded_split = experiment.load(tmp_path / "run")
    assert loaded_config == config
    np.testing.assert_array_equal(loaded_split.train, prepared.split.train)
    np.testing.assert_array_equal(loaded_split.test, prepared.split.test)
    other = stratified_split(prepared.scene.labels, train_fraction=0.3, seed=9)
    reused = experiment.prepare(config, other)   # a saved split wins over the settings'
    np.testing.assert_array_equal(reused.test.indices, other.test)
    with pytest.raises(ValueError, match=r"saved split is for a 4x4 image, but scene"):
        experiment.prepare(config, data.Split(np.array([0]), np.array([1]), (4, 4)))
    with pytest.raises(ValueError, match="holds no saved split"):
        experiment.load(tmp_path / "nothing")


def test_a_finished_runs_scene_is_found_from_any_folder(labels, tmp_path, monkeypatch):
    """data.json keeps the paths as given, relative to the folder the run started in
    (results.json's working_dir): ``load_as_trained`` reads them from there, from
    anywhere; a benchmark scene's name and an absolute path stay as they are."""
    started = tmp_path / "project"
    (started / "scene").mkdir(parents=True)
    scene = synthetic_scene(layout=labels, n_bands=6, seed=3)
    np.save(started / "scene" / "cube.npy", scene.cube)
    np.save(started / "scene" / "labels.npy", scene.labels)
    config = experiment.DataConfig(dataset="scene/cube.npy", labels_path="scene/labels.npy",
                                   train_set="sets/train.mat", test_set=str(tmp_path / "t.mat"),
                                   patch_size=3)
    monkeypatch.chdir(started)
    split = experiment.prepare(dataclasses.replace(config, train_set=None,
                                                   test_set=None)).split
    experiment.save(started / "run", config, split)
    assert experiment.load_as_trained(started / "run")[0] == config   # no working_dir yet
    (started / "run" / "results.json").write_text(json.dumps({"working_dir": str(started)}))
    monkeypatch.chdir(tmp_path)
    loaded, loaded_split = experiment.load_as_trained(started / "run")
    assert loaded == dataclasses.replace(
        config, dataset=str(started / "scene" / "cube.npy"),
        labels_path=str(started / "scene" / "labels.npy"),
        train_set=str(started / "sets" / "train.mat"))
    np.testing.assert_array_equal(loaded_split.train, split.train)
    assert experiment.load(started / "run")[0] == config   # what --resume compares
    named = experiment.DataConfig(dataset="indian_pines", data_dir="data")
    assert experiment.from_folder(named, "/w") == dataclasses.replace(named,
                                                                       data_dir="/w/data")
    # no --data_dir: the default ./data of the folder it started in, when it has one
    monkeypatch.delenv("HMP_DATA_DIR", raising=False)
    unnamed = experiment.DataConfig(dataset="indian_pines")
    assert experiment.from_folder(unnamed, str(started)) == unnamed
    (started / "data").mkdir()
    assert experiment.from_folder(unnamed, str(started)).data_dir == str(started / "data")
    # a project moved since: a path found from here and not from there stays relative
    (started / "scene").rename(tmp_path / "scene")   # tmp_path is the current folder
    assert experiment.from_folder(config, str(started)).dataset == "scene/cube.npy"


@pytest.mark.parametrize("given, units, divides", [
    ("auto", "radiance", True), ("auto", "reflectance", False), ("auto", None, False),
    ("on", "reflectance", True), ("on", None, True), ("off", "radiance", False)])
def test_brightness_is_divided_as_asked_and_by_default_on_radiance(given, units, divides,
                                                                    labels):
    scene = data.Scene("s", np.ones((*labels.shape, 3)), labels, units=units)
    config = experiment.DataConfig(brightness_norm=given)
    assert experiment.divides_brightness(config, scene) is divides


def test_a_radiance_scene_trains_on_spectra_over_their_brightness(labels, tmp_path):
    """With every default, the radiance kind's pixels reach the model divided by their
    brightness (floored: ``BrightnessNormaliser``) before the band scaling; the setting
    is kept in data.json (one from before it: the resume test below)."""
    config = experiment.DataConfig(synthetic_kind="radiance", patch_size=3, pca=4, seed=1)
    exp = experiment.prepare(config)
    assert exp.scene.units == "radiance"
    train = exp.split.train
    reference = data.Preprocessor("standard", 4)
    reference.fit(data.BrightnessNormaliser().fit(exp.scene.cube, train).transform(
        exp.scene.cube), train)
    floor = 0.25 * np.median(exp.scene.cube.reshape(-1, 100)[train].mean(axis=1))
    assert exp.preprocessor.brightness_norm.floor == pytest.approx(floor, rel=1e-9)
    np.testing.assert_allclose(exp.preprocessor.pca.components, reference.pca.components,
                               atol=1e-9)
    # the all-band cube a graph projects itself (--pca_in_graph) is divided too
    np.testing.assert_allclose(exp.preprocessor.pca.transform(exp.all_bands.padded),
                               exp.train.extractor.padded, atol=1e-4)
    experiment.save(tmp_path, config, exp.split)
    assert experiment.load(tmp_path)[0] == config


def test_classes_without_a_pixel_are_named_once(tmp_path, capsys):
    """A label map numbered with gaps (1, 2, 4 of 4: class 3 has no pixel) trains, and
    says that the model keeps an output nothing trains; without gaps, nothing is said."""
    from hmp.run.seed_data import load_experiment
    from hmp.run.settings import Settings
    from models import get_model
    labels = np.repeat(np.arange(1, 5), 6)[None, :].repeat(20, axis=0)   # 4 stripes
    scene = synthetic_scene(layout=labels, n_bands=6, seed=3)
    np.save(tmp_path / "cube.npy", scene.cube)
    for name, gaps in (("whole", ()), ("gap", (3,)), ("gaps", (1, 3))):
        gapped = np.where(np.isin(labels, gaps), 0, labels)
        np.save(tmp_path / ("%s.npy" % name), gapped)
        settings = Settings.of(dataset=str(tmp_path / "cube.npy"), patch_size=3, pca=0,
                               labels=str(tmp_path / ("%s.npy" % name)))
        exp = load_experiment(settings, get_model, seed=0)[0]
        assert exp.n_classes == 4 and exp.unlabelled_classes == list(gaps)
        said = [line for line in capsys.readouterr().out.splitlines() if "no labelled" in line]
        assert said == {(): [], (3,): [
            "class 3 has no labelled pixel: the model keeps an output for it, which nothing "
            "trains or scores (number the classes 1..K without gaps to leave it out)"],
            (1, 3): ["classes 1, 3 have no labelled pixel: the model keeps an output for "
                     "each, which nothing trains or scores (number the classes 1..K without "
                     "gaps to leave them out)"]}[gaps]


def test_a_run_keeps_whether_it_divided_and_resumes_by_that(tmp_path, capsys):
    """The seed's data settings say on or off, not auto (data.json keeps what the run
    did); --resume compares that: a run from before the setting (no key: off) resumes
    with the default on reflectance and is refused on radiance, where auto divides."""
    from hmp.cli import UsageError
    from hmp.run.resume import check_same_data
    from hmp.run.seed_data import load_experiment
    from hmp.run.settings import Settings
    from models import get_model
    for kind, done in (("radiance", "on"), ("reflectance", "off")):
        settings = Settings.of(synthetic_kind=kind, patch_size=3, pca=4)
        exp, _, resolved = load_experiment(settings, get_model, seed=0)
        assert resolved.brightness_norm == done
        assert (exp.preprocessor.brightness_norm is not None) is (done == "on")
        said = capsys.readouterr().out
        assert ("spectra divided by their brightness: --brightness_norm=auto (the scene "
                "holds radiance)" in said) is (done == "on")
        folder = tmp_path / kind
        experiment.save(folder, dataclasses.replace(resolved, brightness_norm="off"), exp.split)
        saved = json.loads((folder / experiment.CONFIG_FILE).read_text())
        del saved["brightness_norm"]
        (folder / experiment.CONFIG_FILE).write_text(json.dumps(saved))
        if done == "off":
            check_same_data(str(folder), resolved, exp.split)
        else:
            with pytest.raises(UsageError, match="trained with brightness_norm=off, not "
                                                 "brightness_norm=on"):
                check_same_data(str(folder), resolved, exp.split)


def test_a_prediction_map_holds_1_based_classes_at_its_pixels_and_0_elsewhere():
    predicted = report.prediction_map((3, 4), np.array([0, 5, 11]), np.array([2, 0, 1]))
    np.testing.assert_array_equal(predicted, [[3, 0, 0, 0], [0, 1, 0, 0], [0, 0, 0, 2]])
    assert predicted.dtype == np.int32


def test_summary_of_runs_is_the_mean_and_sample_std():
    runs = [{"overall_accuracy": oa, "average_accuracy": aa, "kappa": k}
            for oa, aa, k in ((0.9, 0.8, 0.85), (0.7, 0.6, 0.65), (0.8, 0.9, 0.75))]
    summary = report.summarise_runs(runs)
    for measure in report.SUMMARY_MEASURES:
        values = [run[measure] for run in runs]
        assert summary[measure]["mean"] == pytest.approx(sum(values) / 3)
        assert summary[measure]["std"] == pytest.approx(
            (sum((v - sum(values) / 3) ** 2 for v in values) / 2) ** 0.5)
    table = report.summary_table(summary, ["seed 0", "seed 1", "seed 2"]).splitlines()
    assert table[0].split() == ["run", "OA", "%", "AA", "%", "kappa%"]   # kappa x100 too
    assert [line.split() for line in table[1:4]] == [
        ["seed", "0", "90.00", "80.00", "85.00"], ["seed", "1", "70.00", "60.00", "65.00"],
        ["seed", "2", "80.00", "90.00", "75.00"]]
    assert table[-2].split() == ["mean", "80.00", "76.67", "75.00"]
    assert table[-1].split() == ["std", "10.00", "15.28", "10.00"]
    assert report.summarise_runs(runs[:1])["kappa"]["std"] == 0.0


@pytest.fixture(scope="module")
def scene_files(labels, tmp_path_factory):
    """(cube, labels) .npy files of a small synthetic scene on ``labels``."""
    folder = tmp_path_factory.mktemp("scene")
    scene = synthetic_scene(layout=labels, n_bands=6, seed=3)
    np.save(folder / "cube.npy", scene.cube)
    np.save(folder / "labels.npy", scene.labels)
    return str(folder / "cube.npy"), str(folder / "labels.npy")


def _chebyshev_gap(first, second, width):
    """The smallest Chebyshev distance between two sets of flat pixel indices."""
    (rows_a, cols_a), (rows_b, cols_b) = np.divmod(first, width), np.divmod(second, width)
    return np.maximum(np.abs(rows_a[:, None] - rows_b[None]),
                      np.abs(cols_a[:, None] - cols_b[None])).min()


@pytest.mark.parametrize("split, val_split, kind", [
    ("random", "auto", "random"), ("disjoint", "auto", "spatial"),
    ("train_set", "auto", "spatial"), ("disjoint", "random", "random"),
    ("random", "spatial", "spatial")])
def test_the_validation_share_is_held_out_as_asked(split, val_split, kind, labels,
                                                   scene_files, tmp_path):
    """random: a random share (``validation_split``), some of it inside training patches;
    spatial: apart from training by the patch radius (``spatial_validation_split``), the
    pixels in between dropped and said; auto: spatial for a disjoint split or a given
    training set, random for a random split."""
    cube, label_file = scene_files
    config = experiment.DataConfig(dataset=cube, labels_path=label_file, patch_size=5,
                                   seed=2, val_fraction=0.2, val_split=val_split,
                                   split="random" if split == "random" else "disjoint")
    if split == "train_set":   # the disjoint split's pixels, given as label maps
        given = disjoint_split(labels, train_fraction=0.1, patch_size=5, seed=2)
        for name, mask in (("train.npy", given.train_mask), ("test.npy", given.test_mask)):
            np.save(tmp_path / name, np.where(mask, labels, 0))
        config = dataclasses.replace(config, split="random",
                                     train_set=str(tmp_path / "train.npy"),
                                     test_set=str(tmp_path / "test.npy"))
    exp = experiment.prepare(config)
    assert experiment.validation_kind(config) == kind
    train, val = exp.train.indices, exp.val.indices
    held_out = (data.validation_split(labels, exp.split.train, 0.2, seed=2)
                if kind == "random" else
                data.spatial_validation_split(labels, exp.split.train, 0.2, 5))
    np.testing.assert_array_equal(train, held_out[0])
    np.testing.assert_array_equal(val, held_out[1])
    gap = _chebyshev_gap(val, train, labels.shape[1])
    dropped = len(exp.split.train) - len(train) - len(val)
    assert exp.guard_dropped == dropped
    line = experiment.describe_validation(exp, config)
    classes = len(np.unique(labels.ravel()[val]))
    if kind == "random":
        assert gap <= 2 and dropped == 0
        assert line.startswith("validation: %d pixels of %d classes, drawn at random"
                               % (len(val), classes))
    else:
        assert gap > 2 and dropped > 0
        assert line.startswith("validation: %d pixels of %d classes, blocks at one end of "
                               "each class's training pixels; the %d training pixels within "
                               "2 pixels of them dropped" % (len(val), classes, dropped))
    no_share = dataclasses.replace(config, val_fraction=0.0)
    assert experiment.describe_validation(experiment.prepare(no_share), no_share) is None


def test_given_sets_leave_their_no_data_pixels_out_as_unlabelled(labels, scene_files,
                                                                  tmp_path):
    """A pixel of --train_set whose spectrum holds NaN (no data): the set still agrees with
    the ground truth as its file holds it (it was refused as "another class than the
    ground truth": the no-data pixel reads 0 there once masked), and the pixel is left
    out, unlabelled, as a scene's no-data pixels are."""
    cube, label_file = scene_files
    holed = np.load(cube)
    given = stratified_split(labels, train_fraction=0.2, seed=1)
    hole = given.train[0]
    holed.reshape(-1, holed.shape[-1])[hole, 2] = np.nan
    np.save(tmp_path / "holed.npy", holed)
    for name, mask in (("train.npy", given.train_mask), ("test.npy", given.test_mask)):
        np.save(tmp_path / name, np.where(mask, labels, 0))
    exp = experiment.prepare(experiment.DataConfig(
        dataset=str(tmp_path / "holed.npy"), labels_path=label_file, patch_size=3,
        train_set=str(tmp_path / "train.npy"), test_set=str(tmp_path / "test.npy")))
    np.testing.assert_array_equal(exp.split.train, given.train[1:])
    np.testing.assert_array_equal(exp.split.test, given.test)


def test_an_unknown_validation_split_is_refused(scene_files):
    cube, label_file = scene_files
    with pytest.raises(ValueError, match="split 'stripes' is not known; choose one of "
                                         "random, spatial, auto"):
        experiment.prepare(experiment.DataConfig(dataset=cube, labels_path=label_file,
                                                 val_split="stripes"))


def test_score_table_shows_each_class_s_training_pixels_and_names_those_never_found():
    names = ["Corn", "Oats", "Wheat", "Woods"]
    y_true = np.array([0, 0, 0, 1, 1, 2, 2, 2, 2, 3])
    y_pred = np.array([0, 0, 2, 0, 3, 2, 2, 0, 2, 3])
    scores = evaluate(y_true, y_pred, 4)
    train_counts = np.array([40, 2, 0, 7])   # Wheat: not trained on
    lines = report.score_table(scores, names, train_counts=train_counts).splitlines()
    assert lines[0].split() == ["class", "train", "test", "precision", "recall", "F1"]
    for k, name in enumerate(names):
        hits = np.sum((y_true == k) & (y_pred == k))
        with np.errstate(invalid="ignore"):   # Oats is never predicted: precision nan
            recall, precision = hits / np.sum(y_true == k), hits / np.sum(y_pred == k)
        f1 = 2 * hits / (np.sum(y_true == k) + np.sum(y_pred == k))
        expected = [name, str(train_counts[k]), str(np.sum(y_true == k))] + [
            "%.2f" % (100 * v) if np.isfinite(v) else "-" for v in (precision, recall, f1)]
        assert lines[1 + k].split() == expected, lines[1 + k]
    assert lines[1 + 1].split()[3:] == ["-", "0.00", "0.00"]   # Oats: never predicted
    assert lines[-1] == ("recall 0 (no test pixel of the class classified right): "
                         "Oats (2 training, %d test pixels)" % np.sum(y_true == 1))
    assert "train" not in report.score_table(scores, names).splitlines()[0]
    saved = report.scores_dict(scores, names, train_counts)
    assert saved["per_class_train_pixels"] == {"Corn": 40, "Oats": 2, "Wheat": 0, "Woods": 7}
    assert saved["per_class_recall"]["Oats"] == 0.0
    assert saved["per_class_precision"]["Oats"] is None   # never predicted: JSON's null
    assert "per_class_train_pixels" not in report.scores_dict(scores, names)

