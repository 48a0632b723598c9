"""Per-pixel spectral baseline: a small dense network on the centre spectrum.

It sees no neighbourhood, so the gap between it and the spatial-spectral CNNs
shows what the patch contributes.
"""

from hmp import layers
from hmp.compat import import_mesh_tensorflow

mtf = import_mesh_tensorflow()

SPLIT_DIMS = ("hidden",)


def logits(x, classes, width=64, training=True):
    """[batch, h, w, bands] -> [batch, classes] from the centre pixel only."""
    _, h, w, _ = x.shape.dims
    centre = mtf.slice(mtf.slice(x, h.size // 2, 1, h.name), w.size // 2, 1, w.name)
    hidden = layers.dense(centre, mtf.Dimension("hidden", 2 * width),
                          reduced_dims=centre.shape.dims[1:], activation=mtf.relu, name="hidden")
    hidden = layers.dense(hidden, mtf.Dimension("hidden2", width), activation=mtf.relu,
                          name="hidden2")
    hidden = layers.dropout(hidden, training, 0.2)
    return layers.dense(hidden, classes, name="logits")
