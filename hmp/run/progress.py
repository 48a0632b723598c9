"""A progress line that rewrites itself on a terminal and stays quiet elsewhere.

``line = ProgressLine()``; ``line("step 3/40 ...")`` shows the text after a
carriage return, at most every ``interval`` seconds; ``line(None)`` clears it
before a lasting line is printed. When the stream is not a terminal (a log
file, a pipe) nothing is written, so logs hold only the lasting lines.
"""

import math
import sys
import time


class ProgressLine:
    def __init__(self, stream=None, interval=0.5):
        self.stream = stream if stream is not None else sys.stdout
        isatty = getattr(self.stream, "isatty", None)
        self.enabled = bool(isatty and isatty())
        self.interval = interval
        self._last = -math.inf
        self._width = 0

    def __call__(self, text):
        if not self.enabled:
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
