"""Where a cluster's tasks come from: a ``host:port`` list, TF_CONFIG, or Slurm.

``resolve`` is the one rule for all three, used by ``hmp.worker`` (which task it
is) and by ``hmp.train --cluster`` (where the tasks are), so the two always agree.
TF_CONFIG and Slurm are read by TensorFlow's own resolvers
(``tf.distribute.cluster_resolver``), not by a parser of hmp's:

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
"""

import json
import os

import tensorflow.compat.v1 as tf

from hmp import compat
from hmp.cluster.addresses import DEFAULT_PORT_BASE, DEFAULT_TIMEOUT_S
from hmp.cluster.runtime import JOB, Cluster
from hmp.errors import InvalidInput, is_digits

TF_CONFIG, SLURM = "tf_config", "slurm"


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
        task_type, task = resolver.task_type, resolver.task_id
    except (ValueError, TypeError, KeyError) as error:   # not JSON, not a cluster, bad index
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
    return _cluster(jobs[JOB], timeout_s, "TF_CONFIG"), task


def _slurm_variable(step_name, job_name):
    """The job step's Slurm variable, else the job's; ``InvalidInput`` when neither is set."""
    value = os.environ.get(step_name) or os.environ.get(job_name)
    if not value:
        raise InvalidInput("neither %s nor %s is set: not inside a Slurm job (start the "
                           "workers with srun, the trainer in the job's batch script)"
                           % (step_name, job_name))
    return value


def _from_slurm(timeout_s, port_base):
    nodes = _slurm_variable("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST")
    counts = _slurm_variable("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE")
    expand_hostlist, expand_tasks_per_node = compat.slurm_list_expanders()
    try:
        tasks_per_node = dict(zip(expand_hostlist(nodes), expand_tasks_per_node(counts)))
        most = max(tasks_per_node.values())
        # GPUs are Slurm's to give (srun --gpus-per-task): "one GPU a task" only makes
        # room for the node's tasks in the resolver's arithmetic and sets nothing
        resolver = tf.distribute.cluster_resolver.SlurmClusterResolver(
            jobs={JOB: sum(tasks_per_node.values())}, port_base=port_base,
            gpus_per_node=most, gpus_per_task=1, tasks_per_node=tasks_per_node,
            auto_set_gpu=False)
        addresses = resolver.cluster_spec().as_dict()[JOB]
    except (ValueError, RuntimeError) as error:   # a bad list; SLURM_PROCID missing
        raise InvalidInput("Slurm's nodes %s with tasks %s: %s" % (nodes, counts, error)
                           ) from None
    _, task = resolver.get_task_info()
    return (_cluster(addresses, timeout_s, "Slurm's job (--port_base=%d)" % port_base),
            _own_task(addresses, port_base, task))


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
