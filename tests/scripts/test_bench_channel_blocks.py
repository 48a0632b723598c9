"""scripts/bench_channel_blocks.py: its table (one row per filter count, the host's blocks;
no timed figure is asserted) and its refusal of a reference it does not time."""

import math
import subprocess
import sys

from cli_batch import HUNG_S
from hmp.measure.channel_blocks import CPU_FLAGS_FILE, lanes_of
from script_modules import SCRIPTS

SCRIPT = str(SCRIPTS / "bench_channel_blocks.py")
SMALL = ["--batch_size=2", "--patch=3", "--depth=2", "--in_channels=3", "--out_channels=2",
         "--repeats=1", "--steps=1"]


def test_a_row_per_count_with_its_blocks():
    """The table's structure only: its times are measured, so no test reads them."""
    done = subprocess.run([sys.executable, SCRIPT, "--filters=17,8,16", "--reference=16",
                           *SMALL], capture_output=True, text=True, timeout=HUNG_S)
    assert done.returncode == 0, done.stderr
    rows = [line.strip("|").split("|") for line in done.stdout.splitlines()
            if line.startswith("| ") and not line.startswith("| filters")]
    lanes = lanes_of(open(CPU_FLAGS_FILE).read())
    assert [(int(r[0]), int(r[1])) for r in rows] == [(c, math.ceil(c / lanes))
                                                    for c in (8, 16, 17)]
    assert all(len(r) == 8 for r in rows)   # filters, blocks, 3 times, 3 ratios


def test_a_reference_not_timed_is_refused_in_one_line():
    done = subprocess.run([sys.executable, SCRIPT, "--filters=8,16", "--reference=64", *SMALL],
                          capture_output=True, text=True, timeout=HUNG_S)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == ("bench_channel_blocks: error: --reference=64: not one of "
                           "--filters=8,16\n")
