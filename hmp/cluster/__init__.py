"""Several processes as one TensorFlow cluster: ``runtime`` (the cluster spec,
local clusters of ``hmp.worker`` processes, their health) and ``subprocesses``
(children that die with their parent). TensorFlow's own gRPC runtime carries
the tensors; nothing here sends a byte itself."""
