"""Child processes that never outlive the process that started them (no TensorFlow here)."""

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1   # linux/prctl.h


def die_with_parent():
    """In a child process (``subprocess.Popen(preexec_fn=...)``): on Linux, have the
    kernel send it SIGTERM when the process that started it dies, even by SIGKILL,
    so no worker or load generator outlives a killed benchmark or test."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def pinned(cpus):
    """A ``preexec_fn`` for a child that runs on ``cpus`` alone from its first instruction
    and dies with its parent (``die_with_parent``)."""
    def start():
        os.sched_setaffinity(0, cpus)
        die_with_parent()
    return start
