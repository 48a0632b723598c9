"""hmp.evaluation.spectral_prior: the shrinkage LDA against the Gaussian posterior its
estimates define (scipy) and against scikit-learn's (where installed), the Ledoit-Wolf
shrinkage against its definition over the samples, the patch-window means against the
patches, and the fusion."""

import numpy as np
import pytest
from scipy import stats

from hmp.data.patches import PatchExtractor
from hmp.evaluation.spectral_prior import (ShrinkageLDA, fuse, ledoit_wolf_covariance,
                                           patch_means, window_means)

N_CLASSES = 5
COUNTS = (40, 2, 17, 0, 60)   # a class of 2 pixels, one of none


def _data(seed=0, features=12):
    rng = np.random.default_rng(seed)
    class_ids = np.concatenate([np.full(n, k) for k, n in enumerate(COUNTS)])
    mixing = rng.normal(size=(features, features))
    x = rng.normal(size=(len(class_ids), features)) @ mixing
    x += 3 * rng.normal(size=(N_CLASSES, features))[class_ids]
    return x, class_ids, rng.normal(size=(50, features)) @ mixing


def test_ledoit_wolf_shrinks_by_its_definition_over_the_samples():
    """Ledoit and Wolf (2004), Lemma 3.1 and Theorem 3.1: with S the sample covariance and
    mu = trace(S) / p, the shrinkage is min(b2, d2) / d2 for d2 = |S - mu I|^2 and b2 the
    mean over the samples of |x x' - S|^2 / n (|A|^2 = sum of A's squares / p)."""
    x = _data()[0][:30]
    n, p = x.shape
    centred = x - x.mean(axis=0)
    sample = centred.T @ centred / n
    mu = np.trace(sample) / p
    d2 = np.sum((sample - mu * np.eye(p)) ** 2) / p
    b2 = sum(np.sum((np.outer(row, row) - sample) ** 2) / p for row in centred) / n ** 2
    shrinkage = min(b2, d2) / d2
    assert 0 < shrinkage < 1
    np.testing.assert_allclose(ledoit_wolf_covariance(x),
                               (1 - shrinkage) * sample + shrinkage * mu * np.eye(p),
                               rtol=1e-10, atol=1e-12)


def test_the_lda_is_the_gaussian_posterior_of_its_class_means_and_shared_covariance():
    """Its log probabilities are those of Gaussian classes of the training means and one
    covariance (the priors' mean of each class's Ledoit-Wolf covariance of standardised
    features, scaled back), with the class shares as priors; a class without training
    pixels gets probability 0."""
    x, class_ids, test = _data()
    lda = ShrinkageLDA.fit(x, class_ids, N_CLASSES)
    present = [k for k, n in enumerate(COUNTS) if n]
    priors = np.array([COUNTS[k] for k in present]) / len(class_ids)
    covariance = 0
    for prior, k in zip(priors, present):
        members = x[class_ids == k]
        scale = members.std(axis=0)
        scale[scale == 0] = 1
        covariance = covariance + prior * np.outer(scale, scale) * ledoit_wolf_covariance(
            (members - members.mean(axis=0)) / scale)
    log_joint = np.stack([np.log(prior) + stats.multivariate_normal(
        x[class_ids == k].mean(axis=0), covariance).logpdf(test)
        for prior, k in zip(priors, present)], axis=1)
    expected = log_joint - np.log(np.sum(np.exp(log_joint), axis=1, keepdims=True))
    found = lda.log_probabilities(test)
    assert found.shape == (50, N_CLASSES)
    np.testing.assert_allclose(found[:, present], expected, atol=1e-8)
    assert np.all(found[:, 3] == -np.inf)


def test_the_lda_is_scikit_learns_shrinkage_lda():
    """The ``lda`` baseline of scripts/baseline_scores.py (scikit-learn, where installed),
    also with a feature that one class holds constant (its float spread a rounding
    error: no spread to standardise by)."""
    discriminant_analysis = pytest.importorskip("sklearn.discriminant_analysis")
    x, class_ids, test = _data(seed=1)
    x[class_ids == 4, 3] = 0.1   # 60 pixels: a float spread of 4e-17
    reference = discriminant_analysis.LinearDiscriminantAnalysis(
        solver="lsqr", shrinkage="auto").fit(x, class_ids)
    found = np.exp(ShrinkageLDA.fit(x, class_ids, N_CLASSES).log_probabilities(test))
    np.testing.assert_allclose(found[:, reference.classes_], reference.predict_proba(test),
                               atol=1e-10)


def test_window_and_patch_means_are_the_means_of_the_patches():
    """Of a padded cube's every pixel, and of given pixels cut a chunk at a time."""
    rng = np.random.default_rng(2)
    cube = rng.normal(size=(7, 6, 3)).astype(np.float32)
    extractor = PatchExtractor(cube, 5)
    means = window_means(extractor.padded, 5)
    assert means.shape == (7, 6, 3)
    pixels = np.arange(42)
    expected = extractor(pixels).mean(axis=(1, 2))
    np.testing.assert_allclose(means.reshape(42, 3), expected, atol=1e-6)
    some = np.array([41, 0, 17, 17, 5])
    found = patch_means(extractor, some, chunk=2)
    assert found.shape == (5, 3) and found.dtype == np.float64
    np.testing.assert_allclose(found, expected[some], atol=1e-6)


def test_fuse_is_the_normalised_weighted_geometric_mean():
    """Rows of zeros (pixels not classified) stay zeros; a row whose classes the network
    and the prior rule out between them keeps the network's; a weight outside [0, 1] is
    refused."""
    rng = np.random.default_rng(3)
    network = rng.dirichlet(np.ones(4), size=7)
    network[5] = 0.0   # a pixel not classified
    network[6] = [0.0, 0.0, 0.25, 0.75]   # all on classes the prior rules out
    prior = np.log(rng.dirichlet(np.ones(4), size=7))
    prior[6, 2:] = -np.inf
    fused = fuse(network, prior, 0.65)
    expected = network[:5] ** 0.65 * np.exp(prior[:5]) ** 0.35
    np.testing.assert_allclose(fused[:5], expected / expected.sum(axis=1, keepdims=True),
                               rtol=1e-5)
    assert fused.dtype == np.float32 and np.all(fused[5] == 0)
    np.testing.assert_array_equal(fused[6], network[6])
    by_prior = fuse(network, prior, 0.0)
    np.testing.assert_allclose(by_prior[:5], np.exp(prior[:5]), rtol=1e-5)
    assert np.all(by_prior[5] == 0)
    np.testing.assert_array_equal(fuse(network, None, 1.0), network.astype(np.float32))
    for weight in (-0.1, 1.5):
        with pytest.raises(ValueError, match=r"weight must lie in \[0, 1\], got "):
            fuse(network, prior, weight)
