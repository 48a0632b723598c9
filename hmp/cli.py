"""Command-line behaviour shared by hmp's programs: one-line errors, no tracebacks.

A user who mistypes a flag value should read one line that names the flag and
what is allowed, and get a non-zero exit code; a traceback is for bugs. Only
:class:`hmp.errors.InvalidInput` (raised by hmp's validators; ``UsageError``
is one) is input the user can fix: any other exception is a bug or a failure
and keeps its traceback (exit code 1).
"""

import contextlib
import importlib
import os
import re
import signal
import sys

from absl import app, flags

from hmp.errors import InvalidInput


class UsageError(InvalidInput):
    """A flag value that is not allowed; the message names the flag."""


class Interrupted(Exception):
    """The run stopped on SIGINT or SIGTERM; the message says how to continue.

    ``signum`` is the signal; :func:`run` exits with ``128 + signum`` (130 for
    Ctrl-C, 143 for SIGTERM), as a shell does for a process a signal ended.
    """

    def __init__(self, message, signum=signal.SIGINT):
        super().__init__(message)
        self.signum = int(signum)


class TrainingError(RuntimeError):
    """Training cannot go on (e.g. the loss became NaN); the message says why.

    Defined here, beside the handler in :func:`run`, so that catching or
    subclassing it (``hmp.cluster.runtime``, imported by every ``hmp.worker``) does not
    import the trainer.
    """


def import_tensorflow_quietly():
    """Imports TensorFlow without its C++ start-up and log lines; call it first thing.

    TensorFlow prints "oneDNN custom operations are on" (4 lines) at import, before
    its log level applies, and later one line per traced step ("Profiler session
    started"): they would bury a program's own lines and its one-line errors. So
    TF_CPP_MIN_LOG_LEVEL defaults to 2 (errors only) and stderr is closed while
    TensorFlow loads. TF_CPP_MIN_LOG_LEVEL=0 shows everything.
    """
    if "tensorflow" in sys.modules:
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if os.environ["TF_CPP_MIN_LOG_LEVEL"] == "0":
        importlib.import_module("tensorflow")
        return
    saved, devnull = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        importlib.import_module("tensorflow")
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


@contextlib.contextmanager
def stop_on_signals(message):
    """Within the block SIGINT and SIGTERM raise :class:`Interrupted` (``message``), so
    that the block's ``finally`` clauses and atomic writes clean up and :func:`run` ends
    the program in one line (a program without checkpoints to save; ``hmp.train`` answers
    them after its running step: ``hmp.run.run_folder.Signals``)."""
    signums = (signal.SIGINT, signal.SIGTERM)

    def interrupt(signum, _):
        for each in signums:   # once: a second Ctrl-C must not break the clean-up
            signal.signal(each, signal.SIG_IGN)
        raise Interrupted(message, signum)

    previous = {signum: signal.signal(signum, interrupt) for signum in signums}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@contextlib.contextmanager
def blame(*flag_names, also=(), values=None, chosen=None):
    """Re-raises an InvalidInput from the block as a UsageError naming the flags.

    ``also``: further exception classes to treat so, e.g. ``(OSError,)`` around
    reading the files the flags name. Any other exception passes unchanged: a
    bug (a ValueError of a custom model, say) is no fault of the flags.
    ``values``: {flag name: value} to name (a run's ``hmp.run.settings.Settings``);
    None: the parsed flags'. ``chosen``: the names the user chose (given, or set off
    their defaults); None: the parsed flags given on the command line. Of the flags
    listed, the chosen ones are named, or all when none was: a refusal does not name a
    flag left at its default beside one the user gave. A flag without a value (None: not
    given, its default applies) is not named beside flags with one: "--data_dir=None" is
    no value a user gave.
    """
    try:
        yield
    except (UsageError, BrokenPipeError):   # a pipe's reader gone is no fault of the flags
        raise
    except (InvalidInput, *also) as error:
        if chosen is None:   # the command line's, where the values are the parsed flags'
            chosen = (() if values is not None else
                      {name for name in flag_names if flags.FLAGS[name].present})
        flag_names = [name for name in flag_names if name in chosen] or flag_names
        given = values if values is not None else {
            name: flags.FLAGS[name].value for name in flag_names}
        valued = [name for name in flag_names if given[name] is not None]
        named = ", ".join(["--%s=%s" % (name, _as_given(given[name])) for name in valued]
                          or ["--%s (not given)" % name for name in flag_names])
        raise UsageError("%s: %s" % (named, error)) from error


def whole_numbers(name, minimum=1):
    """List flag ``name``'s items as ints >= ``minimum``; a UsageError naming the flag
    when one is not (or the list is empty)."""
    items = flags.FLAGS[name].value
    try:
        numbers = [int(item) for item in items]
    except ValueError:
        numbers = []
    if not numbers or min(numbers) < minimum:
        raise UsageError("--%s=%s: give whole numbers >= %d" % (name, _as_given(items), minimum))
    return numbers


def _as_given(value):
    """A flag's value as on the command line: a list flag's items joined by commas."""
    return ",".join(map(str, value)) if isinstance(value, list) else value


def _parse_flags(prog):
    def parse(argv):
        try:
            return flags.FLAGS(argv)
        except flags.CantOpenFlagFileError as error:   # absl's "ERROR:: Unable to open ..."
            _fail(prog, _unreadable_flagfile(argv) or str(error).replace("ERROR:: ", "", 1), 2)
        except flags.Error as error:
            _fail(prog, _flag_error(error), 2)
        except SystemExit as exit_:   # absl's --help (--helpfull, ...): its text, then exit 1
            sys.exit(0 if exit_.code == 1 else exit_.code)   # help asked for is no error
    return parse


# absl's words for a value its parser refuses, and what is allowed instead
# (absl's message, hmp's words: {0} the flag's name, {1} its value)
_ABSL_REFUSALS = (
    (re.compile(r"^flag --(\w+)=(.*?): invalid literal for int\(\) with base 10: .*$"),
     "--{0}={1}: not a whole number"),
    (re.compile(r"^flag --(\w+)=(.*?): could not convert string to float: .*$"),
     "--{0}={1}: not a number"),
    (re.compile(r"^flag --(\w+)=None: Flag --\w+ must have a value other than None\.$"),
     "--{0} is required"),
    (re.compile(r"^flag --(\w+)=(.*?): \('Non-boolean argument to boolean flag', .*\)$"),
     "--{0}={1}: give true or false (or --{0} alone, or --no{0})"),
)


def _flag_error(error):
    """absl's message of a flag it refused, in hmp's words where absl's are Python's
    (``--batch_size=abc: not a whole number``)."""
    text = str(error)
    for pattern, words in _ABSL_REFUSALS:
        found = pattern.match(text)
        if found:
            return words.format(*found.groups())
    return text


def _unreadable_flagfile(argv):
    """``--flagfile=PATH: cannot be read (why)`` of the first ``--flagfile`` of the command
    line that cannot be opened; None when each can (one named inside another cannot)."""
    for arg in argv[1:]:
        name, equals, path = arg.lstrip("-").partition("=")
        if name == "flagfile" and equals:
            try:
                with open(path, encoding="utf-8"):
                    pass
            except OSError as error:
                return "--flagfile=%s: cannot be read (%s)" % (path, error.strerror)
    return None


def _fail(prog, error, code):
    print("%s: error: %s" % (prog, error), file=sys.stderr)
    sys.exit(code)


def run(main, prog):
    """``app.run(main)``, turning expected errors into one line on stderr.

    Exit code 2 for bad input (:class:`InvalidInput`: flags, files, values), 1
    when training itself fails (e.g. a NaN loss), ``128 + signal`` when
    interrupted (:class:`Interrupted`, or Ctrl-C before a run takes it: one line), 141
    (``128 + SIGPIPE``, as a program killed by it) when its output's reader stops
    (``| head``): one line on stderr, the rest of the output dropped. Any other exception is a bug: Python prints its traceback and exits
    with 1. Set HMP_TRACEBACK=1 to see the tracebacks of the expected errors too.
    """
    def guarded(argv):
        if os.environ.get("HMP_TRACEBACK"):   # for debugging hmp itself
            return main(argv)
        try:
            main(argv)
        except Interrupted as interrupted:
            print("%s: %s" % (prog, interrupted), file=sys.stderr, flush=True)
            sys.exit(128 + interrupted.signum)
        except TrainingError as error:
            _fail(prog, error, 1)
        except InvalidInput as error:
            _fail(prog, error, 2)
        except BrokenPipeError:
            # what is left to print (also Python's flush at exit) goes nowhere
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            with contextlib.suppress(BrokenPipeError):   # stderr into the same pipe
                print("%s: its output's reader stopped (e.g. | head): stopped there" % prog,
                      file=sys.stderr, flush=True)
            sys.exit(128 + signal.SIGPIPE)
        except KeyboardInterrupt:   # before a run's own handler takes Ctrl-C
            print("%s: interrupted" % prog, file=sys.stderr, flush=True)
            sys.exit(128 + signal.SIGINT)

    app.run(guarded, flags_parser=_parse_flags(prog))
