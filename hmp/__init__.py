"""hmp: heterogeneous model- and data-parallel CNN training on Mesh-TensorFlow."""
