"""Train an HSI classifier on heterogeneous devices: ``python -m hmp.train``.

With no flags it trains HybridSN on the built-in synthetic scene on this
machine's real devices (the CPU, plus every GPU TensorFlow sees), with filter
and batch splits planned from their measured speeds and link (on one device:
no profiling, the one-device layout), and prints the test scores. See
README.md and docs/planner.md for every flag.

The program is its flags: it builds the run's settings from them
(``settings_from_flags``: ``hmp.run.settings.Settings``, whose defaults the flags
take) and hands them to ``hmp.run.fit.fit``, the run itself (``hmp.fit`` from Python).
"""

import sys

from hmp import cli

cli.import_tensorflow_quietly()   # before anything imports TensorFlow

from absl import flags  # noqa: E402

import models
from hmp.evaluation.smoothing import WINDOWS
from hmp.graph.graph_config import PRECISIONS
from hmp.layers import BATCH_STATISTICS
from hmp.mesh.optimizers import OPTIMIZERS, SCHEDULES
from hmp.planning.planner import SPLIT_MARGIN
from hmp import scene_flags
from hmp.run.fit import fit
from hmp.run.settings import DEFAULT, FLAG_FIELDS, Settings

flags.adopt_module_key_flags(scene_flags)   # --dataset, --split, --seed, ...: results.json

flags.DEFINE_string("model", DEFAULT.model.name, "Model: " + ", ".join(models.MODEL_NAMES) +
                    ", or a module path (mypackage.mymodel) with logits and SPLIT_DIMS.")
flags.DEFINE_integer("width", DEFAULT.model.width,
                     "Model width (filters of its first layer); 0: default.")
flags.DEFINE_enum("batch_norm", DEFAULT.model.batch_norm, BATCH_STATISTICS, "Batch norm's "
                  "statistics while training: local (each replica of a batch split its own "
                  "samples', as data-parallel frameworks do: no synchronisation of its own) or "
                  "sync (the whole batch's: every split equals one device, at two all-reduces "
                  "a layer). The same on one device and on a filter split.")
flags.DEFINE_enum("precision", DEFAULT.model.precision, list(PRECISIONS), "What the model "
                  "computes in: float32, or mixed_bfloat16 / mixed_float16 (activations and "
                  "gradients in 16 bits, float16 with loss scaling; weights, optimizer slots "
                  "and checkpoints stay float32). Fast on GPUs with tensor cores.")
flags.DEFINE_string("devices", DEFAULT.placement.devices,
                    "Comma-separated TensorFlow devices (default: /cpu:0 "
                    "and every GPU TensorFlow sees; with --cluster one CPU per task); "
                    "/cpu:N with N >= 1 are virtual devices of the local CPU.")
flags.DEFINE_string("speeds", DEFAULT.placement.speeds,
                    "Device speeds: auto (measured speeds and link, reused "
                    "from the speed cache when there), measure (measure again), or a list "
                    "like 70,25,5 (relative; communication is then not priced).")
flags.DEFINE_string("mesh", DEFAULT.placement.mesh, "model:N, batch:M, batch:M;model:N or auto.")
flags.DEFINE_string("plan", DEFAULT.placement.plan,
                    "A plan JSON from scripts/plan_layout.py: it gives the devices, "
                    "speeds, mesh and memory caps (so none of --devices, --speeds, --mesh, "
                    "--memory_caps with it).")
flags.DEFINE_integer("batch_size", DEFAULT.recipe.batch_size, "Global batch size.")
flags.DEFINE_integer("epochs", DEFAULT.recipe.epochs, "Training epochs (at most: see --patience "
                     "and --max_steps).")
flags.DEFINE_integer("max_steps", DEFAULT.recipe.max_steps,
                     "Train at most this many steps: a scene with many training pixels "
                     "trains the whole epochs that fit, fewer than --epochs (0: no limit).")
flags.DEFINE_string("optimizer", DEFAULT.recipe.optimizer,
                    "Optimizer: " + ", ".join(OPTIMIZERS) + ".")
flags.DEFINE_float("learning_rate", DEFAULT.recipe.learning_rate, "Learning rate.")
flags.DEFINE_integer("runs", DEFAULT.folder.runs,
                     "Train this many times, with seeds --seed, --seed+1, ..., each "
                     "in --model_dir/seed-<seed>; then print and save (summary.json) the mean "
                     "and standard deviation of OA, AA and kappa.")
flags.DEFINE_float("val_fraction", DEFAULT.data.val_fraction,
                   "Share of each class's training pixels held out for "
                   "validation: the weights of the epoch with the best validation accuracy "
                   "classify the test pixels (0: no validation, the last epoch's weights).")
flags.DEFINE_string("val_split", DEFAULT.data.val_split,
                    "How the validation share is held out: random (a random share of "
                    "each class), spatial (a block at one end of each class's training "
                    "pixels, the training pixels within the patch radius of it dropped, as "
                    "the disjoint split keeps its test pixels), or auto (spatial for "
                    "--split=disjoint and --train_set, else random); needs --val_fraction "
                    "> 0. docs/data.md.")
flags.DEFINE_string("brightness_norm", DEFAULT.data.brightness_norm,
                    "Divide each pixel's spectrum by its brightness (the mean of its bands) "
                    "before the band scaling, so that a field's or the light's brightness "
                    "does not change it: on, off, or auto (on for a scene of radiance: "
                    "--dataset=indian_pines or salinas, --synthetic_kind=radiance). "
                    "docs/data.md.")
flags.DEFINE_integer("patience", DEFAULT.recipe.patience,
                     "Stop after this many epochs without a better validation "
                     "accuracy (0: never); needs --val_fraction > 0.")
flags.DEFINE_string("schedule", DEFAULT.recipe.schedule,
                    "Learning rate over the run: " + ", ".join(SCHEDULES)
                    + " (after --warmup_epochs).")
flags.DEFINE_float("warmup_epochs", DEFAULT.recipe.warmup_epochs,
                   "Epochs of linear learning-rate warm-up.")
flags.DEFINE_float("weight_decay", DEFAULT.recipe.weight_decay,
                   "Weight decay: decoupled for adam (default 0.01), L2 "
                   "for the other optimizers (default 0; lars 1e-4).")
flags.DEFINE_bool("augment", DEFAULT.recipe.augment,
                  "Augment training patches: random flips and 90-degree "
                  "rotations, --brightness, --noise and the field look (--spectral_shift, "
                  "--spectral_gain); --noaugment: none of them.")
flags.DEFINE_float("brightness", DEFAULT.recipe.brightness,
                   "Augmentation (with --augment): scale each training patch by a factor "
                   "in [1 - b, 1 + b].")
flags.DEFINE_float("noise", DEFAULT.recipe.noise,
                   "Augmentation (with --augment): standard deviation of Gaussian noise "
                   "added to the standardised training patches.")
flags.DEFINE_string("spectral_shift", DEFAULT.recipe.spectral_shift,
                    "Augmentation (field look, with --augment): shift each "
                    "training patch's raw spectrum by up to this many bands (a PCA model "
                    "needs --pca_in_graph); auto: as much as the scene's fields differ, "
                    "measured on the training pixels (hmp.data.field_look), and halved "
                    "when the network does not fit them (hmp.run.look_yield).")
flags.DEFINE_string("spectral_gain", DEFAULT.recipe.spectral_gain,
                    "Augmentation (field look, with --augment): multiply each "
                    "training patch's raw spectrum by a smooth random gain in [1 - g, 1 + g] "
                    "(g <= 1); auto: measured as --spectral_shift.")
flags.DEFINE_bool("pca_in_graph", DEFAULT.recipe.pca_in_graph,
                  "For a model on PCA components: cut the patches "
                  "on all scaled bands and project them onto the components on the devices, "
                  "after augmentation, so that the field look (--spectral_shift, "
                  "--spectral_gain) reaches them too.")
flags.DEFINE_bool("tta", DEFAULT.recipe.tta,
                  "Test-time augmentation: classify each test patch in the 8 "
                  "symmetries of the square and average the class probabilities (8 times "
                  "the classification's work; results.json also holds the scores without).")
flags.DEFINE_string("smoothing", DEFAULT.recipe.smoothing,
                    "Spatial smoothing of the class probabilities: each pixel's are "
                    "smoothed over a square of this many pixels around it (odd; 1: none; "
                    "guided by the scene's edges, --smoothing_guide); "
                    "auto: the window of %s that classifies the validation pixels best, "
                    "the smallest of equals (hmp.evaluation.smoothing; with a random "
                    "validation share on the disjoint split, too small). results.json also "
                    "holds the scores without." % ", ".join(map(str, WINDOWS)))
flags.DEFINE_bool("smoothing_guide", DEFAULT.recipe.smoothing_guide,
                  "Smooth following the scene's edges: a guided filter of the class "
                  "probabilities with the scene's first principal component as guide, "
                  "so that a small field keeps its class; --nosmoothing_guide: the plain "
                  "mean over the window.")
flags.DEFINE_float("spectral_prior", DEFAULT.recipe.spectral_prior,
                   "The network's weight w in its fusion with a spectral prior before the "
                   "smoothing: its class probabilities ** w times those of a shrinkage LDA "
                   "on each pixel's patch-mean spectrum (all bands, fitted on the training "
                   "pixels) ** (1 - w); 1: the network alone.")


class _BalancingParser(flags.ArgumentParser):
    """--class_balanced=VALUE as given; alone (a switch before it took values): inverse;
    --noclass_balanced: off."""

    def parse(self, argument):
        return {"true": "inverse", "false": "off"}.get(str(argument).lower(), argument)


flags.DEFINE_flag(flags.Flag(
    _BalancingParser(), flags.ArgumentSerializer(), "class_balanced",
    DEFAULT.recipe.class_balanced, "Loss weight of each class, by its training pixels "
    "n_c: off, sqrt (1 / sqrt(n_c): a class of a few pixels is still learnt) or inverse "
    "(1 / n_c; also --class_balanced alone), scaled to a mean of 1 over the training "
    "pixels.", boolean=True))
flags.DEFINE_string("model_dir", DEFAULT.folder.model_dir, "Checkpoints, results and event files "
                    "(default runs/<dataset>-<model>).")
flags.DEFINE_bool("resume", DEFAULT.folder.resume,
                  "Continue from the latest checkpoint in --model_dir.")
flags.DEFINE_bool("overwrite", DEFAULT.folder.overwrite,
                  "Start over in a --model_dir that holds a run (or a --runs series): "
                  "its checkpoints, results, maps and event files are deleted once the "
                  "new run's input and plan are good.")
flags.DEFINE_integer("checkpoint_every", DEFAULT.folder.checkpoint_every,
                     "Also checkpoint every N steps (0: every epoch).")
flags.DEFINE_string("rebalance", DEFAULT.placement.rebalance,
                    "off, or epoch: after each epoch, re-plan from "
                    "measured busy times, and switch when that is predicted to pay back.")
flags.DEFINE_bool("try_alone", DEFAULT.placement.try_alone,
                  "With --mesh=auto, when the plan spreads over several "
                  "devices: train the next epoch on the layout priced next within %d%%, if "
                  "any, then one on the fastest device alone, and keep whichever ran the "
                  "most samples/s (a measured guard against a mispriced plan)."
                  % round(100 * SPLIT_MARGIN))
flags.DEFINE_float("rebalance_threshold", DEFAULT.placement.rebalance_threshold,
                   "--rebalance=epoch: re-balancing's noise level: re-plan when "
                   "max/min device busy time exceeds 1 + this, switch only to a plan "
                   "predicted this much faster; a plan's samples/s moving by more is a "
                   "changed machine.")
flags.DEFINE_integer("steps_per_run", DEFAULT.placement.steps_per_run,
                     "Training steps per session.run: the client's round trip and the "
                     "workers' start are paid once per N steps; each graph is built N "
                     "times longer (docs/engine.md).")
flags.DEFINE_string("cluster", DEFAULT.placement.cluster,
                    "Cluster mode: host:port of every hmp.worker task "
                    "(python -m hmp.worker), task 0 first; or tf_config (TF_CONFIG's job "
                    "worker) or slurm (the Slurm job's tasks, at --port_base); --devices "
                    "default to one CPU per task.")
flags.DEFINE_float("cluster_timeout", DEFAULT.placement.cluster_timeout,
                   "Cluster mode (--cluster or --local_workers): seconds a worker may take "
                   "to answer.")
flags.DEFINE_string("local_workers", DEFAULT.placement.local_workers,
                    "Cluster mode on this machine: start one hmp.worker "
                    "per CPUS:THREADS (e.g. 0-7:8,8-9:2: CPUs a-b or one CPU, intra-op "
                    "threads) on free ports, train on them, stop them at the end.")
flags.DEFINE_integer("port_base", DEFAULT.placement.port_base, "--cluster=slurm: the port of a "
                     "node's first task (its next tasks: +1, +2, ...), as the workers have it.")
flags.DEFINE_float("log_every", DEFAULT.folder.log_every, "When stdout is not a terminal (a log "
                   "file): seconds between progress lines within an epoch (0: none).")
flags.DEFINE_string("memory_caps", DEFAULT.placement.memory_caps,
                    "Memory of each device, or one size for all (e.g. "
                    "2GB,512MiB or 8GiB; units B, KB, MB, GB, TB, KiB, MiB, GiB, TiB): bounds "
                    "the plan instead of the memory found (a GPU's as TensorFlow reports it, "
                    "a CPU's the machine's).")
flags.DEFINE_bool("deterministic", DEFAULT.placement.deterministic,
                  "TensorFlow's op determinism: the same steps give "
                  "the same weights bit for bit, on GPUs too (exact --resume); slower on "
                  "GPUs. With --cluster, start every hmp.worker with --deterministic too.")
flags.DEFINE_string("simulate_slowdown", DEFAULT.placement.simulate_slowdown,
                    "DEVICE=FACTOR,...: multiply a device's "
                    "measured busy time (tests re-balancing with virtual devices).")
FLAGS = flags.FLAGS


def settings_from_flags():
    """The run's :class:`hmp.run.settings.Settings`: the flags given (on the command
    line or in a --flagfile), the defaults for the rest."""
    return Settings.of(**{name: FLAGS[name].value for name in FLAG_FIELDS
                          if FLAGS[name].present})


def main(argv):
    if len(argv) > 1:
        raise cli.UsageError("unexpected arguments %s (flags start with --)" % argv[1:])
    fit(settings_from_flags(), models.get_model, sys.argv[1:])


if __name__ == "__main__":
    cli.run(main, "hmp.train")
