"""A run's TensorBoard summaries (``tensorboard --logdir runs``).

Tags: per epoch (at its last step) ``loss``, ``train_accuracy``,
``samples_per_second`` and ``busy_share/<device>`` (each device's share of the
busy time in the epoch's traced step); at the end ``test/overall_accuracy``,
``test/average_accuracy``, ``test/kappa`` and the image ``classification_map``
(the predicted map, one image pixel per scene pixel, legend to the right);
``plan`` (text) at the step each plan starts. A new metric is one more entry of
the dict given to :func:`add_scalars`, e.g. ``{"validation/overall_accuracy": oa}``.
"""

import tensorflow.compat.v1 as tf

from hmp.evaluation import maps


def add_scalars(writer, step, values):
    """Writes ``{tag: number}`` at ``step`` to the ``tf.summary.FileWriter``."""
    writer.add_summary(tf.Summary(value=[tf.Summary.Value(tag=tag, simple_value=float(value))
                                         for tag, value in values.items()]), int(step))
    writer.flush()


def add_text(writer, step, tag, text):
    """Writes ``text`` (shown as preformatted text by TensorBoard's text plugin)."""
    metadata = tf.SummaryMetadata(plugin_data=tf.SummaryMetadata.PluginData(plugin_name="text"))
    value = tf.Summary.Value(tag=tag, metadata=metadata, tensor=tf.make_tensor_proto(
        "\n".join("    " + line for line in text.splitlines())))
    writer.add_summary(tf.Summary(value=[value]), int(step))
    writer.flush()


def add_image(writer, step, tag, rgb):
    """Writes a uint8 RGB image [H, W, 3], pixel for pixel (PNG)."""
    image = tf.Summary.Image(height=rgb.shape[0], width=rgb.shape[1], colorspace=3,
                             encoded_image_string=maps.png_bytes(rgb))
    writer.add_summary(tf.Summary(value=[tf.Summary.Value(tag=tag, image=image)]), int(step))
    writer.flush()


def epoch_scalars(stats, devices):
    """The scalars of an ``hmp.run.trainer.EpochStats``; ``devices`` in the busy times' order."""
    values = {"loss": stats.loss, "train_accuracy": stats.train_accuracy,
              "samples_per_second": stats.samples_per_second}
    if stats.val_accuracy is not None:
        values["val_accuracy"] = stats.val_accuracy
    values.update({"busy_share/" + device.lstrip("/"): share
                   for device, share in zip(devices, stats.busy_share)})
    return values


def test_scalars(scores):
    """OA, AA and kappa of ``hmp.evaluation.metrics.evaluate``'s scores on the test pixels."""
    return {"test/overall_accuracy": scores.overall_accuracy,
            "test/average_accuracy": scores.average_accuracy, "test/kappa": scores.kappa}
