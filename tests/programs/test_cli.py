"""hmp.cli.run at a program's edge: how a program ends when its output's reader stops."""

import subprocess
import sys

import pytest

# A program under hmp.cli.run that prints far more than a pipe holds (64 KiB on Linux)
PRINTS_ON = """
from hmp import cli

def main(argv):
    for line in range(100000):
        print("line %d" % line)

cli.run(main, "prints_on")
"""


# ... the same inside a block that blames a flag for the OSErrors of its files
# (hmp.predict's --out): a broken pipe is not the flag's fault
PRINTS_ON_BLAMING = PRINTS_ON.replace(
    "    for line in range(100000):",
    "    with cli.blame('out', also=(OSError,), values={'out': 'x'}, chosen={'out'}):\n"
    "      for line in range(100000):")


@pytest.mark.parametrize("program", [PRINTS_ON, PRINTS_ON_BLAMING])
def test_a_reader_that_stops_ends_the_program_with_one_line_and_141(program):
    program = subprocess.Popen([sys.executable, "-c", program], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    assert program.stdout.readline() == "line 0\n"
    program.stdout.close()   # as `| head -1` does once it has its line
    stderr = program.stderr.read()
    assert program.wait(timeout=60) == 141   # 128 + SIGPIPE
    assert stderr == "prints_on: its output's reader stopped (e.g. | head): stopped there\n"


def test_a_reader_of_both_streams_that_stops_ends_it_with_141_too():
    """``2>&1 | head``: the one line goes to the same closed pipe; still 141, no traceback."""
    program = subprocess.Popen([sys.executable, "-c", PRINTS_ON], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    assert program.stdout.readline() == "line 0\n"
    program.stdout.close()
    assert program.wait(timeout=60) == 141


def test_ctrl_c_before_a_run_takes_it_is_one_line_and_130():
    """Ctrl-C while the program waits (for a worker, say) before a run's own handler takes
    it: one line, exit 130, no traceback."""
    # Python's own SIGINT handler, as a program started from a shell has it (a child of
    # an xdist worker inherits its ignoring SIGINT)
    waits = ("from hmp import cli\nimport os, signal\n"
             "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
             "def main(argv):\n    os.kill(os.getpid(), signal.SIGINT)\n"
             "cli.run(main, 'waits')\n")
    done = subprocess.run([sys.executable, "-c", waits], capture_output=True, text=True,
                          timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (130, "", "waits: interrupted\n")
