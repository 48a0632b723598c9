"""Several processes as one TensorFlow cluster: ``addresses`` (``host:port``, ports
and the defaults, without TensorFlow), ``runtime`` (the cluster spec,
local clusters of ``hmp.worker`` processes, their health), ``sources`` (a cluster
from a ``host:port`` list, TF_CONFIG or Slurm), ``launch`` (``--local_workers``:
workers started and stopped with a run) and ``subprocesses`` (children that die
with their parent). TensorFlow's own gRPC runtime carries the tensors; nothing
here sends a byte itself."""
