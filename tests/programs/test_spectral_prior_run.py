"""--spectral_prior as a user runs it: a tiny run fused with its prior scores its test
pixels as the network's probabilities fused in numpy with a prior fitted again on its
training pixels; hmp.predict (tile by tile), the whole scene at once, the Python API's
predict and the exported SavedModel fuse alike."""

import json
import re
import shutil
import types

import numpy as np
import pytest
import tensorflow as tf2
import tensorflow.compat.v1 as tf

import harness
from cli_batch import HUNG_S, run_batch
from hmp.data import PatchExtractor, Preprocessor
from hmp.evaluation.metrics import evaluate
from hmp.evaluation.spectral_prior import ShrinkageLDA, SpectralPrior, patch_means
from hmp.run import experiment, export, inference
from hmp.run.fit import Fitted
from models import get_model

WEIGHT = 0.5
FLAGS = ["--model=spectral", "--width=4", "--patch_size=5", "--batch_size=64",
         "--train_fraction=0.05", "--devices=/cpu:0", "--epochs=1", "--notta", "--smoothing=1"]
SESSION = harness.session_config(rewrites=True)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """(folder, results.json, its experiment as saved, its TrainedRun) of a tiny run on one
    device with --spectral_prior=0.5, unsmoothed (--smoothing=1)."""
    model_dir = tmp_path_factory.mktemp("prior") / "run"
    done, = run_batch("hmp.train", [{"args": [*FLAGS, "--spectral_prior=%g" % WEIGHT,
                                              "--model_dir=%s" % model_dir]}],
                      timeout=HUNG_S)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "fused with the spectral prior (--spectral_prior=0.5)" in done.stdout
    results = json.loads((model_dir / "results.json").read_text())
    exp = experiment.prepare(*experiment.load(str(model_dir)))
    return model_dir, results, exp, inference.TrainedRun.open(str(model_dir), get_model)


@pytest.fixture(scope="module")
def network(run):
    """The network's own class probabilities [H, W, K] of every pixel (no prior)."""
    _, _, exp, trained = run
    return inference.classify(trained, trained.prepare_scene(exp.scene)[0], ["/cpu:0"], 1024,
                              SESSION)


def _refit(exp):
    return SpectralPrior.fit(exp.all_bands, exp.train.indices, exp.train.class_ids,
                             exp.n_classes, WEIGHT)


def test_a_run_scores_its_test_pixels_fused_with_its_prior(run, network):
    """The prior it keeps is the one fitted again on its training pixels; its test scores
    are the network's probabilities fused with it in numpy, and differ from the
    network's alone."""
    _, results, exp, trained = run
    refit = _refit(exp)
    assert trained.prior.weight == WEIGHT
    np.testing.assert_allclose(trained.prior.lda.coef, refit.lda.coef, rtol=1e-9)
    np.testing.assert_array_equal(trained.prior.lda.intercept, refit.lda.intercept)
    test = exp.test.indices
    flat = network.reshape(-1, exp.n_classes)
    fused = refit.fused(flat[test], patch_means(exp.all_bands, test))
    expected = evaluate(exp.test.class_ids, fused.argmax(axis=1), exp.n_classes).confusion
    np.testing.assert_array_equal(results["test"]["confusion_matrix"], expected)
    alone = evaluate(exp.test.class_ids, flat[test].argmax(axis=1), exp.n_classes).confusion
    assert not np.array_equal(alone, expected)
    np.testing.assert_array_equal(results["test_without_prior"]["confusion_matrix"], alone)


def test_predict_tile_by_tile_the_whole_scene_and_the_export_fuse_alike(run, network,
                                                                         tmp_path):
    model_dir, _, exp, trained = run
    whole = inference.classify(trained, trained.prepare_scene(exp.scene)[0], ["/cpu:0"],
                               1024, SESSION,
                               scaled=trained.prepare_and_scale(exp.scene.cube)[1])
    height, width = exp.scene.labels.shape
    expected = _refit(exp).fused(network.reshape(-1, exp.n_classes),
                                 patch_means(exp.all_bands, np.arange(height * width)))
    np.testing.assert_allclose(whole.reshape(-1, exp.n_classes), expected, atol=1e-5)
    model_dir, results = run[0], run[1]   # and the Python API's predict (unsmoothed run)
    np.testing.assert_allclose(Fitted(str(model_dir), results, get_model("spectral")).predict(
        exp.scene.cube), whole, atol=1e-5)
    copy = tmp_path / "run"
    shutil.copytree(model_dir, copy)
    done, = run_batch("hmp.predict", [{"args": ["--model_dir=%s" % copy, "--memory_mb=4"]}],
                      timeout=HUNG_S)
    assert done.returncode == 0, done.stderr[-2000:]
    tiles = int(re.search(r"pixels in (\d+) tiles", done.stdout).group(1))
    assert tiles > 1   # classified a tile at a time, each tile's prior from its window
    np.testing.assert_allclose(np.load(copy / "prediction" / "probabilities.npy"), whole,
                               atol=1e-5)
    export.export_saved_model(trained, str(tmp_path / "model"))
    pixels = exp.labelled.indices[::31][:300]   # more than one chunk of 256
    patches = PatchExtractor(exp.scene.cube, 5)(pixels).astype(np.float32)   # raw values
    with tf.Graph().as_default(), tf.Session() as session:
        serve = tf2.saved_model.load(str(tmp_path / "model")).signatures["serving_default"]
        served = session.run(serve(patches=tf.constant(patches)))
    np.testing.assert_allclose(served["probabilities"], whole.reshape(-1, exp.n_classes)[pixels],
                               atol=1e-5)
    logits = served["logits"]
    network_probabilities = np.exp(logits - logits.max(axis=1, keepdims=True))
    network_probabilities /= network_probabilities.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(network_probabilities,
                               network.reshape(-1, exp.n_classes)[pixels], atol=1e-5)


def test_the_export_fuses_as_numpy_where_the_network_and_the_prior_rule_out_classes():
    """The SavedModel's fusion against ``SpectralPrior.fused``: a class without training
    pixels (the prior's -inf), and a patch the network puts wholly on it (kept as the
    network gave it, not NaN)."""
    preprocessor = Preprocessor("standard", None)
    preprocessor.scaler.offset, preprocessor.scaler.scale = np.zeros(2), np.full(2, 2.0)
    prior = SpectralPrior(ShrinkageLDA(np.array([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]]),
                                       np.array([0.0, -np.inf, 0.1])), 0.5)
    run = types.SimpleNamespace(preprocessor=preprocessor, prior=prior)
    probabilities = np.array([[0.0, 1.0, 0.0], [0.2, 0.3, 0.5], [0.6, 0.1, 0.3]], np.float32)
    patches = np.random.default_rng(0).normal(size=(3, 5, 5, 2)).astype(np.float32)
    with tf.Graph().as_default(), tf.Session() as session:
        exported = session.run(export._fused(tf.constant(probabilities), tf.constant(patches),
                                             run))
    expected = prior.fused(probabilities, patches.mean(axis=(1, 2), dtype=np.float64) / 2.0)
    np.testing.assert_allclose(exported, expected, atol=1e-6)
    np.testing.assert_array_equal(exported[0], probabilities[0])
    assert np.all(exported[1:, 1] == 0)
