"""Benchmarks patch batching: patches/s and peak extra memory of one epoch.

Default: a Pavia-University-sized synthetic cube (610 x 340 x 103, laid out
as 9 classes of smooth regions) cut into 11 x 11 x 103 patches, batches of 128.

    python scripts/bench_data.py [--patch_size=11 --batch_size=128 --epochs=1]
    python scripts/bench_data.py --layout=paviau --data_dir=data   # real Pavia U label map

Peak extra memory is measured with tracemalloc from just after the cube
exists (so it counts the padded copy, index arrays and batches, not the
cube) over one full epoch; throughput is timed in a separate pass without
tracemalloc.
"""

import time
import tracemalloc

from absl import flags

from hmp import cli
from hmp.data import PatchDataset, PatchExtractor, synthetic_scene

FLAGS = flags.FLAGS
flags.DEFINE_integer("height", 610, "Scene rows.")
flags.DEFINE_integer("width", 340, "Scene columns.")
flags.DEFINE_integer("bands", 103, "Spectral bands.")
flags.DEFINE_integer("classes", 9, "Classes of the generated layout.")
flags.DEFINE_string("layout", "generated",
                    "Synthetic layout: 'generated' or a scene name (e.g. 'paviau') whose "
                    "ground truth is read from --data_dir.")
flags.DEFINE_string("data_dir", None, "Folder with the ground truth of a named layout.")
flags.DEFINE_integer("patch_size", 11, "Patch side (odd).")
flags.DEFINE_integer("batch_size", 128, "Patches per batch.")
flags.DEFINE_integer("epochs", 1, "Timed epochs over all labelled pixels.")


def one_epoch(dataset, epoch, batch_size):
    """Cuts the patches of one epoch's batches; returns how many it cut (a batch cuts
    its patches only when asked for them)."""
    return sum(len(batch.patches) for batch in dataset.batches(batch_size, seed=0,
                                                                epoch=epoch))


def main(argv):
    del argv
    scene = synthetic_scene(FLAGS.layout, FLAGS.data_dir, height=FLAGS.height,
                            width=FLAGS.width, n_bands=FLAGS.bands, n_classes=FLAGS.classes)
    labelled = scene.labels.ravel().nonzero()[0]
    print(f"scene {scene.cube.shape}, cube {scene.cube.nbytes / 2**20:.0f} MiB, "
          f"{labelled.size} labelled pixels, patches {FLAGS.patch_size}x{FLAGS.patch_size}"
          f"x{FLAGS.bands}, batch {FLAGS.batch_size}")

    tracemalloc.start()
    dataset = PatchDataset(PatchExtractor(scene.cube, FLAGS.patch_size), scene.labels, labelled)
    one_epoch(dataset, 0, FLAGS.batch_size)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    margin = 2 * (FLAGS.patch_size // 2)
    padded = (scene.cube.shape[0] + margin) * (scene.cube.shape[1] + margin) * FLAGS.bands * 4
    print(f"peak extra memory over one epoch: {peak / 2**20:.0f} MiB "
          f"(of which the padded cube {padded / 2**20:.0f} MiB)")

    start = time.perf_counter()
    served = sum(one_epoch(dataset, epoch, FLAGS.batch_size)
                 for epoch in range(1, FLAGS.epochs + 1))
    elapsed = time.perf_counter() - start
    print(f"{served / elapsed:,.0f} patches/s ({served} patches in {elapsed:.2f} s)")


if __name__ == "__main__":
    cli.run(main, "bench_data")
