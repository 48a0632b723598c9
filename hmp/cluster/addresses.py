"""Worker addresses and the cluster's defaults, without TensorFlow: what a run's
settings check before anything loads it (``hmp.run.settings``), and what
``hmp.cluster.runtime`` and ``hmp.cluster.sources`` build on."""

import numbers
import re

from hmp.errors import InvalidInput, is_digits, is_positive_number

DEFAULT_TIMEOUT_S = 60.0   # how long a run waits for its workers to answer
DEFAULT_PORT_BASE = 8888   # Slurm: the port of a node's first task (SlurmClusterResolver's)
# --cluster's values that read the cluster from the environment (hmp.cluster.sources)
TF_CONFIG, SLURM = "tf_config", "slurm"
PORTS = range(1, 65536)   # TCP's


def parse_address(text):
    """``text`` as ``host:port``; ``InvalidInput`` unless it is one."""
    host, colon, port = text.strip().rpartition(":")
    if not colon or not host or not is_digits(port) or re.search(r"[\s;]", host):
        raise InvalidInput("%r is not host:port (e.g. 127.0.0.1:2222; several: separated "
                           "by commas)" % text.strip())
    try:
        return "%s:%d" % (host, check_port(int(port)))
    except InvalidInput as error:
        raise InvalidInput("%r: %s" % (text.strip(), error)) from None


def host_and_port(address):
    """(host, port) of a checked ``host:port`` address, an IPv6 host without the brackets
    that keep its colons from the port's (sockets take it so)."""
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


def check_port(port):
    """``port`` (a worker's, or --port_base) unless it is no TCP port: ``InvalidInput``."""
    if isinstance(port, bool) or not isinstance(port, numbers.Integral) or port not in PORTS:
        raise InvalidInput("a port is a whole number from 1 to 65535, got %r" % port)
    return int(port)


MAX_TIMEOUT_S = 1e9   # about 31 years: a session's operation timeout, in ms, fits int64


def check_timeout(timeout_s):
    """``timeout_s`` as a float; ``InvalidInput`` unless it is a finite number of seconds
    > 0 and at most ``MAX_TIMEOUT_S`` (TensorFlow holds it in milliseconds, an int64)."""
    if not is_positive_number(timeout_s) or timeout_s > MAX_TIMEOUT_S:
        raise InvalidInput("the timeout must be a finite number of seconds > 0 and at most "
                           "%g, got %r" % (MAX_TIMEOUT_S, timeout_s))
    return float(timeout_s)
