"""Patch augmentation inside the graph, per sample, seeded and exact on any split.

The patches are cut on the devices (``hmp.graph.scene_input``), so they are
augmented there too, right after the cut: each sample gets one of the 8
symmetries of the square (a 90-degree rotation, with or without a
left-right flip), a brightness factor and, optionally, Gaussian spectral
noise and a *field look* (``field_look``): its unscaled spectra (divided by
their brightness with ``--brightness_norm``) shifted along the bands and
multiplied by a smooth random gain, as a field's spectra differ from another's
(sensor and atmosphere shift the wavelengths, illumination and plant condition
the levels). Every draw is a Mesh-TF random tensor, drawn whole and sliced per
device (``HeteroMeshImpl.random``), so an uneven batch split augments
exactly as one device does, and a graph seed (``--seed``) repeats it.
``training`` (hmp.graph.graph's switch, 0.0 at inference) turns it all off. What is
drawn is an ``hmp.graph.graph_config.Augmentation``.

At inference, ``in_symmetry`` turns every patch into one symmetry, fed at run
time; ``symmetry_probabilities`` runs the class probabilities in each of the 8
(test-time augmentation, ``--tta``), for both hmp.train and hmp.predict.
"""

import functools

import numpy as np
import tensorflow.compat.v1 as tf

from hmp.compat import import_mesh_tensorflow

mtf = import_mesh_tensorflow()

SYMMETRIES = 8   # rotations by 0, 90, 180, 270 degrees, each with and without a flip


def field_look(patches, shift_draw, gain_draw, augmentation, strength=1.0):
    """``patches`` [n, p, p, bands] (standardised) in another field's look, on the values
    before the band scaling (``Preprocessor.divided``).

    Sample i's unscaled spectrum (``x * band_scale + band_offset``) is read at band
    ``b - s_i`` (linear interpolation, the end bands held beyond the ends), with
    ``s_i = k spectral_shift * (2 shift_draw[i] - 1)``, and multiplied by the gain
    ``1 + k spectral_gain * (u0 + u1 cos(pi t) + u2 cos(2 pi t)) / 3`` over the band
    position t in [0, 1], with ``u_k = 2 gain_draw[i, k] - 1``; then standardised again.
    ``strength`` (k: a number or a float scalar tensor) scales both (the look yielding,
    ``hmp.run.look_yield``).
    The bands are read as rows of [n, bands, p * p]: gathering single values along the
    last axis gives the same values, slower (docs/benchmarks.md, "The work before the
    model").
    """
    bands = patches.shape[-1]
    offset = tf.constant(augmentation.band_offset, tf.float32)
    scale = tf.constant(augmentation.band_scale, tf.float32)
    raw = patches * scale + offset
    position = (tf.range(bands, dtype=tf.float32)[None, :]
                - strength * augmentation.spectral_shift * (2.0 * shift_draw[:, None] - 1.0))
    position = tf.clip_by_value(position, 0.0, bands - 1.0)
    below = tf.minimum(tf.floor(position), bands - 2.0) if bands > 1 else tf.floor(position)
    weight = position - below
    below = tf.cast(below, tf.int32)
    above = tf.minimum(below + 1, bands - 1)
    rows = tf.transpose(tf.reshape(raw, [tf.shape(raw)[0], -1, bands]), [0, 2, 1])
    shifted = (tf.gather(rows, below, axis=1, batch_dims=1) * (1.0 - weight)[:, :, None]
               + tf.gather(rows, above, axis=1, batch_dims=1) * weight[:, :, None])
    t = tf.linspace(0.0, 1.0, bands)
    basis = tf.stack([tf.ones_like(t), tf.cos(np.pi * t), tf.cos(2.0 * np.pi * t)])   # [3, B]
    gain = 1.0 + strength * augmentation.spectral_gain * tf.matmul(2.0 * gain_draw - 1.0, basis) / 3.0
    looked = tf.transpose(shifted * gain[:, :, None], [0, 2, 1])   # [n, p * p, bands]
    return (tf.reshape(looked, tf.shape(patches)) - offset) / scale


def _turned(patches, k):
    """``patches`` [n, p, p, bands] in symmetry ``k`` (a Python int; see ``symmetries``)."""
    turned = tf.reverse(patches, [2]) if k >= 4 else patches
    for _ in range(k % 4):
        # A quarter turn counter-clockwise (tf.image.rot90 would colocate an assert
        # with the patches' gather, which sits with the host's shared cube).
        turned = tf.reverse(tf.transpose(turned, [0, 2, 1, 3]), [1])
    return turned


def symmetries(patches):
    """The 8 symmetries of ``patches`` [n, p, p, bands], stacked: [8, n, p, p, bands].

    Symmetry ``k`` rotates by ``k % 4`` quarter turns counter-clockwise, after a
    left-right flip when ``k >= 4`` (``numpy.rot90(numpy.flip(patch, 1), k % 4)``).
    """
    return tf.stack([_turned(patches, k) for k in range(SYMMETRIES)])


def _in_symmetries(patches, k):
    """Sample i of ``patches`` [n, p, p, bands] in symmetry ``k[i]`` (int32 [n]).

    Each symmetry permutes a patch's pixels, so each sample's spectra are gathered
    in its symmetry's pixel order (the orders: ``_turned`` applied to the pixel
    numbers): one pass over the patches, not 8 copies of them (``symmetries``).
    """
    side = patches.shape[1]
    pixels = tf.reshape(tf.range(side * side), [1, side, side, 1])
    orders = tf.stack([tf.reshape(_turned(pixels, j), [-1]) for j in range(SYMMETRIES)])
    spectra = tf.reshape(patches, [tf.shape(patches)[0], side * side, patches.shape[3]])
    turned = tf.gather(spectra, tf.gather(orders, k), axis=1, batch_dims=1)
    return tf.reshape(turned, tf.shape(patches))


def _apply_symmetries(patches, draw, training):
    """Sample i of ``patches`` [n, p, p, bands] in symmetry floor(draw[i] * 8) (0 unless training)."""
    k = tf.cast(tf.floor(draw * SYMMETRIES * training), tf.int32)
    return _in_symmetries(patches, tf.minimum(k, SYMMETRIES - 1))


def in_symmetry(x, symmetry):
    """The mtf patches ``x`` [batch, h, w, bands], every sample in symmetry ``symmetry``
    (an int32 mtf scalar, 0: as they are; see ``symmetries``), on any split of the batch.
    Only the symmetry asked for is computed (a training step feeds 0 and pays nothing
    but the branch)."""
    return mtf.slicewise(
        lambda patches, k: tf.switch_case(
            k, [functools.partial(_turned, patches, j) for j in range(SYMMETRIES)]),
        [x, symmetry], output_shape=x.shape, output_dtype=x.dtype,
        splittable_dims=[x.shape.dims[0]], name="test_symmetry")


def symmetry_probabilities(session, probabilities, feed_of, tta):
    """Test-time augmentation: [variants, batch, classes], the values of the class
    ``probabilities`` with ``feed_of(k)`` for the patches as they are (variant 0, k = 0)
    and, with ``tta``, in the other 7 symmetries of the square (1..7): the feed that
    gives k to the int32 scalar placeholder(s) ``in_symmetry`` turns the patches by.
    Their mean over the variants is the TTA prediction."""
    return np.stack([session.run(probabilities, feed_of(k))
                     for k in range(SYMMETRIES if tta else 1)])


def augment(x, training, augmentation, look_strength=1.0):
    """``x`` [batch, h, w, bands] (mtf patches) augmented per sample while training.

    ``training``: an mtf scalar, 1.0 while training and 0.0 at inference, or a Python
    number for a graph that only trains (or only classifies); ``look_strength``: the
    share of the field look's strengths drawn (an mtf scalar fed at run time, or a
    number; ``field_look``).
    """
    if not isinstance(training, mtf.Tensor):   # the symmetry's slicewise needs a tensor
        training = mtf.constant(x.mesh, float(training))
    if not isinstance(look_strength, mtf.Tensor):
        look_strength = mtf.constant(x.mesh, float(look_strength))
    batch = x.shape.dims[0]
    if augmentation.flips:
        draw = mtf.random_uniform(x.mesh, mtf.Shape([batch]), name="symmetry_draw")
        x = mtf.slicewise(_apply_symmetries, [x, draw, training], output_shape=x.shape,
                          output_dtype=x.dtype, splittable_dims=[batch], name="symmetry")
    if augmentation.field_look:
        shift = mtf.random_uniform(x.mesh, mtf.Shape([batch]), name="shift_draw")
        gain = mtf.random_uniform(x.mesh, mtf.Shape([batch, mtf.Dimension("gain_terms", 3)]),
                                  name="gain_draw")
        looked = mtf.slicewise(lambda p, s, g, k: field_look(p, s, g, augmentation, k),
                               [x, shift, gain, look_strength], output_shape=x.shape, output_dtype=x.dtype,
                               splittable_dims=[batch], name="field_look")
        x += training * (looked - x)
    if augmentation.brightness > 0:
        draw = mtf.random_uniform(x.mesh, mtf.Shape([batch]), name="brightness_draw")
        x *= 1.0 + training * augmentation.brightness * (2.0 * draw - 1.0)
    if augmentation.noise > 0:
        x += training * augmentation.noise * mtf.random_normal(x.mesh, x.shape,
                                                               name="spectral_noise")
    return x
