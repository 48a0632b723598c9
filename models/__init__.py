"""HSI classification models built only from ``hmp.layers``.

Each model module has ``logits(x, classes, width)``: ``x`` is a batch of
patches ``[batch, h, w, bands]`` (an mtf Tensor), ``classes`` the output
Dimension; it returns ``[batch, classes]`` logits. ``SPLIT_DIMS`` names the
filter dimensions a plan may split over the ``model`` mesh axis.
"""

import importlib

MODEL_NAMES = ("cnn2d", "cnn3d", "hybrid", "spectral")


def get_model(name):
    """The model module called ``name``."""
    if name not in MODEL_NAMES:
        raise ValueError("model %r is not known; choose one of %s"
                         % (name, ", ".join(MODEL_NAMES)))
    return importlib.import_module("models." + name)
