"""A run's fitted preprocessing (brightness, band scaling, PCA; the smoothing's guide; the
spectral prior, ``--spectral_prior``) in ``preprocessing.npz`` of its folder.

The statistics come from the run's training pixels; a trained model only
makes sense on a cube transformed by exactly these, so ``hmp.predict`` reads
them from here instead of fitting them again on the scene it classifies. The
bands' wavelengths, when the training scene's file named them, are kept beside
them: a scene of other bands is refused (``hmp.data.raster.check_wavelengths``).
"""

import collections
import os

import numpy as np

from hmp import files
from hmp.data import Guide, Preprocessor
from hmp.errors import InvalidInput
from hmp.evaluation.spectral_prior import ShrinkageLDA, SpectralPrior

FILE_NAME = "preprocessing.npz"
# The arrays ``save`` writes together, all or none: band scaling, PCA, the guide, the
# spectral prior.
TOGETHER = (("scaling", "offset", "scale"), ("pca_components", "pca_mean"),
            ("guide_direction", "guide_mean", "guide_range"),
            ("prior_coef", "prior_intercept", "prior_weight"))


def save(model_dir, preprocessor, wavelengths=(), guide=None, wavelength_units=None,
         prior=None):
    """Writes ``preprocessor``'s statistics, the scene's band ``wavelengths`` (if any, in
    ``wavelength_units`` if its file named them),
    the smoothing's ``guide`` (an ``hmp.data.Guide``, if any) and the ``prior`` (an
    ``hmp.evaluation.spectral_prior.SpectralPrior``, if any) to
    ``model_dir``/preprocessing.npz, atomically. A run's preprocessing scales its bands,
    reduces them, or both (``load`` refuses a file of neither)."""
    if preprocessor.scaler is None and preprocessor.pca is None:
        raise ValueError("a run's preprocessing scales its bands or reduces them (PCA)")
    arrays = {"wavelengths": np.asarray(wavelengths, np.float64)} if len(wavelengths) else {}
    if arrays and wavelength_units:
        arrays.update(wavelength_units=np.array(wavelength_units))
    if guide is not None:
        arrays.update(guide_mean=guide.mean, guide_direction=guide.direction,
                      guide_range=np.array([guide.low, guide.span]))
    if prior is not None:
        arrays.update(prior_coef=prior.lda.coef, prior_intercept=prior.lda.intercept,
                      prior_weight=np.array(prior.weight))
    if preprocessor.brightness_norm is not None:
        arrays.update(brightness_floor=np.array(preprocessor.brightness_norm.floor))
    if preprocessor.scaler is not None:
        arrays.update(scaling=np.array(preprocessor.scaler.method),
                      offset=preprocessor.scaler.offset, scale=preprocessor.scaler.scale)
    if preprocessor.pca is not None:
        arrays.update(pca_mean=preprocessor.pca.mean, pca_components=preprocessor.pca.components)
    with files.atomic_path(os.path.join(model_dir, FILE_NAME)) as temporary:
        with open(temporary, "wb") as f:
            np.savez(f, **arrays)


def _arrays(model_dir):
    """{name: array} of ``model_dir``/preprocessing.npz; InvalidInput, naming the folder
    and the file, when it has none or one numpy cannot read as an .npz file of plain
    arrays (``hmp.files.read_npz``)."""
    path = os.path.join(model_dir, FILE_NAME)
    if not os.path.exists(path):
        raise InvalidInput("%s holds no %s (the preprocessing statistics of its training "
                           "pixels); train the run again with this version of hmp"
                           % (model_dir, FILE_NAME))
    arrays = files.read_npz(path)
    if arrays is None:
        raise InvalidInput("%s holds a damaged %s (not a numpy .npz file); train the run "
                           "again" % (model_dir, FILE_NAME))
    missing = [name for group in TOGETHER if set(group) & set(arrays)
               for name in group if name not in arrays]
    if missing or not {"scaling", "pca_components"} & set(arrays):
        raise InvalidInput("%s holds a %s that hmp did not write (%s); train the run again"
                           % (model_dir, FILE_NAME,
                              "it lacks %s" % " and ".join(missing) if missing
                              else "neither band scaling nor PCA"))
    return arrays


class SavedPreprocessing(collections.namedtuple(
        "SavedPreprocessing", "preprocessor guide wavelengths wavelength_units prior")):
    """What a run's ``preprocessing.npz`` holds: the fitted :class:`hmp.data.Preprocessor`,
    the smoothing's guide (an ``hmp.data.Guide``; None for a run from before the guided
    smoothing), the band wavelengths of its training scene (() when its file named
    none), their units (None when it named none) and its spectral prior (an
    ``hmp.evaluation.spectral_prior.SpectralPrior``; None for a run without one)."""


def read(model_dir):
    """The :class:`SavedPreprocessing` of ``model_dir`` (one read of its file)."""
    arrays = _arrays(model_dir)
    guide = (Guide(arrays["guide_mean"], arrays["guide_direction"], *arrays["guide_range"])
             if "guide_direction" in arrays else None)
    wavelengths = tuple(arrays["wavelengths"].tolist()) if "wavelengths" in arrays else ()
    units = str(arrays["wavelength_units"]) if "wavelength_units" in arrays else None
    prior = (SpectralPrior(ShrinkageLDA(arrays["prior_coef"], arrays["prior_intercept"]),
                           float(arrays["prior_weight"]))
             if "prior_coef" in arrays else None)
    return SavedPreprocessing(_preprocessor(arrays), guide, wavelengths, units, prior)


def load(model_dir):
    """The fitted :class:`hmp.data.Preprocessor` saved in ``model_dir``."""
    return _preprocessor(_arrays(model_dir))


def _preprocessor(arrays):
    """The :class:`hmp.data.Preprocessor` of a file's ``arrays``."""
    preprocessor = Preprocessor(str(arrays["scaling"]) if "scaling" in arrays else None,
                                arrays["pca_components"].shape[1]
                                if "pca_components" in arrays else None,
                                brightness_norm="brightness_floor" in arrays)
    if preprocessor.brightness_norm is not None:
        preprocessor.brightness_norm.floor = float(arrays["brightness_floor"])
    if preprocessor.scaler is not None:
        preprocessor.scaler.offset, preprocessor.scaler.scale = (arrays["offset"],
                                                                 arrays["scale"])
    if preprocessor.pca is not None:
        preprocessor.pca.mean, preprocessor.pca.components = (arrays["pca_mean"],
                                                              arrays["pca_components"])
    return preprocessor


def input_bands(preprocessor):
    """Bands of the cube the preprocessor takes (the scene's raw bands)."""
    if preprocessor.scaler is not None:
        return len(preprocessor.scaler.offset)
    return len(preprocessor.pca.mean)


def output_bands(preprocessor):
    """Bands of the cube it makes (the model's input)."""
    if preprocessor.pca is not None:
        return preprocessor.pca.components.shape[1]
    return input_bands(preprocessor)
