"""Patch augmentation inside the graph, per sample, seeded and exact on any split.

The patches are cut on the devices (``hmp.run.scene_input``), so they are
augmented there too, right after the cut: each sample gets one of the 8
symmetries of the square (a 90-degree rotation, with or without a
left-right flip), a brightness factor and, optionally, Gaussian spectral
noise. Every draw is a Mesh-TF random tensor, drawn whole and sliced per
device (``HeteroMeshImpl.random``), so an uneven batch split augments
exactly as one device does, and a graph seed (``--seed``) repeats it.
``training`` (hmp.run.graph's switch, 0.0 at inference) turns it all off.
"""

import dataclasses

import tensorflow.compat.v1 as tf

from hmp.compat import import_mesh_tensorflow

mtf = import_mesh_tensorflow()

SYMMETRIES = 8   # rotations by 0, 90, 180, 270 degrees, each with and without a flip


@dataclasses.dataclass(frozen=True)
class Augmentation:
    """What to draw per sample: ``flips`` (the 8 symmetries), ``brightness`` (a
    factor uniform in [1 - b, 1 + b]) and ``noise`` (the standard deviation of
    Gaussian noise added to every value of the standardised patch)."""

    flips: bool = True
    brightness: float = 0.0
    noise: float = 0.0

    @property
    def active(self):
        return self.flips or self.brightness > 0 or self.noise > 0


def symmetries(patches):
    """The 8 symmetries of ``patches`` [n, p, p, bands], stacked: [8, n, p, p, bands].

    Symmetry ``k`` rotates by ``k % 4`` quarter turns counter-clockwise, after a
    left-right flip when ``k >= 4`` (``numpy.rot90(numpy.flip(patch, 1), k % 4)``).
    """
    variants = []
    for turned in (patches, tf.reverse(patches, [2])):
        for _ in range(4):
            variants.append(turned)
            # A quarter turn counter-clockwise (tf.image.rot90 would colocate an assert
            # with the patches' gather, which sits with the host's shared cube).
            turned = tf.reverse(tf.transpose(turned, [0, 2, 1, 3]), [1])
    return tf.stack(variants)


def _apply_symmetries(patches, draw, training):
    """Sample i of ``patches`` [n, p, p, bands] in symmetry floor(draw[i] * 8) (0 unless training)."""
    k = tf.cast(tf.floor(draw * SYMMETRIES * training), tf.int32)
    k = tf.minimum(k, SYMMETRIES - 1)
    return tf.gather_nd(symmetries(patches),
                        tf.stack([k, tf.range(tf.shape(patches)[0])], axis=1))


def augment(x, training, augmentation):
    """``x`` [batch, h, w, bands] (mtf patches) augmented per sample while training.

    ``training``: an mtf scalar, 1.0 while training and 0.0 at inference.
    """
    batch = x.shape.dims[0]
    if augmentation.flips:
        draw = mtf.random_uniform(x.mesh, mtf.Shape([batch]), name="symmetry_draw")
        x = mtf.slicewise(_apply_symmetries, [x, draw, training], output_shape=x.shape,
                          output_dtype=x.dtype, splittable_dims=[batch], name="symmetry")
    if augmentation.brightness > 0:
        draw = mtf.random_uniform(x.mesh, mtf.Shape([batch]), name="brightness_draw")
        x *= 1.0 + training * augmentation.brightness * (2.0 * draw - 1.0)
    if augmentation.noise > 0:
        x += training * augmentation.noise * mtf.random_normal(x.mesh, x.shape,
                                                               name="spectral_noise")
    return x
