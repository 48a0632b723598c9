"""Progress that reads well on a terminal and in a log file.

``line = ProgressLine()``; ``line("step 3/40 ...")`` reports the text, ``line(None)``
says the work ended. On a terminal the text rewrites itself after a carriage
return, at most every ``interval`` seconds, and ``None`` clears it before a
lasting line is printed. Elsewhere (a batch job's log file, a pipe) the text is a
line of its own every ``log_every`` seconds (0: never), the first that long after
the line was made, indented under the lasting lines (a reader of the log that looks
for the lines starting "epoch " finds only the epochs'): a long epoch shows how it
goes without burying the epochs' lines.
"""

import math
import sys
import time

DEFAULT_LOG_EVERY_S = 30.0


def say(line):
    """Prints one line of a run's progress at once (a log file gets it as it happens)."""
    print(line, flush=True)


class ProgressLine:
    def __init__(self, stream=None, interval=0.5, log_every=DEFAULT_LOG_EVERY_S):
        self.stream = stream if stream is not None else sys.stdout
        isatty = getattr(self.stream, "isatty", None)
        self.on_terminal = bool(isatty and isatty())
        self.interval = interval if self.on_terminal else log_every
        self._last = -math.inf if self.on_terminal else time.monotonic()
        self._width = 0

    def __call__(self, text):
        if not self.on_terminal:
            self._log(text)
            return
        if text is None:
            if self._width:
                self.stream.write("\r" + " " * self._width + "\r")
                self.stream.flush()
            self._width, self._last = 0, -math.inf
            return
        now = time.monotonic()
        if now - self._last < self.interval:
            return
        self._last = now
        self.stream.write("\r" + text + " " * max(self._width - len(text), 0))
        self.stream.flush()
        self._width = len(text)

    def _log(self, text):
        now = time.monotonic()
        if text is None or not self.interval or now - self._last < self.interval:
            return
        self._last = now
        self.stream.write("  " + text + "\n")
        self.stream.flush()


def rate_and_eta(done, total, seconds, per_step=1):
    """'N samples/s  ETA T' for ``done`` of ``total`` steps after ``seconds``."""
    if done <= 0 or seconds <= 0:
        return "ETA ?"
    eta = (total - done) * seconds / done
    return "%.0f samples/s  ETA %s" % (done * per_step / seconds, _duration(eta))


def _duration(seconds):
    seconds = int(round(seconds))
    if seconds < 60:
        return "%d s" % seconds
    if seconds < 3600:
        return "%d:%02d" % divmod(seconds, 60)
    return "%d:%02d:%02d" % (seconds // 3600, seconds // 60 % 60, seconds % 60)
