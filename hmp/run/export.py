"""A run's model as a TensorFlow SavedModel that plain TensorFlow loads without hmp.

The signature ``serving_default`` takes ``patches``, float32 [N, p, p, bands]
of the scene's raw values (any N; the run's band scaling and PCA are part of
the model) and returns ``logits``, float32 [N, classes], of the patches as
given, and ``probabilities``, float32 [N, classes]: their softmax or, exported
with ``tta``, the mean softmax of the patches' 8 symmetries of the square (what
``hmp.predict --tta`` computes), fused with the run's spectral prior when it has
one (``--spectral_prior``: a shrinkage LDA on each patch's mean scaled spectrum). Class k+1 of the label map is column k. The
model is the one-device lowering of the run's Mesh-TF graph for a fixed chunk
of patches, with its weights frozen to constants; the signature pads the
patches (all symmetries of them with ``tta``) to whole chunks and maps over them.

Load it with::

    model = tf.saved_model.load(path)
    outputs = model.signatures["serving_default"](patches=patches)
    classes = tf.argmax(outputs["probabilities"], axis=1) + 1
"""

import os

import tensorflow.compat.v1 as tf

from hmp import files
from hmp.errors import InvalidInput
from hmp.graph.augment import SYMMETRIES, symmetries
from hmp.graph.graph import build_logits_graph, imported
from hmp.mesh.lowering import HeteroLowering
from hmp.mesh.mesh_impl import HeteroMeshImpl
from hmp.run import fitted_preprocessing, run_folder
from hmp.run.inference import restore_weights

SIGNATURE = "serving_default"
SAVED_MODEL_FILE = "saved_model.pb"   # what marks a folder as a SavedModel
# A SavedModel's own entries (TensorFlow's saved_model constants; its Builder writes the
# first and variables/, tf.saved_model.save fingerprint.pb too, either assets/ when it has
# any): an export replaces these in its folder and keeps every other file there.
ENTRIES = (SAVED_MODEL_FILE, "fingerprint.pb", "variables", "assets")
CHUNK = 256   # patches per run of the frozen model


def frozen_logits(run, chunk=CHUNK):
    """The run's model on one device with its weights as constants: (GraphDef, name of its
    input, preprocessed patches [chunk, p, p, bands], name of its logits [chunk, classes])."""
    config = run.model_config
    graph = tf.Graph()
    with graph.as_default():
        x = tf.placeholder(tf.float32, [chunk, config.patch, config.patch, config.bands],
                           name="patches")
        mtf_graph, mesh, logits = build_logits_graph(config, chunk, imported(x))
        lowering = HeteroLowering(mtf_graph, {mesh: HeteroMeshImpl("", "", [""], {})})
        output = lowering.export_to_tf_tensor(logits)
        saver = tf.train.Saver(tf.global_variables())
        with tf.Session(graph=graph) as session:
            restore_weights(saver, session, run.checkpoint)
            frozen = tf.graph_util.convert_variables_to_constants(
                session, graph.as_graph_def(), [output.op.name])
    return without_hmp_gradients(frozen), x.name, output.name


def without_hmp_gradients(graph_def):
    """``graph_def`` with its ops' gradient overrides (``_gradient_op_type``: hmp's 3-D
    convolution gradient, ``hmp.mesh.conv3d_gradient``) removed, so that TensorFlow
    without hmp differentiates it with its own gradients."""
    for node in graph_def.node:
        if "_gradient_op_type" in node.attr:
            del node.attr["_gradient_op_type"]
    return graph_def


def _scaled(patches, preprocessor):
    """The run's brightness normalisation and band scaling on raw patches (all bands),
    in float64 as in hmp.data."""
    x = tf.cast(patches, tf.float64)
    if preprocessor.brightness_norm is not None:
        x = x / tf.maximum(tf.reduce_mean(x, axis=-1, keepdims=True),
                           preprocessor.brightness_norm.floor)
    if preprocessor.scaler is not None:
        x = (x - preprocessor.scaler.offset) / preprocessor.scaler.scale
    return x


def _preprocess(patches, preprocessor):
    """The run's brightness normalisation, band scaling and PCA on raw patches, in float64
    as in hmp.data."""
    x = _scaled(patches, preprocessor)
    if preprocessor.pca is not None:
        x = tf.tensordot(x - preprocessor.pca.mean, preprocessor.pca.components, 1)
    return tf.cast(x, tf.float32)


def _fused(probabilities, patches, run):
    """``probabilities`` [N, K] of the raw ``patches`` fused with ``run``'s spectral prior,
    as ``hmp.evaluation.spectral_prior.SpectralPrior.fused`` fuses them: its LDA on each
    patch's mean scaled spectrum."""
    prior = run.prior
    means = tf.reduce_mean(_scaled(patches, run.preprocessor), axis=[1, 2])
    scores = tf.matmul(means, prior.lda.coef, transpose_b=True) + prior.lda.intercept
    fused = (1 - prior.weight) * tf.nn.log_softmax(scores)
    if prior.weight > 0:
        fused += prior.weight * tf.math.log(tf.cast(probabilities, tf.float64))
    possible = tf.math.is_finite(tf.reduce_max(fused, axis=1, keepdims=True))
    # a patch whose every class the network or the prior rules out keeps the network's
    return tf.where_v2(possible, tf.cast(tf.nn.softmax(tf.where_v2(possible, fused, 0.0)),
                                         tf.float32), probabilities)


def export_saved_model(run, path, chunk=CHUNK, tta=False):
    """Writes ``run``'s model as a SavedModel in folder ``path``, beside any other files
    there, replacing an earlier SavedModel's entries (``ENTRIES``) only once the new one is
    whole; with ``tta``, its ``probabilities`` average the patches' 8 symmetries; they are
    fused with the run's spectral prior when it has one (``logits`` stay the network's,
    of the patches as given). Returns
    whether it replaced an earlier SavedModel; raises InvalidInput, writing nothing, when
    ``path`` holds some of ``ENTRIES`` without one (``replaces``)."""
    replaced = replaces(path)
    config = run.model_config
    frozen, input_name, output_name = frozen_logits(run, chunk)
    raw_bands = fitted_preprocessing.input_bands(run.preprocessor)
    graph = tf.Graph()
    with graph.as_default():
        patches = tf.placeholder(tf.float32, [None, config.patch, config.patch, raw_bands],
                                 name="patches")
        x = _preprocess(patches, run.preprocessor)
        variants = SYMMETRIES if tta else 1
        if tta:   # [8 * N, p, p, bands]: the patches in each symmetry, symmetry-major
            x = tf.reshape(symmetries(x), [-1, *x.shape[1:]])
        n = tf.shape(x)[0]
        chunks = (n + chunk - 1) // chunk
        padded = tf.pad(x, [[0, chunks * chunk - n], [0, 0], [0, 0], [0, 0]])

        def model(x):
            return tf.import_graph_def(frozen, input_map={input_name: x},
                                       return_elements=[output_name], name="model")[0]

        logits = tf.map_fn(model, tf.reshape(padded, [chunks, chunk, *padded.shape[1:]]),
                           fn_output_signature=tf.float32)
        logits = tf.reshape(tf.reshape(logits, [-1, config.n_classes])[:n],
                            [variants, -1, config.n_classes])
        probabilities = tf.reduce_mean(tf.nn.softmax(logits), axis=0)
        if run.prior is not None:
            probabilities = _fused(probabilities, patches, run)
        with tf.Session(graph=graph) as session, \
                files.replacing_entries(path, ENTRIES) as temporary:
            builder = tf.saved_model.Builder(temporary)
            builder.add_meta_graph_and_variables(
                session, [tf.saved_model.tag_constants.SERVING],
                signature_def_map={SIGNATURE: tf.saved_model.predict_signature_def(
                    {"patches": patches},
                    {"logits": logits[0], "probabilities": probabilities})})
            builder.save()
    return replaced


def replaces(path):
    """Whether an export to ``path`` replaces an earlier SavedModel there (its ``ENTRIES``;
    other files there are kept); InvalidInput when ``path`` holds a run, or some of
    ``ENTRIES`` but no saved_model.pb: not an earlier SavedModel's, they would be lost."""
    run_folder.check_holds_no_run(path)
    if os.path.isfile(os.path.join(path, SAVED_MODEL_FILE)):
        return True
    found = [name for name in ENTRIES if os.path.lexists(os.path.join(path, name))]
    if found:
        raise InvalidInput("%s holds %s but no %s (no earlier SavedModel), which an export "
                           "there would replace; give another folder"
                           % (path, ", ".join(found), SAVED_MODEL_FILE))
    return False
