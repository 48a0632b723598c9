"""Peak memory of ``python -m hmp.predict`` on a scene too large to hold whole.

Default: a 2000 x 2000 x 200 ENVI cube (int16, BIL: 1.6 GB on disk, 3.2 GB as
float32), classified a tile at a time at each ``--memory_mb``.

    python scripts/bench_predict_memory.py [--size=2000 --bands=200 --memory_mb=256,1024]

The script writes the cube into ``--work_dir`` (a synthetic scene tiled over it,
written a block of rows at a time), trains a small cnn2d for one epoch on a
64 x 64 scene of the same bands, then runs hmp.predict as a child process once on
that small scene (what TensorFlow and the model cost alone) and once on the large
cube per ``--memory_mb``, and prints each child's peak resident memory (its
``ru_maxrss``), time and speed (both with the child's start: Python, TensorFlow,
the graph) as a table.
"""

import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
from absl import flags

from hmp import cli
from hmp.data import synthetic_scene

FLAGS = flags.FLAGS
flags.DEFINE_integer("size", 2000, "Rows and columns of the large cube.", lower_bound=1)
flags.DEFINE_integer("bands", 200, "Spectral bands.", lower_bound=1)
flags.DEFINE_list("memory_mb", ["256", "1024"], "hmp.predict's --memory_mb values to run.")
flags.DEFINE_string("work_dir", None, "Folder for the cube and the run (default: a temporary "
                    "folder, deleted at the end).")
flags.DEFINE_integer("batch_size", 1024, "hmp.predict's --batch_size.", lower_bound=1)

TRAIN = ["--model=cnn2d", "--width=4", "--patch_size=5", "--batch_size=64",
         "--train_fraction=0.5", "--epochs=1", "--notta", "--devices=/cpu:0"]
BLOCK_ROWS = 100   # rows of the large cube written at once


def write_envi_bil(stem, rows, cols, cube_rows):
    """An int16 BIL ENVI file ``<stem>.img`` (and ``.hdr``) of ``rows`` x ``cols``, its
    rows ``cube_rows(top, bottom)`` (int16 [n, cols, bands]) written a block at a time."""
    bands = None
    with open(f"{stem}.img", "wb") as f:
        for top in range(0, rows, BLOCK_ROWS):
            block = cube_rows(top, min(top + BLOCK_ROWS, rows))
            bands = block.shape[2]
            f.write(np.ascontiguousarray(block.transpose(0, 2, 1)).astype("<i2").tobytes())
    pathlib.Path(f"{stem}.hdr").write_text(
        f"ENVI\nsamples = {cols}\nlines = {rows}\nbands = {bands}\nheader offset = 0\n"
        f"data type = 2\ninterleave = bil\nbyte order = 0\n")


def write_labels(stem, labels):
    """An ENVI classification file of ``labels`` [H, W]."""
    labels.astype(np.uint8).tofile(f"{stem}.img")
    classes = int(labels.max()) + 1
    pathlib.Path(f"{stem}.hdr").write_text(
        f"ENVI\nsamples = {labels.shape[1]}\nlines = {labels.shape[0]}\nbands = 1\n"
        f"header offset = 0\nfile type = ENVI Classification\ndata type = 1\n"
        f"interleave = bsq\nbyte order = 0\nclasses = {classes}\n")


def peak_of(command):
    """(exit code, peak resident memory in bytes, seconds, stdout) of a child process."""
    started = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True)
    output = child.stdout.read()
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    return child.returncode, usage.ru_maxrss * 1024, time.perf_counter() - started, output


def main(argv):
    del argv
    # hmp.predict's bounds, checked before a run is trained for them
    memory_mb = cli.whole_numbers("memory_mb")
    folder = pathlib.Path(FLAGS.work_dir or tempfile.mkdtemp(prefix="bench_predict_"))
    folder.mkdir(parents=True, exist_ok=True)
    try:
        run(folder, memory_mb)
    finally:
        if FLAGS.work_dir is None:
            shutil.rmtree(folder)


def run(folder, memory_mb):
    small = synthetic_scene(height=64, width=64, n_classes=5, n_bands=FLAGS.bands, seed=0,
                            field_size=10, region_smoothness=4)
    to_int16 = lambda cube: np.round(cube * 1000).astype(np.int16)   # noqa: E731
    write_envi_bil(folder / "small", 64, 64, lambda top, bottom: to_int16(small.cube[top:bottom]))
    write_labels(folder / "small_gt", small.labels)
    tile = to_int16(synthetic_scene(height=145, width=145, n_classes=5, n_bands=FLAGS.bands,
                                    seed=1).cube)
    size = FLAGS.size
    columns = np.arange(size) % tile.shape[1]   # the 145 x 145 scene repeated
    write_envi_bil(folder / "large", size, size, lambda top, bottom: tile[
        np.arange(top, bottom) % tile.shape[0]][:, columns])
    print("cube: %d x %d x %d int16 BIL, %.2f GB on disk (%.2f GB as float32)"
          % (size, size, FLAGS.bands, (folder / "large.img").stat().st_size / 1e9,
             size * size * FLAGS.bands * 4 / 1e9), flush=True)
    code, _, seconds, output = peak_of(
        [sys.executable, "-m", "hmp.train", *TRAIN, "--dataset=%s" % (folder / "small.hdr"),
         "--labels=%s" % (folder / "small_gt.hdr"), "--model_dir=%s" % (folder / "run")])
    if code:
        raise RuntimeError("hmp.train failed:\n" + output[-3000:])
    print("trained cnn2d (width 4, 5x5 patches) in %.0f s" % seconds, flush=True)
    rows = [["scene", "--memory_mb", "tiles", "peak RSS", "seconds (with start)",
             "pixels/s"]]
    cases = [("64 x 64", folder / "small.hdr", memory_mb[0])] + [
        ("%d x %d" % (size, size), folder / "large.hdr", mb) for mb in memory_mb]
    for name, path, bound in cases:
        code, peak, seconds, output = peak_of(
            [sys.executable, "-m", "hmp.predict", "--model_dir=%s" % (folder / "run"),
             "--dataset=%s" % path, "--memory_mb=%d" % bound,
             "--batch_size=%d" % FLAGS.batch_size, "--devices=/cpu:0",
             "--out=%s" % (folder / "prediction")])
        if code:
            raise RuntimeError("hmp.predict failed:\n" + output[-3000:])
        tiles = next(line for line in output.splitlines() if " tile" in line)
        tiles = tiles.split(" pixels in ")[1].split(";")[0]
        pixels = int(name.split(" x ")[0]) ** 2
        rows.append([name, str(bound), tiles, "%.2f GB" % (peak / 1e9), "%.0f" % seconds,
                     "%.0f" % (pixels / seconds)])
        print("  ".join(rows[-1]), flush=True)
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    print()
    for i, row in enumerate(rows):
        print("| " + " | ".join(cell.ljust(width) for cell, width in zip(row, widths)) + " |")
        if i == 0:
            print("|" + "|".join("-" * (width + 2) for width in widths) + "|")


if __name__ == "__main__":
    cli.run(main, "bench_predict_memory")
