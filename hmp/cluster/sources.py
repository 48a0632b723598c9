"""Where a cluster's tasks come from: a ``host:port`` list, TF_CONFIG, or Slurm.

``resolve`` is the one rule for all three, used by ``hmp.worker`` (which task it
is) and by ``hmp.train --cluster`` (where the tasks are), so the two always agree.
TF_CONFIG and Slurm are read by TensorFlow's own resolvers
(``tf.distribute.cluster_resolver``), not by a parser of hmp's; hmp reads only what it
checks before handing it over (below):

* ``tf_config``: ``TFConfigClusterResolver``; TF_CONFIG's job "worker" is the
  cluster, its task (type "worker") the worker's task. The trainer needs no task.
* ``slurm``: ``SlurmClusterResolver``; a node's tasks listen at ``port_base``,
  ``port_base + 1``, ..., the nodes in the resolver's (sorted) order, and task N
  is the process whose ``SLURM_PROCID`` is N. The nodes and tasks per node are
  the job step's (``SLURM_STEP_NODELIST``, ``SLURM_STEP_TASKS_PER_NODE``: an
  ``srun`` task, i.e. a worker), else the job's (``SLURM_JOB_NODELIST``,
  ``SLURM_TASKS_PER_NODE``: the batch script, where the trainer runs), so the
  workers' ``srun`` must run one step over the whole job, as it does without
  ``--nodes`` or ``--ntasks`` options. GPUs are left to Slurm
  (``srun --gpus-per-task``): the resolver sets no ``CUDA_VISIBLE_DEVICES``.

hmp checks what it hands the resolvers: TF_CONFIG's task index (the resolver takes
``int()`` of it: 0.5 as task 0, true as task 1) and Slurm's lists, whose node names
``expand_hostlist`` reads as Slurm writes them (TensorFlow's reader refuses a suffix,
``node[01-03]-ib``), one task count a node (the resolver would zip them, dropping the
longer list's tail).
"""

import collections
import itertools
import json
import os
import re

import tensorflow.compat.v1 as tf

from hmp import compat
from hmp.cluster.addresses import DEFAULT_PORT_BASE, DEFAULT_TIMEOUT_S, SLURM, TF_CONFIG
from hmp.cluster.runtime import JOB, Cluster
from hmp.errors import InvalidInput, is_digits



def detect():
    """The source the environment gives: ``tf_config`` when TF_CONFIG is set, else
    ``slurm`` inside a Slurm job (``SLURM_PROCID`` set), else None."""
    if os.environ.get("TF_CONFIG"):
        return TF_CONFIG
    if "SLURM_PROCID" in os.environ:
        return SLURM
    return None


def resolve(source, timeout_s=DEFAULT_TIMEOUT_S, port_base=DEFAULT_PORT_BASE):
    """(the ``Cluster``, this process's task in it or None) of ``source``: ``tf_config``,
    ``slurm`` or a ``host:port,...`` list (whose task is given apart: None).
    ``InvalidInput`` says what is wrong, naming the variable it read."""
    if source == TF_CONFIG:
        return _from_tf_config(timeout_s)
    if source == SLURM:
        return _from_slurm(timeout_s, port_base)
    if ":" not in source:
        raise InvalidInput("%r is none of %s, %s or a host:port list (e.g. "
                           "127.0.0.1:2222,127.0.0.1:2223)" % (source, TF_CONFIG, SLURM))
    return Cluster.parse(source, timeout_s), None


_TF_CONFIG_FORM = ('{"cluster": {"worker": ["host:port", ...]}, '
                  '"task": {"type": "worker", "index": N}}')


def _from_tf_config(timeout_s):
    if not os.environ.get("TF_CONFIG"):
        raise InvalidInput("TF_CONFIG is not set; give it as " + _TF_CONFIG_FORM)
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    try:
        jobs = resolver.cluster_spec().as_dict()
        task_type = resolver.task_type
    except (ValueError, TypeError, KeyError) as error:   # not JSON, not a cluster
        raise InvalidInput("TF_CONFIG is not a cluster description (%s: %s)"
                           % (type(error).__name__, error)) from None
    if not jobs:   # e.g. a JSON list, or an object without "cluster"
        raise InvalidInput("TF_CONFIG holds no cluster (%s); give it as %s"
                           % (os.environ["TF_CONFIG"][:60], _TF_CONFIG_FORM))
    if set(jobs) != {JOB}:
        raise InvalidInput("TF_CONFIG's cluster has the jobs %s; hmp's tasks are one job, "
                           '"worker", a list of host:port'
                           % json.dumps(sorted(jobs)))
    if not isinstance(jobs[JOB], list) or not jobs[JOB]:
        raise InvalidInput('TF_CONFIG\'s job "worker" is %s; give it as a list of host:port, '
                           "task 0 first" % json.dumps(jobs[JOB]))
    if task_type not in (None, JOB):
        raise InvalidInput('TF_CONFIG\'s task has the type "%s"; hmp\'s tasks are of the '
                           'type "worker"' % task_type)
    _check_task_index(len(jobs[JOB]))
    return _cluster(jobs[JOB], timeout_s, "TF_CONFIG"), resolver.task_id


def _check_task_index(count):
    """``InvalidInput`` unless TF_CONFIG's task index, if it gives one, is a JSON whole
    number from 0 to ``count`` - 1; the resolver, reading it next, takes ``int()`` of
    anything (0.5 as task 0, true as task 1, "1" as 1)."""
    task = json.loads(os.environ["TF_CONFIG"]).get("task", {})
    if not isinstance(task, dict):
        raise InvalidInput('TF_CONFIG\'s task is %s; give it as {"type": "worker", "index": N}'
                           % json.dumps(task))
    if "index" not in task:
        return
    index = task["index"]
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < count:
        raise InvalidInput('TF_CONFIG\'s task index is %s; allowed: a whole number >= 0 below '
                           '%d (the job "worker"\'s task count)' % (json.dumps(index), count))


def _slurm_variable(step_name, job_name):
    """(name, value) of the job step's Slurm variable, else of the job's; ``InvalidInput``
    when neither is set."""
    for name in (step_name, job_name):
        if os.environ.get(name):
            return name, os.environ[name]
    raise InvalidInput("neither %s nor %s is set: not inside a Slurm job (start the "
                       "workers with srun, the trainer in the job's batch script)"
                       % (step_name, job_name))


def _from_slurm(timeout_s, port_base):
    nodes = _slurm_variable("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST")
    counts = _slurm_variable("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE")
    tasks_per_node = _tasks_per_node(nodes, counts)
    try:
        most = max(tasks_per_node.values())
        # GPUs are Slurm's to give (srun --gpus-per-task): "one GPU a task" only makes
        # room for the node's tasks in the resolver's arithmetic and sets nothing
        resolver = tf.distribute.cluster_resolver.SlurmClusterResolver(
            jobs={JOB: sum(tasks_per_node.values())}, port_base=port_base,
            gpus_per_node=most, gpus_per_task=1, tasks_per_node=tasks_per_node,
            auto_set_gpu=False)
        addresses = resolver.cluster_spec().as_dict()[JOB]
    except (ValueError, RuntimeError) as error:   # SLURM_PROCID missing or no number
        raise InvalidInput("Slurm's nodes %s with tasks %s: %s" % (nodes[1], counts[1], error)
                           ) from None
    _, task = resolver.get_task_info()
    return (_cluster(addresses, timeout_s, "Slurm's job (--port_base=%d)" % port_base),
            _own_task(addresses, port_base, task))


def _tasks_per_node(nodes, counts):
    """{node: its task count} of Slurm's node list and tasks per node, each a (variable,
    value) pair; ``InvalidInput``, naming the variables, unless they give one count a
    node and each node once (zip and a dict would drop the rest silently)."""
    (nodes_name, node_list), (counts_name, count_list) = nodes, counts
    try:
        hosts = expand_hostlist(node_list)
    except InvalidInput as error:
        raise InvalidInput("%s=%s: %s" % (nodes_name, node_list, error)) from None
    expand_tasks_per_node = compat.slurm_tasks_per_node()
    try:
        tasks = expand_tasks_per_node(count_list)
    except ValueError:
        raise InvalidInput("%s=%s: allowed are task counts separated by commas, N(xK) for K "
                           "nodes of N tasks, e.g. 2(x3),1" % (counts_name, count_list)
                           ) from None
    if len(hosts) != len(tasks):
        raise InvalidInput("%s=%s names %d nodes but %s=%s gives %d task counts; allowed: "
                           "one count a node" % (nodes_name, node_list, len(hosts),
                                                 counts_name, count_list, len(tasks)))
    twice = [host for host, times in collections.Counter(hosts).items() if times > 1]
    if twice:
        raise InvalidInput("%s=%s names the node %s more than once; allowed: each node once"
                           % (nodes_name, node_list, twice[0]))
    return dict(zip(hosts, tasks))


_HOSTLIST_FORM = ("a Slurm hostlist: names separated by commas, each with bracketed "
                  "ranges, e.g. node[01-03,7]-ib,gpu5")
_MOST_NODES = 64 * 1024   # of one range or name (Slurm's MAX_RANGE, a range's)
_GROUP = re.compile(r"(?:[^\[\],]+|\[[^\[\]]*\])+")   # text and [ranges]
_RANGE = re.compile(r"([0-9]+)(?:-([0-9]+))?")


def expand_hostlist(hostlist):
    """The node names of Slurm's compressed ``hostlist``, in its order, read as Slurm
    reads them: groups separated by commas (outside brackets), each a name whose bracketed
    ranges (``[1-3,7]``, each number zero-padded to the width of its range's first:
    ``[08-10]``) stand for each of their numbers, the text around them kept:
    ``"n[1-2]-ib,m5"`` -> ``["n1-ib", "n2-ib", "m5"]``. Several brackets in one name
    give every combination, the last varying fastest (``r[1-2]n[1-2]``: r1n1, r1n2,
    r2n1, r2n2). ``InvalidInput`` (naming no variable: the caller does) otherwise."""
    groups = re.split(r",(?![^\[\]]*\])", hostlist.strip())
    return [name for group in groups for name in _expand_group(group)]


def _expand_group(group):
    """The names of one comma-free group of a hostlist (``node[01-03]-ib``)."""
    if not _GROUP.fullmatch(group):
        raise InvalidInput("%r is not a node name with bracketed ranges (%s)"
                           % (group, _HOSTLIST_FORM))
    parts = [_range_numbers(part[1:-1]) if part.startswith("[") else [part]
             for part in re.findall(r"\[[^\]]*\]|[^\[]+", group)]
    count = 1
    for part in parts:
        count *= len(part)
    if count > _MOST_NODES:
        raise InvalidInput("%r names %d nodes; allowed: at most %d in one name"
                           % (group, count, _MOST_NODES))
    return ["".join(pieces) for pieces in itertools.product(*parts)]


def _range_numbers(ranges):
    """The numbers, as text, of a bracket's ranges (``01-03,7``: 01, 02, 03, 7)."""
    return [number for text in ranges.split(",") for number in _one_range(text)]


def _one_range(text):
    """The numbers, as text, of ``N`` or ``LOW-HIGH``, zero-padded as Slurm pads them:
    to the width of the first (``08-10``: 08, 09, 10; ``8-10``: 8, 9, 10)."""
    match = _RANGE.fullmatch(text)
    low, high = (int(match[1]), int(match[2] or match[1])) if match else (None, None)
    if not match or low > high:
        raise InvalidInput("the range %r is not N or LOW-HIGH with LOW <= HIGH, in digits "
                           "(%s)" % (text, _HOSTLIST_FORM))
    if high - low >= _MOST_NODES:
        raise InvalidInput("the range %r names %d nodes; allowed: at most %d"
                           % (text, high - low + 1, _MOST_NODES))
    return ["%0*d" % (len(match[1]), number) for number in range(low, high + 1)]


def _own_task(addresses, port_base, rank):
    """This srun task's index in ``addresses``: its node's (SLURMD_NODENAME) port for its
    place on the node (SLURM_LOCALID). The resolver lists the nodes sorted as text
    (node10 before node9) while Slurm ranks the tasks (SLURM_PROCID, ``rank``) in its own
    order, so that a rank may name another node's address; ``rank`` where those
    variables are not set (the batch script) or name no address listed."""
    node, local = os.environ.get("SLURMD_NODENAME"), os.environ.get("SLURM_LOCALID", "")
    own = "%s:%d" % (node, port_base + int(local)) if node and is_digits(local) else None
    return addresses.index(own) if own in addresses else rank


def _cluster(addresses, timeout_s, origin):
    """``Cluster.of``, its complaint (a bad port, two tasks at one) naming ``origin``."""
    try:
        return Cluster.of(addresses, timeout_s, origin)
    except InvalidInput as error:
        raise InvalidInput("%s: %s" % (origin, error)) from None
