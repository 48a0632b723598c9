"""Use a trained run: ``python -m hmp.predict --model_dir=RUN [--out=DIR] [--export=DIR]``.

Classifies every pixel of a scene with the run's model, on any devices (the
run's plan does not matter), and writes to ``--out``: ``class_map.npy``
(int32 [H, W], classes 1..K, 0 for no-data pixels), ``class_map.png`` (one
image pixel per scene pixel, legend to the right), ``probabilities.npy``
(float32 [H, W, K], smoothed over the run's window, ``--smoothing``, and guided by
the scene's first principal component if the run's smoothing was; all zero for
no-data pixels) and, for a scene read from
an ENVI or GDAL file, the class map in that format on the scene's map
(``hmp.data.raster_writer``: ``class_map.hdr``/``.img`` or ``class_map.tif``).
They replace an earlier prediction's there once all are written
(``hmp.files.replacing_entries``).
The scene is read and classified a tile at a time
(``hmp.run.inference.classify_tiles``), tiles as large as ``--memory_mb``
allows, with the same result as the whole scene at once. The scene defaults to
the run's own (its data flags, from results.json); ``--dataset`` (with
hmp.train's data flags) names another one with the same bands, e.g. a cube
file without ``--labels``.
``--export`` writes the model as a TensorFlow SavedModel (``hmp.run.export``).
"""

import os

import numpy as np

from hmp import cli

cli.import_tensorflow_quietly()   # before anything imports TensorFlow

import tensorflow.compat.v1 as tf  # noqa: E402
from absl import flags

import models
from hmp import files
from hmp.data.raster_writer import write_class_map
from hmp.errors import whole_number
from hmp.evaluation import maps
from hmp.evaluation.smoothing import smooth_rows
from hmp.measure.devices import check_local, device_list, gpu_count, session_config_for
from hmp.run import experiment, export, run_files, run_folder
from hmp.run.run_files import PREDICTION_FILES, PREDICTION_MAPS, PROBABILITIES
from hmp.run.inference import DATA_FLAGS, Classifier, TrainedRun, classify_tiles, open_cube, tiling
from hmp.run.progress import ProgressLine
from hmp.run.settings import check_file_flags

flags.DEFINE_string("model_dir", None, "The run's folder (hmp.train's --model_dir).")
flags.DEFINE_string("out", None, "Folder for class_map.npy, class_map.png and "
                    "probabilities.npy (default <model_dir>/prediction; none with only "
                    "--export).")
flags.DEFINE_string("export", None, "Write the model as a TensorFlow SavedModel here "
                    "(instead of the class map, unless --out is given too).")
flags.DEFINE_string("dataset", None, "The scene, as hmp.train's --dataset (default: the "
                    "run's scene, with its data flags unless given here); a cube file "
                    "needs no --labels.")
flags.DEFINE_string("labels", None, "Label map file of a --dataset given as a path "
                    "(optional, not read: prediction needs only the cube).")
flags.DEFINE_string("cube_key", None, "MATLAB variable of the cube.")
flags.DEFINE_string("labels_key", None, "MATLAB variable of the label map.")
flags.DEFINE_string("data_dir", None, "Folder with the scene files.")
flags.DEFINE_string("synthetic_layout", None, "Class layout of the synthetic scene.")
flags.DEFINE_string("synthetic_kind", None, "Kind of synthetic scene: reflectance or "
                    "radiance.")
flags.DEFINE_integer("seed", None, "Seed of the synthetic scene.")
flags.DEFINE_string("devices", None, "Comma-separated TensorFlow devices; the batch is "
                    "split evenly over them (default /gpu:0 if there is one, else /cpu:0).")
flags.DEFINE_integer("batch_size", 1024, "Pixels classified per step.")
flags.DEFINE_integer("memory_mb", 512, "Memory in MB for the scene's tiles: the scene is "
                     "read and classified a tile at a time, tiles as large as this allows "
                     "(TensorFlow, the model and one batch of patches come on top).")
flags.DEFINE_bool("tta", None, "Test-time augmentation: average the class probabilities of "
                  "each patch's 8 symmetries of the square (default: as the run's --tta); with "
                  "--export, the SavedModel's probabilities do so.")
flags.DEFINE_integer("smoothing", None, "Smooth each pixel's class probabilities over a "
                     "square of this many pixels around it (an odd number; 1: none; "
                     "default: the run's window, results.json's smoothing). Not in "
                     "--export's SavedModel, which classifies patches.")
flags.DEFINE_bool("smoothing_guide", None, "Smooth following the scene's edges (the guided "
                  "filter of hmp.train --smoothing_guide) or, --nosmoothing_guide, with the "
                  "window's mean (default: as the run).")
flags.mark_flag_as_required("model_dir")
FLAGS = flags.FLAGS


def _devices():
    if FLAGS.devices is None:
        return ["/gpu:0" if gpu_count() else "/cpu:0"]
    with cli.blame("devices"):
        devices = device_list(FLAGS.devices)
        check_local(devices)
    return devices


def predict_into(out_dir, run, raster, rows_of_tiles, model, progress, window=1,
                 guide=None):
    """Classifies ``raster`` a row of tiles at a time (``classify_tiles``), the
    probabilities smoothed over ``window`` x ``window`` pixels (``smooth_rows``; with
    ``guide``, an ``hmp.data.Guide``, or the mean), writing
    them as they come, then the class maps. They replace an earlier prediction's files in
    ``out_dir`` (``run_files.PREDICTION_FILES``: a map of another format it wrote goes
    too) once all are written; other files there are kept. Returns (the number of no-data pixels,
    the names of the files written)."""
    with files.replacing_entries(out_dir, PREDICTION_FILES) as new:
        os.mkdir(new)
        return _write_prediction(new, run, raster, rows_of_tiles, model, progress, window,
                                 guide)


def _write_prediction(out_dir, run, raster, rows_of_tiles, model, progress, window, guide):
    """``predict_into``'s files, written into the new folder ``out_dir``."""
    height, width = raster.shape[:2]
    class_map = np.zeros((height, width), np.int32)
    nodata_pixels = 0
    with open(os.path.join(out_dir, PROBABILITIES), "wb") as f:
        np.lib.format.write_array_header_1_0(f, {
            "descr": np.lib.format.dtype_to_descr(np.dtype(np.float32)),
            "fortran_order": False, "shape": (height, width, len(run.class_names))})
        for rows, probabilities, nodata in smooth_rows(   # zeros for no-data pixels
                classify_tiles(run, raster, rows_of_tiles, model, progress, guide), window):
            class_map[rows] = np.where(nodata, 0, probabilities.argmax(axis=2) + 1)
            probabilities.tofile(f)
            nodata_pixels += int(nodata.sum())
    contents = (lambda f: np.save(f, class_map),
                lambda f: f.write(maps.png_bytes(maps.map_with_legend(class_map,
                                                                      run.class_names))))
    for name, write in zip(PREDICTION_MAPS, contents):
        with open(os.path.join(out_dir, name), "wb") as f:
            write(f)
    return nodata_pixels, [PROBABILITIES, *PREDICTION_MAPS, *write_class_map(
        out_dir, class_map, run.class_names, maps.class_colors(len(run.class_names)),
        raster.info)]


def main(argv):
    if len(argv) > 1:
        raise cli.UsageError("unexpected arguments %s (flags start with --)" % argv[1:])
    with cli.stop_on_signals("interrupted; no half-written file is left: run the command "
                             "again to predict"):
        _predict()


def _predict():
    """Exports the run of --model_dir, or classifies the cube the flags name with it."""
    for name, least in (("batch_size", 1), ("memory_mb", 1), ("seed", 0)):
        if FLAGS[name].value is not None:
            with cli.blame(name):   # in hmp.train's words (hmp.run.settings.Settings.check)
                whole_number(FLAGS[name].value, name, least)
    tf.disable_eager_execution()
    tf.logging.set_verbosity(tf.logging.ERROR)
    with cli.blame("model_dir"):
        run = TrainedRun.open(FLAGS.model_dir, models.get_model)
    devices = _devices()
    with cli.blame("smoothing"):
        tta, window = run.classifying(FLAGS.tta, FLAGS.smoothing)
    with cli.blame("smoothing_guide"):
        guide = run.guide_for(window, FLAGS.smoothing_guide)
    if FLAGS.export:
        _export(run, tta)
        if FLAGS.out is None:
            return
    out_dir = FLAGS.out or os.path.join(FLAGS.model_dir, run_files.PREDICTION)
    with cli.blame("out"):
        files.check_folder_can_be_made(out_dir)   # before the work; made when written
        run_folder.check_holds_no_run(out_dir)
    raster, dataset, scene_flags = _open_scene(run)
    with cli.blame("memory_mb"):
        rows_of_tiles = tiling(run, raster, FLAGS.memory_mb * 2**20, window, guide)
    tile = rows_of_tiles[0][0].shape
    _say_tiles(run, dataset, raster, rows_of_tiles, devices, window, guide)
    with cli.blame("model_dir"):
        model = Classifier(run, devices, FLAGS.batch_size, tile, session_config_for(devices),
                           tta)
    with model, cli.blame("out", also=(OSError,)), cli.blame(*scene_flags):
        nodata, written = predict_into(out_dir, run, raster, rows_of_tiles, model,
                                       ProgressLine(), window, guide)
    if nodata:
        print(experiment.nodata_summary(nodata, raster.info), flush=True)
    print("%s of %d pixels in %s" % (", ".join(written), raster.shape[0] * raster.shape[1],
                                     out_dir))


def _export(run, tta):
    """--export: the run's SavedModel written there, and said."""
    with cli.blame("export", also=(OSError,)):
        files.check_folder_can_be_made(FLAGS.export)
        replaced = export.export_saved_model(run, FLAGS.export, tta=tta)
    print("SavedModel in %s (signature %r: patches -> logits, probabilities%s)%s"
          % (FLAGS.export, export.SIGNATURE,
             " averaged over the 8 symmetries" if tta else "",
             "; it replaced the SavedModel there" if replaced else ""), flush=True)


def _open_scene(run):
    """``(raster, dataset, scene flags)``: the cube to classify (the run's, or the one
    the data flags given name) with the run's bands, its file and the flags that named
    it (to blame)."""
    changed = {name: FLAGS[name].value for name in DATA_FLAGS if FLAGS[name].present}
    scene_flags = changed or ["model_dir"]
    dataset = changed.get("dataset", run.flags["dataset"])
    check_file_flags(dataset, changed)
    print("loading %s ..." % dataset, flush=True)
    with cli.blame(*scene_flags, also=(OSError,)):
        raster = open_cube(run.data_config(**changed))
        run.check_bands(raster.shape[2], raster.info.wavelengths, raster.info.wavelength_units,
                        raster.info.bad_bands)
    return raster, dataset, scene_flags


def _say_tiles(run, dataset, raster, rows_of_tiles, devices, window, guide):
    """What will be classified, in what tiles, with what, on which devices; and a note
    when --memory_mb makes tiles smaller than a batch."""
    tile = rows_of_tiles[0][0].shape
    tiles = sum(map(len, rows_of_tiles))
    print("%s: %dx%d pixels in %d tile%s of up to %dx%d; %s model of %s on %s%s"
          % (dataset, *raster.shape[:2], tiles, "s"[:tiles > 1], *tile, run.flags["model"],
             run.checkpoint, ", ".join(devices),
             "; probabilities smoothed over %d x %d pixels%s" % (
                 window, window, ", guided" if guide is not None else "")
             if window > 1 else ""), flush=True)
    if tile[0] * tile[1] < min(FLAGS.batch_size, raster.shape[0] * raster.shape[1]):
        print("note: --memory_mb=%d gives tiles of %dx%d pixels, fewer than a batch "
              "(--batch_size=%d): each is read with its border and classified on its own, "
              "slowly; more --memory_mb makes fewer, larger tiles"
              % (FLAGS.memory_mb, *tile, FLAGS.batch_size), flush=True)


if __name__ == "__main__":
    cli.run(main, "hmp.predict")
