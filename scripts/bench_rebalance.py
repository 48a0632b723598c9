"""Dynamic load: a worker disturbed in the middle of a run, with and without re-balancing.

Two ``hmp.worker`` processes as ``bench_hetero.py`` starts them (each pinned to a core
of its own with one intra-op thread; ``--workers`` to place them otherwise), equal at
the start. For each model of ``--models``, ``hmp.train --cluster`` trains ``--epochs``
epochs on ``--mesh=batch:2`` (``--notta``, ``--steps_per_run``,
``--batch_norm``) twice
on them: with
``--rebalance=off`` and with ``--rebalance=epoch``. Once epoch ``--disturb_after`` has
ended, ``--slowdown`` CPU-bound processes start on the first CPU of worker
``--disturbed_worker`` (the second, 1, by default; 0: the first)
(``bench_hetero.competing_load``) and spin until that run ends, or, with
``--disturb_for=N``, until N epochs later (a passing disturbance: the run should move
back). The speeds are profiled by the first run before any disturbance (a speed cache
of this benchmark's own), so both runs start from the same plan.

Per run: the samples/s of the last ``LAST`` epochs by the wall clock (from the end of
the epoch before them to the end of the last: switches, checkpoints and validation
count), hmp's own samples/s of those epochs (their steps only), the wall samples/s of
every epoch from the disturbance on, each epoch's wall seconds and the plan it ran on.
The goal: with re-balancing, the last epochs at 1.25x or more the run without (under a
disturbance that lasts; under a passing one, at least as fast from the disturbance on).

  python scripts/bench_rebalance.py --models=cnn2d --epochs=8
"""

import contextlib
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

from absl import flags

from bench_hetero import (FLAGS, check_flags, competing_load, machine, refuse_unused,
                          worker_placement)
from hmp import cli, files
from hmp.cluster.launch import local_cluster
from hmp.cluster.subprocesses import die_with_parent
from hmp.formatting import aligned_columns
from hmp.run import run_files

flags.DEFINE_integer("epochs", 8, "Epochs of each run.")
flags.DEFINE_integer("disturb_after", 3, "The competing processes start once this epoch "
                     "has ended.")
flags.DEFINE_integer("disturb_for", 0, "The competing processes stop after this many "
                     "epochs (0: they spin until the run ends).", lower_bound=0)
flags.DEFINE_enum("disturbed_worker", "1", ["0", "1"], "The worker whose first CPU the "
                  "competing processes share.")
flags.DEFINE_float("train_fraction", 0.6, "Training share of each class's pixels (of the "
                   "built-in scene).")
FLAGS.set_default("models", ["cnn2d"])
FLAGS.set_default("batch_size", 256)
FLAGS.set_default("out", "bench_rebalance.json")

# bench_hetero's flags that these runs do not use (hmp.train trains them with its own)
NOT_USED = ("width", "steps", "repeats", "warmup", "profile_steps", "trace_steps",
            "hybrid_across", "fixed_splits")
LAST = 3   # the epochs compared
GOAL = 1.25   # under a disturbance that lasts: the last epochs with / without re-balancing
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# the figures a table line names: the last epochs, every epoch from the disturbance on
WHEN = {"last": "last %d epochs" % LAST, "since": "from the disturbance on"}
EPOCH_LINE = re.compile(r"epoch (\d+)/\d+ ")


def train_command(model, spec, rebalance, folder):
    """The ``hmp.train`` command of one run on the cluster ``spec``, in ``folder``."""
    return [sys.executable, "-m", "hmp.train", "--cluster=" + spec, "--model=" + model,
            "--batch_size=%d" % FLAGS.batch_size, "--epochs=%d" % FLAGS.epochs,
            "--train_fraction=%g" % FLAGS.train_fraction, "--mesh=batch:2",
            "--notta", "--rebalance=" + rebalance,
            "--batch_norm=" + FLAGS.batch_norm, "--steps_per_run=%d" % FLAGS.steps_per_run,
            "--model_dir=" + os.path.join(folder, rebalance)]


def train(model, spec, rebalance, folder, slowed_cpu):
    """One ``hmp.train`` run on the cluster ``spec``: (the time each epoch's line came
    {epoch: perf_counter seconds}, the epochs after which it switched plans, its
    re-balancing and standby lines, results.json).
    The competing load starts after epoch ``--disturb_after``."""
    command = train_command(model, spec, rebalance, folder)
    ended, switched, decisions = {}, [], []
    os.makedirs(folder, exist_ok=True)
    env = {**os.environ, "HMP_CACHE_DIR": folder}   # both runs: the first run's speeds
    with contextlib.ExitStack() as stack, contextlib.ExitStack() as load:
        process = stack.enter_context(subprocess.Popen(
            command, cwd=REPO, env=env, stdout=subprocess.PIPE, text=True,
            preexec_fn=die_with_parent))
        for line in process.stdout:
            print("  " + line, end="", flush=True)
            match = EPOCH_LINE.match(line)
            if match:
                ended[int(match.group(1))] = time.perf_counter()
                if int(match.group(1)) == FLAGS.disturb_after:
                    load.enter_context(competing_load(slowed_cpu, FLAGS.slowdown))
                elif int(match.group(1)) == FLAGS.disturb_after + FLAGS.disturb_for:
                    load.close()   # a passing disturbance ends
            elif line.startswith(("re-balancing", "standby")):
                decisions.append("after epoch %d: %s" % (max(ended), line.strip()))
                if line.rstrip().endswith("switching"):
                    switched.append(max(ended))
    if process.returncode:
        raise RuntimeError("%s ended with exit code %d" % (" ".join(command),
                                                           process.returncode))
    results = run_files.read_results(os.path.join(folder, rebalance))
    if results is None:
        raise RuntimeError("%s ended without a readable %s in %s" % (
            " ".join(command), run_files.RESULTS, os.path.join(folder, rebalance)))
    return ended, switched, decisions, results


def summary(ended, switched, decisions, results):
    """A run's figures: the last epochs' samples/s (wall clock, and hmp's), each epoch's
    wall seconds and plan (its splits), its re-balancing and standby lines."""
    history, plans = results["history"], results["plans"]
    epochs = sorted(ended)
    last = epochs[-LAST:]
    # every epoch trains all its steps: one switched within records its last ones only
    epoch_samples = max(h["steps"] for h in history) * FLAGS.batch_size
    splits, plan = [], 0
    for epoch in epochs:
        splits.append(" ".join(str(v) for v in plans[plan]["splits"].values()))
        if epoch in switched:
            plan += 1
    since = [e for e in epochs if e > FLAGS.disturb_after]
    return {"last_samples_per_s": (len(last) * epoch_samples
                                   / (ended[last[-1]] - ended[last[0] - 1])),
            "disturbed_on_samples_per_s": (len(since) * epoch_samples
                                           / (ended[since[-1]] - ended[FLAGS.disturb_after])),
            # their samples over their seconds (epochs of equal samples: the harmonic mean)
            "last_hmp_samples_per_s": statistics.harmonic_mean(
                history[e - 1]["samples_per_second"] for e in last),
            "epoch_seconds": [ended[e] - ended[e - 1] if e - 1 in ended else None
                              for e in epochs],
            "plans": splits, "switched_after": switched, "decisions": decisions}


def goal():
    """(the figure a run pair is judged by, "last" or "since", its goal): under a
    disturbance that lasts, the last ``LAST`` epochs at ``GOAL`` times the run without
    re-balancing; under a passing one (``--disturb_for``), at least as fast from the
    disturbance on."""
    if FLAGS.disturb_for:
        return "since", 1.0
    return "last", GOAL


def table(model, runs):
    """(the table of a model's run pair, the ratio ``goal`` judges it by)."""
    lines = ["", "%s, batch %d, %d epochs, %d busy loop(s) beside worker %s after epoch %d%s"
             % (model, FLAGS.batch_size, FLAGS.epochs, FLAGS.slowdown, FLAGS.disturbed_worker,
                FLAGS.disturb_after,
                " until epoch %d" % (FLAGS.disturb_after + FLAGS.disturb_for)
                if FLAGS.disturb_for else "")]
    rows = [["--rebalance", "last %d samples/s (wall)" % LAST, "(hmp)",
             "from epoch %d on (wall)" % (FLAGS.disturb_after + 1), "epoch seconds",
             "plan of each epoch"]]
    for name, run in runs.items():
        rows.append([name, "%.0f" % run["last_samples_per_s"],
                     "%.0f" % run["last_hmp_samples_per_s"],
                     "%.0f" % run["disturbed_on_samples_per_s"],
                     " ".join("-" if s is None else "%.1f" % s for s in run["epoch_seconds"]),
                     " | ".join(run["plans"])])
    lines += aligned_columns(rows)
    ratios = {"last": runs["epoch"]["last_samples_per_s"] / runs["off"]["last_samples_per_s"],
              "since": (runs["epoch"]["disturbed_on_samples_per_s"]
                        / runs["off"]["disturbed_on_samples_per_s"])}
    judged, target = goal()
    other = "since" if judged == "last" else "last"
    lines.append("with / without re-balancing, %s: %.2fx (goal >= %.2f: %s); %s: %.2fx"
                 % (WHEN[judged], ratios[judged], target,
                    "met" if ratios[judged] >= target else "missed", WHEN[other],
                    ratios[other]))
    return "\n".join(lines), ratios[judged]


def main(argv):
    refuse_unused(argv, NOT_USED, "hmp.train trains the model at its default width")
    check_flags()
    if not 1 <= FLAGS.disturb_after < FLAGS.epochs - LAST + 1:
        raise cli.UsageError("--disturb_after=%d: must lie in [1, --epochs - %d] = [1, %d]"
                             % (FLAGS.disturb_after, LAST, FLAGS.epochs - LAST))
    if FLAGS.disturb_for and FLAGS.disturb_after + FLAGS.disturb_for >= FLAGS.epochs:
        raise cli.UsageError("--disturb_for=%d: the disturbance must end before the last "
                             "epoch (--disturb_after + --disturb_for < --epochs = %d)"
                             % (FLAGS.disturb_for, FLAGS.epochs))
    cpus, threads, _ = worker_placement()
    slowed_cpu = cpus[int(FLAGS.disturbed_worker)][0]
    before, results = machine(), {}
    with local_cluster(2, cpus=cpus, threads=threads,
                       inter_op_threads=FLAGS.inter_op_threads) as workers, \
            tempfile.TemporaryDirectory(prefix="bench-rebalance-") as folder:
        judged, target = goal()
        for model in FLAGS.models:
            runs = {}
            for rebalance in ("off", "epoch"):
                print("%s, --rebalance=%s" % (model, rebalance), flush=True)
                runs[rebalance] = summary(*train(model, workers.flag, rebalance,
                                                 os.path.join(folder, model), slowed_cpu))
            text, ratio = table(model, runs)
            print(text, flush=True)
            results[model] = {"runs": runs, "ratio": ratio, "goal": "%s >= %.2f" % (
                WHEN[judged], target)}
    files.write_json(FLAGS.out, {
        "date": time.strftime("%Y-%m-%d %H:%M"), "command": " ".join(sys.argv),
        "machine": before, "workers": {"cpus": cpus, "threads": threads},
        "flags": {name: FLAGS[name].value for name in (
            "models", "batch_size", "epochs", "disturb_after", "disturb_for", "disturbed_worker",
            "train_fraction", "batch_norm", "steps_per_run", "slowdown", "inter_op_threads",
            "workers")},
        "models": results})
    print("wrote %s" % FLAGS.out, flush=True)


if __name__ == "__main__":
    cli.run(main, "bench_rebalance")
