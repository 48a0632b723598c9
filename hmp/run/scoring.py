"""A trained seed scored: the weights that score it (its best epoch's, else the last:
:class:`hmp.run.trainer.BestEpoch`), every labelled pixel classified (each in the 8
symmetries of the square with ``--tta``), the test pixels' scores printed (with each
class's training pixels, and the classes trained on but never found), and the
class map saved as pictures and events.
"""

from hmp.evaluation import maps, report
from hmp.evaluation.metrics import evaluate
from hmp.run import events


def classify(trainer, best, exp, tta):
    """(the class probabilities [variants, labelled pixels, K] of ``exp``'s labelled
    pixels by the best weights, the step training ended at): restores ``best``'s
    checkpoint into ``trainer`` when there is one."""
    step = trainer.step
    if best.path is not None:
        print("the weights of epoch %d (best validation accuracy %.3f) classify"
              % (best.epoch + 1, best.accuracy), flush=True)
        trainer.restore(best.path)
    print("classifying the %d labelled pixels (%d test pixels)%s ..."
          % (len(exp.labelled), len(exp.test),
             ", each in the 8 symmetries of the square (--tta)" if tta else ""), flush=True)
    return trainer.probabilities(exp.labelled, tta), step


def scores(exp, variants, leakage, tta):
    """The test pixels' scores from the labelled pixels' class probabilities
    ``variants`` [variants, pixels, K] (their mean: the class map) and, with ``tta``,
    those of the patches as they are ({"test_without_tta": ...}); prints both.
    Returns (class map, scores, that dict)."""
    predicted_map, scored = _classified(exp, variants.mean(axis=0))
    print(report.score_table(scored, exp.scene.class_names, leakage, exp.train_counts))
    if not tta:
        return predicted_map, scored, {}
    _, plain = _classified(exp, variants[0])
    print("without --tta (the patches as they are): OA %.2f, AA %.2f, kappa %.4f"
          % (100 * plain.overall_accuracy, 100 * plain.average_accuracy, plain.kappa))
    return predicted_map, scored, {
        "test_without_tta": report.scores_dict(plain, exp.scene.class_names,
                                               exp.train_counts)}


def _classified(exp, probabilities):
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
