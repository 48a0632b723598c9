"""A command-line program run many times in one child interpreter: one TensorFlow import.

Every ``python -m hmp.train`` a test starts pays a Python start and a TensorFlow
import (seconds on 2 cores) before it does anything, and most of the runs the
tests need are short: a refused flag, a resume, a tiny training. ``run_batch``
runs a list of them in order in a child process, each as its own process
would: ``sys.argv`` set, the flags parsed afresh, the program run as
``__main__`` (``runpy``), its stdout and stderr captured, its exit code taken
from ``SystemExit``, and an exception that escapes printed as a traceback with
exit code 1, as Python does. The child imports the program from this checkout.

The child of a program stays up for the next batch of that program, from any
test module, so a whole test session pays one TensorFlow import per program; it
ends when the session does (or with it, when the session is killed).

Runs that must be processes of their own (a signal, a kill) start one themselves.
"""

import atexit
import contextlib
import importlib.util
import io
import json
import os
import pathlib
import runpy
import select
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections import namedtuple

REPO = pathlib.Path(__file__).resolve().parents[1]

Run = namedtuple("Run", "returncode stdout stderr")

# Seconds after which a test takes a program it runs as hung, and fails: a guard against a
# hang, the same for every program and batch, not a speed limit (tests assert no speed).
HUNG_S = 600


def run_batch(program, runs, timeout=HUNG_S):
    """Runs ``program`` once per entry of ``runs``, in order, in its child process.

    Args:
      program: a module run as ``python -m`` ("hmp.train") or a script's path
        (relative to the checkout, e.g. "scripts/plan_layout.py"). One child per
        program: two programs' flags would share one flag registry.
      runs: dicts with ``args`` (list of str) and optionally ``cwd``, ``env``
        (added to the environment) and ``pythonpath`` (a folder put first on
        ``sys.path``, as PYTHONPATH would).

    Returns:
      A ``Run(returncode, stdout, stderr)`` per entry.
    """
    child = _child(program)
    try:
        return [Run(*result) for result in child.run(runs, timeout)]
    except BaseException:
        del _CHILDREN[program]   # the next batch starts a fresh child
        child.process.kill()
        child.close()
        raise


def started(program):
    """The process id of ``program``'s child (the parent of the processes its runs
    start), started now if it is not running. A test that runs a batch on another thread
    calls this on the main thread first: a child ends with the thread that started it
    (``die_with_parent``)."""
    return _child(program).process.pid


def wait_for_file(path, ended):
    """Returns once ``path`` exists or the run that writes it has ended (``ended()``),
    however long its steps take: no deadline of its own (a hung run is ended by its own
    time-out, ``run_batch``'s for a batch)."""
    while not path.exists() and not ended():
        time.sleep(0.02)


def _child(program):
    child = _CHILDREN.get(program)
    if child is None or child.process.poll() is not None:
        child = _CHILDREN[program] = _Child(program)
    return child


class _Child:
    """A child interpreter that runs ``program``'s batches, one at a time: a batch is
    a line on one pipe (its request and answer files), one byte on another when done."""

    def __init__(self, program):
        # not at the top: the child runs this file before it puts this checkout on sys.path
        from hmp.cluster.subprocesses import die_with_parent   # pylint: disable=import-outside-toplevel
        if threading.current_thread() is not threading.main_thread():
            # the kernel's parent-death signal follows the thread that starts the child
            raise RuntimeError("%s's child started off the main thread would end with that "
                               "thread: call cli_batch.started(%r) first" % (program, program))
        self.program = program
        self.folder = tempfile.TemporaryDirectory(prefix="hmp-cli-batch-")
        self.log = open(os.path.join(self.folder.name, "child.log"), "w+")
        to_child, self.requests = os.pipe()
        self.answers, from_child = os.pipe()
        self.process = subprocess.Popen(
            [sys.executable, __file__, program, str(to_child), str(from_child)], cwd=REPO,
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT,
            pass_fds=(to_child, from_child), preexec_fn=die_with_parent)
        os.close(to_child)
        os.close(from_child)
        self.batches = 0

    def run(self, runs, timeout):
        """[(exit code, stdout, stderr)] of ``runs``."""
        self.batches += 1
        request = pathlib.Path(self.folder.name, "runs-%d.json" % self.batches)
        answer = request.with_name("out-%d.json" % self.batches)
        request.write_text(json.dumps(runs))
        os.write(self.requests, b"%s\n" % json.dumps([str(request), str(answer)]).encode())
        ready, _, _ = select.select([self.answers], [], [], timeout)
        if not ready or not os.read(self.answers, 1) or not answer.exists():
            self.log.seek(0)
            raise RuntimeError("the batch of %s runs %s:\n%s" % (
                self.program, "timed out" if not ready else "failed",
                self.log.read()[-3000:]))
        return json.loads(answer.read_text())

    def close(self):
        os.close(self.requests)   # the child's end of input: it returns
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        os.close(self.answers)
        self.log.close()
        self.folder.cleanup()


_CHILDREN = {}   # program: its _Child


@atexit.register
def _close_children():
    while _CHILDREN:
        _CHILDREN.popitem()[1].close()


def run_batch_with_out(program, args, folder, cwd=None):
    """{name: (Run, its file)} of ``program`` run with each ``args[name]`` plus
    ``--out=<folder>/<name>.json``, in one child process (``run_batch``), each in the
    folder ``cwd`` (if given)."""
    outs = {name: pathlib.Path(folder, f"{name}.json") for name in args}
    where = {"cwd": str(cwd)} if cwd else {}
    runs = run_batch(program, [{"args": [*flags, f"--out={outs[name]}"], **where}
                               for name, flags in args.items()])
    return {name: (run, outs[name]) for name, run in zip(args, runs)}


def _exit_code(code):
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)   # sys.exit("message"), as Python prints it
    return 1


def _run_one(program, args, cwd=None, env=None, pythonpath=None):
    """One run in this process; returns (exit code, stdout, stderr)."""
    from absl import flags   # pylint: disable=import-outside-toplevel
    script = program.endswith(".py")
    path = str(REPO / program) if script else importlib.util.find_spec(program).origin
    # absl files a __main__'s flags under sys.argv[0], the program's path: drop the
    # previous run's, so that this run defines its own afresh, as a new process does
    for name in [name for name in flags.FLAGS
                 if flags.FLAGS.find_module_defining_flag(name) == path]:
        delattr(flags.FLAGS, name)
    flags.FLAGS.unparse_flags()   # every other flag back to its default
    saved = dict(os.environ), list(sys.path), os.getcwd(), set(sys.modules)
    os.environ.update(env or {})
    if script:
        sys.path.insert(0, os.path.dirname(path))   # as python does for a script
    if pythonpath:
        sys.path.insert(0, pythonpath)
    if cwd:
        os.chdir(cwd)
    sys.argv = [path, *args]
    stdout, stderr = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            try:
                if script:
                    runpy.run_path(path, run_name="__main__")
                else:
                    runpy.run_module(program, run_name="__main__", alter_sys=True)
                code = 0
            except SystemExit as exit_:
                code = _exit_code(exit_.code)
            except Exception:   # pylint: disable=broad-except
                traceback.print_exc()
                code = 1
    finally:
        environ, sys.path[:], cwd_before, modules = saved
        os.environ.clear()
        os.environ.update(environ)
        os.chdir(cwd_before)
        if pythonpath:   # the next run may bring a package of the same name
            for name in set(sys.modules) - modules:
                if (getattr(sys.modules[name], "__file__", None) or "").startswith(pythonpath):
                    del sys.modules[name]
    return code, stdout.getvalue(), stderr.getvalue()


def _serve(program, requests, answers):
    """The child: each line on fd ``requests`` names a batch's request file and its
    answer file; runs the batch, writes the answer, then one byte on fd ``answers``."""
    sys.path.insert(0, str(REPO))   # this checkout's hmp, as python -m from it imports
    with open(int(requests)) as lines:
        for line in lines:
            request, answer = json.loads(line)
            runs = json.loads(pathlib.Path(request).read_text())
            results = [_run_one(program, **run) for run in runs]
            pathlib.Path(answer).write_text(json.dumps(results))
            os.write(int(answers), b"1")


if __name__ == "__main__":
    _serve(*sys.argv[1:])
