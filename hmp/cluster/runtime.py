"""Cluster mode: hmp's mesh devices as tasks of TensorFlow's distributed runtime.

A cluster is a list of ``host:port`` addresses, one ``python -m hmp.worker``
process each: a ``tf.distribute.Server`` of the job "worker", task N at the
N-th address. The list comes from ``--cluster``, TF_CONFIG or Slurm
(``hmp.cluster.sources``) or from workers started here (``hmp.cluster.launch``).
Nothing here speaks its own protocol: the trainer's sessions connect over gRPC to a
TensorFlow server of the trainer's own process (``client_server``, the job "client"),
TensorFlow's master for the cluster: it runs each mesh device's part of the graph on
the task that owns it (``/job:worker/task:N/device:CPU:0``) and the ops placed nowhere
(the saver's, the global step's) itself. So no worker does a master's work beside its
share of a step (on a loaded worker it held every step back), and checkpoints are
written where the trainer runs.

``Cluster`` parses and checks a ``--cluster`` string, names its devices, session
target and session configuration, finds the worker that stopped answering
when a step fails, and turns that failure into one ``WorkerUnavailable``
naming it; ``client_server`` is the trainer's own server and master.
"""

import contextlib
import dataclasses
import errno
import functools
import ipaddress
import os
import re
import socket
import time

import tensorflow.compat.v1 as tf

from hmp.cli import TrainingError
from hmp.cluster.addresses import (DEFAULT_TIMEOUT_S, PORTS, check_timeout, host_and_port,
                                   parse_address)
from hmp.cluster.sessions import session_on
from hmp.device_names import device_key
from hmp.errors import InvalidInput, is_digits, op_error_line
from hmp.formatting import counted

JOB = "worker"
CLIENT_JOB = "client"   # the trainer's own server, the master of its sessions
# The trainer's host as the workers reach it, where its address on the route to them is
# not (NAT, a container); ``Cluster.client_address``.
TRAINER_HOST_ENV = "HMP_TRAINER_HOST"
# The port the trainer's server listens on (``client_server``), for a firewall that opens
# one; unset: a free one.
TRAINER_PORT_ENV = "HMP_TRAINER_PORT"
LISTED = "--cluster"   # a Cluster's origin when its addresses were listed (Cluster.parse)
# The errors TensorFlow raises when a task is gone (Unavailable), does not
# answer in time (DeadlineExceeded) or lost its state by restarting (Aborted).
WORKER_ERRORS = (tf.errors.UnavailableError, tf.errors.DeadlineExceededError,
                 tf.errors.AbortedError)
_TASK_IN_MESSAGE = re.compile(r"/job:%s/replica:\d+/task:(\d+)" % JOB)



class WorkerUnavailable(TrainingError):
    """A worker of the cluster died or does not answer; the message names it."""


def device(task, index=0):
    """CPU device ``index`` of task ``task`` of the worker job."""
    return "/job:%s/task:%d/device:CPU:%d" % (JOB, task, index)


@dataclasses.dataclass(frozen=True)
class Cluster:
    """The worker tasks of a cluster, task N at ``addresses[N]``.

    ``timeout_s`` bounds every operation of a session on the cluster, so a
    worker that hangs ends a step with an error instead of blocking it forever.
    ``origin`` says where the addresses came from (``--cluster``, TF_CONFIG,
    Slurm), for messages that say how to start a task. ``local_workers``: for
    workers this process started (``hmp.cluster.launch.local_cluster``), each one's
    ``hmp.worker`` flags beyond ``--cluster`` and ``--task``: they name the workers when
    their ports change from run to run (``identity``).
    """

    addresses: tuple
    timeout_s: float = DEFAULT_TIMEOUT_S
    origin: str = LISTED
    local_workers: tuple = None

    @classmethod
    def of(cls, addresses, timeout_s=DEFAULT_TIMEOUT_S, origin=LISTED):
        """From ``host:port`` strings in task order; ``InvalidInput`` names a bad entry
        or the tasks that share an address."""
        addresses = tuple(parse_address(a) for a in addresses)
        if not addresses:
            raise InvalidInput("give the workers' addresses, e.g. 127.0.0.1:2222,127.0.0.1:2223")
        for address in dict.fromkeys(addresses):
            tasks = [t for t, a in enumerate(addresses) if a == address]
            if len(tasks) > 1:
                raise InvalidInput("%s is given more than once (tasks %s): every task needs "
                                   "a port of its own" % (address, ", ".join(map(str, tasks))))
        return cls(addresses, check_timeout(timeout_s), origin)

    @classmethod
    def parse(cls, text, timeout_s=DEFAULT_TIMEOUT_S):
        """From ``"host:port,host:port,..."``; ``InvalidInput`` names a bad entry."""
        entries = text.split(",")
        if not all(entry.strip() for entry in entries):
            raise InvalidInput("an empty address between commas; give host:port,host:port,...")
        return cls.of(entries, timeout_s)

    @property
    def flag(self):
        """The cluster as ``--cluster`` takes it (``"host:port,..."``; ``cluster_spec``:
        TensorFlow's)."""
        return ",".join(self.addresses)

    def cluster_spec(self):
        """The workers' cluster, as each ``hmp.worker`` starts with it."""
        return tf.train.ClusterSpec({JOB: list(self.addresses)})

    @property
    def devices(self):
        """One CPU device per task, in task order."""
        return tuple(device(task) for task in range(len(self.addresses)))

    @functools.cached_property
    def client_address(self):
        """``host:port`` of this process's server (``client_server``) as the workers
        reach it: ``$HMP_TRAINER_HOST``, else this machine's address on the route to the
        first worker it does not reach on its loopback interface (else to task 0). The
        workers connect to it for what the master's own ops give them (the master
        weights, a restore's)."""
        found = [_address_towards(*host_and_port(address))
                 for address in self.addresses]
        given = os.environ.get(TRAINER_HOST_ENV, "").strip().strip("[]")   # IPv6 bracketed
        host = given or next(
            (ip for ip in found if not _is_loopback(ip)), found[0])
        return _joined(host, _port(client_server().target))

    @property
    def target(self):
        """The session target: this process's server, TensorFlow's master for the cluster."""
        return "grpc://" + self.client_address

    @property
    def identity(self):
        """What names the workers, e.g. for the speed cache: their addresses, or the
        flags of workers started here (their ports change from run to run)."""
        return self.local_workers if self.local_workers is not None else self.addresses

    def port(self, task):
        return _port(self.addresses[task])

    def describe(self, task):
        return "worker %d (%s)" % (task, self.addresses[task])

    def how_to_start(self, task):
        """What starts task ``task``, in words, as its cluster's origin has it."""
        if self.origin == LISTED:
            return "python -m hmp.worker --cluster=%s --task=%d" % (self.flag, task)
        return "python -m hmp.worker as task %d of %s" % (task, self.origin)

    def session_config(self):
        """The trainer's and profiler's session configuration on this cluster.

        Every operation times out after ``timeout_s``. Each session keeps its
        variables to itself (``isolate_session_state``), so they are freed
        when it closes instead of living on in the workers for the next run. The
        session's cluster is the workers and this process's server (``target``), which
        the master tells the workers of (TensorFlow's cluster propagation).
        """
        config = tf.ConfigProto(operation_timeout_in_ms=int(1000 * self.timeout_s),
                                isolate_session_state=True)
        config.cluster_def.CopyFrom(tf.train.ClusterSpec(
            {CLIENT_JOB: [self.client_address], JOB: list(self.addresses)}).as_cluster_def())
        return config

    def check_devices(self, devices):
        """``ValueError`` unless every device belongs to a task of this cluster."""
        for name in devices:
            spec = tf.DeviceSpec.from_string(name)
            if spec.job != JOB or spec.task is None or not 0 <= spec.task < len(self.addresses):
                raise InvalidInput("%s is not a device of the cluster's %s; use e.g. %s"
                                   % (name, counted(len(self.addresses), "task"),
                                      device(len(self.addresses) - 1)))

    def check_offered(self, devices):
        """InvalidInput naming a device of ``devices`` (``check_devices``'s) that its task
        does not offer, e.g. a second CPU of a worker started with one; the workers
        answer (``check_answers``)."""
        with session_on(self.target, config=self.session_config()) as session:
            offered = {device_key(d.name) for d in session.list_devices()}
        offered = sorted(key for key in offered if key[0] == JOB)   # not the trainer's
        missing = [name for name in devices if device_key(name) not in offered]
        if missing:
            raise InvalidInput(
                "%s: not offered by the workers, which offer %s (a worker's virtual CPUs: "
                "hmp.worker --virtual_cpus)" % (", ".join(missing), ", ".join(
                    "/job:%s/task:%d/device:%s:%d" % key for key in offered)))

    # -- answering -------------------------------------------------------------
    def answers(self, tasks=None, via=0, timeout_s=5.0):
        """True if a tiny graph with one op on each of ``tasks`` (default all)
        runs within ``timeout_s`` through the master at task ``via`` (default 0).

        Through task 0, this also checks the master's own connections to the
        other tasks (e.g. to a worker just restarted on the same port).
        """
        tasks = range(len(self.addresses)) if tasks is None else tasks
        config = tf.ConfigProto(operation_timeout_in_ms=int(1000 * timeout_s),
                                device_filters=["/job:%s/task:%d" % (JOB, t)
                                                for t in {via, *tasks}])
        def ones():
            for task in tasks:
                with tf.device(device(task)):
                    yield tf.constant(1)
        return _each_gives_one("grpc://" + self.addresses[via], config, ones)

    def check_answers(self, say=None):
        """Raises InvalidInput naming a task whose host is unknown here or two tasks at one
        port of one machine; ``WorkerUnavailable`` naming the tasks that do not answer
        within ``timeout_s`` (with how to start each), or task 0 if it cannot reach
        every task.

        Waits for silent tasks (telling ``say`` once): workers started beside the
        trainer (``srun ... &``, a pod each) take seconds to import TensorFlow.
        """
        self._check_addresses()
        deadline = time.monotonic() + self.timeout_s
        task = self._silent_task()
        if task is not None and say is not None:
            say("waiting up to %g s for %s to answer ..." % (self.timeout_s, self.describe(task)))
        while task is not None and time.monotonic() < deadline:
            time.sleep(0.5)
            task = self._silent_task()
        if task is not None:   # it, and every later one that does not answer either
            silent = [task] + [t for t in range(task + 1, len(self.addresses))
                               if not self._answers_directly(t)]
            raise WorkerUnavailable("%s %s: start %s with %s (waited %g s)" % (
                " and ".join(self.describe(t) for t in silent),
                "does not answer" if len(silent) == 1 else "do not answer",
                "it" if len(silent) == 1 else "them",
                "; ".join(self.how_to_start(t) for t in silent), self.timeout_s))
        if not self.answers(timeout_s=min(10.0, self.timeout_s)):
            raise WorkerUnavailable("%s cannot run ops on every task of %s: was each worker "
                                    "started with this cluster (%s)?"
                                    % (self.describe(0), self.flag, self.origin))
        self.check_reach()

    def check_reach(self):
        """``WorkerUnavailable`` in one line naming this trainer's address (and how to
        set it) unless every worker receives a value from it (``reach_trainer``)."""
        if not self.reach_trainer(timeout_s=min(10.0, self.timeout_s)):
            given = os.environ.get(TRAINER_HOST_ENV)
            where = ("%s=%s" % (TRAINER_HOST_ENV, given) if given else
                     "its address on the route to them")
            raise WorkerUnavailable(
                "the workers of %s cannot reach this trainer at %s (%s): set %s to an "
                "address of this machine that they reach, or %s to a port a firewall lets "
                "them reach" % (self.flag, self.client_address, where, TRAINER_HOST_ENV,
                                TRAINER_PORT_ENV))

    def reach_trainer(self, timeout_s=5.0):
        """True if every task receives a value from this process's server (the master,
        at ``client_address``) within ``timeout_s``."""
        config = self.session_config()
        config.operation_timeout_in_ms = int(1000 * timeout_s)

        def received():
            with tf.device("/job:%s/task:0/device:CPU:0" % CLIENT_JOB):
                one = tf.constant(1)
            for task in range(len(self.addresses)):
                with tf.device(device(task)):
                    yield tf.identity(one)
        return _each_gives_one(self.target, config, received)

    def _check_addresses(self):
        """InvalidInput (the cluster given is wrong) naming the first task whose host does
        not resolve, or two tasks whose hosts resolve to one machine at the same port (e.g.
        ``localhost:2222`` and ``127.0.0.1:2222``): only one of them could listen."""
        seen = {}   # (ip, port) -> the first task there
        for task, address in enumerate(self.addresses):
            host, port = host_and_port(address)
            try:
                ips = {info[4][0] for info in socket.getaddrinfo(host, port,
                                                                 type=socket.SOCK_STREAM)}
            except OSError as error:
                raise InvalidInput("%s is unreachable: its host %s is unknown here (%s; from "
                                   "%s)" % (self.describe(task), host, error.strerror,
                                            self.origin)) from None
            for ip in ips:
                first = seen.setdefault((ip, port), task)
                if first != task:
                    raise InvalidInput("%s and %s are the same port of one machine "
                                       "(%s): give each task a port of its own (from %s)"
                                       % (self.describe(first), self.describe(task), ip,
                                          self.origin))

    def _silent_task(self):
        """The first task that does not answer when asked directly, or None.

        A refused connection tells at once; a task that accepts connections
        but hangs (e.g. stopped) is found by a tiny graph that times out.
        """
        return next((t for t in range(len(self.addresses)) if not self._answers_directly(t)),
                    None)

    def _answers_directly(self, task):
        timeout_s = min(5.0, self.timeout_s)
        return (accepts_connections(self.addresses[task], timeout_s)
                and self.answers([task], via=task, timeout_s=timeout_s))

    def culprit(self, error):
        """The task a worker error came from: the first that does not answer
        when asked directly, else the last one its message names (a restarted
        worker answers, and is named after the task that noticed), else None."""
        silent = self._silent_task()
        if silent is not None:
            return silent
        named = [int(t) for t in _TASK_IN_MESSAGE.findall(error.message or "")
                 if int(t) < len(self.addresses)]
        return named[-1] if named else None

    @contextlib.contextmanager
    def failures(self, hint=""):
        """Turns a worker error inside the block into ``WorkerUnavailable``:
        one line naming the worker (task and address), what TensorFlow said,
        and ``hint`` (e.g. how to continue; a function of no argument gives it when the
        error comes, e.g. from the checkpoints written by then)."""
        try:
            yield
        except WORKER_ERRORS as error:
            task = self.culprit(error)
            who = self.describe(task) if task is not None else "a worker of %s" % self.flag
            reason = {tf.errors.DeadlineExceededError: "did not answer within %g s"
                                                       % self.timeout_s,
                      tf.errors.AbortedError: "lost its state (restarted?)"}.get(
                type(error), "is unreachable")
            said = hint() if callable(hint) else hint
            raise WorkerUnavailable("%s %s (%s)%s" % (who, reason, op_error_line(error), said)
                                    ) from None


def _each_gives_one(target, config, ones):
    """True if the tensors ``ones()`` makes in a graph of its own (each 1, on a device of
    the cluster) sum to their number in a session on ``target``; False on any error of
    TensorFlow's (e.g. ``config``'s operation timeout)."""
    with tf.Graph().as_default():
        made = list(ones())
        try:
            with tf.Session(target, config=config) as session:
                return session.run(tf.add_n(made)) == len(made)
        except tf.errors.OpError:
            return False


@functools.cache
def client_server():
    """This process's TensorFlow server, started at its first call and kept while the
    process lives (TensorFlow cannot stop one): the master of every session on a
    cluster (``Cluster.target``). It listens on every interface, on port
    ``$HMP_TRAINER_PORT`` (``trainer_port``), else on a free one; an InvalidInput naming
    the variable when it cannot listen there."""
    value = os.environ.get(TRAINER_PORT_ENV, "")
    port = trainer_port(value)
    if not port:
        return tf.distribute.Server.create_local_server()
    try:
        return served(port, lambda: tf.distribute.Server(
            {"localhost": ["localhost:%d" % port]}, protocol="grpc", start=True))
    except InvalidInput as error:
        raise InvalidInput("%s=%s: this trainer cannot listen there: %s"
                           % (TRAINER_PORT_ENV, value, error)) from None


def trainer_port(value):
    """The port an ``HMP_TRAINER_PORT`` value names; 0 (a free one) for ""."""
    if not value:
        return 0
    if not is_digits(value) or int(value) not in PORTS:
        raise InvalidInput("%s=%s: give a port number from %d to %d, or leave it unset for "
                           "a free one" % (TRAINER_PORT_ENV, value, PORTS[0], PORTS[-1]))
    return int(value)


def _port(target):
    return int(target.rpartition(":")[2])


def _joined(host, port):
    """``host:port``, an IPv6 host in brackets."""
    return "[%s]:%d" % (host, port) if ":" in host else "%s:%d" % (host, port)


def _address_towards(host, port):
    """The address of this machine's interface on the route to ``host`` (a datagram
    socket's, connected to it: nothing is sent); ``host`` itself if it does not resolve
    (the cluster's own checks then name it)."""
    try:
        family, kind, _, _, peer = socket.getaddrinfo(host, port,
                                                      type=socket.SOCK_DGRAM)[0]
        with socket.socket(family, kind) as probe:
            probe.connect(peer)
            return probe.getsockname()[0]
    except OSError:
        return host


def _is_loopback(host):
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:   # a name
        return False


def accepts_connections(address, timeout_s):
    """Whether ``address`` (``host:port``) takes a TCP connection within ``timeout_s``."""
    try:
        socket.create_connection(host_and_port(address), timeout_s).close()
        return True
    except OSError:
        return False


def served(port, start):
    """``start()``, which starts a TensorFlow server listening on ``port``, or an
    InvalidInput saying why it cannot: the port taken, in words (looked at first, so
    that TensorFlow's C++ log lines of a failed start do not come before the caller's
    line), else TensorFlow's message."""
    taken = "port %d is in use on this machine (by another worker or program)" % port
    if port_in_use(port):
        raise InvalidInput(taken)
    try:
        return start()
    except tf.errors.OpError as error:   # taken meanwhile, or another reason
        raise InvalidInput(taken if port_in_use(port) else error.message.strip()) from None


def port_in_use(port):
    """True when some process listens on ``port`` of this machine, on any interface, IPv4
    or IPv6 (``::1``, ``::``), as a worker's server would. A port that only closed
    connections hold (TIME_WAIT, a worker stopped a moment ago) is free: TensorFlow's
    server reuses it, and so do the probes."""
    return _taken(socket.AF_INET, "", port) or _taken(socket.AF_INET6, "::", port)


def _taken(family, any_address, port):
    """Whether ``port`` of ``family``'s ``any_address`` is taken. False where this
    machine has no such family (no IPv6), or the port is not one this process may take
    (below 1024, say). An IPv6 probe takes IPv6 alone: IPv4 is the other's."""
    try:
        probe = socket.socket(family)
    except OSError:   # no IPv6 here
        return False
    with probe:
        try:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            probe.bind((any_address, port))
            return False
        except OSError as error:   # EADDRNOTAVAIL: IPv6 off on this machine
            return error.errno == errno.EADDRINUSE
