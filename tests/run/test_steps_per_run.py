"""Several training steps per session.run (``TrainingGraph.steps_per_run``): each step
equals the one-step graph's, in a block or alone, and the trainer keeps its traced
steps, metrics, checkpoints and stops between blocks."""

import dataclasses

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

import harness
from hmp.graph.graph import TrainingGraph
from hmp.graph.graph_config import Augmentation, Placement, Recipe
from hmp.run import experiment
from hmp.run.trainer import (MEASURED_STEPS, Paused, Stopped, Trainer, block_size, passes,
                              traced_steps)
from models import model_config

BATCH = 32
SPLIT = Placement("batch:2", "batch:batch", tuple(harness.CPUS[:2]), {"batch": [20, 12]})
# every random draw of a step (flips, brightness, noise, dropout) and a rate that changes
# with the step: a block must draw and schedule as the steps one by one do
RECIPE = Recipe(schedule="cosine", total_steps=40, weight_decay=1e-3,
                augmentation=Augmentation(flips=True, brightness=0.1, noise=0.02))


@pytest.fixture(scope="module")
def exp():
    # 826 training pixels: 25 steps an epoch
    return experiment.prepare(experiment.DataConfig(patch_size=5, train_fraction=0.05,
                                                    pca=12, seed=3))


def graph_of(exp, steps_per_run, placement=SPLIT):
    config = model_config("cnn2d", 5, exp.bands, exp.n_classes, width=4)
    return TrainingGraph(config, placement, BATCH, exp.scene.labels.shape, "adam", 1e-3,
                         seed=1, recipe=RECIPE, steps_per_run=steps_per_run)


def weights(graph, session):
    session.run(graph.copy_slices_to_masters)
    with graph.tf_graph.as_default():
        return session.run(tf.trainable_variables())


def test_blocks_of_steps_equal_the_one_step_graph_exactly(exp):
    """7 steps as blocks of 3, 3 and 1 on a graph of 3 a run, and one by one on a graph
    of one step: the same weights, metric sums and global step, to the bit."""
    batches = [(b.indices, b.labels) for b, _ in zip(
        exp.train.batches(BATCH, seed=5, drop_remainder=True), range(7))]
    results = []
    for steps_per_run, blocks in ((1, [1] * 7), (3, [3, 3, 1])):
        graph = graph_of(exp, steps_per_run)
        assert graph.steps_per_run == steps_per_run
        session = graph.session(exp.train.extractor.padded, harness.session_config())
        done, last = 0, None
        for size in blocks:
            last = session.run(*graph.feed_steps(batches[done:done + size]))
            done += size
        results.append((last, graph.metrics.read(session), weights(graph, session)))
        session.close()
    (step_1, metrics_1, weights_1), (step_3, metrics_3, weights_3) = results
    assert step_1 == step_3 == 7
    np.testing.assert_array_equal(metrics_3, metrics_1)
    assert len(weights_3) == len(weights_1)
    for blocked, alone in zip(weights_3, weights_1):
        np.testing.assert_array_equal(blocked, alone)
    for wrong in (4, 0):
        with pytest.raises(ValueError, match="1 to 3 steps, got %d" % wrong):
            graph.feed_steps(batches[:wrong])


@pytest.mark.parametrize("total,steps_per_run", [(45, 4), (61, 5), (3, 4), (50, 1),
                                                 (100, 25)])
def test_blocks_cover_the_epoch_and_trace_steps_alone(total, steps_per_run):
    """The blocks run every step once; a traced step runs alone; and a step runs alone
    only where a whole block there would hold a traced step or run past the epoch (so
    blocks longer than the metrics' or checkpoints' period still run)."""
    traced = traced_steps(0, total)
    done, sizes = 0, []
    while done < total:
        size = block_size(done, total, steps_per_run, traced)
        whole = range(done, done + steps_per_run)
        allowed = done + steps_per_run <= total and not set(whole) & traced
        assert size == (steps_per_run if allowed else 1), done
        sizes.append(size)
        done += size
    assert done == total
    assert steps_per_run == 1 or total < steps_per_run or steps_per_run in sizes


@pytest.mark.parametrize("every", [0, 1, 5, 20])
def test_a_read_or_checkpoint_is_due_at_the_first_block_end_at_or_past_it(every):
    for before in range(0, 30):
        for after in range(before + 1, before + 26):
            multiples = [n for n in range(before + 1, after + 1) if every and n % every == 0]
            assert passes(before, after, every) == bool(multiples), (before, after)


class StopAfter:
    """A ``stop`` (or ``pause``) that turns true at its ``polls``-th poll."""

    def __init__(self, polls):
        self.polls = polls

    def __call__(self, *_):
        self.polls -= 1
        return self.polls <= 0


def test_the_trainer_in_blocks_trains_checkpoints_and_stops_as_step_by_step(exp, tmp_path):
    """An epoch on a graph of 3 steps a run equals one on a graph of one (loss, accuracy,
    weights; checkpoints due every 5 steps, at the blocks' ends); a stop comes after a
    block, at the step its checkpoint holds, and the run resumes there on the one-step
    graph, pauses (for a switch within the epoch) and goes on, as if uninterrupted.
    On one device (the test above checks a block on a split)."""
    # one graph of each block size, built once: every trainer opens a session of its own
    # on it (fresh variables), as a new run would on a graph built anew
    graphs = {steps_per_run: graph_of(exp, steps_per_run, Placement())
              for steps_per_run in (1, 3)}

    def trainer(steps_per_run, folder, stop=None):
        return Trainer(graphs[steps_per_run], exp, str(folder), seed=7,
                       session_config=harness.session_config(), checkpoint_every=5,
                       log=lambda line: None, stop=stop)

    runs = {}
    for steps_per_run in (1, 3):
        folder = tmp_path / ("k%d" % steps_per_run)
        run = trainer(steps_per_run, folder)
        run.initialise(resume=False)
        stats = run.train_epoch(0, 1)
        runs[steps_per_run] = (stats, weights(run.graph, run.session),
                               tf.train.get_checkpoint_state(str(folder))
                               .all_model_checkpoint_paths)
        run.close()
    (alone, weights_1, checkpoints_1), (blocked, weights_3, checkpoints_3) = runs[1], runs[3]
    total = run.steps_per_epoch
    assert blocked.steps == alone.steps == total
    assert (blocked.loss, blocked.train_accuracy) == (alone.loss, alone.train_accuracy)
    for a, b in zip(weights_3, weights_1):
        np.testing.assert_array_equal(a, b)
    # the blocks' ends (test above); a checkpoint at the first end at or past each multiple
    # of 5, and the epoch's at its end; the saver keeps the last 3
    ends = [0]
    while ends[-1] < total:
        ends.append(ends[-1] + block_size(ends[-1], total, 3, traced_steps(0, total)))
    due = sorted({min(e for e in ends if e >= m) for m in range(5, total, 5)} | {total})
    assert [int(p.rsplit("-", 1)[1]) for p in checkpoints_3] == due[-3:]
    assert [int(p.rsplit("-", 1)[1]) for p in checkpoints_1] == list(range(5, total + 1, 5))[-3:]

    # the stop is polled after each block: the 4th poll's block is one of 3
    polls = 4
    assert ends[polls] - ends[polls - 1] == 3
    folder = tmp_path / "stopped"
    run = trainer(3, folder, stop=StopAfter(polls))
    run.initialise(resume=False)
    partials = {}
    with pytest.raises(Stopped) as stopped:
        run.train_epoch(0, 1, before_checkpoint=lambda step, *sums: partials.update(
            {step: sums}))
    run.close()
    assert stopped.value.step == ends[polls]
    assert tf.train.latest_checkpoint(str(folder)).endswith("-%d" % stopped.value.step)
    # a sum at each checkpoint within the epoch: those due every 5 steps, and the stop's
    assert sorted(partials) == sorted({e for e in due if e < ends[polls]} | {ends[polls]})
    resumed = trainer(1, folder)
    resumed.initialise(resume=True)
    assert resumed.step == stopped.value.step
    # resumed with the sums at its checkpoint, then paused after 2 more steps with a
    # checkpoint and the sums there, and gone on from them (as the plan switched to would):
    # the epoch's loss and accuracy count every step, as the uninterrupted epoch's do
    with pytest.raises(Paused) as paused:
        resumed.train_epoch(0, 1, carried=partials[stopped.value.step], pause=StopAfter(2),
                            before_checkpoint=lambda step, *sums: partials.update(
                                {step: sums}))
    assert paused.value.step == stopped.value.step + 2 == resumed.step
    part = paused.value.stats   # the 2 steps this trainer ran of the epoch
    assert (part.epoch, part.steps, part.val_accuracy) == (0, 2, None)
    assert tf.train.latest_checkpoint(str(folder)).endswith("-%d" % paused.value.step)
    polls = []
    whole = resumed.train_epoch(0, 1, carried=partials[paused.value.step],
                                pause=lambda left, *_: polls.append((resumed.step, left)))
    assert whole.steps == total - paused.value.step
    # polled after every step that leaves enough of the epoch to measure
    assert polls == [(step, total - step) for step in
                     range(paused.value.step + 1, total - MEASURED_STEPS + 1)]
    assert whole.train_accuracy == alone.train_accuracy
    assert whole.loss == pytest.approx(alone.loss, rel=1e-6)   # float32 sums in two parts
    for a, b in zip(weights(resumed.graph, resumed.session), weights_1):
        np.testing.assert_array_equal(a, b)
    resumed.close()

    # a stop in the epoch's last block: the epoch is whole, so it is recorded (before_save,
    # without validation) before its checkpoint
    folder = tmp_path / "stopped_last"
    run = trainer(3, folder, stop=StopAfter(len(ends) - 1))
    run.initialise(resume=False)
    recorded = []
    with pytest.raises(Stopped) as stopped:
        run.train_epoch(0, 1, before_save=recorded.append)
    run.close()
    assert stopped.value.step == total
    assert [(r.steps, r.train_accuracy, r.val_accuracy) for r in recorded] == [
        (total, alone.train_accuracy, None)]


def test_a_yielded_field_look_trains_as_a_graph_of_that_strength(exp, tmp_path):
    """An epoch drawing half the field look (``look_strength=0.5``, fed to every block and
    traced step) equals one on a one-step graph whose look is half as strong, and differs
    from the whole look's."""
    bands = exp.bands
    look = Augmentation(flips=True, spectral_shift=2.0, spectral_gain=0.4,
                        band_offset=(0.0,) * bands, band_scale=(1.0,) * bands)
    half = dataclasses.replace(look, spectral_shift=1.0, spectral_gain=0.2)
    config = model_config("cnn2d", 5, bands, exp.n_classes, width=4)

    def epoch(augmentation, look_strength, folder, steps_per_run=1):
        graph = TrainingGraph(config, SPLIT, BATCH, exp.scene.labels.shape, "adam", 1e-3,
                              seed=1, recipe=Recipe(augmentation=augmentation),
                              steps_per_run=steps_per_run)
        run = Trainer(graph, exp, str(tmp_path / folder), seed=7,
                      session_config=harness.session_config(), log=lambda line: None)
        run.initialise(resume=False)
        stats = run.train_epoch(0, 1, look_strength=look_strength)
        values = weights(run.graph, run.session)
        run.close()
        return (stats.loss, stats.train_accuracy), values

    fed, fed_weights = epoch(look, 0.5, "fed", steps_per_run=3)
    built, built_weights = epoch(half, None, "built")
    whole, whole_weights = epoch(look, None, "whole")
    assert fed == built and fed != whole
    for a, b in zip(fed_weights, built_weights):
        np.testing.assert_array_equal(a, b)
    assert not all(np.array_equal(a, b) for a, b in zip(fed_weights, whole_weights))
