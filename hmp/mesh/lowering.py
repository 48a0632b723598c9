"""Lowering of a Mesh-TensorFlow graph with uneven splits.

``HeteroLowering`` lowers every operation on a :class:`HeteroMeshImpl`
through the registry of ``hmp.mesh.stock_ops`` (stock operations that need each
device's slice extent), and any other operation with its own ``lower``. Stock
``mtf.Lowering`` checks the shape of slice 0 only, which is enough when all
slices are equal; here every device's slice is checked against the plan. It
also checks, before lowering anything, that every uneven split adds up to its
dimension, and names the operation whenever one cannot handle an uneven split.
"""

import tensorflow.compat.v1 as tf

from hmp.compat import import_mesh_tensorflow
from hmp.mesh.mesh_impl import HeteroMeshImpl, UnevenSplitError
from hmp.mesh.stock_ops import LOWERINGS

mtf = import_mesh_tensorflow()


class HeteroLowering(mtf.Lowering):
    """``mtf.Lowering`` for meshes that include a :class:`HeteroMeshImpl`.

    Variable stacking (``autostack``) is off by default: stacking concatenates
    variables of equal slice shape, which uneven splits do not have.
    """

    def __init__(self, graph, mesh_to_impl, autostack=False, log_file=None):
        # pylint: disable=super-init-not-called
        # Stock __init__ calls ``op.lower`` itself; this is the same loop,
        # lowering through the registry.
        _check_split_sizes(graph, mesh_to_impl)
        self.mesh_to_impl = mesh_to_impl
        self.graph = graph
        if autostack:
            self.autostack()
        self._counters = []
        self.tensors = {}
        self.operations = {}
        self.variables = {}
        for op in graph.operations:
            with tf.name_scope(op.name):
                self._lower(op)
            for out in op.outputs:
                self.add_counter("output/%s" % type(op).__name__, self.laid_out_size(out))
                self.add_counter("output_unique/%s" % type(op).__name__, out.size)
        self._log_variable_sizes(log_file)

    def _lower(self, op):
        mesh_impl = self.mesh_impl(op)
        lower = (LOWERINGS.get(type(op)) if isinstance(mesh_impl, HeteroMeshImpl)
                 else None)
        try:
            if lower is None:
                op.lower(self)
            else:
                lower(op, self, mesh_impl)
        except UnevenSplitError as error:
            raise UnevenSplitError(
                "operation %r (%s) cannot be lowered: %s"
                % (op.name, type(op).__name__, error), error.dims) from None

    def _log_variable_sizes(self, log_file):
        """Logs variable and slice sizes and the counters, as stock Mesh-TF's lowering does."""
        def log(f=None):
            mtf.log_variable_sizes(self.graph.trainable_variables, "Trainable Variables",
                                   verbose=True, mesh_to_impl=self.mesh_to_impl, log_file=f)
            mtf.log_variable_sizes(self.graph.all_variables, "All Variables",
                                   verbose=False, mesh_to_impl=self.mesh_to_impl, log_file=f)
            counters = "Counters:\n" + mtf.pretty_print_counters(self._counters)
            tf.logging.info(counters)
            if f:
                f.write(counters + "\n")
        if log_file:
            with tf.io.gfile.GFile(log_file, mode="w") as f:
                log(f)
        else:
            log()

    def average_over_replicas(self, variables, batch_dim):
        """An op that sets every device's copy of each mtf variable of ``variables`` to
        the mean of its copies across the replicas of a batch split, each weighted by
        its replica's part of ``batch_dim`` (one all-reduce per variable over the mesh
        axis ``batch_dim`` lies on; nothing where it lies on none).

        For state that each replica updates from its own samples and that must agree
        before it is saved or used to classify (``hmp.layers.batch_norm``'s moving
        statistics with ``local`` statistics).
        """
        assigns = []
        for variable in variables:
            mesh_impl = self.mesh_impl(variable)
            axis = mesh_impl.tensor_dimension_to_mesh_axis(batch_dim)
            if axis is None:
                continue
            copies = self.variables[variable.operation].laid_out_tensor.tensor_list
            weighted = []
            for pnum, (device, copy) in enumerate(zip(mesh_impl.devices, copies)):
                share = mesh_impl.slice_shape(mtf.Shape([batch_dim]), pnum)[0]
                with tf.device(device):
                    weighted.append(tf.identity(copy) * (share / batch_dim.size))
            means = mesh_impl.allreduce(mesh_impl.LaidOutTensor(weighted), [axis], "SUM")
            for device, copy, mean in zip(mesh_impl.devices, copies, means.tensor_list):
                with tf.device(device):
                    assigns.append(tf.assign(copy, mean))
        return tf.group(assigns)

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
