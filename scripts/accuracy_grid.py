"""The accuracy grid of scripts/bench_accuracy.py, without flags (tests import it beside
other scripts' flags): training runs as pinned parallel jobs, the baselines on each
run's saved split, collapse checks, and the rows, table and JSON of the comparison.

    python scripts/accuracy_grid.py RUN_DIR OUT.json 5,9

scores the baselines of one run's split into ``OUT.json``: bench_accuracy.py starts
it as a job of its own, pinned like the training runs.
"""

import dataclasses
import os
import subprocess
import sys
import time

import numpy as np

from baseline_scores import COORDINATES_ONLY, score_run, sklearn_classifiers
from hmp import data, files
from hmp.cluster.subprocesses import pinned
from hmp.data.synthetic import GENERATED_LAYOUT
from hmp.errors import InvalidInput
from hmp.run import experiment, run_files

COLLAPSE_SHARE = 0.9   # a run that puts more of the test pixels into one class collapsed
COLLAPSE_CHANCE_FACTOR = 2   # ... and so did one below this many times chance (1 / classes)
THREAD_VARIABLES = ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS", "OMP_NUM_THREADS")
# the paired scores a run records (results.json's test_without_<name>): name -> label
PAIRED = {"tta": "TTA", "smoothing": "smoothing"}


@dataclasses.dataclass(frozen=True)
class Run:
    """One training run of the grid."""

    model: str
    layout: str
    split: str
    seed: int

    @property
    def name(self):
        return "%s-%s-%s-%d" % (self.model, self.layout, self.split, self.seed)

    @property
    def group(self):
        """(layout, split, seed): the runs that share a split, and so its baselines."""
        return self.layout, self.split, self.seed


def train_command(run, folder, data_dir=None, train_args=()):
    """``python -m hmp.train`` for ``run`` in ``folder``: one CPU device, every other
    setting hmp.train's or the model's default (10% of each class) unless ``train_args``
    says otherwise; ``run.split`` unless ``train_args`` give the split (--train_set,
    --test_set), which hmp.train refuses beside --split. A layout ``LAYOUT:KIND`` is that
    synthetic layout of that ``--synthetic_kind``; ``data_dir`` holds the ground truth of a
    named layout (the generated one reads none)."""
    layout, _, kind = run.layout.partition(":")   # e.g. indian_pines:radiance
    given_split = any(arg.startswith(("--train_set=", "--test_set=")) for arg in train_args)
    command = [sys.executable, "-m", "hmp.train", "--model=" + run.model,
               "--synthetic_layout=" + layout, "--seed=%d" % run.seed, "--devices=/cpu:0",
               "--model_dir=" + folder] + ([] if given_split else ["--split=" + run.split])
    return (command + (["--synthetic_kind=" + kind] if kind else [])
            + (["--data_dir=" + data_dir] if data_dir and layout != GENERATED_LAYOUT else [])
            + list(train_args))


# hmp.train's main with its flag parsing and Settings.check, and no training
CHECK_TRAIN = ("from hmp import cli, train\n"
               "train.fit = lambda settings, get_model, argv: settings.check(get_model)\n"
               "cli.run(train.main, 'hmp.train')")


def check_train(run, folder, data_dir=None, train_args=()):
    """What hmp.train says of the flags it would train ``run`` with (its one-line error,
    without "hmp.train: error: "), or None when it takes them. A process of its own,
    as the runs: it imports TensorFlow."""
    command = train_command(run, folder, data_dir, train_args)
    checked = subprocess.run([command[0], "-c", CHECK_TRAIN, *command[3:]], text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False)
    if checked.returncode == 0:
        return None
    if checked.returncode != 2:   # not the flags: a bug, with its traceback
        raise RuntimeError("checking hmp.train's flags failed:\n" + checked.stderr[-3000:])
    return checked.stderr.strip().splitlines()[-1].replace("hmp.train: error: ", "", 1)


def baselines_command(run_folder, out, windows):
    """This module run as a job: the baselines of ``run_folder``'s split into ``out``."""
    return [sys.executable, os.path.abspath(__file__), run_folder, out,
            ",".join(str(side) for side in windows)]


def core_groups(jobs, cores_per_job, available=None):
    """The CPU cores of each of ``jobs`` job slots: disjoint groups of ``cores_per_job``
    (0: an equal share) of the cores this process may use."""
    available = sorted(os.sched_getaffinity(0) if available is None else available)
    if jobs < 1 or cores_per_job < 0:
        raise InvalidInput("give at least 1 job and 0 (an equal share) or more cores per job")
    cores_per_job = cores_per_job or len(available) // jobs
    if cores_per_job < 1 or jobs * cores_per_job > len(available):
        raise InvalidInput("%d jobs of %d cores need %d cores; this process may use %d (%s)"
                           % (jobs, cores_per_job, jobs * cores_per_job, len(available),
                              ",".join(map(str, available))))
    return [set(available[i * cores_per_job:(i + 1) * cores_per_job]) for i in range(jobs)]


def start_job(command, cores, log_path):
    """Starts ``command`` pinned to ``cores`` (os.sched_setaffinity in the child) with
    TensorFlow's intra- and inter-op threads set to their number; output to ``log_path``."""
    env = dict(os.environ, **{name: str(len(cores)) for name in THREAD_VARIABLES})
    with open(log_path, "w") as log:
        return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env,
                                preexec_fn=pinned(cores))


def run_jobs(jobs, groups):
    """Runs ``jobs`` ([(key, command, log path, after)]) at most ``len(groups)`` at a time,
    each pinned to a free group of cores. ``after(key, exit code)`` is called as each
    ends and returns jobs to run next (e.g. a split's baselines after its first run)."""
    queue, running, free = list(jobs), {}, list(groups)
    while queue or running:
        while queue and free:
            key, command, log_path, after = queue.pop(0)
            cores = free.pop(0)
            running[key] = (start_job(command, cores, log_path), cores, after)
        time.sleep(0.2)
        for key, (process, cores, after) in list(running.items()):
            if process.poll() is None:
                continue
            del running[key]
            free.append(cores)
            queue[:0] = after(key, process.returncode)


def last_line(path):
    """The last non-empty line of a log (what a failed run said last)."""
    with open(path, errors="replace") as log:
        lines = [line.strip() for line in log if line.strip()]
    return lines[-1] if lines else "(no output)"


def collapse(confusion):
    """Why a run with this test confusion matrix [true, predicted] collapsed, or None:
    it puts more than 90% of the test pixels into one class, or its OA is below twice
    chance (1 / classes)."""
    confusion = np.asarray(confusion)
    total = confusion.sum()
    predicted = confusion.sum(axis=0) / total
    reasons = []
    if predicted.max() > COLLAPSE_SHARE:
        reasons.append("%.0f%% of test pixels in class %d" % (100 * predicted.max(),
                                                             predicted.argmax() + 1))
    chance = 1.0 / len(confusion)
    if np.trace(confusion) / total < COLLAPSE_CHANCE_FACTOR * chance:
        reasons.append("OA below %d x chance (%.1f%%)" % (COLLAPSE_CHANCE_FACTOR, 100 * chance))
    return "; ".join(reasons) or None


def model_row(run, folder):
    """The row of one finished (or failed) run: OA, AA, kappa in %, seconds, collapse."""
    row = {"kind": "model", "name": run.model, "layout": run.layout, "split": run.split,
           "seed": run.seed, "folder": folder}
    results = run_files.read_results(folder)
    if results is None:
        return {**row, "error": last_line(folder + ".log")}
    test = results["test"]
    for name in PAIRED:   # the same weights without TTA or without smoothing
        if "test_without_" + name in results:
            row["oa_without_" + name] = 100 * results["test_without_" + name]["overall_accuracy"]
    if "training_fit" in results:   # the training pixels the scoring weights classify right
        row["training_fit"] = 100 * results["training_fit"]
    return {**row, **_percent(test), "seconds": results["seconds"],
            "best_epoch": results["best_epoch"], "leakage": 100 * results["leakage"],
            "collapsed": collapse(test["confusion_matrix"])}


def baseline_rows(group, path):
    """The rows of one split's baselines (written by :func:`score_baselines`)."""
    layout, split, seed = group
    scored = files.read_json_file(path, "baselines file %s" % path)
    return [{"kind": "baseline", "name": name, "layout": layout, "split": split, "seed": seed,
             "spectral": name != COORDINATES_ONLY, "leakage": 100 * scored["leakage"],
             "split_of": scored["run"], **_percent(scores)}
            for name, scores in scored["scores"].items()]


def _percent(scores):
    return {"oa": 100 * scores["overall_accuracy"], "aa": 100 * scores["average_accuracy"],
            "kappa": 100 * scores["kappa"]}


def score_baselines(run_folder, out, windows, say=print):
    """Scores the baselines on the split ``run_folder`` saved, on all bands (no PCA, whatever
    the run's model used), and writes them to ``out`` (atomically)."""
    config, split = experiment.load_as_trained(run_folder)
    exp = experiment.prepare(dataclasses.replace(config, pca=0), split)
    files.write_json(out, {"run": run_folder, "split": split.description,
                           "leakage": data.split_leakage(split, config.patch_size),
                           "train": split.train, "test": split.test,
                           "scores": score_run(exp, windows, say=say)})


def same_split(run_folder, baselines_path):
    """Whether a run trained and tested on exactly the pixels its group's baselines did."""
    _, split = experiment.load(run_folder)
    scored = files.read_json_file(baselines_path,
                                 "baselines file %s" % baselines_path)
    return (np.array_equal(split.train, scored["train"])
            and np.array_equal(split.test, scored["test"]))


def summaries(rows):
    """Per (layout, split, name): mean and std of OA over seeds, and each model's margin
    over the best spectral baseline and over the best baseline of all (by mean OA), on
    the seeds the model and the baseline share (a failed seed leaves both out)."""
    table = {}
    for row in sorted(rows, key=lambda row: row["seed"]):   # runs end in any order
        if "oa" in row:
            key = (row["layout"], row["split"], row["kind"], row["name"])
            entry = table.setdefault(key, {"kind": row["kind"], "name": row["name"],
                                           "layout": row["layout"], "split": row["split"],
                                           "seeds": [], "oa": [], "collapsed": []})
            entry["seeds"].append(row["seed"])
            entry["oa"].append(row["oa"])
            if row["kind"] == "baseline":
                entry["spectral"] = row["spectral"]
                continue
            entry.setdefault("seconds", []).append(row["seconds"])
            for name in PAIRED:
                if "oa_without_" + name in row:
                    entry.setdefault("oa_without_" + name, []).append(row["oa_without_" + name])
            if "training_fit" in row:
                entry.setdefault("training_fit", []).append(row["training_fit"])
            if row["collapsed"]:
                entry["collapsed"].append(row["seed"])
    summary = []
    for entry in table.values():
        oa = np.array(entry["oa"])
        entry.update(mean_oa=float(oa.mean()),
                     std_oa=float(oa.std(ddof=1)) if len(oa) > 1 else 0.0)
        if "seconds" in entry:
            entry["mean_seconds"] = float(np.mean(entry["seconds"]))
        summary.append(entry)
    for entry in summary:
        if entry["kind"] != "model":
            continue
        others = [b for b in summary if b["kind"] == "baseline"
                  and (b["layout"], b["split"]) == (entry["layout"], entry["split"])]
        oa = dict(zip(entry["seeds"], entry["oa"]))

        def on_shared_seeds(baseline):
            """(the model's mean OA, the baseline's) on the seeds both have."""
            theirs = dict(zip(baseline["seeds"], baseline["oa"]))
            shared = [seed for seed in oa if seed in theirs]
            return (np.mean([oa[s] for s in shared]) if shared else np.nan,
                    np.mean([theirs[s] for s in shared]) if shared else np.nan)

        for label, chosen in (("spectral", [b for b in others if b["spectral"]]),
                              ("all", others)):
            paired = [(b, *on_shared_seeds(b)) for b in chosen]
            paired = [p for p in paired if not np.isnan(p[1])]
            if paired:
                best, mine, theirs = max(paired, key=lambda p: p[2])
                entry["best_%s_baseline" % label] = best["name"]
                entry["margin_over_best_%s" % label] = float(mine - theirs)
    return summary


def table(rows, summary):
    """The printed comparison: per (layout, split), the models, then the baselines."""
    lines = []
    for layout, split in dict.fromkeys((r["layout"], r["split"]) for r in rows):
        lines.append("")
        leakage = sorted({round(r["leakage"], 1) for r in rows if "leakage" in r
                          and (r["layout"], r["split"]) == (layout, split)})
        lines.append("%s, %s split (leakage %s%%)" % (
            layout, split, "-".join("%.1f" % x for x in leakage[::max(len(leakage) - 1, 1)])))
        lines.append("%-16s %-26s %7s %6s %9s %9s %7s  %s" % (
            "", "OA per seed", "mean OA", "std", "vs spect.", "vs all", "s/run", "note"))
        for row in [r for r in rows if (r["layout"], r["split"]) == (layout, split)
                    and "error" in r]:
            lines.append("%-16s seed %d failed: %s" % (row["name"], row["seed"], row["error"]))
        for entry in sorted([s for s in summary if (s["layout"], s["split"]) == (layout, split)],
                            key=lambda s: s["kind"] != "model"):   # models, then baselines
            margins = ["%+9.1f" % entry[key] if key in entry else "%9s" % ""
                       for key in ("margin_over_best_spectral", "margin_over_best_all")]
            note = ("collapsed: seed %s" % ",".join(map(str, entry["collapsed"]))
                    if entry["collapsed"] else "")
            if entry["kind"] == "baseline" and not entry["spectral"]:
                note = "no spectrum: the pixel's position only"
            seconds = "%7.0f" % entry["mean_seconds"] if "mean_seconds" in entry else " " * 7
            lines.append("%-16s %-26s %7.1f %6.1f %s %s %s  %s" % (
                entry["name"], " ".join("%.1f" % oa for oa in entry["oa"]), entry["mean_oa"],
                entry["std_oa"], *margins, seconds, note))
            for name, label in PAIRED.items():
                without = entry.get("oa_without_" + name, [])
                if len(without) == len(entry["oa"]):
                    lines.append("%-20s %-22s %7.1f %6s   %s's paired change %+.1f" % (
                        "  without " + label, " ".join("%.1f" % oa for oa in without),
                        np.mean(without), "", label, entry["mean_oa"] - np.mean(without)))
            fit = entry.get("training_fit", [])
            if fit and len(fit) == len(entry["oa"]):
                lines.append("%-20s %-22s %7.1f %6s   lowest %.1f" % (
                    "  training fit", " ".join("%.1f" % f for f in fit), np.mean(fit), "",
                    min(fit)))
    return "\n".join(lines)


def write(path, rows, summary=None):
    """Every row so far (and the summary at the end), atomically."""
    if path:
        files.write_json(path, {"rows": rows, "summary": summary})


def run_grid(grid, root, groups, data_dir=None, train_args=(), windows=(5, 9),
             json_path=None, say=print):
    """Trains every run of ``grid`` in ``root/<run name>`` (log: ``<run name>.log``) as
    pinned jobs on ``groups`` of cores and scores the baselines of each (layout, split,
    seed) on the split its first finished run saved; one line per finished job. Returns
    (rows, summary); ``json_path`` gets every row as each job ends."""
    os.makedirs(root, exist_ok=True)
    with_baselines, why_not = baselines_available()
    if not with_baselines:
        say(why_not)
    rows, scored, done = [], {}, []
    total = len(grid) + (len({run.group for run in grid}) if with_baselines else 0)

    def progress(line):
        say("[%d/%d] %s" % (len(done), total, line))

    def after_run(run, code):
        folder = os.path.join(root, run.name)
        row = model_row(run, folder)
        rows.append(row)
        done.append(run)
        progress("%s %s %s seed %d: %s" % (run.model, run.layout, run.split, run.seed,
                                          _outcome(row)))
        write(json_path, rows)
        if not with_baselines or code or run.group in scored:
            return []
        scored[run.group] = os.path.join(root, "baselines-%s-%s-%d.json" % run.group)
        return [(run.group, baselines_command(folder, scored[run.group], windows),
                 scored[run.group] + ".log", after_baselines)]

    def after_baselines(group, code):
        done.append(group)
        if code:
            progress("baselines %s %s seed %d failed: %s"
                     % (*group, last_line(scored[group] + ".log")))
            return []
        found = baseline_rows(group, scored[group])
        rows.extend(found)
        best = max((r for r in found if r["spectral"]), key=lambda r: r["oa"])
        progress("baselines %s %s seed %d: best spectral %s %.1f" % (*group, best["name"],
                                                                     best["oa"]))
        write(json_path, rows)
        return []

    run_jobs([(run, train_command(run, os.path.join(root, run.name), data_dir, train_args),
               os.path.join(root, run.name + ".log"), after_run) for run in grid], groups)
    for row in rows:
        if row["kind"] == "model" and "oa" in row and row_group(row) in scored:
            row["same_split_as_baselines"] = same_split(row["folder"], scored[row_group(row)])
    summary = summaries(rows)
    write(json_path, rows, summary)
    return rows, summary


def row_group(row):
    return row["layout"], row["split"], row["seed"]


def _outcome(row):
    if "error" in row:
        return "failed: " + row["error"]
    return "OA %.1f%% (%.0f s)%s" % (row["oa"], row["seconds"], "; collapsed: "
                                     + row["collapsed"] if row["collapsed"] else "")


def baselines_available():
    """Whether scikit-learn is there; if not, the one line that says so."""
    try:
        sklearn_classifiers()
    except InvalidInput as missing:
        return False, "%s; printing the models only" % missing
    return True, None


def _main(args):
    """``RUN_DIR OUT.json SIDES``: one run's baselines (a job bench_accuracy.py starts)."""
    asked = args[:1] in (["-h"], ["--help"])
    if asked or len(args) != 3 or not all(side.isdigit() for side in args[2].split(",")):
        print(__doc__.strip(), file=sys.stdout if asked else sys.stderr)   # how to use it
        return 0 if asked else 2
    score_baselines(args[0], args[1], [int(side) for side in args[2].split(",")])
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
