"""Sessions that close without holding the caller: after a step failed on a lost
worker, TensorFlow's master closes its session only once the step's clean-up on that
worker has timed out, so the caller waits at most ``CLOSE_WAIT_S`` and goes on."""

import contextlib
import threading

import tensorflow.compat.v1 as tf

CLOSE_WAIT_S = 5.0   # how long ``close_session`` waits for a session to close


def close_session(session, wait_s=CLOSE_WAIT_S):
    """Closes ``session``, waiting at most ``wait_s`` seconds; True if it closed by then.

    After a step failed on a lost worker, TensorFlow's master closes the session only
    once its clean-up of that step on the lost worker has timed out (the cluster's
    timeout): the close then goes on, on a thread of its own, and the caller goes on
    (e.g. to report the lost worker and exit). An error of a close that ends in time
    is raised."""
    errors = []

    def close():
        try:
            session.close()
        except Exception as error:   # pylint: disable=broad-except  (raised below)
            errors.append(error)

    closing = threading.Thread(target=close, name="closing a session", daemon=True)
    closing.start()
    closing.join(wait_s)
    if errors:
        raise errors[0]
    return not closing.is_alive()


@contextlib.contextmanager
def session_on(target, **kwargs):
    """``tf.Session(target, **kwargs)``, closed by ``close_session`` on leaving."""
    session = tf.Session(target, **kwargs)
    try:
        yield session
    finally:
        close_session(session)
