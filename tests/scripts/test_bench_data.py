"""scripts/bench_data.py: an epoch it times cuts every patch it counts."""

import numpy as np

from hmp.data import PatchDataset, PatchExtractor
from script_modules import import_script

bench = import_script("bench_data")


class CountingExtractor(PatchExtractor):
    """A PatchExtractor that counts the patches it cuts."""

    cut = 0

    def __call__(self, indices):
        patches = super().__call__(indices)
        self.cut += len(patches)
        return patches


def test_an_epoch_cuts_the_patches_it_counts():
    cube = np.random.default_rng(0).random((9, 8, 3)).astype(np.float32)
    labels = np.ones((9, 8), np.int32)
    extractor = CountingExtractor(cube, 3)
    dataset = PatchDataset(extractor, labels, np.arange(70))
    assert bench.one_epoch(dataset, 0, 16) == extractor.cut == 70
