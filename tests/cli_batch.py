"""A command-line program run many times in one child interpreter: one TensorFlow import.

Every ``python -m hmp.train`` a test starts pays a Python start and a TensorFlow
import (seconds on 2 cores) before it does anything, and most of the runs the
tests need are short: a refused flag, a resume, a tiny training. ``run_batch``
runs a list of them in order in one child process, each as its own process
would: ``sys.argv`` set, the flags parsed afresh, the program run as
``__main__`` (``runpy``), its stdout and stderr captured, its exit code taken
from ``SystemExit``, and an exception that escapes printed as a traceback with
exit code 1, as Python does. The child imports the program from this checkout.

Runs that must be processes of their own (a signal, a kill) start one themselves.
"""

import contextlib
import importlib.util
import io
import json
import os
import pathlib
import runpy
import subprocess
import sys
import tempfile
import traceback
from collections import namedtuple

REPO = pathlib.Path(__file__).resolve().parents[1]

Run = namedtuple("Run", "returncode stdout stderr")


def run_batch(program, runs, timeout=600):
    """Runs ``program`` once per entry of ``runs``, in order, in one child process.

    Args:
      program: a module run as ``python -m`` ("hmp.train") or a script's path
        (relative to the checkout, e.g. "scripts/plan_layout.py"). One program
        per batch: two programs' flags would share one flag registry.
      runs: dicts with ``args`` (list of str) and optionally ``cwd``, ``env``
        (added to the environment) and ``pythonpath`` (a folder put first on
        ``sys.path``, as PYTHONPATH would).

    Returns:
      A ``Run(returncode, stdout, stderr)`` per entry.
    """
    with tempfile.TemporaryDirectory(prefix="hmp-cli-batch-") as folder:
        request, answer = pathlib.Path(folder, "runs.json"), pathlib.Path(folder, "out.json")
        request.write_text(json.dumps({"program": program, "runs": runs}))
        child = subprocess.run([sys.executable, __file__, str(request), str(answer)],
                               cwd=REPO, capture_output=True, text=True, timeout=timeout)
        if child.returncode != 0 or not answer.exists():
            raise RuntimeError("the batch of %s runs failed:\n%s"
                               % (program, child.stderr[-3000:]))
        return [Run(*result) for result in json.loads(answer.read_text())]


def run_batch_with_out(program, args, folder):
    """{name: (Run, its file)} of ``program`` run with each ``args[name]`` plus
    ``--out=<folder>/<name>.json``, in one child process (``run_batch``)."""
    outs = {name: pathlib.Path(folder, f"{name}.json") for name in args}
    runs = run_batch(program, [{"args": [*flags, f"--out={outs[name]}"]}
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


def _main(request, answer):
    sys.path.insert(0, str(REPO))   # this checkout's hmp, as python -m from it imports
    batch = json.loads(pathlib.Path(request).read_text())
    results = [_run_one(batch["program"], **run) for run in batch["runs"]]
    pathlib.Path(answer).write_text(json.dumps(results))


if __name__ == "__main__":
    _main(*sys.argv[1:])
