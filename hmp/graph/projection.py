"""The run's PCA inside the graph: patches cut on all the scaled bands, projected on the devices.

The field look (``hmp.graph.augment.field_look``) works on all the bands, which a
model on PCA components never sees when the cube is projected before training
(``hmp.data.PCA``). With a projection (``hmp.graph.graph_config.Projection``) the
devices hold the scaled cube with all its bands instead (``Experiment.all_bands``), cut
and augment the patches on them, and project each patch's spectra onto the components
fitted on the training pixels, per sample and so on any split of the batch. The
projection is per pixel, so without augmentation the model sees the patches of
the projected cube (to float32 rounding).
"""

import tensorflow.compat.v1 as tf

from hmp.compat import import_mesh_tensorflow

mtf = import_mesh_tensorflow()


def project(x, projection, bands):
    """The mtf patches ``x`` [batch, h, w, raw bands] projected: [batch, h, w, ``bands``]."""
    def on_slice(patches):
        flat = tf.reshape(patches - projection.mean, [-1, projection.raw_bands])
        projected = tf.matmul(flat, tf.constant(projection.components))
        return tf.reshape(projected, tf.concat([tf.shape(patches)[:-1], [bands.size]], 0))
    return mtf.slicewise(on_slice, [x], output_shape=mtf.Shape(x.shape.dims[:-1] + [bands]),
                         output_dtype=x.dtype, splittable_dims=[x.shape.dims[0]],
                         name="pca_projection")
