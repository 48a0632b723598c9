"""hmp.run.standby: a plan's trainer made ready on a thread while another trains."""

import threading

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

import harness
from hmp.graph.graph import TrainingGraph
from hmp.graph.graph_config import Placement
from hmp.run import experiment
from hmp.run import standby as standby_module
from hmp.run.standby import Standby
from hmp.run.trainer import Trainer
from models import model_config


class FakeTrainer:
    """Its first restore takes 5 s on ``clock`` (a list of one float: the time), each
    later one 0.25 s."""

    def __init__(self, log, clock=None):
        self.log, self.clock = log, clock or [0.0]

    def restore(self, path):
        self.clock[0] += 0.25 if ("restore", path) in self.log else 5.0
        self.log.append(("restore", path))

    def close(self):
        self.log.append("close")


def test_a_standby_builds_restores_and_warms_up_on_its_thread_then_hands_over(monkeypatch):
    log, release, clock = [], threading.Event(), [0.0]
    monkeypatch.setattr(standby_module.time, "perf_counter", lambda: clock[0])

    built = []

    def build(plan):
        release.wait()   # until the test lets it go (a daemon thread: no hang if it fails)
        log.append(("build", plan, threading.current_thread().name))
        built.append(FakeTrainer(log, clock))
        return built[-1]

    standby = Standby("plan", build, lambda: "ckpt-7", lambda t: log.append("warm up"))
    assert not standby.ready and standby.failed is None   # still building
    release.set()
    trainer = standby.take()
    assert log == [("build", "plan", "hmp-standby"), ("restore", "ckpt-7"), "warm up",
                   ("restore", "ckpt-7")]
    assert standby.restore_seconds == 0.25   # a switch's restore: not the first's setup
    assert built == [trainer]   # the trainer it built, handed over
    standby.close()   # a taken trainer is the taker's
    assert "close" not in log


def test_a_standby_restores_the_newer_checkpoint_when_the_one_it_read_was_pruned():
    """The run's saver keeps its newest few checkpoints: one pruned while the standby
    restored it (a missing file) is read again from the newer one; a failure that is
    not a pruning (the latest is the same) is the standby's error."""
    log, latest = [], iter(["ckpt-5", "ckpt-6", "ckpt-6", "ckpt-6"])

    class Pruned(FakeTrainer):
        def restore(self, path):
            if path == "ckpt-5":
                raise tf.errors.NotFoundError(None, None, "ckpt-5.index: no such file")
            super().restore(path)

    standby = Standby("plan", lambda plan: Pruned(log), lambda: next(latest), lambda t: None)
    standby.take()
    assert log == [("restore", "ckpt-6"), ("restore", "ckpt-6")]

    class Broken(FakeTrainer):
        def restore(self, path):
            raise ValueError("The passed save_path is not a valid checkpoint: " + path)

    standby = Standby("plan", lambda plan: Broken([]), lambda: "ckpt-6", lambda t: None)
    standby.wait()
    assert isinstance(standby.failed, ValueError)


def test_a_standby_closes_what_it_built_when_not_taken_or_when_it_fails():
    log = []
    standby = Standby("plan", lambda plan: FakeTrainer(log), lambda: "ckpt", lambda t: None)
    standby.wait()
    assert standby.close() is True
    assert log[-1] == "close" and not standby.ready

    def failing_warm_up(trainer):
        raise tf.errors.UnavailableError(None, None, "worker 1 is gone\nmore")

    log.clear()
    standby = Standby("plan", lambda plan: FakeTrainer(log), lambda: "ckpt", failing_warm_up)
    with pytest.raises(tf.errors.UnavailableError):
        standby.take()
    assert isinstance(standby.failed, tf.errors.UnavailableError) and log[-1] == "close"


def test_a_standby_closed_while_building_leaves_it_and_its_build_closes_its_trainer():
    log, release = [], threading.Event()

    def build(plan):   # a build held up, as on a lost worker until TensorFlow's timeout
        release.wait()   # until the test lets it go (a daemon thread: no hang if it fails)
        return FakeTrainer(log)

    standby = Standby("plan", build, lambda: "ckpt", lambda t: log.append("warm up"))
    assert standby.close(wait_s=0) is False   # the build still under way
    assert log == []
    release.set()
    standby.wait()
    assert log == [("restore", "ckpt"), "warm up", ("restore", "ckpt"), "close"]
    assert not standby.ready   # nothing left to take


def test_a_switch_to_a_standby_trains_on_as_the_run_would_have(tmp_path):
    """A batch split trains 3 steps and checkpoints; another split of the same model is
    made ready on a thread meanwhile (its warm-up step changes its weights and step, its
    timed restore after it sets them back to a checkpoint's); restored at the switch, its
    next steps' losses are the first split's."""
    exp = experiment.prepare(experiment.DataConfig(patch_size=5, train_fraction=0.15,
                                                   pca=12, seed=3))
    config = model_config("cnn2d", 5, exp.bands, exp.n_classes, width=4)
    folder = str(tmp_path)

    def trainer_of(splits):
        placement = Placement("batch:2", "batch:batch", tuple(harness.CPUS[:2]), splits)
        graph = TrainingGraph(config, placement, 32, exp.scene.labels.shape, "adam", 1e-3,
                              seed=1)
        return Trainer(graph, exp, folder, seed=7, session_config=harness.session_config(),
                       log=lambda line: None)

    def steps(trainer, batches):
        return [trainer.session.run([trainer.graph.loss, trainer.graph.train_op],
                                    trainer.graph.feed(b.indices, b.labels))[0]
                for b in batches]

    batches = list(exp.train.batches(32, seed=7, epoch=0, drop_remainder=True))[:6]
    running = trainer_of({"batch": [20, 12]})
    running.initialise(False)
    standby = Standby({"batch": [9, 23]}, trainer_of,
                      lambda: tf.train.latest_checkpoint(folder), Trainer.warm_up)
    steps(running, batches[:3])
    running.save()
    expected = steps(running, batches[3:])
    switched = standby.take()
    try:
        # its restore after its warm-up step: of step 0's or step 3's checkpoint
        assert switched.step in (0, 3)
        switched.restore(tf.train.latest_checkpoint(folder))
        assert switched.step == 3 and switched.graph is not running.graph
        losses = steps(switched, batches[3:])
    finally:
        running.close()
        switched.close()
    np.testing.assert_allclose(losses, expected, rtol=1e-5)


def _run_signatures(monkeypatch):
    """The (fetched, fed) tensor and op names of every ``tf.Session.run`` from now on, a
    set a session prepares once each (its first run of them optimises their graph)."""
    seen, original = set(), tf.Session.run

    def names(structure):
        return tuple(sorted(getattr(x, "name", str(x)) for x in tf.nest.flatten(structure)))

    def run(session, fetches, feed_dict=None, *args, **kwargs):
        seen.add((names(fetches), names(list(feed_dict or ()))))
        return original(session, fetches, feed_dict, *args, **kwargs)

    monkeypatch.setattr(tf.Session, "run", run)
    return seen


def test_a_warm_up_runs_everything_an_epoch_runs_and_writes_nothing_in_the_run_folder(
        tmp_path, monkeypatch):
    """After a warm-up (and the restore that undoes it), an epoch with its validation,
    its checkpoint and a best epoch's save runs nothing a session has not run before (a
    standby's first epoch after a switch pays no preparation); the warm-up's checkpoint
    goes to a scratch folder, and another series of checkpoints adds no op to the graph."""
    exp = experiment.prepare(experiment.DataConfig(patch_size=5, train_fraction=0.15,
                                                   val_fraction=0.2, pca=12, seed=3))
    config = model_config("cnn2d", 5, exp.bands, exp.n_classes, width=4)
    placement = Placement("batch:2", "batch:batch", tuple(harness.CPUS[:2]), {"batch": [20, 12]})
    graph = TrainingGraph(config, placement, 32, exp.scene.labels.shape, "adam", 1e-3, seed=1)
    trainer = Trainer(graph, exp, str(tmp_path), seed=7, session_config=harness.session_config(),
                      log=lambda line: None)
    try:
        trainer.initialise(resume=False)
        checkpoint = tf.train.latest_checkpoint(str(tmp_path))
        files = sorted(p.name for p in tmp_path.iterdir())
        ran = _run_signatures(monkeypatch)
        trainer.restore(checkpoint)
        trainer.warm_up()
        assert sorted(p.name for p in tmp_path.iterdir()) == files
        trainer.restore(checkpoint)
        warmed = set(ran)
        ran.clear()
        ops = len(graph.tf_graph.get_operations())
        trainer.train_epoch(0, 1)
        trainer.save(prefix="best", latest_filename="best_checkpoint", max_to_keep=1)
        assert len(graph.tf_graph.get_operations()) == ops
        assert trainer.step == trainer.steps_per_epoch   # from the checkpoint of step 0
    finally:
        trainer.close()
    assert exp.val is not None and len(ran) >= 6   # steps, metrics, classifying, saves, ...
    assert ran <= warmed, ran - warmed
