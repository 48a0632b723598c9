"""The flags that say which scene to load and how to split it.

Shared by ``python -m hmp.train`` and ``scripts/baselines.py``, so that a
baseline given the same flags scores on exactly the pixels a training run
uses (both build the split with :func:`hmp.run.experiment.prepare`). Only
definitions, with the defaults of :class:`hmp.run.experiment.DataConfig`: each
program builds its :class:`hmp.run.settings.Settings` from the flags given
and checks them there (``Settings.check_data``).
"""

from absl import flags

from hmp.run.experiment import DataConfig

flags.DEFINE_string("dataset", DataConfig.dataset, "synthetic, a scene of hmp.data.download "
                    "(indian_pines, paviau, salinas, pavia_centre, ksc, botswana), or the "
                    "path of a cube file: .mat, .npy, ENVI (.hdr), GeoTIFF (.tif) or another "
                    "GDAL raster (then also --labels).")
flags.DEFINE_string("labels", DataConfig.labels_path,
                    "Label map file for a --dataset given as a path, of "
                    "any of its file types (an ENVI classification file brings its class "
                    "names).")
flags.DEFINE_string("cube_key", DataConfig.cube_key,
                    "MATLAB variable holding the cube, when the --dataset "
                    ".mat file holds several arrays.")
flags.DEFINE_string("labels_key", DataConfig.labels_key,
                    "MATLAB variable holding the label map, when the "
                    "--labels .mat file holds several arrays.")
flags.DEFINE_string("data_dir", DataConfig.data_dir,
                    "Folder with the scene files (default $HMP_DATA_DIR "
                    "or ./data); for --synthetic_layout of a real scene, its ground truth "
                    "(refused where nothing is read: the generated scene, a cube file).")
flags.DEFINE_string("synthetic_layout", DataConfig.synthetic_layout,
                    "Class layout of the synthetic scene: "
                    "generated, or a scene's name, e.g. indian_pines (ground truth in "
                    "--data_dir).")
flags.DEFINE_string("synthetic_kind", DataConfig.synthetic_kind,
                    "Kind of synthetic scene: reflectance "
                    "(float, fields also shifted along the wavelengths) or radiance (at-sensor "
                    "counts as the real Indian Pines and Salinas files hold, water-vapour "
                    "bands left out; hmp.data.synthetic).")
flags.DEFINE_float("train_fraction", DataConfig.train_fraction,
                   "Share of each class's pixels used for training.")
flags.DEFINE_integer("train_per_class", DataConfig.train_per_class,
                     "Training pixels per class, instead of "
                     "--train_fraction (0: by --train_fraction).")
flags.DEFINE_string("split", DataConfig.split, "random (stratified) or disjoint (spatially "
                    "separate train and test regions).")
flags.DEFINE_string("train_set", DataConfig.train_set,
                    "Label-map file (any --labels file type, the "
                    "scene's shape, 0 = not in the set) of the training pixels; with "
                    "--test_set it gives the split (so no --split, --train_fraction or "
                    "--train_per_class with it).")
flags.DEFINE_string("test_set", DataConfig.test_set,
                    "Label-map file of the test pixels (see --train_set).")
flags.DEFINE_integer("patch_size", DataConfig.patch_size, "Odd patch size (pixels).")
flags.DEFINE_integer("pca", DataConfig.pca,
                     "Reduce the bands to this many PCA components (0: keep all); "
                     "hmp.train: when not given, the model's default (hybridsn: 45).")
flags.DEFINE_integer("seed", DataConfig.seed,
                     "Seed of the split, the data order and the synthetic scene.")

# The flags defined here (hmp.run.settings.FLAG_FIELDS: their DataConfig fields).
NAMES = ("dataset", "labels", "cube_key", "labels_key", "data_dir", "synthetic_layout",
         "synthetic_kind", "train_fraction", "train_per_class", "split", "train_set",
         "test_set", "patch_size", "pca", "seed")
