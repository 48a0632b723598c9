"""``python -m hmp.train`` end to end: runs, errors, resumes (kill, resume: test_train_runs.py)."""

import dataclasses
import json
import re
import shutil

import numpy as np
import pytest

from cli_batch import run_batch
from hmp.data import load_split, split_leakage, synthetic_scene
from hmp.evaluation.metrics import evaluate
from hmp.evaluation.smoothing import WINDOWS, smooth
from hmp.run import experiment, inference
from models import get_model

TINY = ["--model=cnn2d", "--width=4", "--patch_size=5", "--batch_size=64",
        "--train_fraction=0.05", "--devices=/cpu:0,/cpu:1", "--speeds=2,1",
        "--mesh=model:2", "--notta"]


THREE = "--devices=/cpu:0,/cpu:1,/cpu:2"


def train(*args, model_dir=None, env=None, pythonpath=None):
    """One run of the module's batch (``cli_runs``): flags, and where it writes."""
    if model_dir is not None:
        args = (*args, "--model_dir=%s" % model_dir)
    run = {"args": list(args), "env": env or {}}
    return {**run, "pythonpath": str(pythonpath)} if pythonpath else run


def plan_file(path, config, devices, speeds, batch_size, mesh):
    """A plan JSON, as scripts/plan_layout.py writes it (tests/scripts/test_plan_layout_cli.py),
    for ``config`` trained with hmp.train's batch norm."""
    from hmp.graph.from_graph import model_spec
    from hmp.planning import plan_layout
    from hmp.run.settings import DEFAULT
    config = dataclasses.replace(config, batch_norm=DEFAULT.model.batch_norm)
    plan_layout(model_spec(config), devices, speeds, batch_size, mesh).to_json(path)
    return path


@pytest.fixture(scope="module")
def cli_runs(tmp_path_factory, small_scene, readme_models):
    """({name: [Run, ...]}, {name: folder}) of every run of this module, in order in
    one interpreter (tests/cli_batch.py): one TensorFlow import, not one a run. Each
    name's runs write in a folder of their own; a BAD_FLAGS run is named by its flags.
    The runs that train do so on conftest's ``small_scene``."""
    from models import model_config
    names = ("no_checkpoint", "few_bands", "other_model_plan", "other_batch_plan", "gpu_plan",
             "nan",
             "readme_model", "auto_speeds", "relative_speeds", "virtual_cpus_plan",
             "too_large", "max_steps", "help")
    folders = {name: tmp_path_factory.mktemp(name) for name in names}
    other_plan = plan_file(folders["other_model_plan"] / "plan.json",
                           model_config("cnn3d", 9, 200, 16), ["/cpu:0", "/cpu:1"], [1, 1],
                           32, "model:2")
    own_plan = plan_file(folders["virtual_cpus_plan"] / "p.json",   # small_scene's model
                         model_config("cnn2d", 5, 100, 10, 4), ["/cpu:0", "/cpu:1"], [2, 1],
                         64, "model:2")
    gpu_plan = plan_file(folders["gpu_plan"] / "gpu.json",   # a GPU this machine lacks
                         model_config("cnn2d", 5, 100, 10, 4), ["/cpu:0", "/gpu:9"], [2, 1],
                         64, "model:2")
    # max_steps's runs are laid out by that plan on virtual CPUs (--plan, no --devices), so
    # that their run is test_a_plan_on_virtual_cpus_runs_without_naming_them's too: one
    # training run, not two
    on_own_plan = [*(flag for flag in TINY_AUTO if not flag.startswith("--epochs=")),
                   *small_scene, "--plan=%s" % own_plan]
    cache = {"HMP_CACHE_DIR": str(folders["auto_speeds"] / "cache")}
    rng = np.random.default_rng(0)
    few_bands = folders["few_bands"]
    np.save(few_bands / "cube.npy", rng.normal(size=(12, 12, 8)).astype(np.float32))
    np.save(few_bands / "gt.npy", rng.integers(1, 4, (12, 12)).astype(np.int32))
    tiny, tiny_auto = [*TINY, *small_scene], [*TINY_AUTO, *small_scene]
    # the model is incidental to the profiling and its reuse: spectral's graphs (13 of
    # them profiled) are a third of cnn2d's
    two = [*tiny_auto, "--model=spectral", "--devices=/cpu:0,/cpu:1"]
    runs = {
        "no_checkpoint": [train(*TINY, "--resume", model_dir=folders["no_checkpoint"])],
        "few_bands": [train("--dataset=%s" % (few_bands / "cube.npy"),
                            "--labels=%s" % (few_bands / "gt.npy"), "--model=hybridsn",
                            model_dir=few_bands / "run")],
        "other_model_plan": [train(*(flag for flag in TINY if not flag.startswith(
                                       ("--devices=", "--speeds=", "--mesh="))),
                                   "--plan=%s" % other_plan,
                                   model_dir=folders["other_model_plan"] / "run")],
        # own_plan is for a batch of 64 (TINY_AUTO's); 32 would train another batch than
        # planned (a batch split's samples per device add up to 64: a traceback)
        "other_batch_plan": [train(*on_own_plan, "--epochs=1", "--batch_size=32",
                                   model_dir=folders["other_batch_plan"] / "run")],
        "gpu_plan": [train(*on_own_plan[:-1], "--plan=%s" % gpu_plan, "--epochs=1",
                           model_dir=folders["gpu_plan"] / "run")],
        # the model is incidental: spectral's graph is a third of cnn2d's
        "nan": [train(*tiny, "--model=spectral", "--optimizer=sgd", "--learning_rate=1e30",
                      "--epochs=1", model_dir=folders["nan"]),
                train(*tiny, "--model=spectral", "--resume", "--epochs=1", "--optimizer=sgd",
                      "--learning_rate=1e-3", model_dir=folders["nan"]),
                train(*tiny, "--model=spectral", "--resume", "--epochs=2",
                      model_dir=folders["nan"])],
        # --max_steps=1, less than its one epoch: trains that epoch, and says so
        "readme_model": [train(*tiny, "--model=mymodels.small", "--epochs=1", "--max_steps=1",
                               model_dir=folders["readme_model"] / "run",
                               pythonpath=readme_models)],
        "auto_speeds": [train(*two, model_dir=folders["auto_speeds"] / "a", env=cache),
                        train(*two, model_dir=folders["auto_speeds"] / "b", env=cache)],
        "relative_speeds": [train(*tiny_auto, "--devices=/cpu:0,/cpu:1", "--speeds=2,1",
                                  "--tta", "--smoothing=auto",
                                  model_dir=folders["relative_speeds"])],
        "max_steps": [train(*on_own_plan, "--epochs=3", "--max_steps=10",
                            model_dir=folders["max_steps"]),
                      train(*on_own_plan, "--epochs=3", "--max_steps=10", "--resume",
                            model_dir=folders["max_steps"])],
        # input refused on max_steps's finished run (one epoch on small_scene's data; the
        # batch runs its runs in this order): a run of its own would train one epoch more
        "refused_on_max_steps": [train(*tiny, "--overwrite", "--batch_size=100000",
                       model_dir=folders["max_steps"]),
                 train(*tiny, "--overwrite", THREE, "--speeds=1,1,1", "--mesh=batch:3",
                       "--batch_size=2", model_dir=folders["max_steps"]),
                 train(*tiny, "--resume", "--epochs=2", "--train_fraction=0.3",
                       model_dir=folders["max_steps"]),
                 train(*tiny, "--resume", "--epochs=2", "--model=cnn3d",
                       "--local_workers=0:1", model_dir=folders["max_steps"]),
                 train(*tiny, "--resume", "--runs=2", model_dir=folders["max_steps"]),
                 # a flag that does nothing, given anew on --resume (not in its flags.txt)
                 train(*tiny, "--resume", "--epochs=2", "--rebalance_threshold=0.3",
                       model_dir=folders["max_steps"])],
        "help": [{"args": [flag], "cwd": str(folders["help"])}   # a run would write there
                 for flag in ("--help", "--helpfull")],
        "too_large": [train("--width=1000000", model_dir=folders["too_large"] / "wide"),
                      train("--batch_size=10000000", model_dir=folders["too_large"] / "big")],
    }
    bad_flags = tmp_path_factory.mktemp("bad_flags")   # their runs/<name> folders
    runs.update({flags: [{"args": flags.split(), "cwd": str(bad_flags)}]
                 for flags in sorted(BAD_FLAGS)})
    done = iter(run_batch("hmp.train", [run for runs_of in runs.values() for run in runs_of]))
    folders["bad_flags"] = bad_flags
    return {name: [next(done) for _ in runs_of] for name, runs_of in runs.items()}, folders


def test_trains_end_to_end_and_writes_everything(tiny_run):
    run, folder = tiny_run   # conftest.py: TINY for 2 epochs
    assert run.returncode == 0, run.stderr[-2000:]
    assert "epoch 2/2" in run.stdout and "overall accuracy (OA)" in run.stdout
    results = json.loads((folder / "results.json").read_text())
    assert results["flags"]["model"] == "cnn2d"
    assert results["plan"]["splits"]["filters1"] == [5, 3]   # 8 filters at 2:1 = 5.3, 2.7
    assert [h["epoch"] for h in results["history"]] == [0, 1]
    assert 0.2 < results["test"]["overall_accuracy"] <= 1.0   # chance: 0.1
    assert len(results["test"]["per_class_accuracy"]) == 10
    confusion = np.array(results["test"]["confusion_matrix"])
    precision = np.diag(confusion) / np.maximum(confusion.sum(axis=0), 1)
    f1 = 2 * np.diag(confusion) / (confusion.sum(axis=0) + confusion.sum(axis=1))
    predicted = confusion.sum(axis=0) > 0
    written = {name: np.array([np.nan if v is None else v for v in values.values()])
               for name, values in results["test"].items() if name.startswith("per_class_")}
    np.testing.assert_array_equal(np.isnan(written["per_class_precision"]), ~predicted)
    np.testing.assert_allclose(written["per_class_precision"][predicted], precision[predicted])
    np.testing.assert_allclose(written["per_class_f1"], f1)
    json.loads((folder / "results.json").read_text(),   # strict JSON: no NaN
               parse_constant=lambda name: pytest.fail("results.json holds %s" % name))
    split = load_split(folder / "split.npz")
    # the split's pixels, as split.npz (and scripts/baselines.py) hold them, the
    # validation share among the training ones
    assert "; %d training / %d test pixels\n" % (len(split.train), len(split.test)) in run.stdout
    assert results["leakage"] == pytest.approx(split_leakage(split, 5))
    assert 0.5 < results["leakage"] <= 1.0 and "leakage" in run.stdout
    for name in ("classification_map.png", "confusion_matrix.png", "checkpoint", "data.json"):
        assert (folder / name).exists(), name
    assert any(p.name.startswith("events.out.tfevents") for p in folder.iterdir())


def test_runs_on_given_train_and_test_sets_and_summarises_the_seeds(tmp_path):
    scene = synthetic_scene(height=30, width=34, n_classes=3, n_bands=8, seed=4,
                            field_size=10, region_smoothness=4)
    rows = np.arange(30)[:, None] * np.ones((1, 34), int)
    for name, part in (("train", rows < 12), ("test", rows >= 17)):
        np.save(tmp_path / ("%s.npy" % name), np.where(part, scene.labels, 0))
    np.save(tmp_path / "cube.npy", scene.cube)
    np.save(tmp_path / "labels.npy", scene.labels)
    flags = ["--dataset=%s" % (tmp_path / "cube.npy"), "--labels=%s" % (tmp_path / "labels.npy"),
             "--train_set=%s" % (tmp_path / "train.npy"),
             "--test_set=%s" % (tmp_path / "test.npy"), "--runs=2", "--seed=3", "--epochs=1",
             "--model=spectral", "--width=2", "--patch_size=5", "--batch_size=16",
             "--devices=/cpu:0", "--nosmoothing_guide"]
    run, = run_batch("hmp.train", [train(*flags, model_dir=tmp_path / "runs")])
    assert run.returncode == 0, run.stderr[-2000:]
    # a series stopped before its second seed: --resume finishes it
    summary_path = tmp_path / "runs" / "summary.json"
    shutil.rmtree(tmp_path / "runs" / "seed-4")
    summary_path.unlink()
    resumed, = run_batch("hmp.train", [train(*flags, "--resume", model_dir=tmp_path / "runs")])
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "the run in %s is finished" % (tmp_path / "runs" / "seed-3") in resumed.stdout
    assert ("%s holds no checkpoint yet: this seed's run starts" % (tmp_path / "runs" / "seed-4")
            in resumed.stdout)
    assert json.loads(summary_path.read_text())["seeds"] == [3, 4]
    retrained = json.loads((tmp_path / "runs" / "seed-4" / "results.json").read_text())
    assert len(retrained["history"]) == 1 and retrained["flags"]["seed"] == 4
    summary = json.loads((tmp_path / "runs" / "summary.json").read_text())
    assert summary["seeds"] == [3, 4] and summary["smoothing"] == [7, 7]   # the default
    accuracies = []
    for seed in (3, 4):
        folder = tmp_path / "runs" / ("seed-%d" % seed)
        results = json.loads((folder / "results.json").read_text())
        assert results["flags"]["seed"] == seed
        split = load_split(folder / "split.npz")
        np.testing.assert_array_equal(split.train, np.flatnonzero(
            np.load(tmp_path / "train.npy").ravel()))
        np.testing.assert_array_equal(split.test, np.flatnonzero(
            np.load(tmp_path / "test.npy").ravel()))
        assert results["leakage"] == 0.0   # 5 rows between the sets, patches reach 2
        # the window's mean: so the run records, and so its predictions smooth
        assert results["smoothing"] == {"window": 7, "guided": False}
        trained = inference.TrainedRun.open(str(folder), get_model)
        assert not trained.guided and trained.guide_for(7) is None
        accuracies.append(results["test"]["overall_accuracy"])
    assert summary["overall_accuracy"]["mean"] == pytest.approx(np.mean(accuracies))
    assert summary["overall_accuracy"]["std"] == pytest.approx(np.std(accuracies, ddof=1))
    assert "mean" in run.stdout and "std" in run.stdout


BAD_FLAGS = {
    "--batch_size=abc": "--batch_size=abc: not a whole number",   # absl's words replaced
    "--learning_rate=x": "--learning_rate=x: not a number",
    # the list's fault alone: not --cluster_timeout's, which is given beside it
    "--cluster=127.0.0.1:22x2 --cluster_timeout=5":
        "error: --cluster=127.0.0.1:22x2: '127.0.0.1:22x2' is not host:port",
    "--model=nope": "--model=nope: model 'nope' is not known; choose one of cnn2d, cnn3d",
    "--model=no.such.module": "--model=no.such.module: model module 'no.such.module' cannot",
    "--dataset=nope": "--dataset=nope: unknown scene 'nope'; allowed: "
                      "indian_pines, paviau, salinas, pavia_centre, ksc, botswana, synthetic, "
                      "or the path of a cube file (.mat, .npy, .hdr, .img, .dat, .raw, .bsq, "
                      ".bil, .bip, .tif, .tiff, .vrt, .jp2) and its label map",
    "--dataset=cube.mat": "--dataset=cube.mat: a cube file needs its label map: give --labels",
    # a file hmp does not read: not "--labels only for a --dataset given as a cube file"
    "--dataset=cube.h5 --labels=gt.h5": "--dataset=cube.h5: unknown scene 'cube.h5'; "
                                        "allowed: indian_pines,",
    "--labels=gt.mat": "--labels=gt.mat: only for a --dataset given as a cube file, "
                       "not --dataset=synthetic",
    "--dataset=paviau --cube_key=x": "--cube_key=x: only for a --dataset given as a cube file",
    "--dataset=paviau --synthetic_layout=salinas": "--synthetic_layout=salinas: only for "
                                                   "--dataset=synthetic, not --dataset=paviau",
    "--synthetic_layout=nope": "--synthetic_layout=nope: choose one of generated, "
                               "indian_pines, paviau, salinas",
    # the flags given, not --dataset at its default (synthetic), whose layout they choose
    "--synthetic_layout=salinas --data_dir=/nonexistent":
        "error: --synthetic_layout=salinas, --data_dir=/nonexistent: Salinas_gt.mat",
    "--data_dir=/tmp": "--data_dir=/tmp: only for a benchmark scene or a --synthetic_layout "
                       "of one; --dataset=synthetic (--synthetic_layout=generated) reads no "
                       "file from it",
    "--width=-3": "--width=-3: width must be a whole number >= 0, got -3",
    "--dataset=indian_pines --data_dir=/nonexistent": "Indian_pines_corrected.mat",
    "--speeds=1,x": "--speeds='1,x': give auto, measure or one number per device",
    "--speeds=1,1_0": "--speeds='1,1_0': give auto, measure or one number per device",
    "--mesh=AUTO": "--mesh=AUTO: bad mesh 'AUTO': the cost model's choice is written auto, in "
                   "lower case",
    THREE + " --speeds=1,2": "--speeds=1,2: got 2 speeds for 3 devices",
    THREE + " --speeds=1,0,1": "--speeds=1,0,1: /cpu:1 has speed 0.0: speeds must be finite "
                               "and greater than 0",
    THREE + " --mesh=model:5 --speeds=1,1,1": "mesh model:5 has 5 positions but 3 devices",
    "--mesh=foo": "--mesh=foo: bad mesh 'foo'",
    "--patch_size=4": "--patch_size=4: patch_size must be an odd positive integer",
    THREE + " --batch_size=2 --mesh=batch:3 --speeds=1,1,1": "2 samples cannot give 3 devices",
    # before profiling (--speeds=auto would print its progress) and before any folder
    THREE + " --batch_size=12 --mesh=batch:3": (
        "hmp.train: error: --mesh=batch:3, --batch_size=12, --batch_norm=local: mesh batch:3: "
        "12 samples give 3 batch replicas at most 4 each, and each replica normalises its "
        "batch norms over its own samples (local statistics), which needs 8 a replica; "
        "allowed: a batch of at least 24, fewer batch rows, or sync batch-norm statistics"),
    "--devices=/gpu:7": "--devices=/gpu:7: /gpu:7 is not a device of this machine, which has",
    "--devices=/cpu:0,/cpu:0": "--devices=/cpu:0,/cpu:0: /cpu:0 named twice",
    "--devices=/cpu:0,/device:CPU:0": (
        "--devices=/cpu:0,/device:CPU:0: /cpu:0 and /device:CPU:0 name one device"),
    "--devices=/bogus:0": "--devices=/bogus:0: '/bogus:0' is not a TensorFlow device string",
    "--devices=/cpu:-1": "--devices=/cpu:-1: '/cpu:-1' names no device type and index >= 0",
    # the words of hmp.run.settings.Settings.check, as from Python (hmp.fit)
    "--seed=-1": "--seed=-1: seed must be a whole number >= 0, got -1",
    "--pca=-1": "--pca=-1: pca must be a whole number >= 0, got -1",
    "--train_per_class=-1": "--train_per_class=-1: train_per_class must be a whole number >= 0",
    "--checkpoint_every=-1": "--checkpoint_every=-1: checkpoint_every must be a whole number",
    "--batch_size=100000": "--batch_size=100000: batch_size must be at most the 1444 "
                           "training pixels, got 100000",
    "--rebalance_threshold=nan": "--rebalance_threshold=nan: must be a number >= 0",
    "--spectral_prior=2": "--spectral_prior=2: give a weight from 0 to 1 (1: the network "
                          "alone)",
    "--spectral_prior=nan": "--spectral_prior=nan: give a weight from 0 to 1",
    "--simulate_slowdown=/cpu:0=0": "--simulate_slowdown=/cpu:0=0: use DEVICE=FACTOR",
    "--model_dir=/proc/x": "--model_dir=/proc/x: not writable",
    "--epochs=abc": "--epochs=abc",
    "--resume=yes": "--resume=yes: give true or false (or --resume alone, or --noresume)",
    # a flags.txt's relative --model_dir from another folder: not "start without --resume"
    "--resume --model_dir=elsewhere/run": "--resume: there is no folder elsewhere/run in ",
    "--flagfile=/nonexistent/flags.txt": "hmp.train: error: --flagfile=/nonexistent/flags.txt: "
                                         "cannot be read (No such file or directory)",
    "--optimizer=nope": "--optimizer=nope: choose one of",
    "--rebalance=always": "--rebalance=always: choose off or epoch",
    "--split=nope": "--split=nope: choose one of random, disjoint",
    "--train_set=a.npy --test_set=b.npy --split=disjoint":
        "--split=disjoint: --train_set and --test_set give the split; leave --split out",
    "--train_per_class=5 --split=disjoint":   # it took the default fraction, silently
        "--train_per_class=5: --split=disjoint takes a share of each class in stripes "
        "(--train_fraction), not a number of pixels",
    "--train_per_class=5 --train_fraction=0.2":
        "--train_fraction=0.2, --train_per_class=5: give one of them (a share of each "
        "class's pixels, or a number of them)",
    "--plan=p.json --mesh=batch:2": "--mesh=batch:2: --plan=p.json gives the mesh; leave "
                                    "--mesh out",
    "--plan=p.json --devices=/cpu:0": "--devices=/cpu:0: --plan=p.json gives the devices; "
                                      "leave --devices out",
    "--train_fraction=1.5": "--train_fraction=1.5: train_fraction must lie strictly "
                             "between 0 and 1",
    "--spectral_gain=1.5": "--spectral_gain=1.5: give auto or a number from 0 to 1 (a gain "
                           "stays >= 0)",
    "--spectral_shift=wide": "--spectral_shift=wide: give auto or a number >= 0",
    "--synthetic_kind=raw": "--synthetic_kind=raw: choose one of reflectance, radiance",
    "--smoothing=4": "--smoothing=4: give an odd number of pixels (1: no smoothing), or auto",
    "--model=hybridsn --spectral_shift=4 --nopca_in_graph":
        "--spectral_shift=4: the field-look augmentation needs all bands, but this run keeps "
        "45 PCA components (give --pca=0 or --pca_in_graph)",
    # a flag given where it does nothing (hmp.run.settings.ACTS_ONLY; its rules are tested
    # in tests/run/test_settings_flags.py)
    "--cluster_timeout=30": "--cluster_timeout=30.0: only with --cluster or --local_workers, "
                            "whose workers it waits for; this run has no workers",
    "--port_base=9000 --cluster=127.0.0.1:2222": (
        "--port_base=9000: only with --cluster=slurm, whose tasks listen from it; "
        "--cluster=127.0.0.1:2222 names its workers' ports"),
    "--rebalance_threshold=0.3": "--rebalance_threshold=0.3: only with --rebalance=epoch, "
                                 "whose re-planning it steers; --rebalance=off does not "
                                 "re-plan",
    "--val_fraction=0 --patience=5": (
        "--patience=5: only with a validation share (--val_fraction > 0): it stops after "
        "epochs without a better validation accuracy; --val_fraction=0 holds none out"),
    "--val_fraction=0 --val_split=spatial": (
        "--val_split=spatial: only with a validation share (--val_fraction > 0), which it "
        "holds out; --val_fraction=0 holds none out"),
    "--noaugment --spectral_shift=2": "--spectral_shift=2: only with --augment, which draws "
                                      "the field look; --noaugment draws none",
    "--resume --overwrite --model_dir=no/such/run": (
        "--resume, --overwrite: give one of them (continue the run in --model_dir, or "
        "delete it and start over)"),
}


@pytest.fixture(scope="module")
def bad_flag_runs(cli_runs):
    """{flags: (exit code, stderr)} of every BAD_FLAGS run."""
    runs, _ = cli_runs
    return {flags: (runs[flags][0].returncode, runs[flags][0].stderr) for flags in BAD_FLAGS}


@pytest.mark.parametrize("flags", sorted(BAD_FLAGS))
def test_bad_flag_gives_one_line_error(flags, bad_flag_runs):
    returncode, stderr = bad_flag_runs[flags]
    assert returncode == 2
    lines = stderr.splitlines()   # nothing else: no traceback, no warning
    assert len(lines) == 1 and lines[0].startswith("hmp.train: error:"), stderr[-2000:]
    assert BAD_FLAGS[flags] in lines[0], lines[0]


def test_bad_flags_write_nothing(cli_runs, bad_flag_runs):
    """No run of BAD_FLAGS (each with its default --model_dir, runs/<name>) made a folder."""
    assert list(cli_runs[1]["bad_flags"].iterdir()) == []


def test_help_lists_the_flags_and_exits_0(cli_runs):
    short, full = cli_runs[0]["help"]
    assert (short.returncode, full.returncode) == (0, 0), short.stderr[-2000:]
    for run in (short, full):
        assert "--batch_size: Global batch size." in run.stdout and run.stderr == ""
    assert "--[no]tta" in short.stdout and "absl.flags:" in full.stdout   # absl's own flags
    assert list(cli_runs[1]["help"].iterdir()) == []   # nothing written in their folder


def test_resume_without_checkpoint_is_refused_before_anything_is_written(cli_runs):
    (run,), folders = cli_runs[0]["no_checkpoint"], cli_runs[1]
    assert run.returncode == 2
    assert run.stderr.strip() == ("hmp.train: error: --resume: %s holds no checkpoint to "
                                  "resume from; start the run without --resume"
                                  % folders["no_checkpoint"])
    assert list(folders["no_checkpoint"].iterdir()) == []


def test_a_model_that_fits_no_memory_is_refused_before_anything_is_written(cli_runs):
    (wide, big), folders = cli_runs[0]["too_large"], cli_runs[1]
    # hybridsn at width 1e6 on the synthetic scene's 45 PCA components, one device: its
    # weights alone (x4: gradients and Adam's two moments) are far beyond any machine
    spec = wide_hybridsn_spec()
    weights = 4 * 4 * sum(layer.params for layer in spec.layers)
    assert weights > 1e17
    for run in (wide, big):
        assert run.returncode == 2 and len(run.stderr.splitlines()) == 1, run.stderr[-2000:]
    assert wide.stderr.startswith("hmp.train: error: --width=1000000: the model needs ")
    assert "PB for its weights, their gradients and optimizer slots" in wide.stderr
    assert "%.3g PB for its weights" % (weights / 1e15) in wide.stderr
    assert "fits no layout of --mesh=auto on /cpu:0 (" in wide.stderr
    # a batch beyond the training pixels is refused before memory is even asked
    assert big.stderr.startswith("hmp.train: error: --batch_size=10000000: batch_size must "
                                 "be at most the 1444 training pixels")
    assert list(folders["too_large"].iterdir()) == []


def wide_hybridsn_spec():
    """The ModelSpec of hybridsn at width 1e6 on 9x9 patches of 45 bands, 10 classes."""
    from hmp.graph.from_graph import model_spec
    from models import model_config
    return model_spec(model_config("hybridsn", 9, 45, 10, 1000000))


def test_a_models_default_pca_beyond_the_bands_says_how_to_change_it(cli_runs):
    (run,), folders = cli_runs[0]["few_bands"], cli_runs[1]
    assert run.returncode == 2
    assert run.stderr.strip().endswith(
        ": 45 PCA components asked for, but the scene has only 8 bands (45: the default of "
        "--model=hybridsn; give --pca=N with fewer components, or --pca=0 for all bands)")
    assert not (folders["few_bands"] / "run").exists()


def test_refused_input_leaves_the_run_in_its_folder_as_it_was(cli_runs):
    """--overwrite deletes the old run only once the new run's input is good (its batch,
    its plan); --resume refuses other data and another model than the run's, before
    anything is written (no event file either) and before any worker starts
    (--local_workers), and --runs, whose seeds' folders would go beside it. The run:
    max_steps's, trained before these."""
    overwrite, unplanned, resume, other_model, runs, acts_not = cli_runs[0][
        "refused_on_max_steps"]
    trained, _ = cli_runs[0]["max_steps"]
    kept = cli_runs[1]["max_steps"]
    assert trained.returncode == 0, trained.stderr[-2000:]
    assert overwrite.returncode == 2   # known once the scene is loaded
    assert "--batch_size=100000: batch_size must be at most the" in overwrite.stderr
    assert unplanned.returncode == 2   # known once the planner has the model
    assert unplanned.stderr.endswith(
        "--mesh=batch:3, --batch_size=2: 2 samples cannot give 3 devices at least 1 each (at most 0 each)\n")
    assert resume.returncode == 2
    assert resume.stderr.strip() == (
        "hmp.train: error: --resume: the run in %s was trained with train_fraction=0.5, not "
        "train_fraction=0.3; resume it with the same data flags, or start over with "
        "--overwrite" % kept)
    assert other_model.returncode == 2 and "local worker" not in other_model.stdout
    assert other_model.stderr == (
        "hmp.train: error: --model=cnn3d: the run in %s was trained with --model=cnn2d; "
        "resume it with that (--flagfile=%s gives all its flags), or start over with "
        "--overwrite\n" % (kept, kept / "flags.txt"))
    assert len(list(kept.glob("events.out.tfevents.*"))) == 1
    results = json.loads((kept / "results.json").read_text())
    assert runs.returncode == 2
    assert runs.stderr == (
        "hmp.train: error: --runs=2: --model_dir=%s holds a single run (a checkpoint at "
        "step %d, results.json, history.json); continue it without --runs, start over with "
        "--overwrite, or give another --model_dir\n" % (kept, results["step"]))
    assert not list(kept.glob("seed-*"))
    assert acts_not.stderr == (
        "hmp.train: error: --rebalance_threshold=0.3: only with --rebalance=epoch, whose "
        "re-planning it steers; --rebalance=off does not re-plan\n")
    assert len(results["history"]) == 1 and (kept / "checkpoint").exists()
    assert json.loads((kept / "data.json").read_text())["train_fraction"] == 0.5


def test_max_steps_trains_the_whole_epochs_that_fit_and_keeps_the_flags_given(cli_runs):
    (run, resumed), folders = cli_runs[0]["max_steps"], cli_runs[1]
    assert run.returncode == 0, run.stderr[-2000:]
    results = json.loads((folders["max_steps"] / "results.json").read_text())
    steps = results["step"]   # one epoch's steps: it fits in 10, two epochs do not
    assert results["epochs"] == len(results["history"]) == 1 and steps <= 10 < 2 * steps
    assert ("training 1 of --epochs=3: --max_steps=10 allows 1 whole epoch of %d steps"
            % steps) in run.stdout
    assert "epoch 1/1 " in run.stdout   # the loop, schedule and patience count 1 epoch
    assert results["flags"]["epochs"] == 3 and results["flags"]["max_steps"] == 10
    flags_txt = (folders["max_steps"] / "flags.txt").read_text().splitlines()
    assert "--epochs=3" in flags_txt and "--max_steps=10" in flags_txt
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "is finished (1 epoch, step %d)" % steps in resumed.stdout
    assert resumed.stdout.rstrip().endswith("to train longer, resume with a larger --max_steps")


def test_plan_for_another_model_is_refused(cli_runs):
    from hmp.graph.from_graph import model_spec
    from models import model_config
    (run,), folders = cli_runs[0]["other_model_plan"], cli_runs[1]
    assert run.returncode == 2
    plan = folders["other_model_plan"] / "plan.json"
    assert "--plan=%s" % plan in run.stderr and "model" in run.stderr
    assert ("(the name gives the model, its input, precision and batch norm: plan again for "
            "the run's); e.g. python scripts/plan_layout.py --model=cnn2d --width=4 "
            "--patch_size=5 --bands=") in run.stderr
    # the flags it gives plan the very model the run expects
    expected = re.search(r"not the expected model '([^']+)'", run.stderr).group(1)
    flags = dict(re.findall(r"--(\w+)=(\S+)", run.stderr.split("plan_layout.py ")[1]))
    assert flags["precision"] == "float32" and flags["batch_size"] == "64"
    assert model_spec(model_config(
        flags["model"], int(flags["patch_size"]), int(flags["bands"]), int(flags["classes"]),
        int(flags["width"]), batch_norm=flags["batch_norm"])).name == expected


def test_plan_for_another_batch_size_is_refused_before_anything_is_written(cli_runs):
    (run,), folders = cli_runs[0]["other_batch_plan"], cli_runs[1]
    plan = folders["virtual_cpus_plan"] / "p.json"
    assert run.returncode == 2, run.stderr[-2000:]
    assert run.stderr == (
        "hmp.train: error: --plan=%s, --batch_size=32: plan file %s is for a batch of 64, "
        "not 32; train with --batch_size=64, or plan again with scripts/plan_layout.py "
        "--batch_size=32\n" % (plan, plan))
    assert list(folders["other_batch_plan"].iterdir()) == []


def test_a_plan_naming_a_device_this_machine_lacks_is_refused_before_anything_is_written(
        cli_runs):
    (run,), folders = cli_runs[0]["gpu_plan"], cli_runs[1]
    assert run.returncode == 2, run.stderr[-2000:]
    assert run.stderr.startswith("hmp.train: error: --plan=%s: /gpu:9 is not a device of this "
                                 "machine, which has " % (folders["gpu_plan"] / "gpu.json"))
    assert len(run.stderr.splitlines()) == 1
    assert not (folders["gpu_plan"] / "run").exists()


def test_nan_loss_stops_with_message_and_keeps_checkpoint(cli_runs):
    (run, resumed, other_optimizer), folders = cli_runs[0]["nan"], cli_runs[1]
    assert run.returncode == 1
    assert "loss became nan" in run.stderr.lower() and "Traceback" not in run.stderr
    assert (folders["nan"] / "checkpoint").exists()
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert other_optimizer.returncode == 2   # refused before its checkpoint is read
    assert other_optimizer.stderr == (
        "hmp.train: error: --optimizer=adam: the run in %s was trained with "
        "--optimizer=sgd; resume it with that (--flagfile=%s gives all its flags), or start "
        "over with --overwrite\n" % (folders["nan"], folders["nan"] / "flags.txt"))


def test_readme_custom_model_trains(cli_runs):
    """The README's example model, as a user would use it: --model=<module path>."""
    (run,), folders = cli_runs[0]["readme_model"], cli_runs[1]
    assert run.returncode == 0, run.stderr[-2000:]
    results = json.loads((folders["readme_model"] / "run" / "results.json").read_text())
    assert results["plan"]["splits"] == {"filters1": [5, 3]}   # --width=4: 8 filters at 2:1
    steps = results["step"]   # --max_steps=1: one whole epoch all the same
    assert steps > 1 and len(results["history"]) == 1
    assert ("training one whole epoch of %d steps: --max_steps=1 is less than one (a run "
            "trains whole epochs)\n" % steps) in run.stdout


def test_default_devices_are_the_real_ones(monkeypatch):
    import tensorflow as tf
    from hmp.measure.devices import default_devices
    if not tf.config.list_physical_devices("GPU"):   # this CPU-only machine
        assert default_devices() == ["/cpu:0"]
    monkeypatch.setattr(tf.config, "list_physical_devices",
                        lambda kind: ["gpu a", "gpu b"] if kind == "GPU" else [])
    assert default_devices() == ["/cpu:0", "/gpu:0", "/gpu:1"]


def test_virtual_cpus_are_the_highest_local_cpu_named():
    from hmp.measure.devices import virtual_cpus
    assert virtual_cpus(["/cpu:0", "/gpu:0", "/cpu:3"]) == 4
    assert virtual_cpus(["/job:localhost/replica:0/task:0/device:CPU:1"]) == 2
    assert virtual_cpus(["/gpu:0", "/job:worker/task:1/device:CPU:5"]) == 0


TINY_AUTO = ["--model=cnn2d", "--width=4", "--patch_size=5", "--batch_size=64",
             "--train_fraction=0.05", "--epochs=1", "--notta"]


def test_auto_speeds_measure_speeds_and_link_once_then_reuse_them(cli_runs):
    (first, second), tmp_path = cli_runs[0]["auto_speeds"], cli_runs[1]["auto_speeds"]
    assert first.returncode == 0, first.stderr[-2000:]
    assert "profiling /cpu:1 (2/2)" in first.stdout
    assert "profiling the link between /cpu:0 and /cpu:1" in first.stdout
    assert "  link: " in first.stdout and "speeds: reusing" not in first.stdout
    plan = json.loads((tmp_path / "a" / "results.json").read_text())["plan"]
    assert "communication not priced" not in plan["reason"]
    assert len(plan["devices"]) + len(plan["left_out"]) == 2
    assert {c["devices"] for c in plan["candidates"]} == {1, 2}
    for path in (tmp_path / "a" / "speeds.json", tmp_path / "cache" / "speeds.json"):
        (entry,) = json.loads(path.read_text())["entries"]
        assert entry["key"]["devices"] == ["/cpu:0", "/cpu:1"] and entry["link"]
        # --mesh=auto may split the model: the op-size figures were measured too
        assert all(s["half_rate_flops"] is not None
                   and s["elementwise_s_per_element"] is not None for s in entry["speeds"])
    assert "at half width (2 for 4)" in first.stdout
    # each device's figures (an element-wise cost too small to measure is said so)
    assert len(re.findall(r"(MFLOP per sample and op|no op-size effect measured), "
                          r"(element-wise \S+ ns per element|no element-wise cost measured)",
                          first.stdout)) == 2, first.stdout

    assert second.returncode == 0, second.stderr[-2000:]
    assert not [line for line in second.stdout.splitlines() if line.startswith("profiling")]
    assert ("speeds: reusing the measurement of %s from %s" % (
        entry["measured_at"], tmp_path / "cache" / "speeds.json")) in second.stdout
    assert json.loads((tmp_path / "b" / "results.json").read_text())["plan"]["speeds"] == [
        s["flops_per_s"] for s in entry["speeds"] if s["device"] in plan["devices"]]


def test_relative_speeds_say_communication_is_not_priced(cli_runs):
    (run,) = cli_runs[0]["relative_speeds"]
    assert run.returncode == 0, run.stderr[-2000:]
    assert ("communication not priced: --speeds=2,1 gives the speeds, so no link was "
            "measured (--speeds=auto measures both)") in run.stdout
    assert not [line for line in run.stdout.splitlines() if line.startswith("profiling")]


def test_tta_and_smoothing_score_as_inference_and_keep_the_scores_without(cli_runs):
    """--tta and --smoothing=auto: the window chosen is the smallest of those that classify
    the validation pixels best, and the test scores are those of hmp.predict's path (one
    device, the run's checkpoint) smoothed over it (guided, the default), with and
    without TTA, and unsmoothed; the training fit is that path's on the training pixels."""
    (run,), folder = cli_runs[0]["relative_speeds"], cli_runs[1]["relative_speeds"]
    assert run.returncode == 0, run.stderr[-2000:]
    results = json.loads((folder / "results.json").read_text())
    trained = inference.TrainedRun.open(str(folder), get_model)
    exp = experiment.prepare(*experiment.load(str(folder)))   # its scene, split, validation
    test = load_split(folder / "split.npz").test
    cube, _ = trained.prepare_scene(exp.scene)
    probabilities = {tta: inference.classify(trained, cube, ["/cpu:0"], 256, tta=tta)
                     for tta in (True, False)}

    def classes(tta, window, hidden=()):   # smoothed without the outputs at ``hidden``
        valid = np.ones(exp.scene.labels.size, bool)
        valid[np.asarray(hidden, int)] = False
        return smooth(probabilities[tta], window, valid.reshape(exp.scene.labels.shape),
                      guide=exp.guide_image).reshape(-1, 10).argmax(axis=1)

    # a scored pixel's smoothing reads no output of a pixel the network trained on
    accuracy = {window: np.mean(classes(True, window, exp.train.indices)[exp.val.indices]
                                == exp.val.class_ids) for window in WINDOWS}
    window = results["smoothing"]["window"]
    assert results["smoothing"]["guided"] is True
    assert results["smoothing"]["validation_accuracy"] == pytest.approx(
        {str(w): a for w, a in accuracy.items()})
    assert window == min(w for w in WINDOWS if accuracy[w] == max(accuracy.values()))
    scored = [(True, window, "test"), (False, window, "test_without_tta")]
    if window > 1:
        scored.append((True, 1, "test_without_smoothing"))
    else:
        assert "test_without_smoothing" not in results
    for tta, size, name in scored:
        confusion = evaluate(exp.scene.labels.ravel()[test] - 1,
                             classes(tta, size, exp.split.train)[test],
                             len(trained.class_names)).confusion
        np.testing.assert_array_equal(confusion, results[name]["confusion_matrix"])
    assert "without tta (--notta): OA %.2f" % (
        100 * results["test_without_tta"]["overall_accuracy"]) in run.stdout
    assert "smoothing over %d x %d pixels, guided: on the %d validation pixels" % (
        window, window, len(exp.val)) in run.stdout
    # the training pixels the scoring weights fit: the patches as they are, unsmoothed
    fit = np.mean(classes(False, 1)[exp.train.indices] == exp.train.class_ids)
    assert results["training_fit"] == pytest.approx(fit)
    assert ("these weights classify %.1f%% of the %d training pixels right"
            % (100 * fit, len(exp.train))) in run.stdout


def test_a_plan_on_virtual_cpus_runs_without_naming_them(cli_runs):
    """--plan brings its own devices: the default --devices (/cpu:0) must not hide /cpu:1.
    The run: max_steps's (cli_runs), laid out by the plan."""
    (run, _), folder = cli_runs[0]["max_steps"], cli_runs[1]["max_steps"]
    assert run.returncode == 0, run.stderr[-2000:]
    plan = json.loads((folder / "results.json").read_text())["plan"]
    assert plan["devices"] == ["/cpu:0", "/cpu:1"] and plan["splits"]["filters1"] == [5, 3]
