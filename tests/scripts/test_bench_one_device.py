"""scripts/bench_one_device.py's flags: refused in one line, before any step is built."""

import subprocess
import sys

from cli_batch import HUNG_S
from script_modules import SCRIPTS

SCRIPT = str(SCRIPTS / "bench_one_device.py")


def test_bad_flags_are_one_line_with_no_tensorflow_start_up_lines():
    """Processes of their own: their whole stderr, TensorFlow's start-up included, is
    one line."""
    bad = {"--models=ssrn": "--models=ssrn: 'ssrn' has no plain-TensorFlow twin; choose "
                            "from cnn2d, cnn3d",
           "--batch_sizes=32,0": "--batch_sizes=32,0: give whole numbers >= 1"}
    started = {flag: subprocess.Popen([sys.executable, SCRIPT, flag], stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True) for flag in bad}
    for flag, expected in bad.items():
        stdout, stderr = started[flag].communicate(timeout=HUNG_S)
        assert (started[flag].returncode, stdout) == (2, ""), (flag, stderr)
        assert stderr == "bench_one_device: error: %s\n" % expected
