"""Layers refuse what they cannot compute right, each in one line (hmp.errors.InvalidInput)
naming the layer and what it was given, before anything is lowered."""

import numpy as np
import pytest

import harness
from hmp import layers
from hmp.compat import import_mesh_tensorflow
from hmp.errors import InvalidInput

mtf = import_mesh_tensorflow()
D = mtf.Dimension
MAP = [D("batch", 2), D("h", 6), D("w", 6), D("chan", 3)]           # [batch, h, w, bands]
VOLUME = [D("batch", 2), D("d", 5), D("h", 5), D("w", 5), D("chan", 1)]
TO_VOLUME = (": a [batch, h, w, bands] patch is the volume [batch, bands, h, w, 1] "
             "(models.cnn3d.to_volume)")

REFUSED = {
    # a 4-D map into a 3-D layer: the batch would be the depth (samples mixed)
    "conv3d_of_a_map": (MAP, lambda x: layers.conv3d(x, D("f", 2)),
                        "conv3d/conv: a 3-D convolution needs [batch..., depth, height, "
                        "width, chan]; got 4 dimensions [batch, h, w, chan]" + TO_VOLUME),
    "max_pool3d_of_a_map": (MAP, layers.max_pool3d,
                            "max_pool: a 3-D pool needs [batch..., depth, height, width, "
                            "chan]; got 4 dimensions [batch, h, w, chan]" + TO_VOLUME),
    "conv2d_of_one_image": (MAP[1:], lambda x: layers.conv2d(x, D("f", 2)),
                            "conv2d/conv: a 2-D convolution needs [batch..., height, width, "
                            "chan]; got 3 dimensions [h, w, chan]"),
    "avg_pool2d_of_one_image": (MAP[1:], layers.avg_pool2d,
                                "avg_pool: a 2-D pool needs [batch..., height, width, chan]; "
                                "got 3 dimensions [h, w, chan]"),
    # filter sizes, windows and strides: one whole number >= 1 a spatial dim, or one
    "conv2d_stride_0": (MAP, lambda x: layers.conv2d(x, D("f", 2), strides=(0, 1)),
                        "conv2d/conv: strides (0, 1): an entry must be a whole number >= 1, "
                        "got 0"),
    "conv3d_two_strides": (VOLUME, lambda x: layers.conv3d(x, D("f", 2), strides=(2, 2)),
                           "conv3d/conv: strides (2, 2) must be 3 whole numbers >= 1"),
    "conv2d_three_sizes": (MAP, lambda x: layers.conv2d(x, D("f", 2), filter_size=(3, 3, 3)),
                           "conv2d: filter_size (3, 3, 3) must be 2 whole numbers >= 1"),
    "conv2d_float_size": (MAP, lambda x: layers.conv2d(x, D("f", 2), filter_size=2.5),
                          "conv2d: filter_size 2.5 must be 2 whole numbers >= 1"),
    "max_pool3d_2d_window": (VOLUME, lambda x: layers.max_pool3d(x, (2, 2)),
                             "max_pool: window (2, 2) must be 3 whole numbers >= 1"),
    "max_pool2d_three_strides": (MAP, lambda x: layers.max_pool2d(x, (2, 2), (2, 2, 2)),
                                 "max_pool: strides (2, 2, 2) must be 2 whole numbers >= 1"),
    # dense: the dims it reduces must be x's, by name and size
    "dense_of_a_missing_dim": (MAP, lambda x: layers.dense(x, D("o", 2),
                                                           reduced_dims=[D("bands", 3)]),
                               "dense: reduced dim bands=3 is not a dim of x "
                               "[batch=2, h=6, w=6, chan=3]"),
    "dense_of_the_map_before_its_pool": (
        MAP, lambda x: layers.dense(layers.max_pool2d(x), D("o", 2), reduced_dims=MAP[1:],
                                    name="logits"),
        "logits: reduced dim h=6 is not a dim of x [batch=2, h=3, w=3, chan=3]"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_refused_in_one_line(case):
    dims, build, message = REFUSED[case]
    _, _, (x,) = harness.mesh_with_inputs(
        [(np.zeros([d.size for d in dims], np.float32), dims)])
    with pytest.raises(InvalidInput) as refused:
        build(x)
    assert str(refused.value) == message
