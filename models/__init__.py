"""HSI classification models built only from ``hmp.layers``.

Each model module has ``logits(x, classes, width)``: ``x`` is a batch of
patches ``[batch, h, w, bands]`` (an mtf Tensor), ``classes`` the output
Dimension; it returns ``[batch, classes]`` logits. ``SPLIT_DIMS`` names the
filter dimensions a plan may split over the ``model`` mesh axis.
"""

import importlib

from hmp.errors import InvalidInput
from hmp.graph.graph_config import ModelConfig, check_model
from hmp.run.settings import model_recipe

MODEL_NAMES = ("cnn2d", "cnn3d", "hybrid", "hybridsn", "spectral", "ssrn")


def get_model(name):
    """The model module called ``name``: a built-in one, or any importable
    module path (``mypackage.mymodel``) defining ``logits`` and ``SPLIT_DIMS``."""
    if name in MODEL_NAMES:
        return importlib.import_module("models." + name)
    if "." in name:
        try:
            module = importlib.import_module(name)
        except ImportError as error:
            raise InvalidInput("model module %r cannot be imported: %s" % (name, error)) from None
        return check_model(module, name)
    raise InvalidInput("model %r is not known; choose one of %s, or give a module path"
                     % (name, ", ".join(MODEL_NAMES)))


def recipe(name):
    """Model ``name``'s own defaults of ``hmp.train`` flags: its ``RECIPE`` dict (flag
    name: value, e.g. ``{"pca": 45}``), or {} if it has none."""
    return model_recipe(get_model(name))


def model_config(name, patch, bands, n_classes, width=0, batch_norm="sync",
                 precision="float32"):
    """The ``hmp.graph.graph_config.ModelConfig`` of model ``name`` (``get_model``) for
    ``patch x patch x bands`` patches and ``n_classes`` classes, its batch norms
    training with ``batch_norm`` statistics (``hmp.layers.BATCH_STATISTICS``),
    computing in ``precision`` (``hmp.graph.graph_config.PRECISIONS``)."""
    return ModelConfig(name, patch, bands, n_classes, width, batch_norm, precision,
                       model=get_model(name))
