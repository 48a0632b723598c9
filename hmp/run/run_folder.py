"""A run's folder (--model_dir): who may use it, its history, and stopping on a signal.

A folder that holds a run (checkpoints, results) is not silently reused: a
new run there needs ``--resume`` (continue it) or ``--overwrite`` (delete the
run's files first); one that holds other files than a run's is refused.
``history.json`` records every epoch of every invocation,
written atomically before each epoch's checkpoint, so a resumed run's
``results.json`` holds the whole history; ``flags.txt`` the flags that started
the run (``--flagfile``). :class:`Signals` turns SIGINT and
SIGTERM into a request the trainer answers after its running step, with a
checkpoint.
"""

import glob
import re
import os
import shutil
import signal

import tensorflow.compat.v1 as tf

from hmp import cli, files
from hmp.errors import InvalidInput
from hmp.graph.graph import CHECKPOINTS_KEPT
from hmp.measure import speedcache
from hmp.evaluation import report
from hmp.run import experiment, fitted_preprocessing
from hmp.run.alone_trial import record_before
from hmp.run.settings import check_resume_or_overwrite
from hmp.run.run_files import (BEST_CHECKPOINT, BEST_PREFIX, FLAGS_FILE, HISTORY, PREDICTION,
                               RESULTS, SEED_PREFIX, SUMMARY, checkpoint_path_step, read_json,
                               read_results)

# The files a run writes whole, each through a temporary NAME.*.tmp beside it (hmp.files) ...
_WRITTEN_WHOLE = (RESULTS, HISTORY, SUMMARY, experiment.CONFIG_FILE,
                  fitted_preprocessing.FILE_NAME, FLAGS_FILE)
# ... and every file a run writes in its folder.
RUN_FILES = ("checkpoint", "ckpt-*", BEST_CHECKPOINT, BEST_PREFIX + "-*", report.MAP_FILE,
             report.CONFUSION_FILE, "events.out.tfevents.*", experiment.SPLIT_FILE,
             experiment.SPLIT_FILE + ".*.npz", *_WRITTEN_WHOLE,
             *(name + ".*.tmp" for name in _WRITTEN_WHOLE))
# What --overwrite deletes, and nothing else: the run's files and hmp.predict's default
# --out, the maps of the old run's weights (a new run's folder must not show them as its own).
OVERWRITTEN = RUN_FILES + (PREDICTION,)
# What else may be in a run's folder: the measured speeds (hmp.run.plan_choice), the seeds'
# runs of --runs. Anything more makes it no run's folder.
WRITE_PROBE = ".write_test"   # prepare_model_dir's, removed at once
RUN_ENTRIES = OVERWRITTEN + (speedcache.FILE_NAME, speedcache.FILE_NAME + ".*.tmp",
                             SEED_PREFIX + "*")


def seed_folder(model_dir, seed):
    """The folder of seed ``seed``'s run in the folder ``model_dir`` of a --runs series."""
    return os.path.join(model_dir, SEED_PREFIX + str(seed))


def seed_folders(model_dir):
    """The seeds' run folders that ``model_dir`` (a --runs series' folder) holds, sorted:
    those with a run (:func:`held`) or its data (``experiment.CONFIG_FILE``), not one an
    --overwrite left with its measured speeds alone."""
    return [folder for folder in paths_in(model_dir, [SEED_PREFIX + "*"])
            if held(folder) or os.path.exists(os.path.join(folder, experiment.CONFIG_FILE))]


def resume_flags(model_dir):
    """The flags of ``python -m hmp.train`` that continue the run whose flags.txt is in
    ``model_dir`` (``save_flags``: the flags it goes on with, its folder included)."""
    return "--flagfile=%s --resume" % os.path.join(model_dir, FLAGS_FILE)


def started_flags(model_dir):
    """(the folder of the flags.txt that started the run in ``model_dir``, its flags as
    :func:`saved_flags` gives them), read once: ``model_dir``'s, or for a seed's folder of
    --runs (``seed-N``) its series' (``save_flags`` writes one for the series, naming
    --runs); (None, None) without one."""
    own = _flags_in(model_dir)
    if own is not None:
        return model_dir, own
    series, folder = os.path.split(os.path.abspath(model_dir))
    if re.fullmatch(re.escape(SEED_PREFIX) + r"\d+", folder):
        flags = _flags_in(series)
        if "runs" in (flags or {}):
            return series, flags
    return None, None


def flags_folder(model_dir):
    """The folder of the flags.txt that started the run in ``model_dir``
    (:func:`started_flags`), or None."""
    return started_flags(model_dir)[0]


def continuing_flags(model_dir):
    """The flags that continue the run in ``model_dir`` where its flags.txt may be
    elsewhere (:func:`flags_folder`: ``resume_flags``), else ``--resume`` in words."""
    folder = flags_folder(model_dir)
    return "--resume and the flags that started it" if folder is None else resume_flags(folder)


def paths_in(model_dir, patterns):
    """The paths in ``model_dir`` that match ``patterns`` (glob patterns; a run's files)."""
    return sorted({path for pattern in patterns
                   for path in glob.glob(os.path.join(glob.escape(model_dir), pattern))})


def check_model_dir(model_dir, resume=False, overwrite=False):
    """Refuses, before anything is written or deleted, a folder that cannot take the run.

    Raises :class:`hmp.cli.UsageError` (naming --model_dir, --resume and
    --overwrite) when ``model_dir`` is not a folder that can be made or written,
    or holds a run and neither ``resume`` nor ``overwrite`` is given. Deletes
    nothing: :func:`prepare_model_dir` does, once the run's input is known good.
    """
    check_resume_or_overwrite(resume, overwrite)
    try:
        files.check_folder_can_be_made(model_dir)
    except InvalidInput as error:
        raise cli.UsageError("--model_dir=%s: %s" % (model_dir, error)) from None
    run = held(model_dir)
    if run and not resume and not overwrite:
        raise cli.UsageError(
            "--model_dir=%s holds a run (%s); continue it with --resume, start over with "
            "--overwrite, or give another --model_dir" % (model_dir, ", ".join(run)))
    if not run:
        check_holds_only_runs(model_dir)


def check_holds_only_runs(model_dir):
    """Refuses (:class:`hmp.cli.UsageError`) a ``model_dir`` that holds other files than
    runs write (:func:`foreign`): a new run, or the seeds' runs of --runs, would scatter
    their files among them (and replace any of their names)."""
    others = foreign(model_dir)
    if others:
        raise cli.UsageError(
            "--model_dir=%s holds no run but other files (%s%s); give a new or empty folder"
            % (model_dir, ", ".join(others[:3]),
               " and %d more" % (len(others) - 3) if len(others) > 3 else ""))


def foreign(model_dir):
    """The names in ``model_dir`` (sorted) that no run writes (``RUN_ENTRIES``), but hidden
    ones (.DS_Store, an editor's, the write probe); [] for a folder that is not there."""
    try:
        names = {name for name in os.listdir(model_dir) if not name.startswith(".")}
    except OSError:
        return []
    return sorted(names - {os.path.basename(path)
                           for path in paths_in(model_dir, RUN_ENTRIES)})


def series_replaced(model_dir, folders):
    """The run folders of the --runs series in ``model_dir`` that an --overwrite with the
    seeds' ``folders`` replaces beside the first seed's: the series' own (its summary) and
    every other seed's, also those the new series has too (each would otherwise keep its
    old run until its seed starts) or has not (they would stay for good)."""
    return [model_dir] + [folder for folder in seed_folders(model_dir) if folder != folders[0]]


def prepare_model_dir(model_dir, overwrite=False, replaced=()):
    """Makes ``model_dir`` (checked by :func:`check_model_dir`) and checks it is writable;
    with ``overwrite``, deletes the run's files first (``OVERWRITTEN``), and those of the
    folders ``replaced`` (:func:`series_replaced`; a seed's folder left empty goes too)."""
    try:
        if overwrite:
            for folder in (model_dir, *replaced):
                # ckpt-N_temp: a folder of a killed save; prediction: hmp.predict's
                for path in paths_in(folder, OVERWRITTEN):   # a link itself, not its target
                    (shutil.rmtree(path) if os.path.isdir(path) and not os.path.islink(path)
                     else os.remove(path))
            for folder in replaced:   # the other seeds' folders, beside or in model_dir
                if (os.path.dirname(folder) in (os.path.dirname(model_dir), model_dir)
                        and os.path.isdir(folder) and not os.listdir(folder)):
                    os.rmdir(folder)
        os.makedirs(model_dir, exist_ok=True)
        probe = os.path.join(model_dir, WRITE_PROBE)
        with open(probe, "w"):
            pass
        os.remove(probe)
    except OSError as error:
        raise cli.UsageError("--model_dir=%s: not writable (%s)"
                             % (model_dir, error.strerror)) from None


def held(model_dir):
    """What makes ``model_dir`` a run's folder: a checkpoint, results.json, history.json.

    Event files, or the pieces of a checkpoint whose writing was killed
    (TensorFlow lists a checkpoint only once it is whole), do not.
    """
    step = checkpoint_step(model_dir)
    return (["a checkpoint at step %d" % step] if step is not None else []) + [
        name for name in (RESULTS, HISTORY)
        if os.path.exists(os.path.join(model_dir, name))]


def check_holds_no_run(path):
    """InvalidInput when ``path`` holds a run (``held``): a prediction or a SavedModel
    written among a run's files would outlive the run (``--overwrite`` deletes a run's
    files only), and the folder they leave is then no run's, which a new run refuses."""
    run = held(path)
    if run:
        raise InvalidInput("%s holds a run (%s); give another folder" % (path, ", ".join(run)))


def save_flags(model_dir, flags):
    """Writes ``flags`` (``--name=value`` strings of ``hmp.train``), one a line, atomically
    to ``model_dir/flags.txt``: ``--flagfile=`` that file with ``--resume`` continues the
    run, with ``--overwrite`` starts it again (later flags override it, e.g.
    ``--model_dir`` for a moved folder)."""
    path = os.path.join(model_dir, FLAGS_FILE)
    with files.atomic_path(path) as temporary, open(temporary, "w", encoding="utf-8") as f:
        f.write("# python -m hmp.train %s continues this run (--overwrite instead of "
                "--resume: starts it again)\n" % resume_flags(model_dir))
        f.writelines(flag + "\n" for flag in flags)


def saved_flags(model_dir):
    """The flags :func:`save_flags` wrote for the run in ``model_dir`` (there, or for a
    seed of --runs in its series' folder: :func:`flags_folder`) ({name: value as written;
    "" for a boolean's ``--name``}), or None without them (a run from before them)."""
    return started_flags(model_dir)[1]


def _flags_in(folder):
    """The flags of the flags.txt in ``folder`` (as :func:`saved_flags` gives them), or
    None without one."""
    try:
        with open(os.path.join(folder, FLAGS_FILE), encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    return dict(line[2:].partition("=")[::2] for line in lines if line.startswith("--"))


def checkpoint_step(model_dir):
    """The global step of the latest checkpoint in ``model_dir``, or None."""
    try:
        checkpoint = tf.train.latest_checkpoint(model_dir)
    except (tf.errors.OpError, ValueError):   # an unreadable checkpoint list
        checkpoint = None
    return checkpoint_path_step(checkpoint)


def checkpoint_identity(model_dir):
    """Which file the latest checkpoint in ``model_dir`` is: (its step, its index file's
    inode and modification stamp), or None without one. A checkpoint written since
    another identity was taken has another (a file replaced under the same name
    included)."""
    step = checkpoint_step(model_dir)
    if step is None:
        return None
    try:
        index = os.stat(tf.train.latest_checkpoint(model_dir) + ".index")
    except (OSError, TypeError):   # gone meanwhile
        return None
    return step, index.st_ino, index.st_mtime_ns


def scored_at_checkpoint(model_dir):
    """The results.json of the run in ``model_dir`` when it was scored at its latest
    checkpoint (its training over: ``hmp.run.seed_training`` says whether it ended), else
    None."""
    step = checkpoint_step(model_dir)
    results = read_results(model_dir) or {}
    if step is None or "test" not in results or results.get("step") != step:
        return None
    return results


class History:
    """history.json: every epoch, plan and invocation of a run, across resumes, and the
    record of ``--try_alone``'s trial (``trial``: ``AloneTrial.record()``, or None).

    ``open`` keeps, of a resumed run's record, the epochs before
    ``first_epoch`` (the one its checkpoint is in), and the trial's rates of those: an
    epoch recorded but not checkpointed (a kill between the two) is trained and recorded
    again.
    ``open`` writes nothing (a run that fails to start leaves no history);
    every change after it is written at once, atomically.
    """

    def __init__(self, path, epochs=(), plans=(), invocations=(), trial=None, partials=None):
        self.path = path
        self.epochs, self.plans, self.invocations = list(epochs), list(plans), list(invocations)
        self.trial = trial
        # "step" -> [loss sum, samples right, batch size], of the latest checkpoints
        self.partials = dict(partials or {})

    @classmethod
    def open(cls, model_dir, resume, first_epoch, step, argv):
        path = os.path.join(model_dir, HISTORY)
        record = (read_json(path) if resume else None) or {}
        history = cls(path, [e for e in record.get("history", []) if e["epoch"] < first_epoch],
                      record.get("plans", []), record.get("invocations", []),
                      record_before(record.get("trial"), first_epoch),
                      record.get("partials"))
        history.invocations.append({"start_step": int(step), "argv": list(argv)})
        return history

    def add_epoch(self, stats):
        """Records an epoch (and ``trial`` as it is now: set it first to record the two
        together, before the epoch's checkpoint)."""
        self.epochs.append(dict(vars(stats)))
        self.write()

    def validated(self, accuracy):
        """Records the last epoch's validation ``accuracy``, measured after its record (a
        stop while it was validated: ``hmp.run.epoch_loop.EpochLoop`` validates it on
        resume)."""
        self.epochs[-1]["val_accuracy"] = float(accuracy)
        self.write()

    def add_partial(self, step, loss_sum, correct, batch_size):
        """Records the loss and accuracy sums of the epoch's steps up to ``step`` (of
        ``batch_size`` samples), before a checkpoint within the epoch
        (``Trainer.train_epoch``'s ``before_checkpoint``); those of the checkpoints kept
        (``CHECKPOINTS_KEPT``) are kept."""
        self.partials[str(int(step))] = [float(loss_sum), float(correct), int(batch_size)]
        latest = sorted(self.partials, key=int)[-CHECKPOINTS_KEPT:]
        self.partials = {key: self.partials[key] for key in latest}
        self.write()

    def carried(self, step, batch_size):
        """The sums recorded at ``step`` of a run of ``batch_size`` (a checkpoint within an
        epoch), or None."""
        sums = self.partials.get(str(int(step)))
        return None if sums is None or sums[2] != batch_size else tuple(sums[:2])

    def add_plan(self, plan):
        self.plans.append(plan)
        self.write()

    def write(self):
        files.write_json(self.path, {"history": self.epochs, "plans": self.plans,
                                      "invocations": self.invocations, "trial": self.trial,
                                      "partials": self.partials})


class Signals:
    """SIGINT/SIGTERM: the first asks the trainer to stop after its step; a second aborts.

    Use as a context manager (it restores the previous handlers), pass it as
    the trainer's ``stop`` and set ``armed`` once the trainer runs. Before
    that (loading, planning) there is nothing to save, and the first signal
    stops at once with :class:`hmp.cli.Interrupted`.
    """

    def __init__(self):
        self.signum, self.armed, self._previous = None, False, {}

    def __call__(self):   # the trainer's stop(): has a signal come?
        return self.signum is not None

    def _handle(self, signum, frame):
        if self.signum is not None:   # the second: give up at once
            os.write(2, b"\ninterrupted again: stopping at once, without a checkpoint\n")
            os._exit(128 + signum)
        self.signum = signum
        if not self.armed:
            raise cli.Interrupted("interrupted before training started; nothing to save",
                                  signum)

    def __enter__(self):
        for signum in (signal.SIGINT, signal.SIGTERM):
            self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc):
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
