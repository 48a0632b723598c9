"""A spectral prior for a network's class probabilities: a shrinkage LDA on each pixel's
mean spectrum over its patch window, fitted on the training pixels, fused with the
network's probabilities as a weighted geometric mean (docs/benchmarks.md, "A spectral
prior fused with the network").

The LDA is the one of the ``lda NxN mean`` baseline (``scripts/baseline_scores.py``:
scikit-learn's ``LinearDiscriminantAnalysis(solver="lsqr", shrinkage="auto")``), in
numpy: class means, the classes' covariances each shrunk by Ledoit and Wolf's estimate
(on standardised features, as scikit-learn shrinks them) and averaged by the class
priors, and the linear discriminant of the shared covariance.
"""

import dataclasses

import numpy as np
from scipy import ndimage


def window_means(padded, patch_size):
    """[H, W, bands] float64: each pixel's mean spectrum over its ``patch_size`` x
    ``patch_size`` window of ``padded`` (a scene padded by ``patch_size // 2`` on each
    side, as ``hmp.data.PatchExtractor`` holds it): the mean of its patch."""
    margin = patch_size // 2
    height, width = padded.shape[0] - 2 * margin, padded.shape[1] - 2 * margin
    means = ndimage.uniform_filter(np.asarray(padded, np.float64),
                                   size=(patch_size, patch_size, 1), mode="nearest")
    return means[margin:margin + height, margin:margin + width]


def patch_means(extractor, pixels, chunk=4096):
    """[n, bands] float64: the mean spectrum of each of ``pixels``' patches (flat
    indices) cut by ``extractor`` (an ``hmp.data.PatchExtractor``), ``chunk`` patches at
    a time (a scene's patches at once would hold patch_size ** 2 copies of it)."""
    pixels = np.asarray(pixels)
    means = np.zeros((len(pixels), extractor.n_bands))
    for start in range(0, len(pixels), chunk):
        means[start:start + chunk] = extractor(pixels[start:start + chunk]).mean(
            axis=(1, 2), dtype=np.float64)
    return means


def ledoit_wolf_covariance(x):
    """The covariance of the rows of ``x`` [n, F] shrunk towards a multiple of the
    identity by Ledoit and Wolf's estimate of the best shrinkage (2004)."""
    n, features = x.shape
    centred = x - x.mean(axis=0)
    empirical = centred.T @ centred / n
    mu = np.trace(empirical) / features
    squares = centred ** 2
    beta = (np.sum(squares.T @ squares) / n - np.sum(empirical ** 2)) / (features * n)
    delta = (np.sum(empirical ** 2) - 2 * mu * np.trace(empirical) + features * mu ** 2) / features
    beta = min(beta, delta)   # never shrunk past the target
    shrinkage = 0.0 if beta == 0 else beta / delta
    return (1 - shrinkage) * empirical + shrinkage * mu * np.eye(features)


def _class_covariance(x):
    """A class's covariance as scikit-learn's ``shrinkage="auto"`` makes it: Ledoit-Wolf
    on the standardised features, scaled back; a feature of no spread (its variance
    within rounding of its mean's, as scikit-learn's ``StandardScaler`` tells) keeps
    scale 1."""
    n, mean, variance = len(x), x.mean(axis=0), x.var(axis=0)
    eps = np.finfo(np.float64).eps
    scale = np.sqrt(variance)
    scale[variance <= n * eps * variance + (n * mean * eps) ** 2] = 1.0
    return scale[:, None] * ledoit_wolf_covariance((x - mean) / scale) * scale[None, :]


@dataclasses.dataclass(frozen=True)
class ShrinkageLDA:
    """Linear discriminants [K, F] (``coef``) and offsets [K] (``intercept``): a class
    without training pixels has offset -inf (probability 0)."""

    coef: np.ndarray
    intercept: np.ndarray

    @classmethod
    def fit(cls, features, class_ids, n_classes):
        """Fitted on ``features`` [n, F] of 0-based ``class_ids`` [n]: each class's
        mean, the prior-weighted mean of their shrunk covariances, its least-squares
        discriminants, and the log priors."""
        features = np.asarray(features, np.float64)
        counts = np.bincount(class_ids, minlength=n_classes)
        present = np.flatnonzero(counts)
        priors = counts[present] / len(class_ids)
        means = np.stack([features[class_ids == k].mean(axis=0) for k in present])
        covariance = sum(prior * _class_covariance(features[class_ids == k])
                         for prior, k in zip(priors, present))
        discriminants = np.linalg.lstsq(covariance, means.T, rcond=None)[0].T
        coef = np.zeros((n_classes, features.shape[1]))
        intercept = np.full(n_classes, -np.inf)
        coef[present] = discriminants
        intercept[present] = -0.5 * np.sum(means * discriminants, axis=1) + np.log(priors)
        return cls(coef, intercept)

    @classmethod
    def of_patches(cls, extractor, pixels, class_ids, n_classes):
        """Fitted on the mean spectra of the patches of ``pixels`` (flat indices, 0-based
        ``class_ids``) that ``extractor`` cuts: the spectral prior's LDA."""
        return cls.fit(patch_means(extractor, pixels), class_ids, n_classes)

    def log_probabilities(self, features):
        """[n, K] log class probabilities of ``features`` [n, F] (-inf for a class that
        had no training pixels)."""
        scores = np.asarray(features, np.float64) @ self.coef.T + self.intercept
        return scores - _log_sum_exp(scores)


@dataclasses.dataclass(frozen=True)
class SpectralPrior:
    """A run's spectral prior: its ``lda`` (a :class:`ShrinkageLDA` of its training
    pixels' patch-mean spectra) and the ``weight`` of the network's probabilities in
    their fusion (``--spectral_prior``; 1 would be the network alone)."""

    lda: ShrinkageLDA
    weight: float

    @classmethod
    def fit(cls, extractor, pixels, class_ids, n_classes, weight):
        """Fitted on the patch means of ``pixels`` (flat indices, 0-based ``class_ids``)
        cut by ``extractor`` (the scaled cube with all its bands)."""
        return cls(ShrinkageLDA.of_patches(extractor, pixels, class_ids, n_classes), weight)

    def fused(self, probabilities, means):
        """``probabilities`` [n, K] of pixels whose patch means are ``means`` [n, bands],
        fused with the prior's (:func:`fuse`)."""
        return fuse(probabilities, self.lda.log_probabilities(means), self.weight)


def fuse(probabilities, prior_log_probabilities, weight):
    """[n, K] float32: ``probabilities`` [n, K] (a network's) and the prior's
    ``prior_log_probabilities`` [n, K] as the normalised weighted geometric mean
    p ** weight * prior ** (1 - weight), ``weight`` from 0 to 1; 1 gives
    ``probabilities`` back (the prior may then be None). A row of zeros (a pixel not
    classified) stays zeros; a row whose every class the network or the prior rules out
    (the prior rules out only classes without training pixels) keeps the network's."""
    if not 0 <= weight <= 1:
        raise ValueError("the network's weight must lie in [0, 1], got %r" % (weight,))
    probabilities = np.asarray(probabilities, np.float64)
    if weight == 1:
        return probabilities.astype(np.float32)
    scores = (1 - weight) * np.asarray(prior_log_probabilities, np.float64)
    if weight > 0:
        with np.errstate(divide="ignore"):   # log 0: a class the network rules out
            scores = scores + weight * np.log(probabilities)
    fused = probabilities.copy()
    possible = (probabilities.sum(axis=1) > 0) & np.isfinite(np.max(scores, axis=1))
    fused[possible] = np.exp(scores[possible] - _log_sum_exp(scores[possible]))
    return fused.astype(np.float32)


def _log_sum_exp(scores):
    """log sum exp of each row of ``scores`` [n, K], kept as [n, 1]."""
    top = np.max(scores, axis=1, keepdims=True)
    return top + np.log(np.sum(np.exp(scores - top), axis=1, keepdims=True))
