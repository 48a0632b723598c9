"""The seeds' folders and what ``--resume`` requires of them: a used folder is resumed or
overwritten only when asked, and a resumed run goes on with the data and the graph
(model, width, precision, optimizer, batch size) its first invocation used (its
data.json, and flags.txt: each invocation's flags, these the same in all), else one line
says which flag differs. Nothing here makes or deletes a
folder (``hmp.run.run_folder.prepare_model_dir`` does, once the input is checked).
"""

import os

import numpy as np

from hmp import cli
from hmp.errors import InvalidInput
from hmp.graph.from_graph import default_width
from hmp.run import experiment, run_files, run_folder
from hmp.run.settings import BATCH_NORM_BEFORE, DEFAULT

# The data settings a resumed run must share with its first invocation (data.json).
RESUMED_DATA = ("dataset", "synthetic_layout", "synthetic_kind", "patch_size", "pca",
                "train_fraction", "train_per_class", "split", "seed", "val_fraction",
                "val_split", "brightness_norm")
# The flags a resumed run must share with its first invocation (flags.txt, rewritten by
# each invocation with these the same): they decide
# the variables its checkpoint holds (the model's, the optimizer's slots) or how they
# compute, or what its global step counts (--batch_size: a step of that many samples, so
# the epoch and the sample a resumed run goes on from). --pca and --patch_size are data
# settings (RESUMED_DATA); --batch_norm's modes hold the same variables, and a run may
# go on in another.
RESUMED_GRAPH = ("model", "width", "precision", "optimizer", "batch_size")


def seed_dirs(folder, model_dir, seeds):
    """The folder of each seed's run, checked (a used one needs --resume or --overwrite:
    ``folder``, the settings' run folder group). One seed: ``model_dir`` itself;
    several: its ``seed-<seed>`` folders (refused when ``model_dir`` holds one run, or
    holds none of the seeds' runs but other files)."""
    single = run_folder.held(model_dir) if len(seeds) > 1 else []
    if single and not folder.overwrite:   # the seeds' folders would go beside it
        raise cli.UsageError("--runs=%d: --model_dir=%s holds a single run (%s); continue it "
                             "without --runs, start over with --overwrite, or give another "
                             "--model_dir" % (len(seeds), model_dir, ", ".join(single)))
    series = run_folder.seed_folders(model_dir) if len(seeds) == 1 else []
    if series and not folder.overwrite:   # a single run would go among the seeds' runs
        raise cli.UsageError("--model_dir=%s holds a --runs series (%s); continue it with "
                             "--runs=%d --resume, start over with --overwrite, or give another "
                             "--model_dir" % (model_dir, ", ".join(
                                 os.path.basename(each) for each in series), len(series)))
    folders = ([model_dir] if len(seeds) == 1 else
               [run_folder.seed_folder(model_dir, seed) for seed in seeds])
    if len(seeds) > 1 and not any(run_folder.held(each) for each in folders):
        # a new series' folder, like a new run's, holds nothing but runs' files
        run_folder.check_holds_only_runs(model_dir)
    if folder.resume and not os.path.isdir(model_dir):   # e.g. flags.txt's path, elsewhere
        where = model_dir if os.path.isabs(model_dir) else (
            "%s in %s (a relative --model_dir is read from the folder hmp.train starts in)"
            % (model_dir, os.getcwd()))
        raise cli.UsageError("--resume: there is no folder %s; give the run's folder as "
                             "--model_dir" % where)
    for each in folders:
        run_folder.check_model_dir(each, folder.resume, folder.overwrite)
    if folder.resume and len(folders) == 1 and run_folder.checkpoint_step(model_dir) is None:
        raise cli.UsageError("--resume: %s holds no checkpoint to resume from; start the "
                             "run without --resume" % model_dir)
    return folders


def resumes(folder, model_dir):
    """Whether the seed in ``model_dir`` goes on from its checkpoint: with --resume, when
    it has one (with --runs, a seed the series had not reached yet starts afresh, and
    says so)."""
    resume = folder.resume and run_folder.checkpoint_step(model_dir) is not None
    if folder.resume and not resume:
        print("%s holds no checkpoint yet: this seed's run starts" % model_dir, flush=True)
    return resume


def check_resumed_flags(model_dir, settings, get_model):
    """UsageError when --resume's flags (``settings``, a :class:`hmp.run.settings.Settings`)
    do not go on with the run's first invocation (its flags.txt, read once: a seed's
    folder of --runs has its series'; a folder without one has nothing to compare). The
    graph: the flags ``RESUMED_GRAPH``, each as given there or at its default, compared
    as what they build (``get_model``: the
    application's model lookup; a model's name or module path, its width 0 or its
    default); TensorFlow would fail to restore the checkpoint only once the run's folder
    holds its events. Then a flag given anew that does nothing beside the others
    (``Settings.check_resumed_acting``): refused as a new run refuses it, while one that
    flags.txt holds with that value goes on ignored, as its first invocation accepted
    it. Refused before anything is written."""
    folder, started = run_folder.started_flags(model_dir)
    if started is None:
        return
    if ("batch_norm" not in started and not settings.chosen("batch_norm")
            and settings.model.batch_norm != BATCH_NORM_BEFORE):
        raise cli.UsageError(
            "--resume: the run in %s trained with %s batch-norm statistics, the default when "
            "it started; give --batch_norm=%s to go on as it trained, or --batch_norm=%s"
            % (model_dir, BATCH_NORM_BEFORE, BATCH_NORM_BEFORE, settings.model.batch_norm))
    first = {name: started.get(name, str(DEFAULT.value(name))) for name in RESUMED_GRAPH}
    now = {name: str(settings.value(name)) for name in RESUMED_GRAPH}

    def built(flags):
        try:
            model = get_model(flags["model"])
        except InvalidInput:   # a model this installation lacks: as written
            return flags
        return {**flags, "model": model,
                "width": int(flags["width"]) or default_width(model)}

    was, will = built(first), built(now)
    changed = [name for name in RESUMED_GRAPH if was[name] != will[name]]
    if changed:
        raise cli.UsageError(
            "%s: the run in %s was trained with %s; resume it with %s (--flagfile=%s gives "
            "all its flags), or start over with --overwrite"
            % (", ".join("--%s=%s" % (name, now[name]) for name in changed),
               model_dir, ", ".join("--%s=%s" % (name, first[name]) for name in changed),
               "that" if len(changed) == 1 else "those",
               os.path.join(folder, run_files.FLAGS_FILE)))
    settings.check_resumed_acting(started, get_model)


def check_same_data(model_dir, data_config, split):
    """UsageError when --resume would go on with other pixels or patches than the run's
    first invocation used (its data.json), or another ``split`` (its split.npz: e.g.
    --train_set left out, or a label file changed); a folder without them has nothing
    to compare. InvalidInput, naming the file, for a data.json or split.npz that cannot
    be read."""
    if not os.path.isfile(os.path.join(model_dir, experiment.CONFIG_FILE)):
        return
    saved, saved_split = experiment.load(model_dir)
    changed = [name for name in RESUMED_DATA
               if getattr(saved, name) != getattr(data_config, name)]
    if changed:
        raise cli.UsageError(
            "--resume: the run in %s was trained with %s, not %s; resume it with the "
            "same data flags, or start over with --overwrite"
            % (model_dir, ", ".join("%s=%s" % (n, getattr(saved, n)) for n in changed),
               ", ".join("%s=%s" % (n, getattr(data_config, n)) for n in changed)))
    differ = [part for part in ("train", "test")
              if not np.array_equal(getattr(saved_split, part), getattr(split, part))]
    if differ:
        raise cli.UsageError(
            "--resume: the run in %s was trained on another split: these flags give other "
            "%s pixels than its %s (%s); resume it with the data flags and files it "
            "started with, or start over with --overwrite"
            % (model_dir, " and ".join(differ), experiment.SPLIT_FILE, saved_split.description))
