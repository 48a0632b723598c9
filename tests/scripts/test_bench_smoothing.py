"""scripts/bench_smoothing.py as a user runs it, on a copy of conftest's tiny run (trained
with --smoothing=5, guided): its guided rows for windows 5 and 1 are the run's own test
scores with and without the smoothing; its rows of the window's mean those of the
probabilities it kept, smoothed with the mean, and with --prior_weights=0.5 those
probabilities fused with the spectral prior first."""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from cli_batch import HUNG_S, run_batch
from hmp.evaluation.smoothing import neighbourhood, smooth
from hmp.evaluation.spectral_prior import ShrinkageLDA, fuse, window_means
from hmp.run import experiment
from hmp.run.inference import TrainedRun
from models import get_model


def results_checkpoint(model_dir):
    """The name of the checkpoint that scored the run (its best epoch's)."""
    return os.path.basename(TrainedRun.open(str(model_dir), get_model).checkpoint)


def test_rows_score_each_window_as_the_run_scored_its_own(tiny_run, tmp_path):
    process, model_dir = tiny_run
    assert process.returncode == 0, process.stderr[-2000:]
    copy = tmp_path / "run"
    shutil.copytree(model_dir, copy)
    results = json.loads((copy / "results.json").read_text())
    script = "scripts/bench_smoothing.py"
    args = ["--model_dirs=%s" % copy, "--windows=5,1", "--prior_weights=1,0.5"]
    # the bad flag: a process of its own (its whole stderr, TensorFlow's start-up included,
    # is under test), started beside the calls, which share one interpreter
    # (tests/cli_batch.py): one TensorFlow import, not two
    refusals = {"--windows=4": "--windows=4: give an odd number of pixels (1: no smoothing)",
                "--prior_weights=1,2": "--prior_weights=1,2: give numbers from 0 to 1 (1: "
                                       "the network alone)"}
    bad = [subprocess.Popen([sys.executable, script, *args[:1], "--windows=4"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)]
    try:
        jsons = [tmp_path / ("rows-%d.json" % call) for call in (1, 2)]
        # the second call reads the probabilities the first kept; the third's flag is bad
        *calls, refused = run_batch(script, [
            *({"args": [*args, "--json=%s" % json_]} for json_ in jsons),
            {"args": [*args[:1], "--prior_weights=1,2"]}])
        assert (refused.returncode, refused.stderr.strip()) == (
            2, "bench_smoothing.py: error: " + refusals["--prior_weights=1,2"])
        for json_, done in zip(jsons, calls):
            assert done.returncode == 0, done.stderr[-2000:]
            rows = json.loads(json_.read_text())["rows"]
            assert [(row["prior_weight"], row["guided"], row["window"], row["tta"])
                    for row in rows] == [(w, guided, window, False) for w in (1.0, 0.5)
                                         for guided in (False, True) for window in (5, 1)]
            for row, scores in zip(rows[2:], (results["test"],
                                              results["test_without_smoothing"])):
                assert row["oa"] == pytest.approx(100 * scores["overall_accuracy"])
                assert row["aa"] == pytest.approx(100 * scores["average_accuracy"])
                recalls = [r for r, n in zip(scores["per_class_accuracy"].values(),
                                             np.sum(scores["confusion_matrix"], axis=1)) if n]
                assert row["lowest_recall"] == pytest.approx(100 * min(recalls))
                assert 0 <= row["validation"] <= 100
            assert [p.name for p in copy.glob("smoothing_probabilities*")] == [
                "smoothing_probabilities_%s.npy" % results_checkpoint(copy)]
        # the mean's row: the kept probabilities of the pixels within the window's reach of
        # the labelled ones smoothed with the window's mean, as the run scores: a test
        # pixel's smoothing reads no output of the split's training pixels
        exp = experiment.prepare(*experiment.load(str(copy)))
        kept = np.load(copy / ("smoothing_probabilities_%s.npy" % results_checkpoint(copy)))
        reach = np.zeros(exp.scene.labels.size, bool)
        reach[neighbourhood(exp.labelled.indices, exp.scene.labels.shape, 2)] = True
        kept = np.where(reach.reshape(exp.scene.labels.shape)[..., None], kept, 0)
        valid = reach & ~experiment.nodata_mask(exp.scene.cube).ravel()
        valid[exp.split.train] = False
        # and fused with the spectral prior at w = 0.5 first (the LDA of the training
        # pixels' patch-mean spectra, all bands, as the run scaled them)
        means = window_means(exp.all_bands.padded, exp.all_bands.patch_size).reshape(
            exp.scene.labels.size, -1)
        prior = ShrinkageLDA.fit(means[exp.train.indices], exp.train.class_ids,
                                 exp.n_classes).log_probabilities(means)
        fused = fuse(kept.reshape(-1, exp.n_classes), prior, 0.5).reshape(kept.shape)
        assert not np.allclose(fused, kept, atol=1e-3)
        for row, probabilities in ((rows[0], kept), (rows[4], fused)):
            mean = smooth(probabilities, 5, valid.reshape(exp.scene.labels.shape)).reshape(
                -1, exp.n_classes)
            assert row["oa"] == pytest.approx(100 * np.mean(
                mean[exp.test.indices].argmax(axis=1) == exp.test.class_ids))
        assert "every row in" in done.stdout and " filter window validation " in done.stdout
        stderrs = [process.communicate(timeout=HUNG_S)[1] for process in bad]
    finally:
        for process in bad:
            if process.poll() is None:   # never left running after a failure
                process.kill()
                process.communicate()
    for process, stderr, message in zip(bad, stderrs, [refusals["--windows=4"]]):
        assert process.returncode == 2
        assert stderr.strip() == "bench_smoothing.py: error: " + message
