"""A plan's trainer made ready in the background while another plan trains.

Re-balancing (``hmp.run.rebalance``) switches plans while training. A switch to a plan
whose graph is not open costs a new graph: building and lowering it, a session on the
devices, the scene loaded onto them, the checkpoint restored, the graph optimisation
of the first step, validation and checkpoint (a session's first run of each): seconds,
which a switch must pay back before the run ends. A
:class:`Standby` does that work on a thread of its own while the current plan trains
(its session runs release the interpreter, so the two overlap): once ``ready``, the
switch to its plan costs a restore of the latest checkpoint, as a switch back to a kept
graph does. ``restore_seconds`` is what such a restore took on it, the rebalancer's
estimate of that switch before one has been measured: a restore after its first (whose
run also prepares the restore on the devices, once: 1.6 s where a later one took 0.04 s,
docs/benchmarks.md, "Dynamic load") and after the warm-up.
"""

import contextlib
import threading
import time

import tensorflow.compat.v1 as tf

from hmp.cluster.sessions import CLOSE_WAIT_S


# Restores tried when the checkpoint read goes meanwhile: the run's own saver keeps its
# newest few, so a restore that outlasts that many saves finds its files pruned.
RESTORE_TRIES = 3


def _restore_latest(trainer, checkpoint):
    """Restores ``checkpoint()`` (the latest) into ``trainer``; when that fails and a newer
    checkpoint is there (the one read was pruned meanwhile: a missing file), from the
    newer one, up to ``RESTORE_TRIES`` in all."""
    path = checkpoint()
    for attempt in range(RESTORE_TRIES):
        try:
            trainer.restore(path)
            return
        except (tf.errors.NotFoundError, ValueError):   # ValueError: no longer a checkpoint
            newer = checkpoint()
            if attempt == RESTORE_TRIES - 1 or newer == path:
                raise
            path = newer


class Standby:
    """Builds ``plan``'s trainer with ``build(plan)`` on a thread, then restores the
    weights of ``checkpoint()`` (a path) into it, runs ``warm_up(trainer)`` (each part
    of an epoch once, so that the devices prepare them; the switch's restore undoes
    its effects) and restores ``checkpoint()`` again, timed (``restore_seconds``).

    ``ready``: the trainer is there (``take()`` hands it over); ``failed``: the error
    the build raised (``take()`` raises it); ``wait()`` returns once either holds;
    ``close(wait_s)`` closes a trainer that was not taken, waiting at most ``wait_s``
    for the build: a build still under way then closes its trainer itself when it ends
    (a build on a lost worker waits for TensorFlow's operation timeout).
    """

    def __init__(self, plan, build, checkpoint, warm_up):
        self.plan = plan
        self.restore_seconds = None
        self._trainer, self._error = None, None
        self._lock, self._closed = threading.Lock(), False
        self._thread = threading.Thread(target=self._prepare,
                                        args=(build, checkpoint, warm_up),
                                        name="hmp-standby", daemon=True)
        self._thread.start()

    def _prepare(self, build, checkpoint, warm_up):
        trainer = None
        try:
            trainer = build(self.plan)
            _restore_latest(trainer, checkpoint)
            warm_up(trainer)
            started = time.perf_counter()
            _restore_latest(trainer, checkpoint)   # as a switch will: the setup done
            self.restore_seconds = time.perf_counter() - started
        except BaseException as error:   # handed to the thread that takes the trainer
            self._error = error
            if trainer is not None:
                with contextlib.suppress(Exception):   # e.g. its worker is gone
                    trainer.close()
            return
        with self._lock:
            closed = self._closed
            if not closed:
                self._trainer = trainer
        if closed:   # nobody will take it
            with contextlib.suppress(Exception):   # e.g. its worker is gone: said elsewhere
                trainer.close()

    @property
    def ready(self):
        return not self._thread.is_alive() and self._trainer is not None

    @property
    def failed(self):
        return None if self._thread.is_alive() else self._error

    def wait(self):
        """Returns once the build has ended: ``ready``, or ``failed``."""
        self._thread.join()

    def take(self):
        """The ready trainer (this standby no longer owns it)."""
        self.wait()
        if self._error is not None:
            raise self._error
        trainer, self._trainer = self._trainer, None
        return trainer

    def close(self, wait_s=CLOSE_WAIT_S):
        """Closes the trainer built unless taken, waiting at most ``wait_s`` seconds for
        the build to end (None: until it ends); True if it had ended (else its thread
        closes what it builds)."""
        self._thread.join(wait_s)
        with self._lock:
            self._closed = True
            trainer, self._trainer = self._trainer, None
        if trainer is not None:
            trainer.close()
        return not self._thread.is_alive()
