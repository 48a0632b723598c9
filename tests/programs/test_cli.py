"""hmp.cli.run at a program's edge: how a program ends when its output's reader stops."""

import subprocess
import sys

# A program under hmp.cli.run that prints far more than a pipe holds (64 KiB on Linux)
PRINTS_ON = """
from hmp import cli

def main(argv):
    for line in range(100000):
        print("line %d" % line)

cli.run(main, "prints_on")
"""


def test_a_reader_that_stops_ends_the_program_with_one_line_and_141():
    program = subprocess.Popen([sys.executable, "-c", PRINTS_ON], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    assert program.stdout.readline() == "line 0\n"
    program.stdout.close()   # as `| head -1` does once it has its line
    stderr = program.stderr.read()
    assert program.wait(timeout=60) == 141   # 128 + SIGPIPE
    assert stderr == "prints_on: its output's reader stopped (e.g. | head): stopped there\n"
