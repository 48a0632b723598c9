"""Hybrid 3-D -> 2-D network in the style of HybridSN (Roy et al., 2020).

Two 3-D convolutions learn spectral-spatial features; a 2-D convolution then
contracts the remaining spectrum and the 3-D filters together (no reshape:
``conv2d`` takes both as input dims), and dense layers classify. Works best
with few bands (``--pca``). Batch norm follows every convolution (without it
the 3-D stack's activations grow with the spectrum and training could stall
on one class), dropout the hidden dense layer.
"""

from hmp import layers
from hmp.compat import import_mesh_tensorflow
from models.blocks import bn_relu
from models.cnn3d import to_volume

mtf = import_mesh_tensorflow()

SPLIT_DIMS = ("filters1", "filters2")


def logits(x, classes, width=8, training=True):
    """[batch, h, w, bands] -> [batch, classes]."""
    act = bn_relu(training)
    v = to_volume(x)
    v = layers.conv3d(v, mtf.Dimension("filters1", width), filter_size=(7, 3, 3),
                      padding="SAME", activation=act, name="conv3d_1")
    v = layers.conv3d(v, mtf.Dimension("channels1", 2 * width), filter_size=(5, 3, 3),
                      strides=(2, 1, 1), padding="SAME", activation=act, name="conv3d_2")
    spectrum, h, w = v.shape.dims[1:4]
    planes = mtf.transpose(v, [v.shape.dims[0], h, w, spectrum, v.shape.dims[4]])
    f = layers.conv2d(planes, mtf.Dimension("filters2", 8 * width), in_dims=[spectrum,
                      v.shape.dims[4]], activation=act, name="conv2d")
    # The dense layer splits its input (filters2), so its output is whole.
    hidden = layers.dense(f, mtf.Dimension("features", 16 * width),
                          reduced_dims=f.shape.dims[1:], activation=mtf.relu, name="hidden")
    hidden = layers.dropout(hidden, training, 0.5)
    return layers.dense(hidden, classes, name="logits")
