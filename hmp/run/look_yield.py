"""The measured field look yields when the network does not fit its training pixels.

The field look (``hmp.graph.augment.field_look``) measured on the training pixels
(``hmp.data.field_look``) can be stronger than a scene's classes allow: on the Pavia U
map it shifts spectra by up to 6 bands, and the network fits 88% of its training
pixels after 4000 steps where it fits 98% without it (docs/benchmarks.md). So a run
whose strengths were measured (``Recipe.look_yields``) watches its training accuracy:
after each epoch that ends a share ``YIELD_AT`` of the run (a quarter, three eighths,
half, five eighths), when the epoch's training accuracy is below
``FIT_ACCURACY``, the strength drawn (a share of the measured shift and gain, fed to
the graph: ``TrainingGraph.kept_steps(count, look_strength)``) is halved. The last
three eighths of the run train on the strength then reached. Strengths given as numbers
(``--spectral_shift``, ``--spectral_gain``) never yield.

Each epoch's record (history.json) holds the strength it trained with, so a resumed
run goes on with the strength the run had reached.
"""

import math

# Training accuracy (augmented patches, dropout on) below which an epoch did not fit its
# training pixels: the look yields after a checked epoch; a run whose last epoch stays
# below says so (``hmp.run.trainer.EpochStats.fit_warning``).
FIT_ACCURACY = 0.9
YIELD_AT = (1 / 4, 3 / 8, 1 / 2, 5 / 8)   # shares of the run after which the fit is checked
FACTOR = 0.5                             # the strength kept at each yield


def checked_epochs(epochs):
    """The 0-based epochs of a run of ``epochs`` after which the fit is checked: those
    that end each share ``YIELD_AT`` of it, the last epoch never (fewer in a short run,
    where shares share an epoch)."""
    return sorted({max(1, math.ceil(share * epochs)) - 1 for share in YIELD_AT}
                  - {epochs - 1})


class LookYield:
    """The strength of the field look a run of ``epochs`` draws next (``strength``: a share
    of the measured one; None where it does not yield: no measured field look,
    ``yields`` false), from the epochs recorded (``history``: dicts of
    :class:`hmp.run.trainer.EpochStats`, as history.json keeps them)."""

    def __init__(self, epochs, yields, history=()):
        self.epochs = epochs
        self.strength = 1.0 if yields else None
        for record in history:
            if self.strength is not None and record.get("look_strength") is not None:
                self.strength = record["look_strength"]
                self.after_epoch(record["epoch"], record["train_accuracy"])

    def after_epoch(self, epoch, train_accuracy):
        """The strength after epoch ``epoch`` (0-based) trained at ``train_accuracy``:
        halved where the epoch is checked and the accuracy below ``FIT_ACCURACY``.
        Returns a line saying so, or None (it kept its strength)."""
        if (self.strength is None or epoch not in checked_epochs(self.epochs)
                or train_accuracy >= FIT_ACCURACY):
            return None
        self.strength *= FACTOR
        return ("training accuracy %.3f after epoch %d of %d is below %.2f: the measured "
                "field look yields to %g of its strength"
                % (train_accuracy, epoch + 1, self.epochs, FIT_ACCURACY, self.strength))
