"""A trained seed scored: the weights that score it (its best epoch's, else the last:
:class:`hmp.run.trainer.BestEpoch`), every labelled pixel and every pixel within the
smoothing's context of one classified (each in the 8 symmetries of the square
with ``--tta``), the class probabilities smoothed (``hmp.evaluation.smoothing``;
``--smoothing``: a window, or the one that classifies the validation pixels best;
``--smoothing_guide``: guided by the scene's first principal component), the
test pixels' scores printed (with each class's training pixels, and the classes trained
on of which no test pixel was classified right), and the class map saved as pictures and events.
"""

import dataclasses

import numpy as np

from hmp.evaluation import maps, report, smoothing
from hmp.evaluation.metrics import evaluate
from hmp.evaluation.spectral_prior import patch_means
from hmp.run import events
from hmp.run.experiment import nodata_mask
from hmp.run.trainer import Stopped


@dataclasses.dataclass
class Classified:
    """Class-probability maps [H, W, K] of a scene, zeros but at the ``valid`` pixels
    ([H, W]: classified, with data): the ``mean`` over the patches' symmetries (TTA) and
    the patches ``as_is``, each fused with the run's spectral prior when it has one, and
    that mean as the ``network`` gave it (None without a prior); the ``guide_image``
    [H, W] they are smoothed with (None: the window's mean)."""

    mean: np.ndarray
    as_is: np.ndarray
    valid: np.ndarray
    guide_image: np.ndarray = None
    network: np.ndarray = None

    @classmethod
    def of(cls, exp, pixels, variants, guided=False, prior=None):
        """The maps of ``exp``'s scene from ``variants`` [variants, pixels, K], the class
        probabilities of its ``pixels`` (flat indices), fused with ``prior`` (an
        ``hmp.evaluation.spectral_prior.SpectralPrior``, or None) after their mean, and
        smoothed with ``exp``'s guide if ``guided``."""
        mean, as_is = variants.mean(axis=0), variants[0]
        fused = [mean, as_is]
        if prior is not None:
            means = patch_means(exp.all_bands, pixels)
            fused = [prior.fused(mean, means), prior.fused(as_is, means), mean]
        maps = np.zeros((len(fused), exp.scene.labels.size, exp.n_classes), np.float32)
        maps[:, pixels] = fused
        valid = np.zeros(exp.scene.labels.size, bool)
        valid[pixels] = True
        shape = exp.scene.labels.shape
        maps = maps.reshape(len(fused), *shape, exp.n_classes)
        return cls(maps[0], maps[1], valid.reshape(shape) & ~nodata_mask(exp.scene.cube),
                   exp.guide_image if guided else None,
                   maps[2] if prior is not None else None)

    def smoothed(self, exp, window, as_is=False, network=False):
        """The labelled pixels' probabilities [labelled, K], the mean of the symmetries
        (or the patches as they are, or the ``network``'s mean before the prior) smoothed
        over ``window`` x ``window`` pixels; a test pixel's smoothing reads no output at a
        pixel of the split's training share (``smoothing.apart_from``: they would bring
        their labels into its score)."""
        maps = self.network if network else self.as_is if as_is else self.mean
        flat = smoothing.smooth(maps, window, self.valid, self.guide_image).reshape(
            -1, exp.n_classes)
        if window > 1:
            apart = smoothing.apart_from(self.valid, exp.split.train)
            flat[exp.test.indices] = smoothing.smooth(maps, window, apart, self.guide_image
                                                      ).reshape(-1, exp.n_classes)[exp.test.indices]
        return flat[exp.labelled.indices]

    def choose_window(self, exp, windows=smoothing.WINDOWS):
        """(the window of ``windows`` that classifies ``exp``'s validation pixels best, the
        accuracy of each window; their smoothing reads no training pixel's output); (the
        default window, {}) without validation pixels."""
        if not exp.val:
            return smoothing.DEFAULT_WINDOW, {}
        return smoothing.choose_window(self.mean, smoothing.apart_from(self.valid,
                                                                       exp.train.indices),
                                       exp.val.indices, exp.val.class_ids, windows,
                                       self.guide_image)


def classify(trainer, best, exp, tta, window, guided, prior=None):
    """(:class:`Classified` of ``exp``'s labelled pixels and those within the smoothing's
    context of them (``window``'s, None: the largest window's; twice the radius if
    ``guided``) by the best weights, fused with ``prior`` (None: none), the step training
    ended at): restores ``best``'s checkpoint into ``trainer`` when there is one."""
    step = trainer.step
    if best.path is not None:
        print("the weights of epoch %d (best validation accuracy %.3f) classify"
              % (best.epoch + 1, best.accuracy), flush=True)
        trainer.restore(best.path)
    reach = smoothing.context(window or max(smoothing.WINDOWS), guided)
    pixels = smoothing.neighbourhood(exp.labelled.indices, exp.scene.labels.shape, reach)
    print("classifying the %d labelled pixels (%d test pixels)%s%s%s ..."
          % (len(exp.labelled), len(exp.test),
             " and the %d others within %d of them (--smoothing)"
             % (len(pixels) - len(exp.labelled), reach) if reach else "",
             ", each in the 8 symmetries of the square (--tta)" if tta else "",
             ", fused with the spectral prior (--spectral_prior=%g)" % prior.weight
             if prior is not None else ""), flush=True)
    try:
        probabilities = trainer.probabilities(pixels, tta)
    except Stopped:   # it names the restored weights' step: training ended at ``step``
        raise Stopped(step // trainer.steps_per_epoch, step, classifying=True) from None
    return Classified.of(exp, pixels, probabilities, guided, prior), step


def scores(exp, classified, leakage, tta, window):
    """The test pixels' scores from ``classified`` (their mean over the variants smoothed
    over ``window`` x ``window`` pixels, or the window chosen on the validation pixels
    for None: the class map), and those without the smoothing
    ({"test_without_smoothing": ...}), with ``tta``, of the patches as they are
    ({"test_without_tta": ...}) and, with a spectral prior, of the network alone
    ({"test_without_prior": ...}); prints them. Returns (class map, scores, that dict,
    {"window": the window, "guided": whether guided, "validation_accuracy": {window:
    accuracy} when chosen})."""
    chosen = {}
    if window is None:
        window, accuracy = classified.choose_window(exp)
        chosen = {"validation_accuracy": accuracy}
        print("smoothing over %d x %d pixels%s: %s" % (
            window, window, ", guided" if classified.guide_image is not None else "", (
            "on the %d validation pixels, accuracy %s" % (len(exp.val), ", ".join(
                "%d: %.3f" % item for item in accuracy.items())) if accuracy else
            "no validation pixels to choose on: the default")), flush=True)
    predicted_map, scored = test_scores(exp, classified.smoothed(exp, window))
    print(report.score_table(scored, exp.scene.class_names, leakage, exp.train_counts))
    paired = {}
    for name, flag, active, probabilities in (
            ("smoothing", "--smoothing=1", window > 1,
             lambda: classified.smoothed(exp, 1)),
            ("tta", "--notta", tta, lambda: classified.smoothed(exp, window, as_is=True)),
            ("prior", "--spectral_prior=1", classified.network is not None,
             lambda: classified.smoothed(exp, window, network=True))):
        if active:
            _, plain = test_scores(exp, probabilities())
            print("without %s (%s): OA %.2f, AA %.2f, kappa %.4f"
                  % (name, flag, 100 * plain.overall_accuracy, 100 * plain.average_accuracy,
                     plain.kappa))
            paired["test_without_" + name] = report.scores_dict(
                plain, exp.scene.class_names, exp.train_counts)
    guided = classified.guide_image is not None and window > 1
    return predicted_map, scored, paired, {"window": window, "guided": guided, **chosen}


def training_fit(exp, classified):
    """The share of ``exp``'s training pixels that ``classified`` classifies right, the
    patches as they are and unsmoothed (fused with the spectral prior, when the run has
    one): how well the scoring weights fit what they were
    trained on, without the augmentation and dropout that the epochs' training accuracy
    is measured under. Prints it."""
    probabilities = classified.as_is.reshape(-1, exp.n_classes)[exp.train.indices]
    fit = float(np.mean(probabilities.argmax(axis=1) == exp.train.class_ids))
    print("these weights classify %.1f%% of the %d training pixels right (the patches as "
          "they are, no smoothing)" % (100 * fit, len(exp.train)), flush=True)
    return fit


def test_scores(exp, probabilities):
    """(class map, test scores) of the labelled pixels' class ``probabilities``
    [pixels, K]."""
    class_map = report.prediction_map(exp.scene.labels.shape, exp.labelled.indices,
                                      probabilities.argmax(axis=1))
    return class_map, evaluate(exp.test.class_ids,
                               class_map.ravel()[exp.test.indices] - 1, exp.n_classes)


def save_pictures(model_dir, writer, step, exp, predicted_map, scored):
    """The class map's pictures in ``model_dir`` and the scores and map as events of
    ``writer`` at ``step``; returns the pictures' file names."""
    pictures = report.save_pictures(model_dir, exp.scene, predicted_map, scored)
    events.add_scalars(writer, step, events.test_scalars(scored))
    events.add_image(writer, step, "classification_map",
                     maps.map_with_legend(predicted_map, exp.scene.class_names))
    return pictures
