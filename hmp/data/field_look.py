"""How much a class's spectra differ from field to field, measured on the training pixels.

The field-look augmentation (``hmp.graph.augment.field_look``) reads each training
spectrum shifted by up to ``spectral_shift`` bands and multiplies it by a smooth gain
``1 + spectral_gain * (u0 + u1 cos(pi t) + u2 cos(2 pi t)) / 3``, so that the network
sees the class as other fields show it. How strong it should be is a property of
the scene: on a scene whose fields really differ that way it teaches what the test
pixels will look like; on one where they do not (a sensor's band centres are fixed
over a flight line; radiance counts carry the sun's and the atmosphere's features at
fixed bands), a shift of a few bands wipes out the small differences that tell one
crop from another, and the network cannot even fit its training pixels (issue #29).

:func:`measure_field_look` reads the strength off the training pixels themselves: it
groups each class's training pixels into spatial cells (pixels of one class in one
cell of about a field's size mostly lie in one field), and fits each cell's mean
spectrum as its class's mean spectrum shifted by ``s`` bands and multiplied by a
smooth gain of the same three-cosine form as the augmentation. Over the cells:

* ``spectral_shift = 2 * median |s|``: the range of uniformly drawn shifts (as the
  augmentation draws them) whose median is the one measured;
* ``spectral_gain = median max |gain - 1|``: the typical field's largest deviation
  (at most 1), the augmentation's largest.

Medians, so that a few cells straddling two fields or two classes do not set the
strength. On the built-in generator's scenes (fields shifted by up to 4.7 bands) this
gives 4.5 bands and 0.49, next to the 4 and 0.5 tuned there by accuracy; on the same
scenes without field shifts 0.5 bands. Pure numpy: no test pixel, no training run.
"""

import dataclasses

import numpy as np

CELL_PIXELS = 16       # side of the cells that group a class's training pixels into fields
MIN_CELL_PIXELS = 5    # training pixels a cell needs for its mean to be measured
MIN_CELLS = 4          # cells in all, below which nothing is measured (no field look)
MAX_SHIFT_BANDS = 8.0  # the largest shift tried
SHIFT_STEP = 0.25      # bands between the shifts tried


@dataclasses.dataclass(frozen=True)
class FieldLook:
    """A measured field-look strength: ``spectral_shift`` (bands) and ``spectral_gain``
    (the augmentation's parameters), from ``cells`` cells of ``classes`` classes."""

    spectral_shift: float
    spectral_gain: float
    cells: int
    classes: int

    def describe(self):
        if not self.cells:
            return ("field look off: too few training pixels to measure how fields differ "
                    "(fewer than %d cells of %d pixels)" % (MIN_CELLS, MIN_CELL_PIXELS))
        return ("field look measured on the training pixels (%d cells of %d classes): "
                "spectral shift %.2f bands, spectral gain %.2f"
                % (self.cells, self.classes, self.spectral_shift, self.spectral_gain))


def measure_field_look(cube, labels, train_pixels, cell=CELL_PIXELS, spectra_of=None):
    """The field-look strength of a scene (module docstring).

    Args:
      cube: [H, W, B] spectra as the scene's file holds them.
      labels: [H, W] class labels, 0 unlabelled.
      train_pixels: flat indices of the training pixels (only these are read).
      cell: side of the grouping cells, in pixels.
      spectra_of: what the augmentation reads of the training pixels' spectra [n, B], a
        pixel at a time (``Preprocessor.divided``: divided by their brightness with
        ``--brightness_norm``); None: the spectra as they are.

    Returns:
      a :class:`FieldLook`; zero strength (and ``cells == 0``) when fewer than
      ``MIN_CELLS`` cells hold ``MIN_CELL_PIXELS`` training pixels of one class.
    """
    height, width, bands = cube.shape
    pixels = np.asarray(train_pixels, np.int64)
    spectra = cube.reshape(-1, bands)[pixels]
    spectra = np.asarray(spectra if spectra_of is None else spectra_of(spectra), np.float64)
    finite = np.all(np.isfinite(spectra), axis=1)
    pixels, spectra = pixels[finite], spectra[finite]
    classes = labels.ravel()[pixels]
    rows, cols = np.divmod(pixels, width)
    cells = (rows // cell) * ((width + cell - 1) // cell) + cols // cell
    shifts, gains, measured_classes = [], [], set()
    for label in np.unique(classes[classes > 0]):
        mine = classes == label
        reference = spectra[mine].mean(axis=0)
        cell_ids, counts = np.unique(cells[mine], return_counts=True)
        for cell_id in cell_ids[counts >= MIN_CELL_PIXELS]:
            mean = spectra[mine & (cells == cell_id)].mean(axis=0)
            shift, gain = fit_shift_and_gain(mean, reference)
            shifts.append(abs(shift))
            gains.append(np.max(np.abs(gain - 1.0)))
            measured_classes.add(int(label))
    if len(shifts) < MIN_CELLS:
        return FieldLook(0.0, 0.0, 0, 0)
    return FieldLook(2.0 * float(np.median(shifts)), float(min(np.median(gains), 1.0)),
                     len(shifts), len(measured_classes))


def gain_basis(bands):
    """[3, bands]: 1, cos(pi t), cos(2 pi t) over the band position t in [0, 1] (the
    augmentation's smooth gain)."""
    t = np.linspace(0.0, 1.0, bands)
    return np.stack([np.ones_like(t), np.cos(np.pi * t), np.cos(2.0 * np.pi * t)])


def shifted(spectrum, shift):
    """``spectrum`` read at band ``b - shift`` (linear interpolation, the end bands held
    beyond the ends), as the augmentation reads it."""
    bands = np.arange(len(spectrum), dtype=np.float64)
    return np.interp(bands - shift, bands, spectrum)


def fit_shift_and_gain(spectrum, reference):
    """``(shift, gain)`` that best explain ``spectrum`` as ``gain * shifted(reference,
    shift)`` in least squares: the shift on a grid of ``SHIFT_STEP`` bands up to
    ``MAX_SHIFT_BANDS`` either way (of equal fits, the smallest), the gain [bands] in
    the span of ``gain_basis``."""
    basis = gain_basis(len(spectrum))
    grid = np.arange(-MAX_SHIFT_BANDS, MAX_SHIFT_BANDS + SHIFT_STEP / 2, SHIFT_STEP)
    best = None
    for shift in sorted(grid, key=abs):   # a tie keeps the smaller shift
        design = (basis * shifted(reference, shift)).T   # [bands, 3]
        coefficients, *_ = np.linalg.lstsq(design, spectrum, rcond=None)
        residual = float(np.sum(np.square(design @ coefficients - spectrum)))
        if best is None or residual < best[0] - 1e-12 * abs(best[0]):
            best = (residual, float(shift), coefficients @ basis)
    return best[1], best[2]
