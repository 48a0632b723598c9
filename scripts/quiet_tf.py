"""Importing TensorFlow without its C++ start-up lines, for the scripts' one-line errors.

Call ``import_tensorflow_quietly()`` before anything imports TensorFlow (hmp
does): the lines it prints ("oneDNN custom operations are on", 4 lines) would
bury the one line a bad flag value gets.
"""

import os


def import_tensorflow_quietly():
    """Imports TensorFlow with stderr closed."""
    saved, devnull = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        import tensorflow  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)
