"""Command-line behaviour shared by hmp's programs: one-line errors, no tracebacks.

A user who mistypes a flag value should read one line that names the flag and
what is allowed, and get a non-zero exit code; a traceback is for bugs.
"""

import contextlib
import os
import sys

from absl import app, flags


class UsageError(ValueError):
    """A flag value that is not allowed; the message names the flag."""


class TrainingError(RuntimeError):
    """Training cannot go on (e.g. the loss became NaN); the message says why.

    Defined here, beside the handler in :func:`run`, so that catching or
    subclassing it (``hmp.cluster``, imported by every ``hmp.worker``) does not
    import the trainer; ``hmp.trainer.TrainingError`` is the same class.
    """


@contextlib.contextmanager
def blame(*flag_names):
    """Re-raises a ValueError/OSError from the block as a UsageError naming the flags."""
    try:
        yield
    except UsageError:
        raise
    except (ValueError, OSError) as error:
        values = ", ".join("--%s=%s" % (name, flags.FLAGS[name].value) for name in flag_names)
        raise UsageError("%s: %s" % (values, error)) from error


def _parse_flags(prog):
    def parse(argv):
        try:
            return flags.FLAGS(argv)
        except flags.Error as error:
            _fail(prog, error, 2)
    return parse


def _fail(prog, error, code):
    print("%s: error: %s" % (prog, error), file=sys.stderr)
    sys.exit(code)


def run(main, prog):
    """``app.run(main)``, turning expected errors into one line on stderr.

    Exit code 2 for bad input (flags, files, values), 1 when training itself
    fails (e.g. a NaN loss). Set HMP_TRACEBACK=1 to see tracebacks instead.
    """
    def guarded(argv):
        if os.environ.get("HMP_TRACEBACK"):   # for debugging hmp itself
            return main(argv)
        try:
            main(argv)
        except TrainingError as error:
            _fail(prog, error, 1)
        except (ValueError, OSError) as error:
            _fail(prog, error, 2)

    app.run(guarded, flags_parser=_parse_flags(prog))
