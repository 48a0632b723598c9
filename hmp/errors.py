"""The one exception class hmp raises for input it refuses, the count, amount and
distinct-name checks its validators share, and the line a TensorFlow error is told by.

Validators (of flags, files, scenes, meshes, plans, speeds, ...) raise
:class:`InvalidInput`, a ``ValueError``; the command-line programs turn it,
and only it, into one line that names the flags concerned (exit code 2).
Any other exception is a bug or a failure of the system, and keeps its
traceback.
"""

import math
import numbers
import re

# lines of a TensorFlow error message that say nothing: its opening, rules, task headers
_DECIMAL = re.compile(r"\s*[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\s*")
_SAYS_NOTHING = re.compile(r"^(Graph execution error:|=+|([A-Z_]+: )?From /job:\S+:)$")


class InvalidInput(ValueError):
    """Input that hmp refuses (a flag value, a file, a scene, a mesh...); the message says why."""


def whole_number(value, what, minimum=1):
    """``value`` as an int if it is a whole number >= ``minimum`` (an int or a numpy
    integer, not a bool), else InvalidInput: "<what> must be a whole number >= <minimum>".

    The one check of counts and sizes (batch sizes, units, components, layer sizes).
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        kind = "" if isinstance(value, numbers.Real) else f" (a {type(value).__name__})"
        raise InvalidInput(f"{what} must be a whole number >= {minimum}, got {value!r}{kind}")
    return int(value)


def is_digits(text):
    """Whether ``text`` is a whole number written in ASCII digits: ``str.isdigit`` also
    takes digits such as "²", which ``int`` refuses. The one test of numbers in text."""
    return text.isascii() and text.isdigit()


def number_in_text(text):
    """The float ``text`` writes as a decimal number in ASCII (``2``, `` .5``, ``-1e2``),
    else None: ``float`` also takes "1_000", "nan", "inf" and digits such as "²". The
    one reading of numbers in flag text (speeds, factors, strengths)."""
    return float(text) if _DECIMAL.fullmatch(text) else None


def is_positive_number(value, allow_zero=False):
    """Whether ``value`` is a finite real number > 0 (>= 0 with ``allow_zero``), not a bool.

    The one test of amounts (speeds, seconds, bytes, rates); each validator words its
    own error.
    """
    return bool(not isinstance(value, bool) and isinstance(value, numbers.Real)
                and math.isfinite(value) and (value > 0 or (allow_zero and value == 0)))


def op_error_line(error, limit=120):
    """The first line of a TensorFlow error's message (``tf.errors.OpError``) that says
    what happened, at most ``limit`` characters: its message opens with lines that say
    nothing ("Graph execution error:", a blank line)."""
    lines = [line.strip() for line in (error.message or "").splitlines()]
    said = [line for line in lines if line and not _SAYS_NOTHING.match(line)] or [
        type(error).__name__]
    return said[0] if len(said[0]) <= limit else said[0][:limit - 3] + "..."
