"""On the built-in scene laid out on the real Indian Pines ground truth, with
10% stratified training pixels, the 3-D CNN reaches at least 90% OA and beats
the per-pixel spectral baseline by a clear margin (results.json records both)."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

SHARED_DATA = pathlib.Path(os.environ.get(
    "HMP_SHARED_DATA", pathlib.Path(__file__).resolve().parents[2] / "shared" / "data"))

pytestmark = pytest.mark.skipif(not (SHARED_DATA / "Indian_pines_gt.mat").exists(),
                                reason="needs the real Indian Pines ground truth in %s"
                                % SHARED_DATA)


def overall_accuracy(model, model_dir, epochs):
    subprocess.run(
        [sys.executable, "-m", "hmp.train", "--model=%s" % model, "--epochs=%d" % epochs,
         "--synthetic_layout=indian_pines", "--data_dir=%s" % SHARED_DATA,
         "--train_fraction=0.1", "--patch_size=9", "--devices=/cpu:0", "--speeds=1",
         "--mesh=model:1", "--model_dir=%s" % model_dir,
         # A short run: the whole training set, a constant rate, no augmentation.
         "--val_fraction=0", "--schedule=constant", "--warmup_epochs=0", "--noaugment"],
        check=True, capture_output=True, timeout=600)
    results = json.loads((model_dir / "results.json").read_text())
    assert results["flags"]["synthetic_layout"] == "indian_pines"
    return results["test"]["overall_accuracy"]


def test_3d_cnn_reaches_90_percent_and_beats_spectral_baseline(tmp_path):
    cnn = overall_accuracy("cnn3d", tmp_path / "cnn3d", epochs=4)
    baseline = overall_accuracy("spectral", tmp_path / "spectral", epochs=4)
    assert cnn >= 0.90
    assert cnn - baseline >= 0.10, (cnn, baseline)
