"""Lowering of a Mesh-TensorFlow graph that checks every device's slice.

Stock ``mtf.Lowering`` checks the shape of slice 0 only, which is enough when
all slices are equal. With uneven splits each device's slice has its own shape,
so ``HeteroLowering`` checks every one against the plan. It also checks, before
lowering anything, that every uneven split adds up to its dimension, and names
the operation whenever one cannot handle an uneven split.
"""

from hmp.compat import import_mesh_tensorflow
from hmp.mesh_impl import HeteroMeshImpl, UnevenSplitError

mtf = import_mesh_tensorflow()


class HeteroLowering(mtf.Lowering):
    """``mtf.Lowering`` for meshes that include a :class:`HeteroMeshImpl`.

    Variable stacking (``autostack``) is off by default: stacking concatenates
    variables of equal slice shape, which uneven splits do not have.
    """

    def __init__(self, graph, mesh_to_impl, autostack=False, log_file=None):
        self._lowering_op = None
        _check_split_sizes(graph, mesh_to_impl)
        try:
            super().__init__(graph, mesh_to_impl, autostack=autostack,
                             log_file=log_file)
        except UnevenSplitError as error:
            op = self._lowering_op
            raise UnevenSplitError(
                "operation %r (%s) cannot be lowered: %s"
                % (op.name, type(op).__name__, error), error.dims) from None

    def mesh_impl(self, m):
        # Every operation asks for its mesh implementation before lowering;
        # remember which one is being lowered, to name it in errors.
        if isinstance(m, mtf.Operation):
            self._lowering_op = m
        return super().mesh_impl(m)

    def verify_slice_shapes(self, tensor, laid_out_tensor):
        mesh_impl = self.mesh_impl(tensor)
        if not isinstance(mesh_impl, HeteroMeshImpl):
            super().verify_slice_shapes(tensor, laid_out_tensor)
            return
        if isinstance(laid_out_tensor, mtf.LazyAllreduceSum):
            laid_out_tensor = laid_out_tensor.laid_out_input
        slices = laid_out_tensor.to_laid_out_tensor().tensor_list
        for pnum, tf_slice in enumerate(slices):
            expected = mesh_impl.slice_shape(tensor.shape, pnum)
            actual = tf_slice.shape.as_list()
            if actual != expected:
                raise ValueError(
                    "Wrong slice shape for %s on device %d (%s): expected %s, "
                    "got %s" % (tensor.name, pnum, mesh_impl.devices[pnum],
                                expected, actual))


def _check_split_sizes(graph, mesh_to_impl):
    """Raises ValueError if a split does not fit the graph's dimensions.

    Every split must name a dimension some tensor of the graph has (a split for
    a dimension the model does not have usually means a plan for another
    model), and its sizes must add up to that dimension.
    """
    dim_names = {}
    for op in graph.operations:
        mesh_impl = mesh_to_impl.get(op.mesh)
        if not isinstance(mesh_impl, HeteroMeshImpl):
            continue
        for tensor in op.outputs:
            mesh_impl.uneven_dims(tensor.shape)
            names = dim_names.setdefault(mesh_impl, set())
            names.update(tensor.shape.dimension_names)
    for mesh_impl, names in dim_names.items():
        unused = sorted(set(mesh_impl.splits) - names)
        if unused:
            raise ValueError(
                "splits: dimension(s) %s do not occur in the graph (its "
                "dimensions are %s)" % (unused, sorted(names)))
