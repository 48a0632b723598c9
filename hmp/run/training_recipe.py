"""A seed's training recipe (:class:`hmp.graph.graph_config.Recipe`) from the settings and its
data: the schedule over the run's steps, weight decay, class weights
(``--class_balanced``: :func:`class_weights`), the augmentation with its field look
(spectral shift and gain, measured on the scene when not given:
``hmp.data.field_look``; a measured one yields when the network does not fit:
``hmp.run.look_yield``) and the PCA done in the graph (``--pca_in_graph``).
"""

import numpy as np

from hmp import cli
from hmp.data.field_look import measure_field_look
from hmp.graph.graph_config import Augmentation, Projection, Recipe

# --class_balanced: the power p of each class's loss weight, proportional to n_c ** -p
# (n_c: its training pixels); None: no weights.
CLASS_BALANCING = {"off": None, "sqrt": 0.5, "inverse": 1.0}


def recipe(settings, exp):
    """The training recipe of ``settings`` (a :class:`hmp.run.settings.Settings`) for the
    experiment ``exp`` (schedule over the run, decay, augmentation, loss)."""
    given = settings.recipe
    steps_per_epoch = exp.steps_per_epoch(given.batch_size)
    power = CLASS_BALANCING[given.class_balanced]
    weights = None if power is None else class_weights(exp.train_counts, power)
    look, measured = _field_look(settings, exp)
    augmentation = (Augmentation(True, given.brightness, given.noise, **look) if given.augment
                    else Augmentation(flips=False))   # --noaugment: nothing drawn
    return Recipe(weight_decay=given.weight_decay, schedule=given.schedule,
                  warmup_steps=int(round(given.warmup_epochs * steps_per_epoch)),
                  total_steps=given.epochs * steps_per_epoch,
                  augmentation=augmentation, class_weights=weights,
                  projection=_projection(settings, exp),
                  look_yields=augmentation.field_look and measured)


def class_weights(counts, power):
    """One loss weight per class from its training pixels ``counts``: proportional to
    ``count ** -power`` (0 for a class without any), scaled so that the mean weight
    over the training pixels is 1 (the loss keeps its scale). Power 1 gives
    n / (K n_c), the inverse frequency; 0.5 its square root, which lifts a class of 2
    pixels among 1000 of 16 classes about 6-fold against the mean rather than 31-fold."""
    counts = np.asarray(counts, np.float64)
    weights = np.zeros_like(counts)
    present = counts > 0
    weights[present] = counts[present] ** -power
    return tuple(float(w) for w in weights * (counts.sum() / (weights @ counts)))


def _projection(settings, exp):
    """The PCA done in the graph (--pca_in_graph), or None."""
    if settings.recipe.pca_in_graph and exp.preprocessor.pca is not None:
        return Projection.of(exp.preprocessor.pca)
    return None


def _field_look(settings, exp):
    """(the field-look augmentation's settings, whether both strengths are measured: the
    look may yield); on with --augment. It works on all the bands before their scaling
    (divided by brightness where that is on), so after PCA only with --pca_in_graph."""
    names = ("spectral_shift", "spectral_gain")
    strengths = {name: settings.field_look_strength(name) for name in names}
    measured = all(value is None for value in strengths.values())
    if not settings.recipe.augment or strengths == {name: 0.0 for name in names}:
        return {}, measured
    if exp.preprocessor.pca is not None and not settings.recipe.pca_in_graph:
        given = [name for name in names if settings.chosen(name)]
        if given:
            raise cli.UsageError("--%s=%s: the field-look augmentation needs all bands, "
                                 "but this run keeps %d PCA components (give --pca=0 or "
                                 "--pca_in_graph)"
                                 % (given[0], settings.value(given[0]), exp.bands))
        print("field-look augmentation off: it needs all bands, and this model keeps %d "
              "PCA components (--pca_in_graph projects after it)" % exp.bands, flush=True)
        return {}, measured
    if None in strengths.values():
        found = measure_field_look(exp.scene.cube, exp.scene.labels, exp.train.indices,
                                   spectra_of=exp.preprocessor.divided)
        print(found.describe(), flush=True)
        strengths = {name: getattr(found, name) if value is None else value
                     for name, value in strengths.items()}
    scaler = exp.preprocessor.scaler
    return {**strengths,
            "band_offset": tuple(map(float, scaler.offset)),
            "band_scale": tuple(map(float, scaler.scale))}, measured
