"""One seed's data: the scene loaded, split and preprocessed (``hmp.run.experiment``)
for that seed, with its split's leakage and its validation share, said in a few lines
before any training.
``--pca`` not given: the model's ``RECIPE`` value (``Settings.pca_components``).
"""

import dataclasses

from hmp import data
from hmp.run import experiment


def load_experiment(settings, get_model, seed):
    """(the scene loaded, split and preprocessed for seed ``seed``, its split's leakage,
    its DataConfig); says what it holds (and writes nothing). ``get_model``: the
    application's model lookup (the model's default --pca)."""
    given = settings.data
    print("loading %s ..." % given.dataset, flush=True)
    data_config = dataclasses.replace(given, seed=seed, pca=settings.pca_components(get_model))
    pca_given = given.pca is not None
    with settings.blame(*settings.scene_flags(), *(("pca",) if pca_given else ()),
                        also=(OSError,)):
        try:
            exp = experiment.prepare(data_config)
        except data.TooFewBands as error:
            if pca_given:
                raise
            raise data.TooFewBands("%s (%d: the default of --model=%s; give --pca=N with "
                                   "fewer components, or --pca=0 for all bands)"
                                   % (error, data_config.pca, settings.model.name)) from None
    patch = given.patch_size
    leakage = data.split_leakage(exp.split, patch)
    bands = exp.scene.cube.shape[2]
    seen = "" if exp.bands == bands else " (the model sees %d PCA components)" % exp.bands
    bad = exp.scene.raster.bad_bands
    if bad:
        seen += " (band%s %s left out: the header's bad band list)" % (
            "s" if len(bad) > 1 else "", ", ".join(map(str, bad)))
    print("%s: %dx%d pixels, %d bands%s, %d classes; %d training / %d test pixels"
          % (exp.scene.name, *exp.scene.labels.shape, bands, seen, exp.n_classes,
             len(exp.split.train), len(exp.test)), flush=True)   # the split's, as split.npz
    empty = exp.unlabelled_classes
    if len(empty) == 1:
        print("class %d has no labelled pixel: the model keeps an output for it, which "
              "nothing trains or scores (number the classes 1..K without gaps to leave it "
              "out)" % empty[0], flush=True)
    elif empty:
        print("classes %s have no labelled pixel: the model keeps an output for each, which "
              "nothing trains or scores (number the classes 1..K without gaps to leave them "
              "out)" % ", ".join(map(str, empty)), flush=True)
    print("split: %s; leakage %.1f%% (test pixels with a training pixel in their %dx%d "
          "patch)" % (exp.split.description, 100 * leakage, patch, patch), flush=True)
    brightness = experiment.describe_brightness(exp, data_config)
    if brightness:
        print(brightness, flush=True)
    validation = experiment.describe_validation(exp, data_config)
    if validation:
        print(validation, flush=True)
    if exp.nodata_pixels:
        print(experiment.nodata_summary(exp.nodata_pixels, exp.scene.raster), flush=True)
    # data.json keeps what the run did (on or off), not auto: a resumed run, baselines and
    # other tools prepare the same pixels whatever the scene's units are said to be later
    divided = exp.preprocessor.brightness_norm is not None
    return exp, leakage, dataclasses.replace(data_config,
                                             brightness_norm="on" if divided else "off")

