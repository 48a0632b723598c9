"""2-D CNN: the spectral bands (or PCA components) are the input channels.

Two filter-split blocks (3x3 convs) with a 2x2 max pool between them, then a
split hidden dense layer. Every split dimension alternates "output split" and
"input split", so each costs one all-reduce per step. Batch norm follows every
convolution, dropout the hidden dense layer.
"""

from hmp import layers
from hmp.compat import import_mesh_tensorflow
from models.blocks import bn_relu

mtf = import_mesh_tensorflow()

SPLIT_DIMS = ("filters1", "filters2", "hidden")


def logits(x, classes, width=32, training=True):
    """[batch, h, w, bands] -> [batch, classes]."""
    h = layers.filter_split_block(x, mtf.Dimension("filters1", 2 * width),
                                  mtf.Dimension("channels1", width),
                                  activation=bn_relu(training), name="block1")
    h = layers.max_pool2d(h, (2, 2), padding="SAME")
    h = layers.filter_split_block(h, mtf.Dimension("filters2", 2 * width),
                                  mtf.Dimension("channels2", width),
                                  activation=bn_relu(training), name="block2")
    hidden = layers.dense(h, mtf.Dimension("hidden", 4 * width), reduced_dims=h.shape.dims[1:],
                          activation=mtf.relu, name="hidden")
    hidden = layers.dropout(hidden, training, 0.5)
    return layers.dense(hidden, classes, name="logits")
