"""SSRN-style spectral-spatial residual network (Zhong et al., 2018).

The patch becomes a volume [batch, bands, h, w, 1]. A 7x1x1 convolution
(spectral stride 2) makes ``width`` feature volumes; two spectral residual
blocks (7x1x1 convolutions) refine them; a 1x1 convolution over the whole
remaining spectrum and the volumes turns them into ``8 x width`` feature
planes; two spatial residual blocks (3x3 convolutions) follow, then global
average pooling, dropout and the classifier. Batch norm follows every
convolution. Each residual block's inner dimension is split over the
model axis (output split, then input split: one all-reduce per block).
"""

from hmp import layers
from hmp.compat import import_mesh_tensorflow
from models.blocks import bn_relu, residual_block
from models.cnn3d import to_volume

mtf = import_mesh_tensorflow()

SPLIT_DIMS = ("spectral1", "spectral2", "spatial1", "spatial2")


def logits(x, classes, width=12, training=True):
    """[batch, h, w, bands] -> [batch, classes]."""
    v = to_volume(x)
    v = layers.conv3d(v, mtf.Dimension("volumes", width), filter_size=(7, 1, 1),
                      strides=(2, 1, 1), padding="VALID", activation=bn_relu(training),
                      name="spectral_in")
    for i in (1, 2):
        v = residual_block(v, mtf.Dimension("spectral%d" % i, width), training,
                           layers.conv3d, "spectral_block%d" % i, filter_size=(7, 1, 1))
    batch, spectrum, h, w, volumes = v.shape.dims
    planes = mtf.transpose(v, [batch, h, w, spectrum, volumes])
    f = layers.conv2d(planes, mtf.Dimension("planes", 8 * width), filter_size=(1, 1),
                      in_dims=[spectrum, volumes], activation=bn_relu(training),
                      name="spectral_out")
    for i in (1, 2):
        f = residual_block(f, mtf.Dimension("spatial%d" % i, 2 * width), training,
                           layers.conv2d, "spatial_block%d" % i)
    f = layers.avg_pool2d(f, (h.size, w.size))
    f = layers.dropout(f, training, 0.5)
    return layers.dense(f, classes, reduced_dims=f.shape.dims[1:], name="logits")
