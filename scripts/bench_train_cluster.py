"""``hmp.train --cluster`` with every default against task 0 alone (issue #27's first goal).

Two ``hmp.worker`` processes as ``bench_hetero.py`` starts them (each pinned to a core
of its own with one intra-op thread; ``--workers`` to place them otherwise), worker 1's
first CPU shared with ``--slowdown`` busy loops for the whole benchmark. For each model of
``--models``, ``--pairs`` pairs of runs in turns on those workers:
``python -m hmp.train --cluster=C --model=M --epochs=E`` with every other default (the
plan it makes: ``--mesh=auto`` on the measured speeds, ``--try_alone``'s trial), and the
same with ``--devices=`` task 0's CPU (task 0 alone). Both read one speed cache of this
benchmark's own, so the first run's profiling is not timed again.

Per run: hmp's samples/s of the last ``LAST`` epochs (their steps, history.json's) and
the wall clock's (from the end of the epoch before them to the end of the last:
validation and checkpoints count), and the plan it ended on; T*/T of the cluster run, T*
from task 0 alone's samples/s and each device's samples/s alone as the plan priced them. The goal: the
cluster run at 1.15x task 0 alone or more (hmp's count, the median of the pairs).

  python scripts/bench_train_cluster.py                          # hybridsn, batch 32
  python scripts/bench_train_cluster.py --models=cnn2d --batch_size=256
"""

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
from hmp.run.settings import DEFAULT

flags.DEFINE_integer("epochs", 8, "Epochs of each run (hmp.train's other flags at their "
                     "defaults).")
flags.DEFINE_integer("pairs", 2, "Pairs of runs (the cluster, then task 0 alone), in turns.")
FLAGS.set_default("models", ["hybridsn"])
FLAGS.set_default("batch_size", DEFAULT.recipe.batch_size)
FLAGS.set_default("out", "bench_train_cluster.json")

# bench_hetero's flags that these runs do not use (hmp.train's defaults stand)
NOT_USED = ("width", "steps", "repeats", "warmup", "profile_steps", "trace_steps",
            "hybrid_across", "fixed_splits", "batch_norm", "steps_per_run")
LAST = 3   # the epochs compared
# --try_alone's trial: the plan, then at most the runner-up and the device alone, then
# the winner's first epoch (a switch within it): the epochs compared come after
TRIAL_EPOCHS = 4
GOAL = 1.15   # the cluster run against task 0 alone
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EPOCH_LINE = re.compile(r"epoch (\d+)/\d+ ")
TASK0 = "/job:worker/task:0/device:CPU:0"
RUNS = ("cluster", "task 0 alone")


def train_command(model, spec, name, folder):
    """The ``hmp.train`` command of run ``name`` (of ``RUNS``) on the cluster ``spec``."""
    return [sys.executable, "-m", "hmp.train", "--cluster=" + spec, "--model=" + model,
            "--epochs=%d" % FLAGS.epochs,
            *(["--batch_size=%d" % FLAGS.batch_size]
              if FLAGS.batch_size != DEFAULT.recipe.batch_size else []),
            *(["--devices=" + TASK0] if name == RUNS[1] else []),
            "--model_dir=" + folder]


def train(command, folder):
    """Runs ``command`` (its lines echoed); returns ({epoch: the perf_counter second its
    line came}, its results.json)."""
    ended = {}
    env = {**os.environ, "HMP_CACHE_DIR": os.path.dirname(folder)}   # one speed cache
    with subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, text=True,
                          preexec_fn=die_with_parent) as process:
        for line in process.stdout:
            print("  " + line, end="", flush=True)
            match = EPOCH_LINE.match(line)
            if match:
                ended[int(match.group(1))] = time.perf_counter()
    if process.returncode:
        raise RuntimeError("%s ended with exit code %d" % (" ".join(command),
                                                           process.returncode))
    results = run_files.read_results(folder)
    if results is None:
        raise RuntimeError("%s ended without a readable %s in %s"
                           % (" ".join(command), run_files.RESULTS, folder))
    return ended, results


def summary(ended, results, batch_size):
    """A run's figures: the last ``LAST`` epochs' samples/s by hmp's count (the harmonic
    mean of history.json's: epochs of equal samples) and by the wall clock, the splits
    of the plan it ended on, and each device's samples/s alone at the batch as its first
    plan priced them from the profile ({device: samples/s}; the plan's ``alone``)."""
    history = results["history"]
    last = sorted(ended)[-LAST:]
    samples = max(h["steps"] for h in history) * batch_size   # an epoch's
    first, plan = results["plans"][0], results["plans"][-1]
    return {"hmp_samples_per_s": statistics.harmonic_mean(
                history[e - 1]["samples_per_second"] for e in last),
            "wall_samples_per_s": len(last) * samples / (ended[last[-1]] - ended[last[0] - 1]),
            "plan": "%s %s" % (plan["mesh"], " ".join(
                "%s=%s" % item for item in plan["splits"].items())),
            "devices": len(plan["devices"]),
            "speeds": {alone["device"]: batch_size / alone["step"]
                       for alone in first.get("alone", []) if alone["step"]}}


def ratios(pairs, figure):
    """The cluster run's ``figure`` over task 0 alone's, per pair."""
    return [pair[RUNS[0]][figure] / pair[RUNS[1]][figure] for pair in pairs]


def efficiency(pair):
    """T*/T of the cluster run by hmp's count, T* in samples/s task 0 alone's times the
    sum of the devices' samples/s alone, as the cluster run's plan priced them, over task
    0's (every device busy all the step, nothing exchanged); None without two devices
    priced."""
    speeds = pair[RUNS[0]]["speeds"]
    if TASK0 not in speeds or len(speeds) < 2:
        return None
    ideal = pair[RUNS[1]]["hmp_samples_per_s"] * sum(speeds.values()) / speeds[TASK0]
    return pair[RUNS[0]]["hmp_samples_per_s"] / ideal


def table(model, pairs):
    """(the table of a model's pairs, the median ratio by hmp's count)."""
    lines = ["", "%s, batch %d, %d epochs, %d busy loop(s) beside worker 1; the last %d "
             "epochs" % (model, FLAGS.batch_size, FLAGS.epochs, FLAGS.slowdown, LAST)]
    rows = [["pair", "run", "samples/s (hmp)", "(wall)", "plan at the end"]]
    for number, pair in enumerate(pairs, 1):
        for name in RUNS:
            run = pair[name]
            rows.append([str(number), name, "%.0f" % run["hmp_samples_per_s"],
                         "%.0f" % run["wall_samples_per_s"], run["plan"]])
    lines += aligned_columns(rows)
    hmp_ratios, wall = ratios(pairs, "hmp_samples_per_s"), ratios(pairs, "wall_samples_per_s")
    median = statistics.median(hmp_ratios)
    lines.append("T*/T (hmp's count; T* from task 0 alone and the devices' priced speeds "
                 "alone): %s" % " ".join("-" if e is None else "%.2f" % e
                                         for e in map(efficiency, pairs)))
    lines.append("cluster / task 0 alone: %s (hmp), %s (wall); median %.2fx (goal >= %.2f: "
                 "%s)" % (" ".join("%.2fx" % r for r in hmp_ratios),
                          " ".join("%.2fx" % r for r in wall), median, GOAL,
                          "met" if median >= GOAL else "missed"))
    return "\n".join(lines), median


def main(argv):
    refuse_unused(argv, NOT_USED, "hmp.train trains with its defaults")
    check_flags()
    for name, least in (("epochs", TRIAL_EPOCHS + LAST), ("pairs", 1)):
        if FLAGS[name].value < least:
            raise cli.UsageError("--%s=%d: must be at least %d" % (name, FLAGS[name].value,
                                                                   least))
    cpus, threads, slowed_cpu = worker_placement()
    before, results = machine(), {}
    with local_cluster(2, cpus=cpus, threads=threads,
                       inter_op_threads=FLAGS.inter_op_threads) as workers, \
            competing_load(slowed_cpu, FLAGS.slowdown), \
            tempfile.TemporaryDirectory(prefix="bench-train-cluster-") as folder:
        for model in FLAGS.models:
            pairs = []
            for number in range(FLAGS.pairs):
                pair = {}
                for name in RUNS:
                    print("%s, pair %d: %s" % (model, number + 1, name), flush=True)
                    run_dir = os.path.join(folder, model, "%d-%s" % (
                        number, "cluster" if name == RUNS[0] else "task0"))
                    pair[name] = summary(*train(train_command(model, workers.flag, name,
                                                              run_dir), run_dir),
                                         FLAGS.batch_size)
                pairs.append(pair)
            text, median = table(model, pairs)
            print(text, flush=True)
            results[model] = {"pairs": pairs, "median_ratio": median,
                              "goal": "median >= %.2f" % GOAL}
    files.write_json(FLAGS.out, {
        "date": time.strftime("%Y-%m-%d %H:%M"), "command": " ".join(sys.argv),
        "machine": before, "workers": {"cpus": cpus, "threads": threads},
        "flags": {name: FLAGS[name].value for name in (
            "models", "batch_size", "epochs", "pairs", "slowdown", "inter_op_threads",
            "workers")},
        "models": results})
    print("wrote %s" % FLAGS.out, flush=True)


if __name__ == "__main__":
    cli.run(main, "bench_train_cluster")
