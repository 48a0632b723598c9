"""The training recipe: validation carve-out, class weights, learning-rate schedule,
weight decay, augmentation and best-epoch checkpoints, each against an independent
reference."""

import dataclasses

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

import harness
from hmp import data
from hmp.compat import import_mesh_tensorflow
from hmp.data.field_look import measure_field_look
from hmp.graph.augment import augment, field_look
from hmp.graph.graph import TrainingGraph
from hmp.graph.graph_config import Augmentation, Placement, Projection, Recipe
from hmp.mesh.optimizers import learning_rate_at
from hmp.run import experiment
from hmp.run.look_yield import FIT_ACCURACY
from hmp.run.trainer import BestEpoch, EpochStats, Stopped, Trainer
from hmp.run import training_recipe
from hmp.run.settings import Settings
from hmp.run.training_recipe import class_weights
from models import model_config

mtf = import_mesh_tensorflow()


def test_validation_split_is_stratified_and_disjoint():
    labels = np.repeat(np.arange(0, 5), [40, 100, 30, 2, 50]).reshape(2, 111)
    split = data.stratified_split(labels, train_fraction=0.5, seed=1)
    train, val = data.validation_split(labels, split.train, 0.2, seed=4)
    np.testing.assert_array_equal(np.sort(np.concatenate([train, val])), split.train)
    assert not set(val) & set(train) and not set(val) & set(split.test)
    held = labels.ravel()
    for label, expected in ((1, 10), (2, 3), (3, 0), (4, 5)):   # 20% of 50, 15, 1, 25
        assert (held[val] == label).sum() == expected, label
        assert (held[train] == label).sum() == (held[split.train] == label).sum() - expected
    again, _ = data.validation_split(labels, split.train, 0.2, seed=4)
    np.testing.assert_array_equal(again, train)
    assert len(data.validation_split(labels, split.train, 0.0)[1]) == 0


@pytest.mark.parametrize("power", [0.5, 1.0])
def test_class_weights_are_a_power_of_the_inverse_frequency_with_mean_one(power):
    counts = np.array([2, 0, 40, 958])   # class 1 has no training pixel
    weights = np.array(class_weights(counts, power))
    per_pixel = weights[np.repeat(np.arange(4), counts)]
    assert per_pixel.mean() == pytest.approx(1.0) and weights[1] == 0.0
    assert weights[0] / weights[2] == pytest.approx((40 / 2) ** power)
    assert weights[2] / weights[3] == pytest.approx((958 / 40) ** power)
    if power == 1.0:   # n / (K n_c), K the 3 classes trained on
        np.testing.assert_allclose(weights[[0, 2, 3]], 1000 / (3 * counts[[0, 2, 3]]))


@pytest.mark.parametrize("schedule", ["constant", "cosine", "step"])
def test_learning_rate_schedule_matches_numpy(schedule):
    steps, warmup, base = np.arange(14), 3, 0.1
    with tf.Graph().as_default():
        step = tf.placeholder(tf.int64, [])
        rate = learning_rate_at(step, base, schedule, total_steps=13, warmup_steps=warmup)
        with tf.Session() as session:
            actual = [session.run(rate, {step: s}) for s in steps]
    progress = np.clip((steps - warmup) / 10.0, 0, 1)
    expected = {"constant": np.full(14, base),
                "cosine": 0.5 * base * (1 + np.cos(np.pi * progress)),
                "step": base * np.where(progress < 0.5, 1, np.where(progress < 0.75, 0.1, 0.01))
                }[schedule]
    expected = np.where(steps < warmup, base * (steps + 1) / warmup, expected)
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-8)   # float32 cos


def _augmented(x, layout, training, augmentation=Augmentation(flips=True), as_tensor=True,
               look_strength=1.0):
    """``augment`` (flips and rotations unless told) of the patches ``x`` on ``layout``;
    ``training`` and ``look_strength`` given as mtf scalars, or (``as_tensor=False``) as
    Python numbers."""
    harness.reset_graph()
    graph = mtf.Graph()
    mesh = mtf.Mesh(graph, "mesh")
    dims = [mtf.Dimension(n, s) for n, s in zip(("batch", "h", "w", "bands"), x.shape)]
    patches = mtf.import_tf_tensor(mesh, tf.constant(x), mtf.Shape(dims))
    mode, strength = ((mtf.import_tf_tensor(mesh, tf.constant(value), mtf.Shape([]))
                       for value in (training, look_strength)) if as_tensor
                      else (training, look_strength))
    out = augment(patches, mode, augmentation, strength)
    impl, lowering = harness.lower(graph, mesh, layout)
    with tf.Session(config=harness.session_config()) as session:
        return session.run(lowering.export_to_tf_tensor(out))


def test_augmentation_is_numpy_symmetries_and_exact_on_an_uneven_split():
    x = np.random.RandomState(0).randn(harness.BATCH, 3, 3, 2).astype(np.float32)
    one = _augmented(x, harness.MeshConfig("", "", ["/cpu:0"], {}), 1.0)
    split = _augmented(x, harness.BATCH_SPLIT, 1.0)        # batch [8, 4]
    np.testing.assert_array_equal(split, one)
    chosen = []
    for sample, out in zip(x, one):
        variants = [np.rot90(np.flip(sample, 1) if k >= 4 else sample, k % 4)
                    for k in range(8)]
        matches = [k for k, v in enumerate(variants) if np.array_equal(v, out)]
        assert matches, "sample is no symmetry of its patch"
        chosen.append(matches[0])
    assert len(set(chosen)) >= 4        # 12 draws of 8 symmetries
    np.testing.assert_array_equal(_augmented(x, harness.BATCH_SPLIT, 0.0), x)
    # a graph that only trains may say so with a number: the same draws
    np.testing.assert_array_equal(_augmented(x, harness.BATCH_SPLIT, 1.0, as_tensor=False),
                                  one)


def _field_look_numpy(raw, shift, gain_terms, augmentation):
    """Each sample's raw spectrum read at band b - shift (np.interp holds the end bands),
    times 1 + a (u0 + u1 cos(pi t) + u2 cos(2 pi t)) / 3."""
    bands = raw.shape[-1]
    t = np.linspace(0, 1, bands)
    out = np.empty_like(raw)
    for i, (s, u) in enumerate(zip(shift, gain_terms)):
        gain = 1 + augmentation.spectral_gain * (u[0] + u[1] * np.cos(np.pi * t)
                                                 + u[2] * np.cos(2 * np.pi * t)) / 3
        out[i] = np.apply_along_axis(
            lambda spectrum: np.interp(np.arange(bands) - s, np.arange(bands), spectrum),
            -1, raw[i]) * gain
    return out


def test_field_look_is_a_shift_and_gain_of_the_raw_spectra_and_exact_on_a_split():
    rng = np.random.RandomState(1)
    offset, scale = rng.rand(6) + 1, rng.rand(6) + 0.5
    look = Augmentation(flips=False, spectral_shift=2.5, spectral_gain=0.6,
                        band_offset=tuple(offset), band_scale=tuple(scale))
    x = rng.randn(harness.BATCH, 3, 3, 6).astype(np.float32)
    shift_draw, gain_draw = rng.rand(harness.BATCH), rng.rand(harness.BATCH, 3)
    with tf.Graph().as_default(), tf.Session() as session:
        looked = session.run(field_look(tf.constant(x), tf.constant(shift_draw, tf.float32),
                                        tf.constant(gain_draw, tf.float32), look))
    expected = _field_look_numpy(x * scale + offset, 2.5 * (2 * shift_draw - 1),
                                 2 * gain_draw - 1, look)
    np.testing.assert_allclose(looked * scale + offset, expected, rtol=1e-5, atol=1e-5)
    one = _augmented(x, harness.MeshConfig("", "", ["/cpu:0"], {}), 1.0, look)
    assert not np.allclose(one, x)
    # the same draws on either split; float32 rounding of x + (looked - x) may differ
    np.testing.assert_allclose(_augmented(x, harness.BATCH_SPLIT, 1.0, look), one, atol=1e-6)
    np.testing.assert_array_equal(_augmented(x, harness.BATCH_SPLIT, 0.0, look), x)
    # a share of the strength, fed at run time: the look of the strengths times it
    with tf.Graph().as_default(), tf.Session() as session:
        share = tf.placeholder(tf.float32, [])
        yielded = session.run(field_look(tf.constant(x), tf.constant(shift_draw, tf.float32),
                                         tf.constant(gain_draw, tf.float32), look, share),
                              {share: 0.25})
    quarter = Augmentation(flips=False, spectral_shift=2.5 / 4, spectral_gain=0.6 / 4)
    expected = _field_look_numpy(x * scale + offset, 2.5 / 4 * (2 * shift_draw - 1),
                                 2 * gain_draw - 1, quarter)
    np.testing.assert_allclose(yielded * scale + offset, expected, rtol=1e-5, atol=1e-5)
    halved = dataclasses.replace(look, spectral_shift=1.25, spectral_gain=0.3)
    np.testing.assert_allclose(
        _augmented(x, harness.BATCH_SPLIT, 1.0, look, look_strength=0.5),
        _augmented(x, harness.MeshConfig("", "", ["/cpu:0"], {}), 1.0, halved), atol=1e-6)


@pytest.fixture(scope="module")
def small_experiment():
    return experiment.prepare(experiment.DataConfig(
        patch_size=3, train_fraction=0.04, pca=4, seed=3, val_fraction=0.25))


def _weights(trainer):
    trainer.session.run(trainer.graph.copy_slices_to_masters)
    return trainer.session.run(tf.trainable_variables())


def test_best_epoch_checkpoint_restores_the_best_weights(small_experiment, tmp_path):
    exp = small_experiment
    assert exp.val is not None and len(exp.val) + len(exp.train) == len(exp.split.train)
    config = model_config("spectral", 3, exp.bands, exp.n_classes, width=4)
    graph = TrainingGraph(config, Placement(), 64, exp.scene.labels.shape, "adam", 1e-2, seed=1)
    trainer = Trainer(graph, exp, str(tmp_path), seed=2, log=lambda line: None)
    trainer.initialise(resume=False)
    steps_per_epoch = exp.steps_per_epoch(64)
    best = BestEpoch(str(tmp_path), steps_per_epoch, patience=2)
    first = trainer.train_epoch(0, 5)
    assert 0 <= first.val_accuracy <= 1
    first.val_accuracy = 0.9
    assert best.update(trainer, first)
    tie = trainer.train_epoch(1, 5)
    tie.val_accuracy = 0.9
    assert best.update(trainer, tie)   # of equal ones the later is kept
    with graph.tf_graph.as_default():
        saved = _weights(trainer)
    for epoch, accuracy in ((2, 0.5), (3, 0.8)):   # worse: not kept
        stats = trainer.train_epoch(epoch, 5)
        stats.val_accuracy = accuracy
        assert not best.update(trainer, stats)
    assert best.should_stop(3) and not best.should_stop(2)
    with graph.tf_graph.as_default():
        assert not all(np.array_equal(a, b) for a, b in zip(_weights(trainer), saved))
        trainer.restore(best.path)
        for restored, value in zip(_weights(trainer), saved):
            np.testing.assert_array_equal(restored, value)
    history = [{"epoch": 0, "val_accuracy": 0.9}, {"epoch": 1, "val_accuracy": 0.9},
               {"epoch": 2, "val_accuracy": 0.5}]
    resumed = BestEpoch(str(tmp_path), steps_per_epoch, 2, history)
    assert (resumed.epoch, resumed.accuracy, resumed.path) == (1, 0.9, best.path)
    assert not resumed.should_stop(2)   # as in the run: patience from the tie's later epoch
    # a stop after epoch 2's checkpoint, before its best one: the weights kept name the epoch
    history[2]["val_accuracy"] = 0.95
    resumed = BestEpoch(str(tmp_path), steps_per_epoch, 2, history)
    assert (resumed.epoch, resumed.accuracy) == (1, 0.9)
    # ... which the resumed run keeps when that epoch is the last (its weights are those
    # it resumes with); not from another step, nor an epoch that is not better
    with graph.tf_graph.as_default():   # as a resume restores: the latest, epoch 3's end
        trainer.restore(tf.train.latest_checkpoint(str(tmp_path)))
    assert trainer.step == 4 * steps_per_epoch
    assert not resumed.catch_up(trainer, history)   # epoch 2 is not the one resumed after
    history.append({"epoch": 3, "val_accuracy": 0.85})
    assert not resumed.catch_up(trainer, history)
    history[3]["val_accuracy"] = 0.9   # a tie: the later is kept
    with graph.tf_graph.as_default():
        last = _weights(trainer)
    assert resumed.catch_up(trainer, history)
    assert (resumed.epoch, resumed.accuracy) == (3, 0.9) and resumed.path != best.path
    assert BestEpoch(str(tmp_path), steps_per_epoch, 2, history).epoch == 3
    assert not resumed.catch_up(trainer, history)   # kept already
    trainer.train_epoch(4, 6)
    with graph.tf_graph.as_default():
        assert not all(np.array_equal(a, b) for a, b in zip(_weights(trainer), last))
        trainer.restore(resumed.path)
        for restored, value in zip(_weights(trainer), last):
            np.testing.assert_array_equal(restored, value)
    # an epoch's validation, checkpoint and best save copy the slices to the masters once
    # (the weights do not change between them); the next epoch's steps call for it anew
    runs, session_run = [], trainer.session.run
    trainer.session.run = lambda fetches, *args, **kwargs: (
        runs.append(fetches), session_run(fetches, *args, **kwargs))[1]
    stats = trainer.train_epoch(4, 6)
    stats.val_accuracy = 1.0
    assert best.update(trainer, stats)
    assert runs.count(graph.copy_slices_to_masters) == 1
    with graph.tf_graph.as_default():
        trained = _weights(trainer)
        trainer.restore(best.path)   # the masters the best save wrote: this epoch's weights
        for restored, value in zip(_weights(trainer), trained):
            np.testing.assert_array_equal(restored, value)
    trainer.close()


def test_a_stop_while_validating_records_the_epoch_without_it(small_experiment, tmp_path):
    """A stop polled during an epoch's validation (after its last step): the epoch is
    recorded (``before_save``) as trained, without validation, then checkpointed, and
    the stop is a training stop at the epoch's end."""
    exp = small_experiment
    config = model_config("spectral", 3, exp.bands, exp.n_classes, width=4)

    def trainer(folder, stop=None):
        graph = TrainingGraph(config, Placement(), 64, exp.scene.labels.shape, "adam", 1e-2,
                              seed=1)
        run = Trainer(graph, exp, str(tmp_path / folder), seed=2, log=lambda line: None,
                      stop=stop)
        run.initialise(resume=False)
        return run

    whole = trainer("whole")
    expected = whole.train_epoch(0, 1)
    whole.close()
    steps = whole.steps_per_epoch
    assert expected.val_accuracy is not None
    polls = iter(range(10 ** 6))   # one a step, then one a batch of validation
    stopping = trainer("stopped", stop=lambda: next(polls) >= steps)
    recorded = []
    with pytest.raises(Stopped) as stopped:
        stopping.train_epoch(0, 1, before_save=recorded.append)
    stopping.close()
    assert (stopped.value.step, stopped.value.classifying) == (steps, False)
    assert tf.train.latest_checkpoint(str(tmp_path / "stopped")).endswith("-%d" % steps)
    assert [(r.steps, r.train_accuracy, r.val_accuracy) for r in recorded] == [
        (steps, expected.train_accuracy, None)]


def test_pca_in_the_graph_classifies_as_the_projected_cube_on_an_uneven_split(
        small_experiment, tmp_path):
    """A graph cutting patches of all scaled bands and projecting them (``Projection``) on a
    batch split (40, 24), restored from a one-device graph on the PCA cube: the same class
    probabilities; while training, the field look reaches its patches before the PCA."""
    exp = small_experiment
    config = model_config("cnn2d", 3, exp.bands, exp.n_classes, width=4)
    look = Augmentation(spectral_shift=4.0, spectral_gain=0.5,
                        band_offset=tuple(exp.preprocessor.scaler.offset),
                        band_scale=tuple(exp.preprocessor.scaler.scale))
    plain = Trainer(TrainingGraph(config, Placement(), 64, exp.scene.labels.shape, seed=1),
                    exp, str(tmp_path / "plain"), log=lambda line: None)
    plain.initialise(resume=False)
    projected = Trainer(TrainingGraph(
        config, Placement("batch:2", "batch:batch", ("/cpu:0", "/cpu:1"), {"batch": [40, 24]}),
        64, exp.scene.labels.shape, seed=1,
        recipe=Recipe(augmentation=look, projection=Projection.of(exp.preprocessor.pca))),
        exp, str(tmp_path / "projected"), session_config=harness.session_config())
    projected.restore(tf.train.latest_checkpoint(str(tmp_path / "plain")))
    assert projected.graph.scene.bands == exp.scene.cube.shape[2] == 100 and exp.bands == 4
    pixels = exp.test.indices[:150]
    expected = plain.probabilities(pixels)
    np.testing.assert_allclose(projected.probabilities(pixels), expected, atol=1e-5)
    assert expected.shape == (1, 150, exp.n_classes) and expected.std() > 0.01
    batch = exp.train.indices[:64]
    feed = projected.graph.feed(batch, exp.train.class_ids[:64])
    losses = [trainer.session.run(trainer.graph.loss, trainer.graph.feed(
        batch, exp.train.class_ids[:64], training=False)) for trainer in (plain, projected)]
    np.testing.assert_allclose(losses[1], losses[0], rtol=1e-5)
    assert abs(projected.session.run(projected.graph.loss, feed) - losses[1]) > 1e-3
    plain.close()
    projected.close()


def test_a_run_that_does_not_fit_its_training_pixels_says_so_in_one_line():
    look = Augmentation(spectral_shift=4.0, spectral_gain=0.5)
    assert EpochStats(59, 0.1, FIT_ACCURACY, 100.0, 1.0).fit_warning(look) is None
    warning = EpochStats(59, 1.2, 0.68, 100.0, 1.0).fit_warning(look)
    assert warning == ("training accuracy 0.680 at epoch 60: the network does not fit its "
                       "training pixels; try more --epochs, or, if the scene's fields do not "
                       "differ as much, weaken the field look below this epoch's "
                       "--spectral_shift=4 --spectral_gain=0.5")
    plain = EpochStats(9, 1.2, 0.5, 100.0, 1.0).fit_warning(Augmentation())
    assert plain.endswith("; try more --epochs or a wider model") and "\n" not in plain


@pytest.mark.parametrize("given, look, yields", [
    ({}, True, True), ({"spectral_shift": "2"}, True, False),
    ({"spectral_gain": "0.3"}, True, False), ({"augment": False}, False, False)])
def test_only_a_measured_field_look_yields(small_experiment, given, look, yields):
    """``Recipe.look_yields``: the field look yields (``hmp.run.look_yield``) only where
    both its strengths were measured (``auto``)."""
    recipe = training_recipe.recipe(Settings.of(**given), small_experiment)
    assert (recipe.augmentation.field_look, recipe.look_yields) == (look, yields)


def test_noaugment_draws_nothing_and_augment_draws_every_kind_asked_for(small_experiment):
    """--noaugment: no flip, brightness factor, noise or field look (the graph's patches
    are the cut ones); --augment: each at its setting."""
    plain = training_recipe.recipe(Settings.of(augment=False), small_experiment).augmentation
    assert plain == Augmentation(flips=False) and not plain.active
    drawn = training_recipe.recipe(Settings.of(brightness=0.2, noise=0.05,
                                               spectral_shift="1", spectral_gain="0.1"),
                                   small_experiment).augmentation
    assert (drawn.flips, drawn.brightness, drawn.noise, drawn.spectral_shift,
            drawn.spectral_gain) == (True, 0.2, 0.05, 1.0, 0.1)


def test_the_field_look_is_measured_on_the_divided_spectra_it_augments():
    """With ``--brightness_norm=on`` the augmentation reads divided spectra, so its
    strength is measured on them (numpy's division here), not on the file's counts.
    (No pixel of this scene is darker than the floor: the floor is tested in test_data_preprocess.)"""
    exp = experiment.prepare(experiment.DataConfig(
        patch_size=3, pca=None, seed=3, synthetic_kind="radiance", brightness_norm="on"))
    look = training_recipe.recipe(Settings.of(), exp).augmentation
    counts = exp.scene.cube.astype(np.float64)
    brightness = counts.mean(axis=-1, keepdims=True)
    floor = 0.25 * np.median(brightness.reshape(-1)[exp.split.train])
    divided = measure_field_look(counts / np.maximum(brightness, floor), exp.scene.labels,
                                 exp.train.indices)
    undivided = measure_field_look(counts, exp.scene.labels, exp.train.indices)
    assert divided.cells > 0
    np.testing.assert_allclose([look.spectral_shift, look.spectral_gain],
                               [divided.spectral_shift, divided.spectral_gain], rtol=1e-6)
    assert abs(undivided.spectral_gain - divided.spectral_gain) > 0.01
