"""hmp.run.scoring: a scored pixel's smoothing reads no output of a training pixel."""

import types

import numpy as np

from hmp.run import scoring


def test_a_test_pixels_smoothing_reads_no_training_pixels_output():
    # A row of 5 pixels, 2 classes: pixel 0 trained on (the network fits it: one-hot class
    # 0), pixels 1-2 tested (outputs leaning to class 1), 3 a validation pixel, 4
    # unlabelled. Over 3 x 3 windows of the mean, test pixel 1 reads pixels 0-2: with
    # pixel 0's output (1 + 0.4 + 0.4) / 3 = 0.6 for class 0; without it 0.4 / 0.6.
    outputs = np.array([[1.0, 0.0], [0.4, 0.6], [0.4, 0.6], [0.5, 0.5], [0.3, 0.7]],
                       np.float32).reshape(1, 5, 2)
    exp = types.SimpleNamespace(
        n_classes=2, split=types.SimpleNamespace(train=np.array([0, 3])),
        train=types.SimpleNamespace(indices=np.array([0])),
        test=types.SimpleNamespace(indices=np.array([1, 2])),
        labelled=types.SimpleNamespace(indices=np.array([0, 1, 2, 3])))
    classified = scoring.Classified(outputs, outputs, np.ones((1, 5), bool))
    smoothed = classified.smoothed(exp, 3)
    np.testing.assert_allclose(smoothed[1], [0.4, 0.6], rtol=1e-6)   # pixels 1, 2
    np.testing.assert_allclose(smoothed[2], [0.4, 0.6], rtol=1e-6)   # 1, 2 (3: split.train)
    np.testing.assert_allclose(smoothed[0], [0.7, 0.3], rtol=1e-6)   # not tested: 0-1, a map
    np.testing.assert_allclose(smoothed[3], [(0.4 + 0.5 + 0.3) / 3, (0.6 + 0.5 + 0.7) / 3],
                               rtol=1e-6)
    np.testing.assert_array_equal(classified.smoothed(exp, 1), outputs[0, :4])
