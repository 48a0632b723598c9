"""The baselines of scripts/baselines.py, without flags: scikit-learn classifiers on
a prepared experiment's split (``scripts/bench_accuracy.py`` scores them beside its
runs, and tests import this module beside other scripts' flags).

* ``lda`` (shrinkage LDA) and ``svm`` (RBF SVM, C picked by 3-fold
  cross-validation on the training pixels) on the pixel's spectrum and on the
  mean spectrum of its windows (reflect-padded);
* ``1nn-xy``: 1-nearest-neighbour on the pixel's (row, column) only. It knows no
  spectrum at all: what it scores measures how much the split lets the test
  pixels' neighbours into training.
"""

import time
import warnings

import numpy as np
from scipy import ndimage

from hmp import cli
from hmp.errors import InvalidInput
from hmp.evaluation import metrics, report

SVM_C_GRID = (1.0, 10.0, 100.0, 1000.0)
SVM_FOLDS = 3   # of the cross-validation that picks C
COORDINATES_ONLY = "1nn-xy"   # the one baseline that reads no spectrum


def window_sides(name="windows"):
    """List flag ``name``'s window sides, odd whole numbers (``hmp.cli.whole_numbers``); a
    UsageError naming the flag when one is not."""
    sides = cli.whole_numbers(name)
    if any(side % 2 == 0 for side in sides):
        raise cli.UsageError("--%s=%s: give odd positive window sides, e.g. 5,9"
                             % (name, ",".join(map(str, sides))))
    return sides


def sklearn_classifiers():
    """The scikit-learn pieces the baselines use; one line on how to install them if missing."""
    try:
        from sklearn.discriminant_analysis import LinearDiscriminantAnalysis
        from sklearn.model_selection import GridSearchCV
        from sklearn.neighbors import KNeighborsClassifier
        from sklearn.svm import SVC
    except ImportError:
        raise InvalidInput('the baselines need scikit-learn: pip install -e ".[baselines]" '
                           '(or pip install scikit-learn)') from None
    return {
        "lda": lambda: LinearDiscriminantAnalysis(solver="lsqr", shrinkage="auto"),
        "svm": lambda: GridSearchCV(SVC(kernel="rbf", gamma="scale"),
                                    {"C": list(SVM_C_GRID)}, cv=SVM_FOLDS),
        "1nn": lambda: KNeighborsClassifier(n_neighbors=1),
    }


def features(cube, windows):
    """{name: [H*W, F] features}: the pixel's spectrum, each window's mean spectrum, and
    the pixel's (row, column)."""
    height, width, bands = cube.shape
    found = {"pixel": cube.reshape(-1, bands)}
    for side in windows:
        found["%dx%d mean" % (side, side)] = ndimage.uniform_filter(
            cube, size=(side, side, 1), mode="mirror").reshape(-1, bands)
    rows, cols = np.divmod(np.arange(height * width), width)
    found["row, column"] = np.stack([rows, cols], axis=1).astype(np.float64)
    return found


def baselines(windows):
    """[(baseline name, feature name, classifier factory)], in table order."""
    make = sklearn_classifiers()
    spectral = ["pixel"] + ["%dx%d mean" % (side, side) for side in windows]
    return ([("lda %s" % f, f, make["lda"]) for f in spectral]
            + [("svm %s" % f, f, make["svm"]) for f in spectral]
            + [(COORDINATES_ONLY, "row, column", make["1nn"])])


def score_run(exp, windows, say=print):
    """{baseline: scores_dict} of every baseline on one prepared experiment's split."""
    chosen = baselines(windows)   # refuses early when scikit-learn is missing
    radius = exp.train.extractor.patch_size // 2
    height, width = exp.scene.labels.shape
    cube = exp.train.extractor.padded[radius:radius + height, radius:radius + width]
    table = features(cube, windows)
    labels = exp.scene.labels.ravel() - 1
    train, test = exp.split.train, exp.split.test
    counts = np.bincount(labels[train], minlength=exp.n_classes)
    few = np.flatnonzero((counts > 0) & (counts < SVM_FOLDS))
    if few.size:   # said once here, not in one scikit-learn warning per SVM fitted
        say("  classes with fewer than %d training pixels (%s): the SVM's C is chosen on "
            "folds that miss some of them" % (SVM_FOLDS, ", ".join(str(c + 1) for c in few)))
    scores = {}
    for name, feature, make in chosen:
        started = time.time()
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "The least populated class", UserWarning)
            classifier = make().fit(table[feature][train], labels[train])
        predicted = classifier.predict(table[feature][test])
        result = metrics.evaluate(labels[test], predicted, exp.n_classes)
        scores[name] = report.scores_dict(result, exp.scene.class_names)
        say("  %-18s OA %6.2f  (%.1f s)" % (name, 100 * result.overall_accuracy,
                                             time.time() - started))
    return scores
