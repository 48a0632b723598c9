"""The flags that say which scene to load and how to split it.

Shared by ``python -m hmp.train`` and ``scripts/baselines.py``, so that a
baseline given the same flags scores on exactly the pixels a training run
uses (both build the split with :func:`hmp.run.experiment.prepare`).
"""

from absl import flags

from hmp import cli
from hmp.data import check_patch_size, is_cube_file
from hmp.data.loaders import SYNTHETIC
from hmp.data.synthetic import GENERATED_LAYOUT, KINDS, LAYOUTS
from hmp.data.splits import check_train_fraction
from hmp.run import experiment

flags.DEFINE_string("dataset", "synthetic", "synthetic, a scene of hmp.data.download "
                    "(indian_pines, paviau, salinas, pavia_centre, ksc, botswana), or the "
                    "path of a cube file: .mat, .npy, ENVI (.hdr), GeoTIFF (.tif) or another "
                    "GDAL raster (then also --labels).")
flags.DEFINE_string("labels", None, "Label map file for a --dataset given as a path, of "
                    "any of its file types (an ENVI classification file brings its class "
                    "names).")
flags.DEFINE_string("cube_key", None, "MATLAB variable holding the cube, when the --dataset "
                    ".mat file holds several arrays.")
flags.DEFINE_string("labels_key", None, "MATLAB variable holding the label map, when the "
                    "--labels .mat file holds several arrays.")
flags.DEFINE_string("data_dir", None, "Folder with the scene files (default $HMP_DATA_DIR "
                    "or ./data); for --synthetic_layout of a real scene, its ground truth.")
flags.DEFINE_string("synthetic_layout", "generated", "Class layout of the synthetic scene: "
                    "generated, or a scene's name, e.g. indian_pines (ground truth in "
                    "--data_dir).")
flags.DEFINE_string("synthetic_kind", "reflectance", "Kind of synthetic scene: reflectance "
                    "(float, fields also shifted along the wavelengths) or radiance (at-sensor "
                    "counts as the real Indian Pines and Salinas files hold, water-vapour "
                    "bands left out; hmp.data.synthetic).")
flags.DEFINE_float("train_fraction", 0.1, "Share of each class's pixels used for training.")
flags.DEFINE_integer("train_per_class", 0, "Training pixels per class (overrides "
                     "--train_fraction when > 0).", lower_bound=0)
flags.DEFINE_string("split", "random", "random (stratified) or disjoint (spatially "
                    "separate train and test regions).")
flags.DEFINE_string("train_set", None, "Label-map file (any --labels file type, the "
                    "scene's shape, 0 = not in the set) of the training pixels; with "
                    "--test_set it replaces --split and --train_fraction.")
flags.DEFINE_string("test_set", None, "Label-map file of the test pixels (see --train_set).")
flags.DEFINE_integer("patch_size", 9, "Odd patch size (pixels).")
flags.DEFINE_integer("pca", 0, "Reduce the bands to this many PCA components (0: keep all); "
                     "hmp.train: when not given, the model's default (hybridsn: 45).",
                     lower_bound=0)
flags.DEFINE_integer("seed", 0, "Seed of the split, the data order and the synthetic scene.",
                     lower_bound=0)
FLAGS = flags.FLAGS


def _check_scene():
    """Flags that only apply to some --dataset: given for another, they would be ignored."""
    if is_cube_file(FLAGS.dataset):
        if not FLAGS.labels:
            raise cli.UsageError("--dataset=%s: a cube file needs its label map: give --labels"
                                 % FLAGS.dataset)
    else:
        for name in ("labels", "cube_key", "labels_key"):
            if FLAGS[name].value is not None:
                raise cli.UsageError("--%s=%s: only for a --dataset given as a cube file, "
                                     "not --dataset=%s"
                                     % (name, FLAGS[name].value, FLAGS.dataset))
    for name in ("synthetic_layout", "synthetic_kind"):
        if FLAGS.dataset != SYNTHETIC and FLAGS[name].present:
            raise cli.UsageError("--%s=%s: only for --dataset=synthetic, not --dataset=%s"
                                 % (name, FLAGS[name].value, FLAGS.dataset))
    if FLAGS.synthetic_kind not in KINDS:
        raise cli.UsageError("--synthetic_kind=%s: choose one of %s"
                             % (FLAGS.synthetic_kind, ", ".join(KINDS)))
    if FLAGS.synthetic_layout not in LAYOUTS:
        raise cli.UsageError("--synthetic_layout=%s: choose one of %s"
                             % (FLAGS.synthetic_layout, ", ".join(LAYOUTS)))


def check():
    """One-line errors for values of these flags the flag parser cannot judge."""
    _check_scene()
    if FLAGS.split not in experiment.SPLITS:
        raise cli.UsageError("--split=%s: choose one of %s"
                             % (FLAGS.split, ", ".join(experiment.SPLITS)))
    with cli.blame("patch_size"):
        check_patch_size(FLAGS.patch_size)
    with cli.blame("train_fraction"):
        check_train_fraction(FLAGS.train_fraction)


def data_config(seed):
    """The :class:`hmp.run.experiment.DataConfig` these flags describe, with split seed ``seed``."""
    return experiment.DataConfig(
        dataset=FLAGS.dataset, data_dir=FLAGS.data_dir, labels_path=FLAGS.labels,
        cube_key=FLAGS.cube_key, labels_key=FLAGS.labels_key,
        synthetic_layout=FLAGS.synthetic_layout, synthetic_kind=FLAGS.synthetic_kind,
        patch_size=FLAGS.patch_size, pca=FLAGS.pca,
        train_fraction=FLAGS.train_fraction, train_per_class=FLAGS.train_per_class,
        split=FLAGS.split, seed=seed, train_set=FLAGS.train_set, test_set=FLAGS.test_set)


def blamed():
    """The flags that name the scene's files (blamed when they cannot be read)."""
    given_split = tuple(key for key in ("train_set", "test_set") if FLAGS[key].value)
    if not is_cube_file(FLAGS.dataset):   # synthetic or a benchmark scene
        layout = ("synthetic_layout",) if FLAGS.dataset == SYNTHETIC and \
            FLAGS.synthetic_layout != GENERATED_LAYOUT else ()
        return ("dataset",) + layout + ("data_dir",) + given_split
    mat = [FLAGS[key].present or str(path).lower().endswith(".mat") for key, path in
           (("cube_key", FLAGS.dataset), ("labels_key", FLAGS.labels))]
    return (("dataset", "labels")
            + tuple(key for key, used in zip(("cube_key", "labels_key"), mat) if used)
            + given_split)
