"""Hyperspectral data pipeline: scenes, synthetic data, splits, preprocessing, patches.

Typical use::

    from hmp import data
    scene = data.load_scene("indian_pines", "data")       # or "synthetic"
    split = data.stratified_split(scene.labels, train_fraction=0.1, seed=0)
    cube = data.Preprocessor("standard", pca_components=30).fit_transform(scene.cube, split.train)
    train = data.PatchDataset(data.PatchExtractor(cube, 9), scene.labels, split.train)
    for batch in train.batches(64, seed=0, epoch=0):
        ...

Nothing here imports TensorFlow; a batch is numpy pixel indices and labels, whose
patches (``batch.patches``) are cut when asked for.
"""

from hmp.data.catalog import SCENES, SceneFile, SceneSpec, find_file, load_ground_truth, scene_spec
from hmp.data.formats import open_raster, read_label_map
from hmp.data.matfile import read_array
from hmp.data.patches import (Batch, PatchDataset, PatchExtractor, check_patch_size,
                              iterate_scene, split_batch)
from hmp.data.leakage import split_leakage, window_counts
from hmp.data.loaders import is_cube_file, load_benchmark_scene, load_scene, load_scene_files
from hmp.data.preprocess import (PCA, BandScaler, BrightnessNormaliser, Guide, Preprocessor,
                                 TooFewBands, pad_cube, training_pixels)
from hmp.data.raster import ArrayRaster, Raster, RasterInfo
from hmp.data.scene import Scene
from hmp.data.split_maps import split_from_label_maps
from hmp.data.splits import (Split, disjoint_split, load_split, save_split,
                             spatial_validation_split, stratified_split, validation_split)
from hmp.data.synthetic import synthetic_scene

__all__ = [
    "ArrayRaster", "BandScaler", "Batch", "BrightnessNormaliser", "Guide", "PCA",
    "PatchDataset", "PatchExtractor",
    "Preprocessor", "Raster", "RasterInfo", "SCENES", "Scene", "SceneFile", "SceneSpec",
    "Split", "check_patch_size",
    "disjoint_split", "find_file", "is_cube_file", "iterate_scene", "load_benchmark_scene",
    "load_ground_truth", "load_scene", "load_scene_files", "load_split", "open_raster",
    "pad_cube", "read_array", "read_label_map", "save_split", "scene_spec",
    "spatial_validation_split", "split_batch", "split_from_label_maps",
    "split_leakage", "stratified_split", "synthetic_scene", "TooFewBands", "training_pixels",
    "validation_split", "window_counts",
]
