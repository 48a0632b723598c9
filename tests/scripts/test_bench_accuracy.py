"""scripts/bench_accuracy.py's grid (scripts/accuracy_grid.py): pinned parallel jobs, the
baselines on a real run's saved split, margins, collapse flags, the table and its JSON."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from cli_batch import HUNG_S, run_batch
from hmp import data
from hmp.errors import InvalidInput
from script_modules import SCRIPTS, import_script

grid = import_script("accuracy_grid")

PROBE = ("import os, sys; print(sorted(os.sched_getaffinity(0)), "
         "os.environ['TF_NUM_INTRAOP_THREADS'], os.environ['TF_NUM_INTEROP_THREADS'], "
         "sys.argv[1])")


def test_collapse_is_one_class_for_most_pixels_or_oa_below_twice_chance():
    assert grid.collapse([[8, 1, 1], [1, 8, 1], [1, 1, 8]]) is None
    one_class = [[95, 0, 0], [2, 1, 0], [2, 0, 0]]                               # OA 96%
    assert grid.collapse(one_class) == "99% of test pixels in class 1"
    leaning = [[30, 0, 0, 10], [0, 29, 0, 11], [0, 0, 29, 11], [0, 0, 0, 40]]     # 45% in 4
    assert grid.collapse(leaning) is None
    near_chance = [[3, 7, 0, 0], [7, 3, 0, 0], [0, 0, 3, 7], [0, 0, 7, 3]]        # OA 30%
    assert grid.collapse(near_chance) == "OA below 2 x chance (25.0%)"


def test_core_groups_are_disjoint_shares_of_the_cores_and_refuse_too_many():
    groups = grid.core_groups(8, 2, available=range(16))
    assert groups == [{2 * i, 2 * i + 1} for i in range(8)]
    assert grid.core_groups(3, 0, available=[4, 5, 6, 7, 9, 11, 12]) == [{4, 5}, {6, 7},
                                                                         {9, 11}]
    with pytest.raises(InvalidInput, match=r"8 jobs of 2 cores need 16 cores; this process "
                                           r"may use 2 \(0,1\)"):
        grid.core_groups(8, 2, available=[0, 1])
    with pytest.raises(InvalidInput, match="give at least 1 job"):
        grid.core_groups(0, 0, available=[0, 1])


def test_jobs_run_pinned_with_their_threads_and_queue_what_follows(tmp_path):
    groups = [{max(os.sched_getaffinity(0))}]   # one at a time: a fixed order
    ended = []

    def job(name, then=()):
        def after(key, code):
            ended.append((key, code))
            return list(then)
        return (name, [sys.executable, "-c", PROBE, name], str(tmp_path / name), after)

    grid.run_jobs([job("a", [job("c")]), job("b")], groups)
    assert ended == [("a", 0), ("c", 0), ("b", 0)]   # what a's end queues runs next
    for name in "abc":
        affinity, intra, inter, said = (tmp_path / name).read_text().rsplit(" ", 3)
        assert [{int(c) for c in affinity.strip("[]").split(",")}] == groups
        assert (intra, inter, said.strip()) == ("1", "1", name)


@pytest.fixture(scope="module")
def scored_tiny_run(tiny_run, tmp_path_factory):
    """conftest's real hmp.train run (cnn2d, 2 epochs) as a grid row, and the baselines
    on its saved split (5x5 windows only, to be quick)."""
    pytest.importorskip("sklearn", reason="scikit-learn is an optional extra "
                                          "(pip install -e .[baselines])")
    run, folder = tiny_run
    assert run.returncode == 0, run.stderr[-2000:]
    out = tmp_path_factory.mktemp("baselines") / "baselines.json"
    grid.score_baselines(str(folder), str(out), [5], say=lambda line: None)
    key = grid.Run("cnn2d", "generated", "random", 0)
    return folder, grid.model_row(key, str(folder)), grid.baseline_rows(key.group, out), out


def test_rows_score_the_run_and_the_baselines_on_its_split(scored_tiny_run):
    folder, model, baselines, out = scored_tiny_run
    results = json.loads((folder / "results.json").read_text())
    confusion = np.array(results["test"]["confusion_matrix"])
    assert model["oa"] == pytest.approx(100 * np.trace(confusion) / confusion.sum())
    assert model["training_fit"] == pytest.approx(100 * results["training_fit"])
    assert (model["collapsed"] is None) == (confusion.sum(0).max() <= 0.9 * confusion.sum()
                                            and model["oa"] >= 20.0)
    split = data.load_split(folder / "split.npz")
    saved = json.loads(out.read_text())
    np.testing.assert_array_equal(saved["train"], split.train)
    np.testing.assert_array_equal(saved["test"], split.test)
    assert grid.same_split(str(folder), str(out))
    assert [row["name"] for row in baselines] == ["lda pixel", "lda 5x5 mean", "svm pixel",
                                                  "svm 5x5 mean", "1nn-xy"]
    assert [row["spectral"] for row in baselines] == [True] * 4 + [False]
    assert baselines[0]["leakage"] == pytest.approx(100 * data.split_leakage(split, 5))


def test_margins_are_over_the_best_spectral_baseline_and_over_all(scored_tiny_run):
    _, model, baselines, _ = scored_tiny_run
    again = dict(model, seed=1, oa=model["oa"] - 10.0, collapsed="99% of test pixels in class 1",
                 oa_without_tta=model["oa"] - 11.0, oa_without_smoothing=model["oa"] - 13.0,
                 training_fit=90.0)
    model = dict(model, oa_without_tta=model["oa"] - 2.0,   # as a --tta run records them
                 oa_without_smoothing=model["oa"] - 3.0, training_fit=99.5)
    rows = [model, again] + baselines + [dict(b, seed=1) for b in baselines]
    summary = {(s["kind"], s["name"]): s for s in grid.summaries(rows)}
    entry = summary["model", "cnn2d"]
    backwards = {(s["kind"], s["name"]): s for s in grid.summaries(rows[::-1])}   # seed 1 first
    assert backwards["model", "cnn2d"]["oa"] == entry["oa"] == [model["oa"], model["oa"] - 10]
    assert entry["mean_oa"] == pytest.approx(model["oa"] - 5.0)
    assert entry["std_oa"] == pytest.approx(np.std([model["oa"], model["oa"] - 10], ddof=1))
    spectral = max((b for b in baselines if b["spectral"]), key=lambda b: b["oa"])
    best = max(baselines, key=lambda b: b["oa"])
    assert entry["best_spectral_baseline"] == spectral["name"]
    assert entry["margin_over_best_spectral"] == pytest.approx(entry["mean_oa"] - spectral["oa"])
    assert entry["margin_over_best_all"] == pytest.approx(entry["mean_oa"] - best["oa"])
    assert entry["collapsed"] == [1]
    lines = grid.table(rows, list(summary.values())).splitlines()
    (line,) = [l for l in lines if l.startswith("cnn2d ")]
    assert line.split()[1:5] == ["%.1f" % model["oa"], "%.1f" % (model["oa"] - 10),
                                 "%.1f" % entry["mean_oa"], "%.1f" % entry["std_oa"]]
    assert "%+.1f" % entry["margin_over_best_spectral"] in line and "collapsed: seed 1" in line
    (line,) = [l for l in lines if l.startswith("  without TTA ")]
    assert line.split()[2:] == ["%.1f" % (model["oa"] - 2), "%.1f" % (model["oa"] - 11),
                                "%.1f" % (model["oa"] - 6.5), "TTA's", "paired", "change",
                                "+1.5"]
    (line,) = [l for l in lines if l.startswith("  training fit ")]
    assert line.split()[2:] == ["99.5", "90.0", "94.8", "lowest", "90.0"]
    (line,) = [l for l in lines if l.startswith("  without smoothing ")]
    assert line.split()[2:] == ["%.1f" % (model["oa"] - 3), "%.1f" % (model["oa"] - 13),
                                "%.1f" % (model["oa"] - 8), "smoothing's", "paired", "change",
                                "+3.0"]


def test_a_margin_is_over_the_seeds_the_model_and_the_baseline_share(scored_tiny_run):
    """A seed whose model run failed leaves the baselines' figures of that seed out of
    the margin: the mean difference on seeds 0 and 1, not the model's two seeds against
    the baseline's three."""
    _, model, baselines, _ = scored_tiny_run
    spectral = next(b for b in baselines if b["spectral"])
    rows = [dict(model, oa=90.0), dict(model, seed=1, oa=50.0),
            {"layout": model["layout"], "split": model["split"], "name": model["name"],
             "seed": 2, "error": "killed"},
            dict(spectral, oa=85.0), dict(spectral, seed=1, oa=45.0),
            dict(spectral, seed=2, oa=10.0)]
    entry = {(s["kind"], s["name"]): s for s in grid.summaries(rows)}["model", model["name"]]
    assert entry["mean_oa"] == pytest.approx(70.0)
    assert entry["best_spectral_baseline"] == spectral["name"]
    assert entry["margin_over_best_spectral"] == pytest.approx(5.0)   # not 70 - 46.7


def test_missing_scikit_learn_is_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "sklearn.svm", None)   # import fails
    available, line = grid.baselines_available()
    assert not available
    assert line.startswith('the baselines need scikit-learn: pip install -e ".[baselines]"')
    assert line.endswith("; printing the models only")


def test_unknown_models_layouts_and_splits_are_refused_before_any_run():
    bad = {"--layouts=generated --models=nope": "--models=nope: model 'nope' is not known; "
                                                "choose one of cnn2d",
           "--layouts=generated:raw": "--layouts=generated:raw: 'generated:raw' is not a "
                                      "layout; choose from generated, indian_pines",
           "--layouts=generated,nope": "--layouts=generated,nope: 'nope' is not a layout; "
                                       "choose from generated, indian_pines, paviau, salinas",
           "--splits=nope": "--splits=nope: 'nope' is not a split; choose from random, "
                            "disjoint"}
    runs = run_batch("scripts/bench_accuracy.py", [{"args": flag.split()} for flag in bad])
    for (flag, expected), run in zip(bad.items(), runs):
        assert run.returncode == 2 and run.stdout == "", (flag, run)
        assert run.stderr.splitlines() == [run.stderr.strip()], (flag, run.stderr)
        assert run.stderr.startswith("bench_accuracy: error: " + expected), (flag, run.stderr)


def test_a_layout_with_a_kind_trains_that_kind_of_synthetic_scene():
    run = grid.Run("hybridsn", "indian_pines:radiance", "disjoint", 1)
    command = grid.train_command(run, "/tmp/run", data_dir="gt")
    assert command[3:] == ["--model=hybridsn", "--synthetic_layout=indian_pines", "--seed=1",
                           "--devices=/cpu:0", "--model_dir=/tmp/run", "--split=disjoint",
                           "--synthetic_kind=radiance", "--data_dir=gt"]
    plain = grid.train_command(grid.Run("cnn3d", "generated", "random", 0), "/tmp/run",
                               data_dir="gt")   # the generated layout reads no ground truth
    assert "--synthetic_layout=generated" in plain and not any(
        arg.startswith(("--synthetic_kind", "--data_dir")) for arg in plain)


def test_train_args_may_give_the_training_pixels_as_hmp_train_takes_them(tmp_path):
    """--train_per_class, or a given split (then the grid's --split is left out: hmp.train
    refuses it beside --train_set), as hmp.train's own check takes them."""
    run = grid.Run("cnn2d", "generated", "random", 0)
    given = grid.train_command(run, "/tmp/run", train_args=["--train_set=a.npy",
                                                             "--test_set=b.npy"])
    assert given[3:] == ["--model=cnn2d", "--synthetic_layout=generated", "--seed=0",
                         "--devices=/cpu:0", "--model_dir=/tmp/run", "--train_set=a.npy",
                         "--test_set=b.npy"]
    assert grid.check_train(run, str(tmp_path / "run"),
                            train_args=["--train_per_class=20"]) is None


def test_bad_seeds_are_one_line_naming_them_alone_before_tensorflow_loads():
    """A process of its own: its whole stderr, TensorFlow's start-up included, is one line."""
    run = subprocess.run([sys.executable, str(SCRIPTS / "bench_accuracy.py"), "--seeds=a"],
                         capture_output=True, text=True, timeout=HUNG_S, check=False)
    assert (run.returncode, run.stdout) == (2, "")
    assert run.stderr == "bench_accuracy: error: --seeds=a: give whole numbers >= 0\n"


def test_bad_files_and_training_flags_are_refused_before_any_run(tmp_path):
    keep = tmp_path / "keep"
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "old.log").write_text("")
    one = ["--models=cnn2d", "--layouts=generated", "--splits=random", "--seeds=0",
           "--keep_runs=%s" % keep]
    bad = {"--keep_runs=%s" % (tmp_path / "full"):
           "--keep_runs=%s: the folder holds files; give a new or empty folder"
           % (tmp_path / "full"),
           "--json=%s" % tmp_path: "--json=%s: %s is a folder; give a file's path"
           % (tmp_path, tmp_path),
           "--layouts=indian_pines": "--layouts=indian_pines, --data_dir=%s: "
           "Indian_pines_gt.mat (any upper/lower case) not found in %s; download it with: "
           "python -m hmp.data.download --dataset=indian_pines --data_dir=%s"
           % (tmp_path, tmp_path, tmp_path),
           "--train_args=--epochz=1": "--train_args=--epochz=1: Unknown command line flag "
                                      "'epochz'. Did you mean: epochs ?",
           # checked for each model: it acts for hybridsn (on PCA components), not cnn3d
           "--models=hybridsn,cnn3d --train_args=--pca_in_graph":
           "--train_args=--pca_in_graph: --pca_in_graph: only for a model on PCA components; "
           "--model=cnn3d keeps all bands (give --pca=N for N components)"}
    runs = run_batch("scripts/bench_accuracy.py", [
        {"args": [*one, "--data_dir=%s" % tmp_path, *flag.split(" ")]} for flag in bad])
    for (flag, expected), run in zip(bad.items(), runs):
        assert (run.returncode, run.stdout) == (2, ""), (flag, run)
        assert run.stderr == "bench_accuracy: error: %s\n" % expected
    assert sorted(path.name for path in tmp_path.iterdir()) == ["full"]   # keep: not made
