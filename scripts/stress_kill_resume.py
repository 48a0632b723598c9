"""Stress test of kill/resume: SIGKILL a tiny run at random moments, resume, compare.

    python scripts/stress_kill_resume.py --kills=6 --seed=0 --out=/tmp/stress

Trains the same tiny run twice: once straight through, and once killed with
SIGKILL at ``--kills`` random moments (a quarter during start-up, the
others within half a second after a new checkpoint is listed: mid-step,
mid-save or mid-classification), each kill followed by a run with
``--resume`` (or a fresh start when no checkpoint was written yet). After
every kill it checks that the latest listed checkpoint restores (every tensor
reads), and at the end that the killed run ends at the same step with the
same weights as the straight one, and that its results.json holds every
epoch once. Exit code 0 when all hold, 1 otherwise. About 15 s per run on
2 cores.
"""

import argparse
import os
import random
import signal
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from hmp import cli  # noqa: E402

cli.import_tensorflow_quietly()   # before anything imports TensorFlow

import tensorflow.compat.v1 as tf  # noqa: E402

from hmp.run import run_files  # noqa: E402

FLAGS = ["--model=cnn2d", "--width=2", "--patch_size=5", "--batch_size=16", "--pca=8",
         "--devices=/cpu:0", "--speeds=1", "--mesh=model:1", "--epochs=3",
         "--checkpoint_every=20"]


def train(model_dir, *extra):
    return subprocess.Popen([sys.executable, "-m", "hmp.train", *FLAGS, *extra,
                             "--model_dir=%s" % model_dir], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def step_of(model_dir):
    path = tf.train.latest_checkpoint(model_dir)
    return None if path is None else int(path.rpartition("-")[2])


def weights(model_dir):
    """{name: array} of the latest listed checkpoint; raises if any tensor cannot be read."""
    path = tf.train.latest_checkpoint(model_dir)
    if path is None:
        return None, None
    reader = tf.train.load_checkpoint(path)
    return path, {name: reader.get_tensor(name)
                  for name in reader.get_variable_to_shape_map()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kills", type=int, default=6)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="/tmp/hmp-stress")
    args = parser.parse_args()
    if args.kills < 1:
        parser.error("--kills=%d: give at least 1" % args.kills)
    rng = random.Random(args.seed)
    straight, killed = os.path.join(args.out, "straight"), os.path.join(args.out, "killed")
    for folder in (straight, killed):
        if os.path.exists(folder):
            sys.exit("%s exists: give another --out" % folder)

    started = time.time()
    process = train(straight)
    if process.wait() != 0:
        sys.exit("the straight run failed: %s" % process.stderr.read()[-2000:])
    duration = time.time() - started
    print("straight run: %.1f s" % duration, flush=True)

    failures = []
    for kill in range(args.kills):
        before = step_of(killed)
        process = train(killed, "--resume" if before is not None else "--overwrite")
        t0 = time.time()
        if rng.random() < 0.25:   # during start-up (loading, planning, restoring)
            time.sleep(rng.uniform(0, 0.5 * duration))
        else:                     # while training: once a new checkpoint is listed, soon after
            while process.poll() is None and step_of(killed) in (before, None):
                time.sleep(0.02)
            time.sleep(rng.uniform(0, 0.5))
        delay = time.time() - t0
        process.send_signal(signal.SIGKILL)
        code = process.wait()
        try:
            path, _ = weights(killed)
        except Exception as error:   # noqa: BLE001 - any failure to read is the finding
            path = None
            failures.append("after kill %d: the latest checkpoint cannot be read: %s"
                            % (kill + 1, error))
        print("kill %d after %.1f s (%s): checkpoint %s -> %s"
              % (kill + 1, delay, "finished before" if code == 0 else "killed", before,
                 os.path.basename(path) if path else None), flush=True)
    resume = tf.train.latest_checkpoint(killed) is not None
    process = train(killed, "--resume" if resume else "--overwrite")
    if process.wait() != 0:
        failures.append("the last resume failed: %s" % process.stderr.read()[-2000:])
    else:
        path_a, expected = weights(straight)
        path_b, actual = weights(killed)
        if os.path.basename(path_a) != os.path.basename(path_b):
            failures.append("ends at %s, not %s" % (path_b, path_a))
        elif sorted(expected) != sorted(actual):
            failures.append("different variables")
        else:
            worst = max(float(np.max(np.abs(expected[k] - actual[k]), initial=0))
                        for k in expected)
            print("final checkpoint %s; largest weight difference %.3g"
                  % (os.path.basename(path_b), worst))
            if worst > 1e-5:
                failures.append("weights differ by up to %g" % worst)
        results = run_files.read_results(killed)   # None: none readable
        epochs = [h["epoch"] for h in results["history"]] if results else None
        if epochs != [0, 1, 2]:
            failures.append("%s in %s holds the epochs %s, not 0, 1, 2"
                            % (run_files.RESULTS, killed, epochs))
    for failure in failures:
        print("FAILED: " + failure)
    print("ok" if not failures else "%d failures" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
