"""scripts/bench_data.py: an epoch it times cuts every patch it counts. In a process of its
own: the script's flags (--batch_size, --data_dir, ...) are other scripts' too, which the
test session imports."""

import subprocess
import sys

from cli_batch import HUNG_S
from script_modules import SCRIPTS

COUNT = '''
import sys
import numpy as np
sys.path.insert(0, sys.argv[1])
import bench_data
from hmp.data import PatchDataset, PatchExtractor

class CountingExtractor(PatchExtractor):
    cut = 0
    def __call__(self, indices):
        patches = super().__call__(indices)
        self.cut += len(patches)
        return patches

cube = np.random.default_rng(0).random((9, 8, 3)).astype(np.float32)
extractor = CountingExtractor(cube, 3)
dataset = PatchDataset(extractor, np.ones((9, 8), np.int32), np.arange(70))
print(bench_data.one_epoch(dataset, 0, 16), extractor.cut)
'''


def test_an_epoch_cuts_the_patches_it_counts():
    counted = subprocess.run([sys.executable, "-c", COUNT, str(SCRIPTS)], capture_output=True,
                             text=True, timeout=HUNG_S, check=False)
    assert counted.returncode == 0, counted.stderr[-2000:]
    assert counted.stdout.split() == ["70", "70"]   # counted, cut
