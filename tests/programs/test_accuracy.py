"""On the built-in scene laid out on the real Indian Pines ground truth, with
10% stratified training pixels, the 3-D CNN learns the scene in 4 epochs (at
least 80% OA) and beats the per-pixel spectral baseline by a clear margin
(results.json records both). Since every field of the scene has its own look
(brightness, wavelength shift, endmember variability), 80% after 4 epochs is
the mark: LDA on 9 x 9 mean spectra reaches about 92% there (docs/benchmarks.md).

Both models see the scene's first 30 PCA components (projected in the graph) and
train at rate 2e-3: a quarter of the time of all 100 bands at 1e-3, and a surer
pass. Measured over seeds 0-4 (2026-11-26, after hmp's own 3-D convolution gradient,
hmp.mesh.conv3d_gradient): the 3-D CNN 83.1-88.8% (88.5% at seed 0, the one tested),
the spectral baseline 40.4-50.3% (how long it takes: docs/benchmarks.md, test suite
time)."""

import json
import os
import pathlib

import pytest

from cli_batch import run_batch

SHARED_DATA = pathlib.Path(os.environ.get(
    "HMP_SHARED_DATA", pathlib.Path(__file__).resolve().parents[3] / "shared" / "data"))

pytestmark = pytest.mark.skipif(not (SHARED_DATA / "Indian_pines_gt.mat").exists(),
                                reason="needs the real Indian Pines ground truth in %s"
                                % SHARED_DATA)


def test_3d_cnn_learns_the_scene_and_beats_spectral_baseline(tmp_path):
    flags = ["--epochs=4", "--synthetic_layout=indian_pines", "--data_dir=%s" % SHARED_DATA,
             "--train_fraction=0.1", "--patch_size=9", "--pca=30", "--learning_rate=2e-3",
             "--devices=/cpu:0", "--speeds=1", "--mesh=model:1",
             # A short run: the whole training set, a constant rate, no augmentation.
             "--val_fraction=0", "--schedule=constant", "--warmup_epochs=0", "--noaugment",
             "--notta"]
    models = ("cnn3d", "spectral")
    runs = run_batch("hmp.train", [   # one interpreter (tests/cli_batch.py)
        {"args": ["--model=%s" % model, *flags, "--model_dir=%s" % (tmp_path / model)]}
        for model in models])
    accuracy = {}
    for model, run in zip(models, runs):
        assert run.returncode == 0, run.stderr[-2000:]
        results = json.loads((tmp_path / model / "results.json").read_text())
        assert results["flags"]["synthetic_layout"] == "indian_pines"
        accuracy[model] = results["test"]["overall_accuracy"]
    assert accuracy["cnn3d"] >= 0.80   # 88.5% measured (the docstring)
    assert accuracy["cnn3d"] - accuracy["spectral"] >= 0.10, accuracy
