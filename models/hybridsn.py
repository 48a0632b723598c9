"""HybridSN (Roy et al., 2020) as designed: PCA, three 3-D convolutions, one 2-D.

On 45 PCA components (its default preprocessing: ``--pca`` unless given; the paper
used 30 on Indian Pines, which here scored 1.1 points lower on the Indian Pines map's
disjoint split over eight seeds, docs/benchmarks.md),
three VALID 3-D convolutions (7x3x3, 5x3x3, 3x3x3; 8, 16, 32 filters at
width 8) learn spectral-spatial features, a 3x3 2-D convolution contracts
the remaining spectrum with the 3-D filters, and two dense layers with
dropout 0.4 classify. Needs patches of at least 9x9. Batch norm follows
every convolution. Split dimensions alternate output and input splits.
"""

from hmp import layers
from hmp.compat import import_mesh_tensorflow
from models.blocks import bn_relu
from models.cnn3d import to_volume

mtf = import_mesh_tensorflow()

SPLIT_DIMS = ("filters1", "filters3", "hidden")
RECIPE = {"pca": 45}


def logits(x, classes, width=8, training=True):
    """[batch, h, w, bands] -> [batch, classes]."""
    v = to_volume(x)
    for i, (dim, filters, size) in enumerate((("filters1", width, (7, 3, 3)),
                                              ("channels2", 2 * width, (5, 3, 3)),
                                              ("filters3", 4 * width, (3, 3, 3))), 1):
        v = layers.conv3d(v, mtf.Dimension(dim, filters), filter_size=size, padding="VALID",
                          activation=bn_relu(training), name="conv3d_%d" % i)
    batch, spectrum, h, w, filters = v.shape.dims
    planes = mtf.transpose(v, [batch, h, w, spectrum, filters])
    f = layers.conv2d(planes, mtf.Dimension("channels4", 8 * width), padding="VALID",
                      in_dims=[spectrum, filters], activation=bn_relu(training), name="conv2d")
    hidden = layers.dense(f, mtf.Dimension("hidden", 32 * width), reduced_dims=f.shape.dims[1:],
                          activation=mtf.relu, name="hidden1")
    hidden = layers.dropout(hidden, training, 0.4)
    hidden = layers.dense(hidden, mtf.Dimension("features", 16 * width), activation=mtf.relu,
                          name="hidden2")
    hidden = layers.dropout(hidden, training, 0.4)
    return layers.dense(hidden, classes, name="logits")
