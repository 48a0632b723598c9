"""Use a trained run: ``python -m hmp.predict --model_dir=RUN [--out=DIR] [--export=DIR]``.

Classifies every pixel of a scene with the run's model, on any devices (the
run's plan does not matter), and writes to ``--out``: ``class_map.npy``
(int32 [H, W], classes 1..K, 0 for no-data pixels), ``class_map.png`` (one
image pixel per scene pixel, legend to the right) and ``probabilities.npy``
(float32 [H, W, K]; all zero for no-data pixels). The scene defaults to the
run's own (its data flags, from results.json); ``--dataset`` (with hmp.train's
data flags) names another one with the same bands, e.g. a cube file without
``--labels``. ``--export`` writes the model as a
TensorFlow SavedModel (``hmp.run.export``).
"""

import os

import numpy as np

from hmp import cli

cli.import_tensorflow_quietly()   # before anything imports TensorFlow

import tensorflow.compat.v1 as tf  # noqa: E402
from absl import flags

import models
from hmp import files
from hmp.evaluation import maps
from hmp.run import export
from hmp.run.devices import check_local, gpu_count, session_config_for
from hmp.run.inference import DATA_FLAGS, Run, classify, load_scene
from hmp.run.progress import ProgressLine

flags.DEFINE_string("model_dir", None, "The run's folder (hmp.train's --model_dir).")
flags.DEFINE_string("out", None, "Folder for class_map.npy, class_map.png and "
                    "probabilities.npy (default <model_dir>/prediction; none with only "
                    "--export).")
flags.DEFINE_string("export", None, "Write the model as a TensorFlow SavedModel here "
                    "(instead of the class map, unless --out is given too).")
flags.DEFINE_string("dataset", None, "The scene, as hmp.train's --dataset (default: the "
                    "run's scene, with its data flags unless given here); a cube file "
                    "needs no --labels.")
flags.DEFINE_string("labels", None, "Label map file of a --dataset given as a path (optional).")
flags.DEFINE_string("cube_key", None, "MATLAB variable of the cube.")
flags.DEFINE_string("labels_key", None, "MATLAB variable of the label map.")
flags.DEFINE_string("data_dir", None, "Folder with the scene files.")
flags.DEFINE_string("synthetic_layout", None, "Class layout of the synthetic scene.")
flags.DEFINE_integer("seed", None, "Seed of the synthetic scene.", lower_bound=0)
flags.DEFINE_string("devices", None, "Comma-separated TensorFlow devices; the batch is "
                    "split evenly over them (default /gpu:0 if there is one, else /cpu:0).")
flags.DEFINE_integer("batch_size", 1024, "Pixels classified per step.")
flags.DEFINE_bool("tta", None, "Test-time augmentation: average the class probabilities of "
                  "each patch's 8 symmetries of the square (default: as the run's --tta); with "
                  "--export, the SavedModel's probabilities do so.")
flags.mark_flag_as_required("model_dir")
FLAGS = flags.FLAGS

OUTPUTS = ("class_map.npy", "class_map.png", "probabilities.npy")


def _devices():
    if FLAGS.devices is None:
        return ["/gpu:0" if gpu_count() else "/cpu:0"]
    devices = [d.strip() for d in FLAGS.devices.split(",") if d.strip()]
    with cli.blame("devices"):
        if not devices:
            raise cli.UsageError("give at least one TensorFlow device, e.g. /cpu:0")
        check_local(devices)
    return devices


def save_outputs(out_dir, probabilities, nodata, class_names):
    """Writes the class map (.npy and .png) and the probabilities, each file atomically."""
    probabilities = np.where(nodata[..., None], np.float32(0), probabilities)
    class_map = np.where(nodata, 0, probabilities.argmax(axis=2) + 1).astype(np.int32)
    contents = (lambda f: np.save(f, class_map),
                lambda f: f.write(maps.png_bytes(maps.map_with_legend(class_map, class_names))),
                lambda f: np.save(f, probabilities))
    for name, write in zip(OUTPUTS, contents):
        with files.atomic_path(os.path.join(out_dir, name)) as temporary:
            with open(temporary, "wb") as f:
                write(f)


def main(argv):
    if len(argv) > 1:
        raise cli.UsageError("unexpected arguments %s (flags start with --)" % argv[1:])
    tf.disable_eager_execution()
    tf.logging.set_verbosity(tf.logging.ERROR)
    with cli.blame("model_dir"):
        run = Run.open(FLAGS.model_dir, models.get_model)
    if FLAGS.batch_size < 1:
        raise cli.UsageError("--batch_size=%d: must be at least 1" % FLAGS.batch_size)
    devices = _devices()
    tta = run.flags.get("tta", False) if FLAGS.tta is None else FLAGS.tta
    if FLAGS.export:
        with cli.blame("export", also=(OSError,)):
            files.check_folder_can_be_made(FLAGS.export)
            export.export_saved_model(run, FLAGS.export, tta=tta)
        print("SavedModel in %s (signature %r: patches -> logits, probabilities%s)"
              % (FLAGS.export, export.SIGNATURE,
                 " averaged over the 8 symmetries" if tta else ""), flush=True)
        if FLAGS.out is None:
            return
    out_dir = FLAGS.out or os.path.join(FLAGS.model_dir, "prediction")
    with cli.blame("out"):
        files.check_folder_can_be_made(out_dir)   # before the work; made when it is done
    changed = {name: FLAGS[name].value for name in DATA_FLAGS if FLAGS[name].present}
    print("loading %s ..." % changed.get("dataset", run.flags["dataset"]), flush=True)
    with cli.blame(*(changed or ["model_dir"]), also=(OSError,)):
        scene = load_scene(run.data_config(**changed))
        cube, nodata = run.preprocess(scene)
    print("%s: %dx%d pixels; %s model of %s on %s"
          % (scene.name, *cube.shape[:2], run.flags["model"], run.checkpoint,
             ", ".join(devices)), flush=True)
    with cli.blame("model_dir"):
        probabilities = classify(run, cube, devices, FLAGS.batch_size,
                                 session_config_for(devices), ProgressLine(), tta=tta)
    with cli.blame("out", also=(OSError,)):
        save_outputs(out_dir, probabilities, nodata, run.class_names)
    print("class map (.npy, .png) and probabilities of %d pixels in %s"
          % (nodata.size, out_dir))


if __name__ == "__main__":
    cli.run(main, "hmp.predict")
