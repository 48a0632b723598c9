"""Named checks run in order and reported as one block of text (``python -m hmp.selfcheck``).

A check is a function returning ``(passed, lines)``: whether it passed and what it
found, its first line the headline. One that raises fails, with the error's first
line, and the checks after it still run; one that builds on an earlier check that did
not pass is skipped. ``HMP_TRACEBACK=1`` prints a failing check's traceback (stderr).
"""

import dataclasses
import os
import sys
import time
import traceback


@dataclasses.dataclass(frozen=True)
class Check:
    """One check: ``run()`` -> (passed, [lines]); ``needs``: names of earlier checks
    whose results it builds on."""

    name: str
    run: object
    needs: tuple = ()


def run_checks(checks, progress=None):
    """``[(name, "PASS" | "FAIL" | "SKIP", lines)]`` of ``checks``, run in order;
    ``progress(line)`` is told when each starts and how long it took."""
    say = progress or (lambda line: None)
    results, passed = [], set()
    for check in checks:
        missing = [name for name in check.needs if name not in passed]
        if missing:
            results.append((check.name, "SKIP", ["needs %s, which did not pass"
                                                 % ", ".join(missing)]))
            continue
        say("%s ..." % check.name)
        started = time.perf_counter()
        try:
            ok, lines = check.run()
        except Exception as error:   # pylint: disable=broad-except  # the check failed
            if os.environ.get("HMP_TRACEBACK"):
                traceback.print_exc(file=sys.stderr)
            ok, lines = False, [error_line(error)]
        say("%s: %.1f s" % (check.name, time.perf_counter() - started))
        if ok:
            passed.add(check.name)
        results.append((check.name, "PASS" if ok else "FAIL", list(lines)))
    return results


def error_line(error):
    """``Type: first line of the message`` (TensorFlow's errors keep theirs in
    ``message``)."""
    text = str(getattr(error, "message", None) or error).strip()
    return "%s: %s" % (type(error).__name__, text.splitlines()[0] if text else "")


def report(title, results):
    """``(text, passed)``: the results of ``run_checks`` under ``title``, one check a
    line (its further lines indented below it), ending with the verdict; ``passed``
    when every check passed."""
    width = max([len(name) for name, _, _ in results] + [0])
    lines = [title]
    for name, verdict, found in results:
        lines.append("%-*s  %s  %s" % (width, name, verdict, found[0] if found else ""))
        lines += ["%s  %s" % (" " * (width + 6), line) for line in found[1:]]
    failed = [name for name, verdict, _ in results if verdict != "PASS"]
    lines.append("%d of %d checks passed" % (len(results), len(results)) if not failed else
                 "%d of %d checks did not pass: %s" % (len(failed), len(results),
                                                       ", ".join(failed)))
    return "\n".join(lines), not failed
