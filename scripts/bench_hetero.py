"""Heterogeneity benchmark: uneven splits over two workers of unequal speed.

Two ``hmp.worker`` processes (``hmp.cluster.launch.local_cluster``) with two virtual
CPU devices each (for the hybrid mesh) and ``--inter_op_threads`` inter-op
threads. Two ways to make them unequal:

* ``--workers=0-7:8,8-9:2`` (a many-core machine): worker 0 pinned to CPUs
  0-7 with 8 intra-op threads, worker 1 to CPUs 8-9 with 2: really unequal
  workers, nothing competing.
* default (two cores): each worker pinned to a core of its own with one
  intra-op thread; the worker on core 1 is made slower by ``--slowdown``
  CPU-bound competing processes (``while True: pass``) pinned to core 1;
  Linux shares that core fairly among them, so the worker gets about
  1/(1 + slowdown) of it. The script starts them before the workers and
  kills them when it ends, also on an error.

The speed ratio this gives is measured, not assumed.

For each model of ``--models`` (on the built-in synthetic scene: 9x9 patches of
100 bands, or as many PCA components as the model's own ``--pca`` default, 10
classes; the scene is loaded onto every worker once, and one batch of its training
pixels' indices and labels too, which every step takes as ``hmp.train``'s steps take
theirs: ``TrainingGraph.load_batches``), in one run:

1. Each worker's speed is profiled alone, and the link between them idle and
   while both train (``hmp.measure.speeds.measure_platform``): the plans are made
   from it, as ``hmp.train`` does.
2. Training steps are timed, repeats interleaved (A B C, B C A, C A B ...) so
   that machine noise and the order hit every configuration alike:
   ``even`` (model parallel, ``model:2``, filters split evenly), ``planned``
   (``model:2``, filters split by ``plan_layout`` from the profiled speeds),
   ``re-balanced`` (the planned split re-planned once from the busy times of
   its traced steps, as ``hmp.train --rebalance=epoch`` does), ``per layer``
   (``model:2`` planned from the profiled speeds and the measured link, each split
   dim split or replicated as the cost model predicts faster), ``data even``
   (``batch:2``, batch split evenly), ``data`` (batch split by speed), ``data local bn``
   or ``data sync bn`` (the same split with the other ``--batch_norm``), ``hybrid`` (``batch:2;model:2`` on the
   four virtual devices; ``--hybrid_across`` says which mesh axis spans the two
   workers, the other spans each worker's two devices), ``worker 0 alone`` and
   ``worker 1 alone`` (the model on one worker), ``plain TF`` (the same
   model written in plain TensorFlow, ``plain_tf_models.py``, on worker 0;
   it is fed its batch of patches every step, as plain TensorFlow code is;
   cnn2d and cnn3d only),
   and ``auto``: the plan ``hmp.train --cluster`` makes with its defaults
   (one device per worker, the profiled speeds and the measured link,
   ``--mesh=auto``, which may leave the slow worker out).
3. The ideal step times for a global batch of ``W`` samples on ``n`` workers
   whose speeds alone are ``s_i`` samples/s (``W`` / the median step of
   ``worker i alone``, timed interleaved with the rest):
   ``T* = W / sum(s_i)`` (perfect balance, no communication) and
   ``T_even = (W / n) / min(s_i)`` (an even split: the slowest worker does
   1/n of the work, no communication). The theoretical speedup of a perfectly
   balanced split over the even one is ``T_even / T*``.
4. Per configuration: median step time ``T`` (and the range over repeats),
   samples/s ``W / T``, efficiency ``T* / T``, speedup over the even split
   ``T(even) / T`` next to the theoretical one and over the fastest worker
   alone, and from ``--trace_steps``
   traced steps (``hmp.run.profiler.busy_times``) each worker's busy time (its
   operations, transfers left out) and its share of the traced step; the rest
   of the step is that worker's communication and waiting; and each step part's busy
   time on each worker (``hmp.run.profiler.busy_by_part``: input, model, gradient
   sums, optimizer, metrics, transfers and waiting); for a configuration on both
   workers, the split step's overhead: ``T`` minus the slower worker's step alone
   on its share (its profiled per-step overhead plus that share of the rest of its
   step alone). ``hmp / plain TF``
   is the throughput ratio on worker 0 alone: the framework's own cost.

The goal for the planned split is efficiency >= 0.9 and a speedup over the even
split >= 90% of the theoretical one; the report says by how much ``planned``
(against ``even``) and ``data`` (against ``data even``) meet or miss it.

  python scripts/bench_hetero.py --models=cnn3d,cnn2d
  python scripts/bench_hetero.py --workers=0-7:8,8-9:2 --slowdown=0
"""

import contextlib
import dataclasses
import functools
import os
import statistics
import subprocess
import sys
import time

from absl import flags

from hmp import cli

cli.import_tensorflow_quietly()   # before anything imports TensorFlow

import numpy as np  # noqa: E402
import tensorflow.compat.v1 as tf  # noqa: E402

import plain_tf_models  # noqa: E402
from hmp import files  # noqa: E402
from hmp.cluster.launch import parse_worker_list  # noqa: E402
from hmp.cluster.launch import local_cluster  # noqa: E402
from hmp.cluster.runtime import JOB  # noqa: E402
from hmp.cluster.subprocesses import pinned  # noqa: E402
from hmp.errors import InvalidInput  # noqa: E402
from hmp.graph.from_graph import model_spec  # noqa: E402
from hmp.graph.graph import TrainingGraph  # noqa: E402
from hmp.graph.graph_config import Placement  # noqa: E402
from hmp.measure.speedcache import speed_json  # noqa: E402
from hmp.measure.speeds import measure_platform, relative_speeds  # noqa: E402
from hmp.planning import LinkSpec, parse_mesh, plan_layout, predict  # noqa: E402
from hmp.formatting import aligned_columns  # noqa: E402
from hmp.run import experiment  # noqa: E402
from hmp.run.profiler import (INPUT, MODEL, STEP_PARTS, busy_by_part,  # noqa: E402
                              busy_times, step_parts, trace_step)
from hmp.layers import BATCH_STATISTICS  # noqa: E402
from hmp.run.rebalance import replan  # noqa: E402
from hmp.run.settings import DEFAULT  # noqa: E402
from models import MODEL_NAMES, model_config, recipe  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_list("models", ["cnn3d", "cnn2d"], "Models to benchmark: "
                  + ", ".join(MODEL_NAMES) + " (the 'plain TF' row: "
                  + ", ".join(plain_tf_models.MODELS) + ").")
flags.DEFINE_integer("width", 0, "Model width (0: each model's default).")
flags.DEFINE_integer("batch_size", 512, "Global batch (samples per step).")
flags.DEFINE_enum("batch_norm", DEFAULT.model.batch_norm, BATCH_STATISTICS, "Batch norm's "
                  "statistics while training (hmp.train --batch_norm).")
flags.DEFINE_integer("steps", 5, "Timed steps per configuration and repeat.")
flags.DEFINE_integer("repeats", 5, "Interleaved repeats of every configuration.")
flags.DEFINE_integer("warmup", 3, "Untimed steps per configuration first.")
flags.DEFINE_integer("profile_steps", 10, "Steps per worker when measuring speeds alone.")
flags.DEFINE_integer("trace_steps", 3, "Traced steps per configuration (busy times).")
flags.DEFINE_integer("steps_per_run", 1, "Steps per session.run (hmp.train --steps_per_run): "
                     "here, above 1, auto, data and worker 0 alone are also timed with it; "
                     "bench_rebalance.py trains with it.")
flags.DEFINE_integer("slowdown", 2, "CPU-bound processes competing with the slow worker "
                     "for its core (0: two equal workers).")
flags.DEFINE_integer("inter_op_threads", 2, "Inter-op threads of each worker (each has "
                     "1 intra-op thread and one core): 2 lets a transfer start while an op "
                     "computes.")
flags.DEFINE_string("workers", "", "CPUS:THREADS of each of the two workers, e.g. "
                    "0-7:8,8-9:2 (CPUs a-b or one CPU; intra-op threads). Empty: worker 0 on "
                    "CPU 0 and worker 1 on CPU 1, one thread each, slowed by --slowdown.")
flags.DEFINE_enum("hybrid_across", "batch", ["batch", "model"], "Hybrid mesh: the axis "
                  "that spans the two workers; the other spans each worker's two devices.")
flags.DEFINE_list("fixed_splits", [], "Also time the batch split at these shares of the "
                  "batch, worker 0's:worker 1's, e.g. 20:12,22:10 (each adds up to "
                  "--batch_size): the rows 'data 20:12', ...")
flags.DEFINE_string("out", "bench_hetero.json", "Results as JSON.")

FAST_CPU, SLOW_CPU = 0, 1   # without --workers: worker 0 (fast) and 1 (slowed) are pinned here
WORKERS = 2
VIRTUAL_CPUS = 2            # per worker, for the hybrid mesh
# The competing process pins itself before it starts spinning.
COMPETITOR = "while True: pass"


@contextlib.contextmanager
def competing_load(cpu, count):
    """Runs ``count`` CPU-bound processes pinned to ``cpu``; kills them on leaving.

    Yields their ``subprocess.Popen`` objects, pinned before they start (in the child,
    before its program runs: no moment on another core). They are killed and reaped
    also when the block raises, so none outlives the benchmark.
    """
    processes = []
    try:
        for _ in range(count):
            processes.append(subprocess.Popen([sys.executable, "-c", COMPETITOR],
                                              preexec_fn=pinned({cpu})))
        yield processes
    finally:
        for process in processes:
            process.kill()
        for process in processes:
            process.wait()


@dataclasses.dataclass(frozen=True)
class Ideal:
    """Ideal step times from the workers' speeds alone (samples/s) for a batch of W.

    ``balanced`` = T* = W / sum(speeds): perfect balance, no communication.
    ``even`` = (W / n) / min(speeds): an even split, the slowest worker doing
    1/n of the work, no communication.
    """

    balanced: float
    even: float

    @classmethod
    def from_speeds(cls, speeds, batch_size):
        speeds = np.asarray(speeds, float)
        return cls(batch_size / speeds.sum(), batch_size / len(speeds) / speeds.min())

    @property
    def speedup(self):
        """Theoretical speedup of a perfectly balanced split over the even split."""
        return self.even / self.balanced

    def efficiency(self, step_s):
        """T* / T of a measured step time T."""
        return self.balanced / step_s


def goal_check(efficiency, speedup, theoretical, target=0.9):
    """Whether a split meets the goals: efficiency >= ``target`` and a speedup
    over the even split >= ``target`` x the theoretical one; with the shortfalls."""
    share = speedup / theoretical
    return {"efficiency": efficiency, "efficiency_met": efficiency >= target,
            "efficiency_short_by": max(0.0, target - efficiency),
            "speedup": speedup, "theoretical_speedup": theoretical,
            "speedup_share_of_theoretical": share, "speedup_met": share >= target,
            "speedup_short_by": max(0.0, target - share)}


# -- what is run ---------------------------------------------------------------
@dataclasses.dataclass
class Run:
    """One configuration's training step in an open session, with a fixed batch."""

    name: str
    description: str
    load: list   # each worker's share of the step's FLOPs (the plan's prediction)
    session: tf.Session
    train_op: tf.Operation
    feed: dict
    times: list = dataclasses.field(default_factory=list)   # seconds per step, per repeat
    steps_per_run: int = 1   # steps one session.run of ``train_op`` runs

    @functools.cached_property
    def parts(self):
        """The step's parts (``hmp.run.profiler.step_parts``) of this run's graph."""
        return step_parts(self.session.graph)

    def seconds_per_step(self, steps):
        """Seconds a step over about ``steps`` steps (whole runs of ``steps_per_run``)."""
        runs = max(1, steps // self.steps_per_run)
        start = time.perf_counter()
        for _ in range(runs):
            self.session.run(self.train_op, self.feed)
        return (time.perf_counter() - start) / (runs * self.steps_per_run)

    def traced(self):
        """One traced run, per step: (its wall seconds, each worker's busy seconds, each
        step part's busy seconds on each worker)."""
        _, metadata, wall = trace_step(self.session, self.train_op, self.feed)
        tasks = ["/job:%s/task:%d" % (JOB, task) for task in range(WORKERS)]
        # a task: all its devices, one thread
        per_step = 1.0 / self.steps_per_run
        return (wall * per_step, [b * per_step for b in busy_times(metadata, tasks, wall)],
                {part: [b * per_step for b in busy]
                 for part, busy in busy_by_part(metadata, tasks, self.parts).items()})


def warmed(run):
    """``run`` after ``--warmup`` untimed steps (graph optimisation, allocation)."""
    if FLAGS.warmup:
        run.seconds_per_step(FLAGS.warmup)
    return run


def worker_devices(devices):
    """``/job:worker/task:N/device:CPU:K`` as ``[[task 0's K...], [task 1's K...]]``."""
    return [list(devices[i:i + VIRTUAL_CPUS]) for i in range(0, len(devices), VIRTUAL_CPUS)]


def split_plans(spec, devices, speeds, batch_size):
    """The split configurations' plans: {name: Plan}.

    ``devices`` per worker as from ``worker_devices``, ``speeds`` per worker
    (samples/s). A worker's two virtual devices share its one thread, so
    each of them alone runs at the worker's speed.
    """
    (fast, fast_b), (slow, slow_b) = devices
    s_fast, s_slow = speeds
    if FLAGS.hybrid_across == "batch":   # batch rows = workers, model columns within one
        hybrid = ([fast, fast_b, slow, slow_b], [s_fast, s_fast, s_slow, s_slow])
    else:                                # model columns = workers, batch rows within one
        hybrid = ([fast, slow, fast_b, slow_b], [s_fast, s_slow, s_fast, s_slow])
    return {"even": plan_layout(spec, [fast, slow], [1, 1], batch_size, "model:2"),
            "planned": plan_layout(spec, [fast, slow], speeds, batch_size, "model:2"),
            "data even": plan_layout(spec, [fast, slow], [1, 1], batch_size, "batch:2"),
            "data": plan_layout(spec, [fast, slow], speeds, batch_size, "batch:2"),
            "hybrid": plan_layout(spec, *hybrid, batch_size, "batch:2;model:2"),
            # speeds in the ratio of the shares: the largest-remainder split gives them exactly
            **{"data %d:%d" % shares: fixed_split(spec, [fast, slow], shares, batch_size)
               for shares in parse_fixed_splits(FLAGS.fixed_splits, batch_size)}}


def fixed_split(spec, devices, shares, batch_size):
    """The batch split of ``--fixed_splits``'s ``shares`` on ``devices``; a UsageError where
    the planner cannot give them (a share below the model's fewest samples a replica)."""
    plan = plan_layout(spec, devices, list(shares), batch_size, "batch:2")
    if plan.splits["batch"] != list(shares):
        raise cli.UsageError("--fixed_splits=%d:%d: %s normalises its batch norms over each "
                             "replica's own samples, which needs %d a replica; allowed: "
                             "larger shares or --batch_norm=sync"
                             % (*shares, spec.name, spec.fewest_replica_samples))
    return plan


def worker_loads(plan):
    """Each worker's share of the plan's FLOPs: the summed load of its devices."""
    tasks = [tf.DeviceSpec.from_string(d).task for d in plan.devices]
    return [sum(l for l, t in zip(plan.prediction.load, tasks) if t == task)
            for task in range(WORKERS)]


def describe(plan):
    left_out = "".join(" (%s left out)" % r["device"] for r in plan.left_out)
    replicated = "".join(" %s=all" % dim for dim in plan.replicated_dims())
    return "%s %s%s%s" % (plan.mesh, " ".join("%s=%s" % item for item in plan.splits.items()),
                          replicated, left_out)


def measured_plan(spec, platform, link, mesh):
    """The plan ``hmp.train --cluster --mesh=MESH`` makes from the profiled speeds and
    the measured link (``auto``: its default, with ``--try_alone``'s trial to follow,
    so a split predicted faster at all)."""
    return plan_layout(spec, platform, None, FLAGS.batch_size, mesh, link=link,
                       alone_margin=0.0)


def rebalanced(plan, spec, run):
    """The plan re-planned from the busy times of ``--trace_steps`` traced steps
    of ``run`` (which runs it), as ``hmp.train --rebalance=epoch`` does; the
    same plan if that changes nothing."""
    busy = [statistics.median(b) for b in zip(*(run.traced()[1]
                                               for _ in range(FLAGS.trace_steps)))]
    return replan(plan, spec, busy, threshold=0.0) or plan


def build_runs(config, batch, workers, profiled, link):
    """Every configuration's warmed-up ``Run``, in the order they are timed (those of
    one layout and model on one graph and session, each timed on its own); the
    ``auto`` plan; the cost model's step of the splits ``planned`` (every dim split),
    ``per layer`` and ``data`` on the profiled platform (``profiled``: one CPU device per
    worker as ``hmp.train --cluster`` sees them) and measured link."""
    speeds = [s.samples_per_s for s in profiled]
    spec = model_spec(config)
    devices = worker_devices(workers.devices)
    session_config = workers.cluster.session_config()
    image_shape = batch.extractor.image_shape

    blocks = FLAGS.steps_per_run
    alone = Placement("", "", (devices[0][0],), {})   # worker 0's first device
    plans = split_plans(spec, devices, speeds, FLAGS.batch_size)
    auto = measured_plan(spec, profiled, link, "auto")
    # the layouts also timed --steps_per_run steps a run: their graph lowers that many
    # steps, and runs one or all of them (the same batch each step of a run)
    in_blocks = ([(Placement.from_plan(auto), config), (Placement.from_plan(plans["data"]), config),
                  (alone, config)] if blocks > 1 else [])
    built = []   # ((layout, model config), (session, graph))

    def hmp_run(name, layout, description, load, model_config=config, steps_per_run=1):
        key = (layout, model_config)
        found = next((found for same, found in built if same == key), None)
        if found is None:
            graph = TrainingGraph(model_config, layout, FLAGS.batch_size, image_shape,
                                  steps_per_run=blocks if key in in_blocks else 1)
            progress("  building %-14s %s" % (name, description))
            session = graph.session(batch.extractor.padded, session_config, workers.target)
            graph.load_batches(session, [(batch.indices, batch.labels)])   # as hmp.train does
            found = session, graph
            built.append((key, found))
        else:   # an earlier configuration's graph (planned = even on equal workers)
            progress("  sharing  %-14s %s" % (name, description))
        session, graph = found
        return warmed(Run(name, description, load, session,
                          *graph.kept_steps(steps_per_run), steps_per_run=steps_per_run))

    def plan_run(name, plan, steps_per_run=1):
        return hmp_run(name, Placement.from_plan(plan), describe(plan), worker_loads(plan),
                       steps_per_run=steps_per_run)

    runs = [plan_run(name, plan) for name, plan in plans.items()]
    runs.insert(2, plan_run("re-balanced", rebalanced(plans["planned"], spec, runs[1])))
    per_layer = measured_plan(spec, profiled, link, "model:2")
    runs.insert(3, plan_run("per layer", per_layer))
    other = next(mode for mode in BATCH_STATISTICS if mode != config.batch_norm)
    data = plans["data"]
    runs.insert([r.name for r in runs].index("data") + 1, hmp_run(
        "data %s bn" % other, Placement.from_plan(data), describe(data), worker_loads(data),
        dataclasses.replace(config, batch_norm=other)))
    runs.append(plan_run("auto", auto))
    if blocks > 1:
        runs.append(plan_run("auto, %d a run" % blocks, auto, blocks))
        runs.append(plan_run("data, %d a run" % blocks, data, blocks))
        runs.append(hmp_run("worker 0 alone, %d a run" % blocks, alone, "one device",
                            [1.0, 0.0], steps_per_run=blocks))
    for task, worker in enumerate(devices):
        runs.append(hmp_run("worker %d alone" % task, Placement("", "", (worker[0],), {}),
                            "one device", [float(t == task) for t in range(WORKERS)]))
    if config.name in plain_tf_models.MODELS:
        plain = plain_tf_models.PlainTrainingGraph(config, devices[0][0], FLAGS.batch_size)
        runs.append(warmed(Run("plain TF", "worker 0 alone, plain TensorFlow", [1.0, 0.0],
                               plain.session(session_config, workers.target), plain.train_op,
                               {plain.x: batch.patches, plain.y: batch.labels})))
    predicted = {"planned": predict(spec, profiled, parse_mesh("model:2"), FLAGS.batch_size,
                                    plans["planned"].splits, link).step,
                 "per layer": per_layer.prediction.step,
                 "data": predict(spec, profiled, parse_mesh("batch:2"), FLAGS.batch_size,
                                 plans["data"].splits, link).step}
    return runs, auto, predicted


def cost_model_check(plan, step, profiled, splits):
    """The auto plan's candidates that were also timed, and the splits (``splits``:
    {configuration: predicted step}): predicted against measured step.

    ``batch:2`` on both workers is the ``data`` layout (the same speeds give the same
    splits), ``model:2`` the ``per layer`` plan; ``batch:1`` is a worker alone: the one
    its candidate's ranking takes (the fastest alone as the cost model prices it, with
    its per-step overhead, or the one of highest FLOP rate).
    """
    names = [s.name for s in profiled]
    by_rate = max(range(WORKERS), key=lambda task: profiled[task].flops_per_s)
    by_alone = names.index(plan.fastest_alone()) if plan.fastest_alone() in names else by_rate
    same_as_data = not any(s.overhead_s for s in profiled)   # else auto's split is not data's

    def timed_as(candidate):
        """The configuration timed with ``candidate``'s layout, or None."""
        if (candidate.mesh, candidate.devices) == ("batch:1", 1):
            task = by_alone if candidate.ranking == "alone" else by_rate
            return "auto" if plan.devices == [names[task]] else "worker %d alone" % task
        if (candidate.mesh, candidate.devices) == (plan.mesh, len(plan.devices)):
            return "auto"
        return {("model:2", 2): "per layer",
                ("batch:2", 2): "data" if same_as_data else None}.get(
                    (candidate.mesh, candidate.devices))

    rows = [{"mesh": c.mesh, "devices": c.devices, "ranking": c.ranking,
             "configuration": timed_as(c), "predicted_s": c.step, "measured_s": step[timed_as(c)]}
            for c in plan.candidates if c.step is not None and timed_as(c) is not None]
    for row in rows:
        row["error"] = row["predicted_s"] / row["measured_s"] - 1
    ranked = [sorted(rows, key=lambda r: r[key]) for key in ("predicted_s", "measured_s")]
    split_rows = [{"configuration": name, "predicted_s": predicted, "measured_s": step[name],
                   "error": predicted / step[name] - 1} for name, predicted in splits.items()]
    return {"candidates": rows, "same_ranking": ranked[0] == ranked[1], "splits": split_rows,
            "alone_by_ranking": {"alone": by_alone, "rate": by_rate}}


# -- measuring -----------------------------------------------------------------
def progress(line):
    print(line, flush=True)


def time_interleaved(runs):
    """``--repeats`` rounds of ``--steps`` steps of every run in turn, each round
    starting one run later (A B C, B C A, C A B ...), so that no configuration
    always follows the same one."""
    for repeat in range(FLAGS.repeats):
        start = repeat % len(runs)
        for run in runs[start:] + runs[:start]:
            run.times.append(run.seconds_per_step(FLAGS.steps))
        progress("  repeat %d/%d: %s" % (repeat + 1, FLAGS.repeats, "  ".join(
            "%s %.1f ms" % (run.name, 1e3 * run.times[-1]) for run in runs)))


def trace_interleaved(runs):
    """Per run: the median wall time of ``--trace_steps`` traced steps, the median busy
    seconds of each worker and of each step part on each worker (traced steps
    interleaved like the timed ones)."""
    traces = {run.name: [] for run in runs}
    for _ in range(FLAGS.trace_steps):
        for run in runs:
            traces[run.name].append(run.traced())
    return {name: (statistics.median(wall for wall, _, _ in t),
                   [statistics.median(b[w] for _, b, _ in t) for w in range(WORKERS)],
                   {part: [statistics.median(p[part][w] for _, _, p in t)
                           for w in range(WORKERS)] for part in STEP_PARTS})
            for name, t in traces.items()}


def split_step_overhead(step_s, load, alone_s, overhead_s):
    """What a split step costs beyond its compute (issue #27): the step ``step_s`` minus
    the slower worker's step alone on its share, that step being the worker's per-step
    overhead as the profiler fitted it (``overhead_s``) plus its share ``load`` of the
    rest of its step alone (``alone_s``)."""
    return step_s - max(over + share * (alone - over)
                        for share, alone, over in zip(load, alone_s, overhead_s))


def config_result(run, trace, ideal, even_s, fastest_alone_s, alone_busy):
    """The figures of one configuration (seconds; shares of the traced step).

    ``expected_busy_s``: each worker's share of the FLOPs times its busy time
    alone (``alone_busy``), what it would be busy if splitting cost nothing;
    ``wait_s``: the traced step minus the busy time, the worker's
    communication and waiting.
    """
    step = statistics.median(run.times)
    traced_s, busy, by_part = trace
    return {"layout": run.description, "step_s": step, "step_s_min": min(run.times),
            "step_s_max": max(run.times), "step_s_repeats": run.times,
            "samples_per_s": FLAGS.batch_size / step, "efficiency": ideal.efficiency(step),
            "speedup_over_even": even_s / step,
            "speedup_over_fastest_alone": fastest_alone_s / step,
            "traced_step_s": traced_s, "busy_s": busy,
            "busy_share": [b / traced_s for b in busy], "load": run.load,
            "expected_busy_s": [l * a for l, a in zip(run.load, alone_busy)],
            "wait_s": [traced_s - b for b in busy], "busy_by_part_s": by_part}


def even_baseline(name):
    """The even split a configuration's "vs even" is measured against: ``data even``
    (``batch:2`` halved) for the batch splits and ``auto``, ``even`` (``model:2``
    halved) for the others."""
    return "data even" if name.startswith(("data", "auto")) else "even"


def benchmark_model(name, exp, batch, workers):
    """One model: profiled speeds, every configuration timed and traced, the figures.

    The profiler's speeds (measured first) make the plans. The speeds alone
    behind T* come from the ``worker N alone`` configurations, timed
    interleaved with the others, so that all figures see the same machine load.
    """
    config = model_config(name, exp.train.extractor.patch_size, exp.bands, exp.n_classes,
                         FLAGS.width, FLAGS.batch_norm)
    progress("%s: profiling each worker alone, for the plans" % name)
    profiled, link = measure_platform(config, [d[0] for d in worker_devices(workers.devices)],
                                      FLAGS.batch_size, FLAGS.warmup, FLAGS.profile_steps,
                                      workers.target, workers.cluster.session_config(),
                                      progress=progress, op_size=True)
    progress("%s: building the configurations" % name)
    runs, auto, split_steps = build_runs(config, batch, workers, profiled, link)
    progress("%s: timing %d steps x %d interleaved repeats" % (name, FLAGS.steps,
                                                               FLAGS.repeats))
    time_interleaved(runs)
    progress("%s: tracing %d steps each" % (name, FLAGS.trace_steps))
    traces = trace_interleaved(runs)
    for run in runs:
        run.session.close()
    step = {run.name: statistics.median(run.times) for run in runs}
    speeds = [FLAGS.batch_size / step["worker %d alone" % task] for task in range(WORKERS)]
    ideal = Ideal.from_speeds(speeds, FLAGS.batch_size)
    alone_busy = [traces["worker %d alone" % task][1][task] for task in range(WORKERS)]
    fastest_alone = min(step["worker %d alone" % task] for task in range(WORKERS))
    configs = {run.name: config_result(run, traces[run.name], ideal,
                                       step[even_baseline(run.name)], fastest_alone, alone_busy)
               for run in runs}
    alone_s = [step["worker %d alone" % task] for task in range(WORKERS)]
    for c in configs.values():
        if min(c["load"]) > 0:
            c["split_overhead_s"] = split_step_overhead(
                c["step_s"], c["load"], alone_s, [s.overhead_s for s in profiled])
    return {"model": model_spec(config).name, "batch_size": FLAGS.batch_size,
            "profiled_speeds": [dict(speed_json(s), relative=relative) for s, relative
                                in zip(profiled, relative_speeds(profiled))],
            "link": dataclasses.asdict(link),
            "speeds": speeds, "speed_ratio": max(speeds) / min(speeds),
            "ideal": {"balanced_s": ideal.balanced, "even_s": ideal.even,
                      "theoretical_speedup": ideal.speedup},
            "configs": configs,
            "goals": {split: dict(goal_check(configs[split]["efficiency"],
                                             configs[split]["speedup_over_even"],
                                             ideal.speedup),
                                  baseline=even_baseline(split), over_fastest_alone=configs[
                                      split]["speedup_over_fastest_alone"])
                      for split in ("planned", "per layer", "data", "auto")},
            "hmp_over_plain_tf": (step["plain TF"] / step["worker 0 alone"]
                                  if "plain TF" in step else None),
            "cost_model": cost_model_check(auto, step, profiled, split_steps)}


# -- reporting -----------------------------------------------------------------
def ms(seconds):
    return "%.1f" % (1e3 * seconds)


def table(result):
    """The printed report of one model: speeds, ideal times, a row per configuration."""
    ideal = result["ideal"]
    lines = ["", "%s, batch %d" % (result["model"], result["batch_size"]),
             "speeds alone (samples/s; the 'alone' rows): " + ", ".join(
                 "worker %d %.0f" % pair for pair in enumerate(result["speeds"]))
             + "; ratio %.2f; profiled for the plans: " % result["speed_ratio"] + ", ".join(
                 "%.0f (%.0f - %.0f), overhead %.1f ms"
                 % (s["samples_per_s"], s["min_samples_per_s"], s["max_samples_per_s"],
                    1e3 * s["overhead_s"])
                 for s in result["profiled_speeds"]),
             "link: %s; under load: %s" % (link_figures(result["link"]),
                                           link_figures(result["link"]["loaded"])),
             "ideal: T* = %s ms (balanced), even split %s ms; theoretical speedup %.2f"
             % (ms(ideal["balanced_s"]), ms(ideal["even_s"]), ideal["theoretical_speedup"])]
    rows = [["configuration", "layout", "step ms (min - max)", "samples/s", "T*/T",
             "vs even", "vs fastest alone", "busy w0 ms (share)", "busy w1 ms (share)"]]
    for name, c in result["configs"].items():
        rows.append([name, c["layout"], "%s (%s - %s)" % (ms(c["step_s"]), ms(c["step_s_min"]),
                                                          ms(c["step_s_max"])),
                     "%.0f" % c["samples_per_s"], "%.2f" % c["efficiency"],
                     "%.2f" % c["speedup_over_even"],
                     "%.2f" % c["speedup_over_fastest_alone"]]
                    + ["%s (%.0f%%)" % (ms(b), 100 * s)
                       for b, s in zip(c["busy_s"], c["busy_share"])])
    lines += aligned_columns(rows)
    for name, goal in result["goals"].items():
        lines.append(
            "%s: efficiency %.2f (goal >= 0.9: %s); speedup over %s %.2f = %.0f%% of the "
            "theoretical %.2f (goal >= 90%%: %s); %.2fx the fastest worker alone"
            % (name, goal["efficiency"], verdict(goal["efficiency_met"],
                                                 goal["efficiency_short_by"]),
               goal["baseline"], goal["speedup"],
               100 * goal["speedup_share_of_theoretical"],
               goal["theoretical_speedup"],
               verdict(goal["speedup_met"], 100 * goal["speedup_short_by"], " points"),
               goal["over_fastest_alone"]))
    lines.append("split-step overhead (the step minus the slower worker's step alone on its "
                 "share: its profiled per-step overhead plus that share of the rest): "
                 + ", ".join("%s %s ms" % (name, ms(c["split_overhead_s"]))
                             for name, c in result["configs"].items()
                             if "split_overhead_s" in c))
    if result["hmp_over_plain_tf"] is not None:
        lines.append("hmp / plain TF on worker 0 alone (throughput): %.2f"
                     % result["hmp_over_plain_tf"])
    check = result["cost_model"]
    lines.append("cost model, the auto plan's candidates (predicted / measured step): "
                 + "; ".join("%s on %d (%s) %s / %s ms (%+.0f%%)"
                             % (r["mesh"], r["devices"], r["configuration"],
                                ms(r["predicted_s"]), ms(r["measured_s"]), 100 * r["error"])
                             for r in check["candidates"])
                 + "; same ranking: %s" % ("yes" if check["same_ranking"] else "no"))
    lines.append("cost model, the splits (predicted / measured step): " + "; ".join(
        "%s %s / %s ms (%+.0f%%)" % (r["configuration"], ms(r["predicted_s"]),
                                     ms(r["measured_s"]), 100 * r["error"])
        for r in check["splits"]))
    return "\n".join(lines + where_the_time_goes(result["configs"]))


def link_figures(link):
    """A recorded LinkSpec's ``LinkSpec.figures`` ("-" for None)."""
    if link is None:
        return "-"
    return LinkSpec(**link).figures()


def where_the_time_goes(configs):
    """Per split configuration and worker, in ms of a traced step: its load (its FLOPs in
    whole channel blocks over the model's: ``Prediction.load``), busy time against that
    share of its busy time alone, and the rest."""
    lines = ["where the time goes (traced step, ms; per worker: load, busy "
             "(expected from its busy time alone), communication + waiting):"]
    for name, c in configs.items():
        if min(c["load"]) > 0:
            lines.append("  %-12s traced %6s  " % (name, ms(c["traced_step_s"])) + "  ".join(
                "w%d %3.0f%% busy %6s (%6s) comm+wait %6s" % (
                    w, 100 * c["load"][w], ms(c["busy_s"][w]), ms(c["expected_busy_s"][w]),
                    ms(c["wait_s"][w])) for w in range(WORKERS)))
    return lines + step_parts_table(configs)


def step_parts_table(configs):
    """Per configuration that runs on both workers, and each worker alone: each step
    part's busy ms on each worker (``hmp.run.profiler.busy_by_part``); the input's and
    the model's next to that share of the worker's own alone (they scale with the
    share, the rest does not)."""
    rows = [["configuration", "worker", "traced ms"] + list(STEP_PARTS)]
    for name, c in configs.items():
        for w in range(WORKERS):
            split = min(c["load"]) > 0
            if not (split or c["load"][w] == 1):
                continue
            alone = configs["worker %d alone" % w]["busy_by_part_s"]
            rows.append([name, "w%d" % w, ms(c["traced_step_s"])] + [
                "%s (%s)" % (ms(c["busy_by_part_s"][part][w]),
                             ms(c["load"][w] * alone[part][w]))
                if split and part in (INPUT, MODEL) else ms(c["busy_by_part_s"][part][w])
                for part in STEP_PARTS])
    return ["the step's parts (traced, busy ms per worker; input and model: (that share "
            "of the worker's alone)):"] + ["  " + line for line in aligned_columns(rows)]


def verdict(met, short_by, unit=""):
    return "met" if met else "missed by %.2g%s" % (short_by, unit)


def machine():
    """What the figures were measured on."""
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return {"cores": os.cpu_count(), "memory_gib": round(memory / 2 ** 30, 1),
            "load_average": os.getloadavg()[0]}


# -- the program -----------------------------------------------------------------
def parse_workers(text):
    """``--workers``: [(cpus, threads)] of the two workers (``hmp.train --local_workers``'s
    list), or None when empty."""
    if not text:
        return None
    try:
        parsed = parse_worker_list(text)
    except InvalidInput as error:
        raise cli.UsageError("--workers=%s: %s" % (text, error)) from None
    if len(parsed) != WORKERS:
        raise cli.UsageError("--workers=%s: give exactly %d workers" % (text, WORKERS))
    return parsed


def parse_fixed_splits(texts, batch_size):
    """``--fixed_splits``: [(worker 0's samples, worker 1's)], each pair adding up to
    ``batch_size``."""
    pairs = []
    for text in texts:
        first, _, second = text.partition(":")
        if not (first.isdigit() and second.isdigit() and int(first) > 0 and int(second) > 0
                and int(first) + int(second) == batch_size):
            raise cli.UsageError("--fixed_splits=%s: give A:B pairs of whole numbers above 0 "
                                 "adding up to --batch_size=%d, e.g. %d:%d"
                                 % (",".join(texts), batch_size, batch_size - batch_size // 3,
                                    batch_size // 3))
        pairs.append((int(first), int(second)))
    return pairs


def worker_placement():
    """(cpus per worker, intra-op threads per worker, CPU to slow down or None)."""
    parsed = parse_workers(FLAGS.workers)
    if parsed is None:
        return [[FAST_CPU], [SLOW_CPU]], [1, 1], SLOW_CPU
    return [c for c, _ in parsed], [t for _, t in parsed], parsed[1][0][0]


def refuse_unused(argv, names=(), instead=""):
    """One-line errors for arguments that are no flags, and for the flags ``names`` of this
    script given to another that does not use them (``instead``: what it does)."""
    if len(argv) > 1:
        raise cli.UsageError("unexpected arguments %s (flags start with --)" % argv[1:])
    given = ["--%s" % name for name in names if FLAGS[name].present]
    if given:
        raise cli.UsageError("%s: bench_hetero.py's, not used here (%s)"
                             % (", ".join(given), instead))


def check_flags():
    """One-line errors for values the flag parser cannot judge."""
    unknown = [m for m in FLAGS.models if m not in MODEL_NAMES]
    if unknown or not FLAGS.models:
        raise cli.UsageError("--models=%s: choose from %s" % (",".join(FLAGS.models),
                                                              ",".join(MODEL_NAMES)))
    for name, least in (("width", 0), ("batch_size", 2), ("inter_op_threads", 1), ("steps", 1), ("repeats", 1),
                        ("warmup", 0), ("profile_steps", 1), ("trace_steps", 1),
                        ("steps_per_run", 1),
                        ("slowdown", 0)):
        if getattr(FLAGS, name) < least:
            raise cli.UsageError("--%s=%d: must be at least %d" % (name, getattr(FLAGS, name),
                                                                   least))
    if not os.path.isdir(os.path.dirname(os.path.abspath(FLAGS.out))):
        raise cli.UsageError("--out=%s: its folder does not exist" % FLAGS.out)
    parse_fixed_splits(FLAGS.fixed_splits, FLAGS.batch_size)
    cpus, _, _ = worker_placement()
    if not set(cpus[0] + cpus[1]) <= os.sched_getaffinity(0):
        raise cli.UsageError("--workers=%s: the workers would be pinned to CPUs %s; this "
                             "process may use only %s" % (FLAGS.workers, cpus,
                                                          sorted(os.sched_getaffinity(0))))


@functools.lru_cache(maxsize=None)
def prepared_scene(pca):
    """(experiment, batch) of the built-in scene on ``pca`` components (0: all bands), as
    ``hmp.train`` prepares it for a model whose own ``--pca`` default that is (hybridsn:
    45; the projection is done once here, not in the graph as the trainer's default does)."""
    exp = experiment.prepare(experiment.DataConfig(pca=pca))
    if FLAGS.batch_size > len(exp.train):
        raise cli.UsageError("--batch_size=%d: the scene has %d training pixels"
                             % (FLAGS.batch_size, len(exp.train)))
    return exp, next(exp.epoch_batches(FLAGS.batch_size, seed=0))


def main(argv):
    refuse_unused(argv)
    check_flags()
    tf.disable_eager_execution()
    tf.logging.set_verbosity(tf.logging.ERROR)
    scenes = {name: prepared_scene(recipe(name).get("pca", 0)) for name in FLAGS.models}
    before = machine()
    cpus, threads, slowed_cpu = worker_placement()
    progress("starting %d competing process(es) on CPU %d and 2 workers: CPUs %s, %s threads"
             % (FLAGS.slowdown, slowed_cpu, cpus, threads))
    with competing_load(slowed_cpu, FLAGS.slowdown), local_cluster(
            WORKERS, cpus=cpus, threads=threads,
            inter_op_threads=FLAGS.inter_op_threads, virtual_cpus=VIRTUAL_CPUS) as workers:
        results = {}
        for name in FLAGS.models:
            results[name] = benchmark_model(name, *scenes[name], workers)
            print(table(results[name]), flush=True)
    files.write_json(FLAGS.out, {
        "date": time.strftime("%Y-%m-%d %H:%M"), "command": " ".join(sys.argv),
        "machine": before, "load_average_after": os.getloadavg()[0],
        "workers": {"cpus": cpus, "threads": threads},
        "slowdown": {"competing_processes": FLAGS.slowdown, "cpu": slowed_cpu,
                     "means": "CPU-bound processes pinned to the slow worker's core"},
        "flags": {name: FLAGS[name].value for name in (
            "models", "width", "batch_size", "steps", "repeats", "warmup", "profile_steps",
            "trace_steps", "steps_per_run", "slowdown", "inter_op_threads", "hybrid_across", "workers")},
        "models": results})
    progress("wrote %s" % FLAGS.out)


if __name__ == "__main__":
    cli.run(main, "bench_hetero")
