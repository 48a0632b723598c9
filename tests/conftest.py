"""Test setup: TF1 graph mode (Mesh-TensorFlow builds graphs, not eager code)."""

import tensorflow.compat.v1 as tf

tf.disable_eager_execution()
tf.logging.set_verbosity(tf.logging.ERROR)
