"""Use a trained run (issue 15): ``python -m hmp.predict``, the SavedModel export, and the
run's TensorBoard events, all on conftest's tiny run (trained on a 2-device filter split).

References: the run's own graph (``TrainingGraph`` on its plan) restored from its
checkpoint, the confusion matrix in its results.json, numpy's softmax, and the
run's results.json for the events.
"""

import dataclasses
import errno
import glob
import io
import json
import os
import pathlib
import re
import shutil

import numpy as np
import pytest
import tensorflow as tf2
import tensorflow.compat.v1 as tf
from matplotlib import image as mpimage

import harness
from cli_batch import HUNG_S, run_batch
from hmp.data import PatchExtractor, Preprocessor, Scene
from hmp.errors import InvalidInput
from hmp.evaluation.maps import LEGEND_ROW, class_colors
from hmp.evaluation.metrics import evaluate
from hmp.evaluation.smoothing import context, neighbourhood, smooth
from hmp.graph.graph import TrainingGraph
from hmp.graph.graph_config import Placement
from hmp.mesh import conv3d_gradient
from hmp import files
from hmp.run import experiment, export, fitted_preprocessing, inference, run_files
from hmp.run.fit import Fitted
from hmp.run.trainer import Trainer
from models import get_model, model_config

# TensorFlow's graph rewrites on, as hmp.predict runs, where its classes (argmaxes) are
# compared with this process's (harness.session_config); off where values are compared
# within a tolerance
SESSION = harness.session_config(rewrites=True)


@pytest.fixture(scope="module")
def run(tiny_run):
    process, model_dir = tiny_run
    assert process.returncode == 0, process.stderr[-2000:]
    results = json.loads((model_dir / "results.json").read_text())
    flags = results["flags"]
    exp = experiment.prepare(experiment.DataConfig(
        patch_size=flags["patch_size"], train_fraction=flags["train_fraction"],
        seed=flags["seed"]))
    return model_dir, results, exp


@pytest.fixture(scope="module")
def predicted(run, tmp_path_factory):
    """``python -m hmp.predict --model_dir=COPY`` (on this machine's one default device),
    COPY a copy of the run's folder elsewhere (its checkpoints name no folder), in the
    session's hmp.predict interpreter (tests/cli_batch.py, which this module's other
    runs of hmp.predict take too: one TensorFlow import fewer than a process of its
    own); returns (class map, probabilities, PNG pixels, stdout)."""
    model_dir = tmp_path_factory.mktemp("moved") / "run"
    shutil.copytree(run[0], model_dir)
    process, = run_batch("hmp.predict", [{"args": ["--model_dir=%s" % model_dir]}],
                         timeout=HUNG_S)
    assert process.returncode == 0, process.stderr[-2000:]
    out = model_dir / "prediction"
    png = (mpimage.imread(out / "class_map.png")[..., :3] * 255).round().astype(np.uint8)
    return (np.load(out / "class_map.npy"), np.load(out / "probabilities.npy"), png,
            process.stdout)


@pytest.fixture(scope="module")
def unsmoothed(run):
    """The class probabilities [H, W, K] of every pixel of the run's scene, unsmoothed: its
    model on one device in this process (``inference.classify``, what hmp.predict smooths)."""
    model_dir, _, exp = run
    trained = inference.TrainedRun.open(str(model_dir), get_model)
    return inference.classify(trained, trained.prepare_scene(exp.scene)[0], ["/cpu:0"], 1024,
                              SESSION)


def run_graph_probabilities(model_dir, results, exp, indices):
    """Class probabilities [pixels, K] of the pixels ``indices`` by the run's own graph:
    its plan's devices and splits, restored from its best checkpoint."""
    flags, plan = results["flags"], results["plan"]
    config = model_config(flags["model"], flags["patch_size"], exp.bands, exp.n_classes,
                          flags["width"])
    graph = TrainingGraph(config, Placement(plan["mesh"], plan["layout_rules"],
                                         tuple(plan["devices"]), plan["splits"]),
                          flags["batch_size"], exp.scene.labels.shape)
    batch, predictions = flags["batch_size"], []
    with tf.Session(graph=graph.tf_graph, config=SESSION) as session:
        graph.saver.restore(session, inference.TrainedRun.open(str(model_dir), get_model).checkpoint)
        session.run(graph.copy_masters_to_slices)
        graph.load_scene(session, exp.train.extractor.padded)
        for start in range(0, len(indices), batch):
            chunk = indices[start:start + batch]
            feed = graph.feed(np.resize(chunk, batch), np.zeros(batch, np.int32),
                              training=False)
            predictions.append(session.run(graph.probabilities, feed)[:len(chunk)])
    return np.concatenate(predictions)


def test_predicts_every_pixel_as_the_run_did_on_its_own_devices(run, predicted, unsmoothed):
    model_dir, results, exp = run
    class_map, probabilities, _, stdout = predicted
    height, width = exp.scene.labels.shape
    one_device = stdout.splitlines()[1].split(" on ")[-1].split(";")[0]   # /cpu:0 or /gpu:0
    assert one_device in ("/cpu:0", "/gpu:0") and len(results["plan"]["devices"]) == 2
    assert class_map.shape == (height, width) and class_map.dtype == np.int32
    assert class_map.min() >= 1 and class_map.max() <= exp.n_classes   # every pixel
    # unsmoothed, the run's test scores (smoothed, they read no training pixel's output,
    # which a map of the scene reads: test_scores_smooth_no_training_pixels_output)
    test_classes = unsmoothed.argmax(axis=2).ravel()[exp.test.indices]
    confusion = evaluate(exp.test.class_ids, test_classes, exp.n_classes).confusion
    np.testing.assert_array_equal(confusion,
                                  results["test_without_smoothing"]["confusion_matrix"])
    # the run's own graph on the pixels around some test pixels, smoothed as the run did:
    # guided by the guide fitted on its training pixels (the default)
    window, guided = results["smoothing"]["window"], results["smoothing"]["guided"]
    assert (window, guided) == (5, True)
    assert "probabilities smoothed over 5 x 5 pixels, guided" in stdout
    guide = exp.guide_image
    some = exp.test.indices[:128]
    around = neighbourhood(some, (height, width), context(window, guided))
    own = np.zeros((height * width, exp.n_classes), np.float32)
    own[around] = run_graph_probabilities(model_dir, results, exp, around)
    classified = np.isin(np.arange(height * width), around).reshape(height, width)
    smoothed = smooth(own.reshape(height, width, -1), window, classified, guide)
    np.testing.assert_array_equal(class_map.ravel()[some] - 1,
                                  smoothed.reshape(-1, exp.n_classes)[some].argmax(axis=1))
    assert probabilities.shape == (height, width, exp.n_classes)
    assert probabilities.dtype == np.float32
    np.testing.assert_allclose(probabilities.sum(axis=2), 1.0, atol=1e-5)
    np.testing.assert_array_equal(probabilities.argmax(axis=2) + 1, class_map)
    np.testing.assert_allclose(probabilities, smooth(unsmoothed, 5, guide=guide), atol=1e-5)


def test_the_smoothing_is_the_runs_or_the_one_asked_for(run, unsmoothed, tmp_path):
    """A guided run predicts with the window's mean when asked (``smoothing_guide=False``);
    a run from before the guided smoothing (results.json without ``smoothing.guided``,
    preprocessing.npz without a guide) smooths with the mean, and refuses in one line
    to be guided."""
    model_dir, results, exp = run
    model = get_model(results["flags"]["model"])
    guided = Fitted(str(model_dir), results, model)
    np.testing.assert_allclose(guided.predict(exp.scene.cube), smooth(
        unsmoothed, 5, guide=exp.guide_image), atol=1e-5)
    np.testing.assert_allclose(guided.predict(exp.scene.cube, smoothing_guide=False),
                               smooth(unsmoothed, 5), atol=1e-5)
    older = tmp_path / "older"
    shutil.copytree(model_dir, older)
    old_results = json.loads((older / "results.json").read_text())
    del old_results["smoothing"]["guided"]
    (older / "results.json").write_text(json.dumps(old_results))
    with np.load(older / "preprocessing.npz") as arrays:
        kept = {name: arrays[name] for name in arrays.files if not name.startswith("guide")}
    np.savez(older / "preprocessing.npz", **kept)
    trained = inference.TrainedRun.open(str(older), get_model)
    assert (trained.guided, trained.guide) == (False, None)
    default, asked = run_batch("hmp.predict", [
        {"args": ["--model_dir=%s" % older, "--out=%s" % (tmp_path / "mean")]},
        {"args": ["--model_dir=%s" % older, "--smoothing_guide", "--out=%s" % (tmp_path / "no")]}])
    assert default.returncode == 0, default.stderr[-2000:]
    np.testing.assert_allclose(np.load(tmp_path / "mean" / "probabilities.npy"),
                               smooth(unsmoothed, 5), atol=1e-5)
    assert asked.returncode == 2 and not (tmp_path / "no").exists()
    assert asked.stderr.strip().splitlines()[-1] == (
        "hmp.predict: error: --smoothing_guide=True: the run in %s keeps no guide (trained "
        "before the guided smoothing): smooth with the window's mean" % older)


def test_png_has_one_pixel_per_scene_pixel_and_a_legend(run, predicted):
    _, results, exp = run
    class_map, _, png, _ = predicted
    height, width = class_map.shape
    np.testing.assert_array_equal(png[:height, :width], class_colors(10)[class_map])
    legend_height = LEGEND_ROW * exp.n_classes + LEGEND_ROW // 2
    assert png.shape[0] == max(height, legend_height) and png.shape[1] > width + 100
    legend = png[:, width:].reshape(-1, 3)
    for color in class_colors(10)[1:]:   # a swatch of every class
        assert (legend == color).all(axis=1).sum() >= 50


def _softmax(logits):
    exp = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return exp / exp.sum(axis=-1, keepdims=True)


def test_saved_model_in_plain_tensorflow_gives_the_same_classes_and_tta(
        run, unsmoothed, tmp_path):
    """Exported with TTA: ``logits`` of the patches as given match hmp.predict's before its
    smoothing (no TTA), ``probabilities`` the mean softmax of the 8 symmetries turned in
    numpy."""
    model_dir, _, exp = run
    probabilities = unsmoothed
    export.export_saved_model(inference.TrainedRun.open(str(model_dir), get_model),
                              str(tmp_path / "model"), tta=True)
    pixels = exp.labelled.indices[::31][:300]   # more than one chunk of 256
    patches = PatchExtractor(exp.scene.cube, 5)(pixels).astype(np.float32)   # raw values
    turned = [np.ascontiguousarray(np.rot90(np.flip(patches, 2) if k >= 4 else patches,
                                            k % 4, axes=(1, 2))) for k in range(8)]
    with tf.Graph().as_default(), tf.Session() as session:
        serve = tf2.saved_model.load(str(tmp_path / "model")).signatures["serving_default"]
        outputs = session.run([serve(patches=tf.constant(p)) for p in turned])
    logits, tta = outputs[0]["logits"], outputs[0]["probabilities"]
    assert logits.shape == tta.shape == (300, 10) and tta.dtype == np.float32
    np.testing.assert_allclose(_softmax(logits), probabilities.reshape(-1, 10)[pixels],
                               atol=1e-5)
    np.testing.assert_array_equal(logits.argmax(axis=1),
                                  probabilities.reshape(-1, 10)[pixels].argmax(axis=1))
    reference = np.mean([_softmax(o["logits"]) for o in outputs], axis=0)
    np.testing.assert_allclose(tta, reference, atol=1e-6)
    assert np.abs(tta - _softmax(logits)).max() > 1e-3   # the symmetries do change it
    for other in outputs[1:]:   # TTA's mean is the same for every symmetry of the input
        np.testing.assert_allclose(other["probabilities"], tta, atol=1e-6)


def test_a_saved_brightness_normalisation_is_read_back_and_exported_as_fitted(tmp_path):
    """preprocessing.npz keeps the brightness floor: the preprocessing read back, and the
    SavedModel's graph (``export``), transform raw pixels as the fitted one does."""
    rng = np.random.default_rng(4)
    cube = rng.uniform(500, 3000, (6, 7, 5)) * rng.uniform(0.05, 2, (6, 7, 1))
    fitted = Preprocessor("standard", 3, brightness_norm=True).fit(cube, np.arange(20))
    assert 0 < fitted.brightness_norm.floor and (cube.mean(axis=2) < fitted.brightness_norm.floor).any()
    fitted_preprocessing.save(str(tmp_path), fitted)
    loaded = fitted_preprocessing.load(str(tmp_path))
    assert loaded.brightness_norm.floor == fitted.brightness_norm.floor
    np.testing.assert_array_equal(loaded.transform(cube), fitted.transform(cube))
    with tf.Graph().as_default(), tf.Session() as session:
        exported = session.run(export._preprocess(tf.constant(cube, tf.float32), loaded))
    np.testing.assert_allclose(exported, fitted.transform(cube.astype(np.float32)), atol=1e-5)
    plain = Preprocessor("standard", 3).fit(cube, np.arange(20))
    fitted_preprocessing.save(str(tmp_path), plain)
    assert fitted_preprocessing.load(str(tmp_path)).brightness_norm is None


def test_preprocessing_keeps_the_bands_wavelengths_and_their_units(tmp_path):
    cube = np.random.default_rng(5).uniform(0, 1, (4, 5, 3))
    fitted = Preprocessor("standard").fit(cube, np.arange(20))
    fitted_preprocessing.save(str(tmp_path), fitted, (0.4, 0.5, 0.6), None, "Micrometers")
    saved = fitted_preprocessing.read(str(tmp_path))
    assert (saved.wavelengths, saved.wavelength_units) == ((0.4, 0.5, 0.6), "Micrometers")
    fitted_preprocessing.save(str(tmp_path), fitted, (400.0, 500.0, 600.0))   # none named
    saved = fitted_preprocessing.read(str(tmp_path))
    assert (saved.wavelengths, saved.wavelength_units) == ((400.0, 500.0, 600.0), None)


def test_a_preprocessing_file_hmp_did_not_write_is_refused_naming_what_it_lacks(tmp_path):
    """An .npz of other arrays, or one missing a written array's companions, is refused
    (it would have preprocessed nothing, or failed with a KeyError)."""
    rng = np.random.default_rng(5)
    cube = rng.uniform(0, 1, (6, 7, 5))
    fitted_preprocessing.save(str(tmp_path), Preprocessor("standard", 3).fit(cube, np.arange(20)))
    with np.load(tmp_path / fitted_preprocessing.FILE_NAME) as stored:
        written = dict(stored)
    def without(*names):
        return {k: v for k, v in written.items() if k not in names}

    for arrays, lacking in (({"weights": np.ones(3)}, "neither band scaling nor PCA"),
                            (without("scale"), "it lacks scale"),
                            (without("offset", "scale"), "it lacks offset and scale"),
                            (without("scaling"), "it lacks scaling"),   # companions alone
                            (without("pca_mean"), "it lacks pca_mean")):
        np.savez(tmp_path / fitted_preprocessing.FILE_NAME, **arrays)
        with pytest.raises(InvalidInput, match="^%s$" % re.escape(
                "%s holds a preprocessing.npz that hmp did not write (%s); train the run "
                "again" % (tmp_path, lacking))):
            fitted_preprocessing.load(str(tmp_path))
    np.savez(tmp_path / fitted_preprocessing.FILE_NAME, **written)
    np.testing.assert_array_equal(fitted_preprocessing.load(str(tmp_path)).transform(cube),
                                  Preprocessor("standard", 3).fit(cube, np.arange(20)).transform(cube))
    with pytest.raises(ValueError, match="scales its bands or reduces them"):   # nor written
        fitted_preprocessing.save(str(tmp_path), Preprocessor(None).fit(cube, np.arange(20)))


def test_an_exported_graph_keeps_no_hmp_gradient_override():
    """A SavedModel's ops carry no ``_gradient_op_type`` (hmp's 3-D convolution gradient,
    which plain TensorFlow does not know); every other attribute stays."""
    with tf.Graph().as_default() as graph:
        x, w = tf.zeros([1, 6, 5, 5, 1]), tf.ones([3, 3, 3, 1, 2])
        conv3d_gradient.conv3d(x, w, (2, 1, 1), "VALID")
        before = graph.as_graph_def()
    after = export.without_hmp_gradients(graph.as_graph_def())
    overridden = [n.name for n in before.node if "_gradient_op_type" in n.attr]
    assert overridden == ["Conv3D"]
    assert not [n.name for n in after.node if "_gradient_op_type" in n.attr]
    for old, new in zip(before.node, after.node):
        assert {k: v for k, v in old.attr.items() if k != "_gradient_op_type"} == dict(
            new.attr.items())


def test_a_checkpoint_of_weights_of_other_shapes_is_refused_naming_one(run):
    """TensorFlow restores a resource variable from a checkpoint tensor of another shape
    without a word (the graph would then fail, or classify wrongly): the weights' shapes
    are compared first."""
    trained = inference.TrainedRun.open(str(run[0]), get_model)
    for flags, model, weight in (
            ({"width": 8}, trained.model,
             "block1/split_out/kernel is [3, 3, 100, 8] there, [3, 3, 100, 16]"),
            ({"model": "spectral"}, get_model("spectral"),
             "hidden/kernel is [3, 3, 4, 16] there, [1, 1, 100, 8]")):
        other = dataclasses.replace(trained, flags={**trained.flags, **flags}, model=model)
        with pytest.raises(InvalidInput) as refused:
            inference.Classifier(other, ["/cpu:0"], 16, (10, 10))
        assert str(refused.value) == ("checkpoint %s does not fit the model of its run "
                                      "(%s in the model)" % (trained.checkpoint, weight))


def test_a_runs_smoothing_is_read_from_results_json_and_none_for_runs_from_before_it():
    """A results.json without "smoothing" (a run from before --smoothing): no window (1),
    not guided, so older runs predict as they scored; a run of window 1 is guided as its
    flag asked."""
    assert (inference.smoothed_over({}), inference.smoothed_guided({})) == (1, False)
    results = {"smoothing": {"window": 7, "guided": True}}
    assert (inference.smoothed_over(results), inference.smoothed_guided(results)) == (7, True)
    # a run that smoothed nothing: hmp.predict --smoothing=N follows its --smoothing_guide
    for flag in (True, False):
        unsmoothed = {"smoothing": {"window": 1, "guided": False},
                      "flags": {"smoothing_guide": flag}}
        assert inference.smoothed_guided(unsmoothed) is flag


def test_a_run_without_checkpoint_or_results_and_a_cube_of_other_bands_are_refused(
        run, tmp_path):
    model_dir = run[0]
    with pytest.raises(InvalidInput, match="^no such folder$"):
        inference.TrainedRun.open(str(tmp_path / "nothing"), get_model)
    with pytest.raises(InvalidInput) as refused:
        inference.TrainedRun.open(str(tmp_path), get_model)
    assert str(refused.value) == "%s holds no finished run (no readable results.json)" % tmp_path
    # checkpoints, no results: a run stopped before its end; the flags that finish it are
    # its flags.txt's, a --runs series' for its seed's folder, or said in words
    stopped, series = tmp_path / "stopped", tmp_path / "series"
    for folder in (stopped, series / "seed-1"):
        folder.mkdir(parents=True)
        for path in [model_dir / "checkpoint", *model_dir.glob("ckpt-*")]:
            (folder / path.name).write_bytes(path.read_bytes())
    for folder in (stopped, series):
        (folder / "flags.txt").write_bytes((model_dir / "flags.txt").read_bytes())
    with open(series / "flags.txt", "a", encoding="utf-8") as f:   # a series' names --runs
        f.write("--runs=2\n")
    finish = {stopped: "--flagfile=%s --resume" % (stopped / "flags.txt"),
              series / "seed-1": "--flagfile=%s --resume" % (series / "flags.txt")}
    for folder, flags in finish.items():
        with pytest.raises(InvalidInput) as refused:
            inference.TrainedRun.open(str(folder), get_model)
        assert str(refused.value) == (
            "%s holds no finished run (no readable results.json); its training stopped before "
            "the end: finish it with python -m hmp.train %s" % (folder, flags))
    (series / "flags.txt").unlink()
    with pytest.raises(InvalidInput) as refused:
        inference.TrainedRun.open(str(series / "seed-1"), get_model)
    assert str(refused.value).endswith("finish it with python -m hmp.train --resume and the "
                                       "flags that started it")
    for seed in (1, 0):   # the folder of --runs=2: its runs are its seeds' (their data)
        (tmp_path / ("seed-%d" % seed)).mkdir()
        (tmp_path / ("seed-%d" % seed) / "data.json").write_text("{}")
    with pytest.raises(InvalidInput) as refused:
        inference.TrainedRun.open(str(tmp_path), get_model)
    assert str(refused.value) == (
        "%s holds no finished run (no readable results.json); it holds the runs of --runs: "
        "give one of them, e.g. %s" % (tmp_path, tmp_path / "seed-0"))
    for name in ("results.json", "preprocessing.npz"):
        (tmp_path / name).write_bytes((model_dir / name).read_bytes())
    with pytest.raises(InvalidInput, match="holds no checkpoint"):
        inference.TrainedRun.open(str(tmp_path), get_model)
    trained = inference.TrainedRun.open(str(model_dir), get_model)
    np.save(tmp_path / "cube.npy", np.ones((6, 7, 90), np.float32))
    cube = inference.open_cube(trained.data_config(dataset=str(tmp_path / "cube.npy")))
    assert cube.shape == (6, 7, 90)   # a cube file opens without labels
    for check in (lambda: trained.check_bands(cube.shape[2], cube.info.wavelengths),
                  lambda: trained.prepare_scene(Scene("c", cube.read_all(),
                                                      np.zeros((6, 7), np.int32)))):
        with pytest.raises(InvalidInput, match="the cube has 90 bands; the run in .* was "
                                               "trained on 100$"):
            check()
    # a scene of the run's bands in micrometres, the run's file in nanometres: one band set
    in_nm = dataclasses.replace(trained, wavelengths=tuple(400.0 + 10 * np.arange(100)),
                                wavelength_units="Nanometers")
    in_um = tuple((400.0 + 10 * np.arange(100)) / 1000)
    in_nm.check_bands(100, in_um, "Micrometers")
    with pytest.raises(InvalidInput, match=r"^the cube has 98 bands \(bands 3, 7 left out: its "
                                           r"header's bad band list, bbl\); the run in .* was "
                                           r"trained on 100$"):
        trained.check_bands(98, (), None, (3, 7))
    with pytest.raises(InvalidInput, match=r"^the cube: band 1 lies at wavelength 0.4, but "
                                           r"at 400 in the scene the run was trained on"):
        in_nm.check_bands(100, in_um)   # the scene's file names no units
    (tmp_path / "a_file").write_text("")
    with pytest.raises(InvalidInput, match="^not a folder$"):
        inference.TrainedRun.open(str(tmp_path / "a_file"), get_model)
    with pytest.raises(OSError, match="^cannot write in .*a_file/model: Not a directory$"):
        export.export_saved_model(trained, str(tmp_path / "a_file" / "model"))
    assert (tmp_path / "a_file").read_text() == ""


def test_a_run_without_its_preprocessing_or_with_it_damaged_is_refused_in_one_line(
        run, tmp_path):
    missing, damaged = tmp_path / "missing", tmp_path / "damaged"
    for folder in (missing, damaged):
        shutil.copytree(run[0], folder)
    (missing / "preprocessing.npz").unlink()
    (damaged / "preprocessing.npz").write_text("not arrays\n")
    refused = run_batch("hmp.predict", [{"args": ["--model_dir=%s" % folder]}
                                        for folder in (missing, damaged)])
    assert [(process.returncode, process.stderr) for process in refused] == [
        (2, "hmp.predict: error: --model_dir=%s: %s holds no preprocessing.npz (the "
            "preprocessing statistics of its training pixels); train the run again with "
            "this version of hmp\n" % (missing, missing)),
        (2, "hmp.predict: error: --model_dir=%s: %s holds a damaged preprocessing.npz (not "
            "a numpy .npz file); train the run again\n" % (damaged, damaged))]
    assert not (missing / "prediction").exists() and not (damaged / "prediction").exists()


def test_a_device_list_of_no_device_is_refused_naming_the_flag(run, tmp_path):
    out = tmp_path / "out"
    refused, = run_batch("hmp.predict", [{"args": ["--model_dir=%s" % run[0], "--devices=,",
                                                   "--out=%s" % out]}])
    assert (refused.returncode, refused.stderr) == (
        2, "hmp.predict: error: --devices=,: give at least one TensorFlow device, e.g. "
           "/cpu:0\n")
    assert not out.exists()


def test_a_missing_model_dir_counts_too_small_and_a_runs_folder_are_refused(run, tmp_path):
    """In hmp's words, nothing written (a prediction among a run's files would outlive
    the run: run_folder.check_holds_no_run)."""
    out, a_run = tmp_path / "out", tmp_path / "a_run"   # a run's folder: its history.json
    a_run.mkdir()
    (a_run / "history.json").write_bytes((run[0] / "history.json").read_bytes())
    given = ["--batch_size=0", "--memory_mb=-5", "--seed=-1"]
    *refused, into_run = run_batch("hmp.predict", [{"args": []}, *(
        {"args": ["--model_dir=%s" % run[0], "--out=%s" % out, flag]} for flag in given),
        {"args": ["--model_dir=%s" % run[0], "--out=%s" % a_run]}])
    assert [(p.returncode, p.stderr) for p in refused] == [
        (2, "hmp.predict: error: --model_dir is required\n"),
        *((2, "hmp.predict: error: %s: %s must be a whole number >= %d, got %s\n"
           % (flag, flag[2:].split("=")[0], least, flag.split("=")[1]))
          for flag, least in zip(given, (1, 1, 0)))]
    assert (into_run.returncode, into_run.stderr) == (
        2, "hmp.predict: error: --out=%s: %s holds a run (history.json); give another folder\n"
        % (a_run, a_run))
    assert not out.exists() and sorted(p.name for p in a_run.iterdir()) == ["history.json"]


def test_a_synthetic_runs_scene_is_of_the_kind_it_trained_on():
    """A run of the radiance kind predicts on that scene (the kind was left out: its maps
    classified the reflectance scene of the same seed); a run from before the flag is of
    the reflectance kind; --synthetic_kind given changes it."""
    flags = {"dataset": "synthetic", "data_dir": None, "labels": None, "cube_key": None,
             "labels_key": None, "synthetic_layout": "generated", "seed": 3}
    run = inference.TrainedRun("run", {**flags, "synthetic_kind": "radiance"}, [], None,
                               None, None)
    assert run.data_config() == experiment.DataConfig(synthetic_kind="radiance", seed=3)
    assert run.data_config(synthetic_kind="reflectance") == experiment.DataConfig(seed=3)
    older = inference.TrainedRun("run", flags, [], None, None, None)
    assert older.data_config() == experiment.DataConfig(seed=3)


def test_a_file_scenes_flag_for_a_named_scene_is_refused_as_hmp_train_refuses_it(run, tmp_path):
    """--labels, --cube_key and --labels_key would be ignored for the run's synthetic scene
    (or a benchmark scene named): one line, as hmp.train says it, nothing written."""
    out = tmp_path / "out"
    refused = run_batch("hmp.predict", [
        {"args": ["--model_dir=%s" % run[0], "--out=%s" % out, flag]}
        for flag in ("--labels=gt.mat", "--cube_key=x")])
    assert [(p.returncode, p.stderr) for p in refused] == [
        (2, "hmp.predict: error: --labels=gt.mat: only for a --dataset given as a cube file, "
            "not --dataset=synthetic\n"),
        (2, "hmp.predict: error: --cube_key=x: only for a --dataset given as a cube file, "
            "not --dataset=synthetic\n")]
    assert not out.exists()


def test_a_batch_split_over_two_devices_gives_the_same_probabilities(run, unsmoothed):
    model_dir, _, exp = run
    trained = inference.TrainedRun.open(str(model_dir), get_model)
    cube, nodata = trained.prepare_scene(exp.scene)
    assert not nodata.any()
    probabilities = inference.classify(trained, cube[:16, :14], ["/cpu:0", "/cpu:1"], 50,
                                       harness.session_config())   # 4 batches and 24 pixels
    inner = (slice(2, 14), slice(2, 12))   # whose patches lie inside the 16 x 14 crop
    np.testing.assert_allclose(probabilities[inner], unsmoothed[inner], atol=1e-5)


def _in_symmetry(image, k):
    """``image`` [H, W, ...] flipped left-right when k >= 4, then turned k % 4 quarter turns
    counter-clockwise: each pixel's patch turns with it (reflect padding turns too)."""
    return np.rot90(np.flip(image, 1) if k >= 4 else image, k % 4)


def _back_from_symmetry(image, k):
    turned = np.rot90(image, -(k % 4))
    return np.flip(turned, 1) if k >= 4 else turned


@pytest.fixture(scope="module")
def tta(run):
    """(the run, its model's input cube cropped to 14 x 14, the mean class probabilities
    of the 8 symmetries (with --tta) on one device and on an uneven batch split (26, 25),
    and the reference: the mean of the probabilities of the 8 turned crops, each turned
    back, from one device without TTA [8, 14, 14, classes])."""
    model_dir, _, exp = run
    trained = inference.TrainedRun.open(str(model_dir), get_model)
    crop = trained.prepare_scene(exp.scene)[0][:14, :14]
    one, two = (inference.classify(trained, crop, devices, 51, harness.session_config(),
                                   tta=True)
                for devices in (["/cpu:0"], ["/cpu:0", "/cpu:1"]))   # 4 batches, 196 pixels
    graph = inference.InferenceGraph(trained.model_config,
                                     inference.batch_placement(["/cpu:0"], 196), 196, (14, 14))
    variants = []
    with tf.Session(graph=graph.tf_graph, config=harness.session_config()) as session:
        graph.restore(session, trained.checkpoint)
        for k in range(8):
            graph.scene.load(session, PatchExtractor(np.ascontiguousarray(
                _in_symmetry(crop, k)), 5).padded)
            turned = session.run(graph.probabilities, {graph.indices: np.arange(196)})
            variants.append(_back_from_symmetry(turned.reshape(14, 14, -1), k))
    return trained, crop, one, two, np.array(variants)


def test_tta_is_the_mean_over_the_turned_scenes_and_exact_on_an_uneven_batch_split(tta):
    _, _, one, two, variants = tta
    assert inference.batch_placement(["/cpu:0", "/cpu:1"], 51).splits["batch"] == [26, 25]
    assert one.shape == two.shape == (14, 14, 10) and two.dtype == np.float32
    np.testing.assert_allclose(two, one, atol=1e-6)
    np.testing.assert_allclose(two, variants.mean(axis=0), atol=1e-5)
    assert np.abs(two - variants[0]).max() > 1e-3   # the symmetries do change the mean


def test_training_runs_tta_on_its_own_plan_as_inference_does(run, tta, tmp_path):
    """``Trainer.probabilities`` (hmp.train's path) on the run's 2-device filter split."""
    model_dir, results, exp = run
    trained, _, one, _, variants = tta
    flags, plan = results["flags"], results["plan"]
    graph = TrainingGraph(trained.model_config, Placement(
        plan["mesh"], plan["layout_rules"], tuple(plan["devices"]), plan["splits"]),
        flags["batch_size"], exp.scene.labels.shape)
    trainer = Trainer(graph, exp, str(tmp_path), session_config=harness.session_config())
    trainer.restore(trained.checkpoint)
    rows, cols = np.divmod(exp.labelled.indices, exp.scene.labels.shape[1])
    inner = exp.labelled.indices[(rows >= 2) & (rows < 12) & (cols >= 2) & (cols < 12)]
    probabilities = trainer.probabilities(inner, tta=True)
    trainer.close()
    assert probabilities.shape == (8, len(inner), 10) and len(inner) > 50
    rows, cols = np.divmod(inner, exp.scene.labels.shape[1])
    np.testing.assert_allclose(probabilities.mean(axis=0), one[rows, cols], atol=1e-5)
    np.testing.assert_allclose(probabilities[0], variants[0][rows, cols], atol=1e-5)


# -- TensorBoard events --------------------------------------------------------------------

def events(model_dir):
    """{tag: [(step, value)]}: scalars as numbers, text as str, images as uint8 RGB."""
    found = {}
    for path in sorted(glob.glob(str(model_dir / "events.out.tfevents.*"))):
        for event in tf.train.summary_iterator(path):
            for value in event.summary.value:
                if value.HasField("image"):
                    content = (mpimage.imread(io.BytesIO(value.image.encoded_image_string))
                               [..., :3] * 255).round().astype(np.uint8)
                elif value.HasField("tensor"):
                    content = value.tensor.string_val[0].decode()
                else:
                    content = value.simple_value
                found.setdefault(value.tag, []).append((event.step, content))
    return found


def test_events_hold_what_results_json_says(run, predicted):
    model_dir, results, exp = run
    found = events(model_dir)
    steps = np.cumsum([h["steps"] for h in results["history"]]).tolist()
    for tag in ("loss", "train_accuracy", "samples_per_second"):
        assert found[tag] == [(s, np.float32(h[tag])) for s, h in zip(steps, results["history"])]
    for i, device in enumerate(results["plan"]["devices"]):
        assert found["busy_share/" + device.lstrip("/")] == [
            (s, np.float32(h["busy_seconds"][i] / sum(h["busy_seconds"])))
            for s, h in zip(steps, results["history"])]
    for tag in ("overall_accuracy", "average_accuracy", "kappa"):
        assert found["test/" + tag] == [(results["step"], np.float32(results["test"][tag]))]
    [(step, text)] = found["plan"]
    assert step == 0 and "mesh %s (" % results["plan"]["mesh"] in text
    assert all(device in text for device in results["plan"]["devices"])
    [(step, image)] = found["classification_map"]
    height, width = exp.scene.labels.shape
    assert step == results["step"]
    # the map the run scored: its test pixels' classes give results.json's confusion; its
    # other labelled pixels are smoothed as hmp.predict smooths
    colors = class_colors(10)
    shown = (image[:height, :width, None, :] == colors[None, None]).all(axis=3).argmax(axis=2)
    test = np.zeros(height * width, bool)
    test[exp.test.indices] = True
    np.testing.assert_array_equal(
        evaluate(exp.test.class_ids, shown.ravel()[exp.test.indices] - 1, 10).confusion,
        results["test"]["confusion_matrix"])
    others = (exp.scene.labels.ravel() > 0) & ~test
    np.testing.assert_array_equal(shown.ravel()[others], predicted[0].ravel()[others])


def test_the_checkpoint_lists_name_no_folder_so_a_run_can_move(run):
    for name in ("checkpoint", "best_checkpoint"):
        paths = [line.split(": ")[1].strip('"') for line in
                 (run[0] / name).read_text().splitlines()]
        assert paths and all(re.fullmatch(r"(best-)?ckpt-\d+", p) for p in paths), paths


def _tree(folder):
    """{path relative to ``folder``: file bytes, or None for a folder} of all it holds."""
    return {str(p.relative_to(folder)): None if p.is_dir() else p.read_bytes()
            for p in sorted(folder.rglob("*"))}


def test_an_export_replaces_only_an_earlier_saved_models_entries(run, tmp_path):
    """An earlier SavedModel's entries are replaced, and said so, and a folder of other
    files gets the SavedModel beside them: the other files are kept in both. A folder with
    a SavedModel's entry but no saved_model.pb is refused in one line and left as it was."""
    assert not export.replaces(str(tmp_path / "new"))
    with pytest.raises(InvalidInput) as refused:   # a run's folder, the run itself
        export.replaces(str(run[0]))
    assert str(refused.value).startswith("%s holds a run (a checkpoint at step " % run[0])
    assert str(refused.value).endswith("results.json, history.json); give another folder")
    (tmp_path / "empty").mkdir()
    assert not export.replaces(str(tmp_path / "empty"))
    (tmp_path / "empty").rmdir()
    earlier, other, stray = tmp_path / "earlier", tmp_path / "other", tmp_path / "stray"
    for folder in (earlier, other, stray):
        (folder / "notes").mkdir(parents=True)
        (folder / "README.txt").write_text("mine")
        (folder / "notes" / "a.txt").write_text("also mine")
    for name in ("saved_model.pb", "fingerprint.pb"):   # as tf.saved_model.save leaves them
        (earlier / name).write_bytes(b"earlier")
    (earlier / "variables").mkdir()
    (earlier / "variables" / "variables.index").write_bytes(b"earlier")
    (stray / "variables").mkdir()
    before = _tree(stray)
    exported, replaced, refused = run_batch("hmp.predict", [
        {"args": ["--model_dir=%s" % run[0], "--export=%s" % folder]}
        for folder in (other, earlier, stray)])
    assert exported.returncode == replaced.returncode == 0, (exported.stderr, replaced.stderr)
    assert "replaced" not in exported.stdout
    assert "; it replaced the SavedModel there\n" in replaced.stdout
    for folder in (other, earlier):   # the earlier entries gone, none left beside
        tree = _tree(folder)
        kept = {name: data for name, data in tree.items()
                if name.split("/")[0] not in export.ENTRIES}
        assert kept == {"README.txt": b"mine", "notes": None, "notes/a.txt": b"also mine"}
        assert {name.split("/")[0] for name in tree} - set(kept) == {
            "saved_model.pb", "variables"}   # what TensorFlow's Builder writes
        assert tree.keys() == _tree(other).keys()
    assert (earlier / "saved_model.pb").read_bytes() != b"earlier"
    with tf.Graph().as_default():
        assert "serving_default" in tf2.saved_model.load(str(earlier)).signatures
    assert (refused.returncode, refused.stdout, refused.stderr) == (
        2, "", "hmp.predict: error: --export=%s: %s holds variables but no saved_model.pb "
               "(no earlier SavedModel), which an export there would replace; give another "
               "folder\n" % (stray, stray))
    assert _tree(stray) == before
    assert sorted(os.listdir(tmp_path)) == ["earlier", "other", "stray"]   # no staging left


def test_a_prediction_replaces_the_earlier_ones_files_of_any_format(tmp_path):
    """A prediction's files replace an earlier prediction's once all are written: an
    earlier GeoTIFF map goes with the rest when the new one is of an ENVI scene (it would
    describe another prediction), a file of the user's stays."""
    out = tmp_path / "prediction"
    out.mkdir()
    for name in ("probabilities.npy", "class_map.npy", "class_map.png", "class_map.tif",
                 "notes.txt"):
        (out / name).write_text("earlier " + name)
    written = ["probabilities.npy", "class_map.npy", "class_map.png", "class_map.hdr",
               "class_map.img"]
    with files.replacing_entries(str(out), run_files.PREDICTION_FILES) as new:
        os.mkdir(new)
        for name in written:
            (pathlib.Path(new) / name).write_text("new " + name)
    assert _tree(out) == {**{name: b"new " + name.encode() for name in written},
                          "notes.txt": b"earlier notes.txt"}
    assert os.listdir(tmp_path) == ["prediction"]


def test_an_export_into_a_folder_of_its_own_filesystem_moves_nothing_across(tmp_path,
                                                                           monkeypatch):
    """A folder that exists (a mount point, say) gets its SavedModel written inside it:
    here every move from outside the folder into it fails as a move across filesystems
    does (EXDEV), and the export still replaces the earlier entries, leaving nothing
    behind inside the folder or beside it."""
    folder = tmp_path / "mounted"
    folder.mkdir()
    for name in ("saved_model.pb", "README.txt"):
        (folder / name).write_text("earlier " + name)
    replace = os.replace

    def within_one_filesystem(source, target):
        inside = [str(p).startswith(str(folder) + os.sep) for p in (source, target)]
        if inside[0] != inside[1]:
            raise OSError(errno.EXDEV, "Invalid cross-device link")
        replace(source, target)

    monkeypatch.setattr(os, "replace", within_one_filesystem)
    with files.replacing_entries(str(folder), export.ENTRIES) as new:
        os.makedirs(os.path.join(new, "variables"))
        for name in ("saved_model.pb", "variables/v.index"):
            (pathlib.Path(new) / name).write_text("new " + name)
    assert _tree(folder) == {"README.txt": b"earlier README.txt",
                             "saved_model.pb": b"new saved_model.pb", "variables": None,
                             "variables/v.index": b"new variables/v.index"}
    assert os.listdir(tmp_path) == ["mounted"]


def test_an_export_that_fails_half_way_leaves_the_folder_as_it_was(tmp_path, monkeypatch):
    """A failure while the SavedModel is written, or while its entries are moved in (here
    the third move: two of the earlier SavedModel's entries moved aside), leaves the
    folder as it was and nothing beside it."""
    folder = tmp_path / "model"
    (folder / "variables").mkdir(parents=True)
    for name in ("saved_model.pb", "fingerprint.pb", "README.txt", "variables/v.index"):
        (folder / name).write_text("earlier " + name)
    before = _tree(folder)
    with pytest.raises(RuntimeError, match="^the builder failed$"):
        with files.replacing_entries(str(folder), export.ENTRIES) as new:
            os.mkdir(new)
            (pathlib.Path(new) / "saved_model.pb").write_text("new")
            raise RuntimeError("the builder failed")
    assert _tree(folder) == before and os.listdir(tmp_path) == ["model"]
    moves, replace = [], os.replace

    def third_fails(source, target):
        moves.append(os.path.basename(source))
        if len(moves) == 3:
            raise OSError(28, "No space left on device")
        replace(source, target)

    monkeypatch.setattr(os, "replace", third_fails)
    with pytest.raises(OSError, match="No space left on device"):
        with files.replacing_entries(str(folder), export.ENTRIES) as new:
            os.makedirs(os.path.join(new, "variables"))
            for name in ("saved_model.pb", "variables/v.index"):
                (pathlib.Path(new) / name).write_text("new")
    assert moves[:3] == ["saved_model.pb", "fingerprint.pb", "variables"]
    assert _tree(folder) == before and os.listdir(tmp_path) == ["model"]
