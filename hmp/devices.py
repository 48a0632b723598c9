"""The devices hmp uses when none are named: this machine's real ones."""

import tensorflow as tf


def default_devices():
    """``/cpu:0`` plus ``/gpu:N`` for every GPU TensorFlow sees.

    Virtual CPU devices (``/cpu:1`` ...) share the one CPU, so they are used
    only when named.
    """
    gpus = tf.config.list_physical_devices("GPU")
    return ["/cpu:0"] + ["/gpu:%d" % i for i in range(len(gpus))]
