"""Loading scenes from .mat (v5 and v7.3) and .npy files, and the real ground-truth maps."""

import os
import pathlib
import re
import shutil

import h5py
import numpy as np
import pytest
import scipy.io
from scipy import ndimage

from hmp.data import (Scene, disjoint_split, load_benchmark_scene, load_ground_truth,
                      load_scene, read_array, scene_spec)

REPO = pathlib.Path(__file__).resolve().parents[2]
SHARED_DATA = pathlib.Path(os.environ.get("HMP_SHARED_DATA", REPO.parent / "shared" / "data"))

# Labelled pixels per class, as published with the scenes (EHU GIC wiki).
PUBLISHED_COUNTS = {
    "indian_pines": [46, 1428, 830, 237, 483, 730, 28, 478, 20, 972, 2455, 593, 205, 1265, 386, 93],
    "paviau": [6631, 18649, 2099, 3064, 1345, 5029, 1330, 3682, 947],
    "salinas": [2009, 3726, 1976, 1394, 2678, 3959, 3579, 11271, 6203, 3278, 1068, 1927, 916,
                1070, 7268, 1807],
}
PUBLISHED_TOTALS = {"indian_pines": 10249, "paviau": 42776, "salinas": 54129}
GT_FILES = {"indian_pines": "Indian_pines_gt.mat", "paviau": "PaviaU_gt.mat",
            "salinas": "Salinas_gt.mat"}


def write_mat_v73(path, arrays):
    """Writes arrays the way MATLAB's ``save -v7.3`` does: HDF5, column-major (transposed)."""
    classes = {"uint8": "uint8", "float64": "double", "float32": "single", "int32": "int32"}
    with h5py.File(path, "w", userblock_size=512) as handle:
        for name, array in arrays.items():
            array = np.asarray(array)
            dataset = handle.create_dataset(name, data=array.T)
            dataset.attrs["MATLAB_class"] = np.bytes_(classes[array.dtype.name])
    header = (b"MATLAB 7.3 MAT-file, Platform: GLNXA64, "
              b"Created on: Mon Jan  1 00:00:00 2024 HDF5 schema 1.00 .")
    with open(path, "r+b") as handle:
        handle.write(header.ljust(116) + bytes(8) + b"\x00\x02" + b"IM")


def small_scene_arrays(seed=0, shape=(6, 5, 4)):
    rng = np.random.default_rng(seed)
    cube = rng.uniform(0, 9000, shape).round()
    labels = rng.integers(0, 4, shape[:2]).astype(np.uint8)
    labels.flat[:3] = [1, 2, 3]
    return cube, labels


def require_shared_data():
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real ground-truth folder {SHARED_DATA} is absent (set HMP_SHARED_DATA)")
    return SHARED_DATA


@pytest.mark.parametrize("version", ["v5", "v7.3"])
def test_pavia_university_loads_from_mat_files_of_both_versions(tmp_path, version):
    cube, labels = small_scene_arrays()
    if version == "v5":
        scipy.io.savemat(tmp_path / "PaviaU.mat", {"paviaU": cube})
        scipy.io.savemat(tmp_path / "PaviaU_gt.mat", {"paviaU_gt": labels})
    else:
        write_mat_v73(tmp_path / "PaviaU.mat", {"paviaU": cube})
        write_mat_v73(tmp_path / "PaviaU_gt.mat", {"paviaU_gt": labels})
    scene = load_scene("paviau", tmp_path)
    np.testing.assert_array_equal(scene.cube, cube.astype(np.float32))
    np.testing.assert_array_equal(scene.labels, labels)
    assert scene.cube.dtype == np.float32 and scene.labels.dtype == np.int32
    assert scene.class_names[0] == "Asphalt" and scene.n_classes == 9
    assert scene.units is None   # not known for Pavia University's file


def test_v73_reader_undoes_matlab_column_major_storage(tmp_path):
    cube = np.arange(2 * 3 * 4, dtype=np.float64).reshape(2, 3, 4)
    write_mat_v73(tmp_path / "cube.mat", {"x": cube})
    with h5py.File(tmp_path / "cube.mat") as handle:
        assert handle["x"].shape == (4, 3, 2)
    np.testing.assert_array_equal(read_array(tmp_path / "cube.mat", "x"), cube)


def test_an_hdf5_file_not_of_matlab_is_read_as_written(tmp_path):
    """Without MATLAB's userblock ("MATLAB 7.3 MAT-file") an HDF5 file is numpy's order."""
    cube = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4)
    with h5py.File(tmp_path / "cube.mat", "w") as handle:
        handle.create_dataset("x", data=cube)
    np.testing.assert_array_equal(read_array(tmp_path / "cube.mat"), cube)


@pytest.mark.parametrize("cube_name,labels_name", [
    ("indian_pines_corrected.mat", "indian_pines_gt.mat"),
    ("INDIAN_PINES_CORRECTED.MAT", "Indian_Pines_GT.mat"),
])
def test_file_names_match_ignoring_case(tmp_path, cube_name, labels_name):
    cube, labels = small_scene_arrays()
    scipy.io.savemat(tmp_path / cube_name, {"indian_pines_corrected": cube})
    scipy.io.savemat(tmp_path / labels_name, {"indian_pines_gt": labels})
    scene = load_benchmark_scene("Indian Pines", tmp_path)
    assert scene.name == "indian_pines" and scene.class_names[-1] == "Stone-Steel-Towers"
    np.testing.assert_array_equal(scene.cube, cube)
    np.testing.assert_array_equal(scene.labels, labels)


def test_generic_loader_reads_npy_and_single_array_mat_without_key(tmp_path):
    cube, labels = small_scene_arrays()
    np.save(tmp_path / "cube.npy", cube)
    scipy.io.savemat(tmp_path / "gt.mat", {"whatever": labels})
    scene = load_scene(tmp_path / "cube.npy", labels_path=tmp_path / "gt.mat",
                       class_names=["a", "b", "c"])
    assert scene.name == "cube" and scene.class_names == ["a", "b", "c"]
    assert scene.units is None   # a file's units are not known (--brightness_norm=auto: off)
    np.testing.assert_array_equal(scene.labels, labels)


def test_generic_loader_names_classes_when_no_names_are_given(tmp_path):
    cube, labels = small_scene_arrays()
    scipy.io.savemat(tmp_path / "scene.mat", {"data": cube, "gt": labels})
    scene = load_scene(tmp_path / "scene.mat", labels_path=tmp_path / "scene.mat",
                       cube_key="data", labels_key="gt")
    assert scene.class_names == ["class 1", "class 2", "class 3"]


def test_class_names_that_repeat_get_their_labels():
    """A name given to two classes (an ENVI file's, say) is told apart by its label: the
    reports and a run's results key their rows by name, and would merge the two."""
    cube, labels = small_scene_arrays()
    scene = Scene("s", cube, labels, class_names=["grass", "water", "grass"])
    assert scene.class_names == ["grass (class 1)", "water", "grass (class 3)"]


def test_missing_file_names_the_file_and_folder(tmp_path):
    with pytest.raises(FileNotFoundError) as error:
        load_scene("salinas", tmp_path)
    message = str(error.value)
    assert "Salinas_corrected.mat" in message and str(tmp_path) in message
    assert "--dataset=salinas" in message


def test_missing_data_folder_is_reported(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_scene("paviau", tmp_path / "nowhere")


def test_files_missing_from_the_default_folder_name_the_flag_and_variable_that_give_another(
        tmp_path, monkeypatch):
    """No data_dir given: the folder read is $HMP_DATA_DIR's, else ./data; the error says
    how to name the folder that holds the files, not only how to download them there.
    A folder given (--data_dir) is named as it is."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HMP_DATA_DIR", raising=False)
    with pytest.raises(FileNotFoundError) as unset:
        load_scene("salinas")
    assert str(unset.value) == (
        "Salinas_corrected.mat (any upper/lower case) not found because folder data does "
        "not exist; give the folder that holds it with --data_dir or the environment "
        "variable HMP_DATA_DIR (not set: ./data), or download it with: python -m "
        "hmp.data.download --dataset=salinas --data_dir=data")
    monkeypatch.setenv("HMP_DATA_DIR", str(tmp_path))
    with pytest.raises(FileNotFoundError) as elsewhere:
        load_ground_truth("paviau")
    assert str(elsewhere.value) == (
        "PaviaU_gt.mat (any upper/lower case) not found in %s; give the folder that holds "
        "it with --data_dir or the environment variable HMP_DATA_DIR (now %s), or download "
        "it with: python -m hmp.data.download --dataset=paviau --data_dir=%s"
        % (tmp_path, tmp_path, tmp_path))
    with pytest.raises(FileNotFoundError) as given:
        load_scene("paviau", tmp_path / "given")
    assert "--data_dir or" not in str(given.value)


def test_wrong_key_lists_the_keys_that_exist(tmp_path):
    scipy.io.savemat(tmp_path / "PaviaU.mat", {"pavia_cube": np.zeros((2, 2, 2))})
    scipy.io.savemat(tmp_path / "PaviaU_gt.mat", {"paviaU_gt": np.zeros((2, 2), np.uint8)})
    with pytest.raises(ValueError, match=r"no array named 'paviaU'.*\['pavia_cube'\]"):
        load_scene("paviau", tmp_path)


def test_several_arrays_without_key_is_refused(tmp_path):
    scipy.io.savemat(tmp_path / "two.mat", {"a": np.zeros(2), "b": np.ones(2)})
    with pytest.raises(ValueError, match=r"2 arrays \['a', 'b'\]"):
        read_array(tmp_path / "two.mat")


def test_units_other_than_radiance_or_reflectance_are_refused():
    with pytest.raises(ValueError, match="^scene 's': units 'counts' are not known; allowed: "
                                         "radiance, reflectance, None$"):
        Scene("s", np.ones((2, 2, 3)), np.ones((2, 2), np.int32), units="counts")


def test_label_map_of_other_shape_than_cube_is_refused(tmp_path):
    np.save(tmp_path / "cube.npy", np.zeros((6, 5, 4)))
    np.save(tmp_path / "gt.npy", np.zeros((5, 6), np.uint8))
    with pytest.raises(ValueError, match=r"^labels file .*gt.npy: the label map is 5 x 6 "
                                         r"\(rows x columns\), but the cube .*cube.npy is 6 x 5$"):
        load_scene(tmp_path / "cube.npy", labels_path=tmp_path / "gt.npy")


def test_unknown_scene_and_file_type_are_refused(tmp_path):
    with pytest.raises(ValueError, match="unknown scene 'houston'; allowed: indian_pines"):
        load_scene("houston")
    (tmp_path / "cube.tif").write_bytes(b"")
    with pytest.raises(ValueError, match="unsupported file type '.tif'; allowed: .mat, .npy"):
        read_array(tmp_path / "cube.tif")


def test_negative_or_fractional_labels_are_refused(tmp_path):
    np.save(tmp_path / "cube.npy", np.zeros((2, 2, 3)))
    np.save(tmp_path / "gt.npy", np.array([[0, 1.5], [1, 2]]))
    with pytest.raises(ValueError, match="whole numbers"):
        load_scene(tmp_path / "cube.npy", labels_path=tmp_path / "gt.npy")
    np.save(tmp_path / "gt.npy", np.array([[0, -1], [1, 2]]))
    with pytest.raises(ValueError, match="found -1"):
        load_scene(tmp_path / "cube.npy", labels_path=tmp_path / "gt.npy")
    # labels beyond int32 are refused as written (not wrapped round to another class)
    for labels in (np.array([[0, 2 ** 32 + 3], [1, 2]], np.int64),
                   np.array([[0, 2 ** 32 - 1], [1, 2]], np.uint32)):
        np.save(tmp_path / "gt.npy", labels)
        with pytest.raises(ValueError, match=r"^labels file %s: label map must hold labels "
                                             r"0..K \(0 = unlabelled\) up to 2147483647, "
                                             r"found %d$"
                                             % (re.escape(str(tmp_path / "gt.npy")),
                                                labels.max())):
            load_scene(tmp_path / "cube.npy", labels_path=tmp_path / "gt.npy")


@pytest.mark.parametrize("name", sorted(PUBLISHED_COUNTS))
def test_real_ground_truth_matches_published_class_counts(name):
    labels = load_ground_truth(name, require_shared_data())
    counts = np.bincount(labels.ravel(), minlength=len(PUBLISHED_COUNTS[name]) + 1)
    assert counts[1:].tolist() == PUBLISHED_COUNTS[name]
    assert counts[1:].sum() == PUBLISHED_TOTALS[name]


def test_real_ground_truth_pairs_with_a_cube_into_a_scene(tmp_path):
    shutil.copy(require_shared_data() / GT_FILES["indian_pines"], tmp_path / "Indian_pines_gt.mat")
    scipy.io.savemat(tmp_path / "Indian_pines_corrected.mat",
                     {"indian_pines_corrected": np.ones((145, 145, 3), np.uint16)})
    scene = load_scene("indian_pines", tmp_path)
    assert scene.cube.shape == (145, 145, 3) and scene.n_classes == 16
    assert scene.units == "radiance"   # the corrected file's at-sensor counts
    assert np.count_nonzero(scene.labels) == PUBLISHED_TOTALS["indian_pines"]


@pytest.mark.parametrize("name", sorted(PUBLISHED_COUNTS))
def test_real_ground_truth_splits_disjointly_for_9x9_patches(name):
    labels = load_ground_truth(name, require_shared_data())
    split = disjoint_split(labels, train_fraction=0.1, patch_size=9, seed=0)
    distance_to_training = ndimage.distance_transform_cdt(~split.train_mask, metric="chessboard")
    assert distance_to_training.flat[split.test].min() > 4
    assert len(np.unique(labels.flat[split.test])) == len(PUBLISHED_COUNTS[name])


# Scenes added from DeepHyperX's list (issue 32): name, MATLAB keys, upload paths, classes.
MORE_SCENES = {
    "pavia_centre": ("Pavia.mat", "pavia", "e/e3/Pavia.mat", "Pavia_gt.mat", "pavia_gt",
                     "5/53/Pavia_gt.mat", 9, "Water", "Bare Soil"),
    "ksc": ("KSC.mat", "KSC", "2/26/KSC.mat", "KSC_gt.mat", "KSC_gt", "a/a6/KSC_gt.mat", 13,
            "Scrub", "Water"),
    "botswana": ("Botswana.mat", "Botswana", "7/72/Botswana.mat", "Botswana_gt.mat",
                 "Botswana_gt", "5/58/Botswana_gt.mat", 14, "Water", "Exposed soils"),
}


@pytest.mark.parametrize("name", sorted(MORE_SCENES))
def test_more_scenes_load_by_name_from_their_mat_files(tmp_path, name):
    (cube_file, cube_key, cube_url, gt_file, gt_key, gt_url, classes, first,
     last) = MORE_SCENES[name]
    spec = scene_spec(name)
    assert (spec.cube.file_name, spec.cube.key, spec.cube.url_path) == (cube_file, cube_key,
                                                                        cube_url)
    assert (spec.labels.file_name, spec.labels.key, spec.labels.url_path) == (gt_file, gt_key,
                                                                              gt_url)
    assert spec.cube.sha256 is None and spec.labels.sha256 is None   # not verified: unknown
    cube, labels = small_scene_arrays()
    labels.flat[3] = classes
    scipy.io.savemat(tmp_path / cube_file, {cube_key: cube})
    scipy.io.savemat(tmp_path / gt_file, {gt_key: labels})
    scene = load_scene(name, tmp_path)
    assert scene.n_classes == classes and scene.class_names[0] == first
    assert scene.class_names[-1] == last
    np.testing.assert_array_equal(scene.labels, labels)


def test_deephyperx_names_of_the_scenes_are_understood():
    assert [scene_spec(name).name for name in ("PaviaC", "Pavia Centre", "KSC", "Botswana")] \
        == ["pavia_centre", "pavia_centre", "ksc", "botswana"]
