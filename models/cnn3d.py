"""3-D CNN in the style of Hamida et al. (2018): convolutions over space and spectrum.

The patch becomes a volume [batch, bands, h, w, 1]. Each stage is a 3-D
conv (VALID, so the neighbourhood shrinks) that splits its output filters,
then a 3x1x1 conv with spectral stride 2 that splits its input filters (it
sums them) and halves the spectrum, as Hamida's spectral "pooling"
convolutions do. The first conv also strides the spectrum by 2. Batch norm
follows every convolution. No dropout: it only slowed training (4 epochs of
``tests/programs/test_accuracy.py``: 71% OA at rate 0.5, 85% at 0.2, over 90% without).
"""

from hmp import layers, ops
from hmp.compat import import_mesh_tensorflow
from models.blocks import bn_relu

mtf = import_mesh_tensorflow()

SPLIT_DIMS = ("filters1", "filters2", "hidden")


def to_volume(x):
    """[batch, h, w, bands] -> [batch, bands, h, w, 1] (spectrum as depth)."""
    batch, h, w, bands = x.shape.dims
    x = mtf.transpose(x, [batch, bands, h, w])
    return ops.reshape(x, [batch, bands, h, w, mtf.Dimension("channels0", 1)])


def logits(x, classes, width=16, training=True):
    """[batch, h, w, bands] -> [batch, classes]."""
    act = bn_relu(training)
    v = to_volume(x)
    v = layers.conv3d(v, mtf.Dimension("filters1", width), filter_size=(7, 3, 3),
                      strides=(2, 1, 1), padding="VALID", activation=act, name="conv1")
    v = layers.conv3d(v, mtf.Dimension("channels1", width), filter_size=(3, 1, 1),
                      strides=(2, 1, 1), padding="VALID", activation=act, name="pool1")
    v = layers.conv3d(v, mtf.Dimension("filters2", 2 * width), padding="VALID",
                      activation=act, name="conv2")
    v = layers.conv3d(v, mtf.Dimension("channels2", width), filter_size=(3, 1, 1),
                      strides=(2, 1, 1), padding="VALID", activation=act, name="pool2")
    hidden = layers.dense(v, mtf.Dimension("hidden", 4 * width), reduced_dims=v.shape.dims[1:],
                          activation=mtf.relu, name="hidden")
    return layers.dense(hidden, classes, name="logits")
