"""Several processes as one TensorFlow cluster: ``addresses`` (``host:port``, ports
and the defaults, without TensorFlow), ``sessions`` (closed without holding the
caller), ``runtime`` (the cluster spec, its workers' health, the trainer's server),
``sources`` (a cluster from a ``host:port`` list, TF_CONFIG or Slurm), ``launch``
(``hmp.worker`` processes on this machine: ``--local_workers``, tests and benchmarks)
and ``subprocesses`` (children that die with their parent). TensorFlow's own gRPC
runtime carries the tensors; nothing here sends a byte itself."""
