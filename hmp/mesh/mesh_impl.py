"""A Mesh-TensorFlow placement mesh whose tensor dimensions may be split unevenly.

Stock Mesh-TensorFlow splits a tensor dimension laid out on a mesh axis into
equal parts, one per mesh coordinate. ``HeteroMeshImpl`` also accepts, per
tensor dimension, the list of part sizes (``{"filters1": [7, 4, 1]}``), so a
fast device can hold more convolution filters, or more of the batch, than a
slow one. Every device holds a real slice of exactly its size (variables,
activations and gradients); nothing is padded to the largest share.

Most of Mesh-TensorFlow works unchanged on such slices because it only applies
TensorFlow functions slice by slice, and ``tf.concat`` and the ring all-reduce
accept unequal parts. What needs per-device knowledge is overridden here:
slice shapes and offsets, variables, import/export, broadcast and random
tensors; ``keep_own_parts`` splits a whole axis into each device's part.
Collectives that cannot work on unequal parts (all-to-all, receive) refuse
them. All-reduces are two-level when the mesh spans several hosts
(``hmp.mesh.collectives``). A split written out evenly (``[2, 2]``) is an even
split. Stock operations that need per-device sizes are lowered by
``hmp.mesh.stock_ops`` (through ``hmp.HeteroLowering``); one that still asks for a
single slice shape raises :class:`UnevenSplitError`, which the lowering
prefixes with the operation's name. See ``docs/engine.md``.
"""

import numbers
import os
import random
import zlib

import tensorflow.compat.v1 as tf

from hmp.hosts import group_by_host, is_hierarchical
from hmp.mesh.collectives import hierarchical_allreduce, host_of
from hmp.mesh.numerics import exact_float32
from hmp.compat import import_mesh_tensorflow

mtf = import_mesh_tensorflow()
PlacementMeshImpl = mtf.placement_mesh_impl.PlacementMeshImpl

# Stateless counterparts of the random ops Mesh-TF lowers (by the op function's name).
STATELESS = {"random_uniform": tf.random.stateless_uniform,
             "random_normal": tf.random.stateless_normal}


class UnevenSplitError(ValueError):
    """An operation needs equal slices but a dimension is split unevenly."""

    def __init__(self, message, dims):
        super().__init__(message)
        self.dims = list(dims)


def _placed_alike(device, other):
    """Whether two TensorFlow device strings place alike (``/cpu:0``, ``/device:CPU:0``)."""
    return (tf.DeviceSpec.from_string(device).to_string()
            == tf.DeviceSpec.from_string(other).to_string())


class HeteroMeshImpl(PlacementMeshImpl):
    """``PlacementMeshImpl`` with per-device slice sizes for chosen dimensions.

    Args:
      shape: the mesh shape, e.g. ``"batch:2;model:3"`` or an ``mtf.Shape``.
      layout: the layout rules, e.g. ``"filters1:model;batch:batch"``.
      devices: one TensorFlow device string per mesh position, row-major.
      splits: ``{tensor dimension name: [size per coordinate]}`` along the
        mesh axis that dimension is laid out on. Dimensions not named, and
        dimensions given equal sizes, are split evenly, as in stock
        Mesh-TensorFlow.
      hosts: the host of each device (any labels; devices of one host share
        fast links). Default: each device's TensorFlow task, so every
        ``hmp.worker`` is a host and a single process is one host.
      allreduce: "hierarchical" (default) reduces within each host first,
        then across hosts (``hmp.mesh.collectives``); "flat" uses Mesh-TensorFlow's
        ring over all devices. They differ only when some host has several
        devices and there are several hosts.
      device_inputs: a ``hmp.mesh.device_inputs.DeviceInputs``, or None: imports of
        fed placeholders and of functions of the step, and the random draws' key,
        made on each device (fed to it, or from its own step counter) instead of
        sliced where they lie. Only with it are the random draws keyed by a step
        (``random``); without it they draw anew at every run.

    Raises:
      ValueError: a split names a dimension the layout does not lay out, has
        the wrong number of sizes for its mesh axis, or a size that is not a
        positive integer. Sizes that do not add up to the dimension, and splits
        of dimensions the graph does not have, are reported by ``HeteroLowering``
        before anything is lowered.
    """

    def __init__(self, shape, layout, devices, splits=None, hosts=None,
                 allreduce="hierarchical", device_inputs=None):
        super().__init__(shape, layout, list(devices))
        if len(self.devices) != self.size:
            raise ValueError(
                "devices: %d devices given for mesh %s of %d positions: %s"
                % (len(self.devices), self.shape.to_string, self.size,
                   self.devices))
        exact_float32(self.devices)   # a GPU computes float32 in full, as a CPU
        self._splits = self._validated_splits(dict(splits or {}))
        self._host_of_device = self._validated_hosts(hosts)
        if allreduce not in ("hierarchical", "flat"):
            raise ValueError("allreduce: %r is not 'hierarchical' or 'flat'" % (allreduce,))
        self.allreduce_kind = allreduce
        self._random_ops = 0   # random tensors made so far (see ``random``)
        self.device_inputs = device_inputs

    def _validated_hosts(self, hosts):
        """``{device: host}``, from ``hosts`` or from the device strings."""
        if hosts is None:
            return {device: host_of(device) for device in self.devices}
        hosts = list(hosts)
        if len(hosts) != len(self.devices):
            raise ValueError("hosts: %d hosts given for %d devices"
                             % (len(hosts), len(self.devices)))
        host_of_device = {}
        for device, host in zip(self.devices, hosts):
            if host_of_device.setdefault(device, host) != host:
                raise ValueError("hosts: device %s is given two hosts, %r and %r"
                                 % (device, host_of_device[device], host))
        return host_of_device

    @property
    def hosts(self):
        """The host of each device, in mesh order."""
        return [self._host_of_device[device] for device in self.devices]

    # ------------------------------------------------------------------
    # Splits
    # ------------------------------------------------------------------
    def _validated_splits(self, splits):
        laid_out = {}
        for mesh_axis, mesh_dim in enumerate(self.shape.dims):
            rules = self.layout_rules.mesh_dimension_name_to_tensor_dimension_names(
                mesh_dim.name)
            for tensor_dim_name in rules:
                laid_out[tensor_dim_name] = mesh_axis
        validated = {}
        for name, sizes in splits.items():
            if name not in laid_out:
                raise ValueError(
                    "splits: dimension %r is not laid out on any mesh axis; "
                    "the layout rules lay out %s" % (name, sorted(laid_out)))
            mesh_dim = self.shape.dims[laid_out[name]]
            sizes = list(sizes)
            if len(sizes) != mesh_dim.size:
                raise ValueError(
                    "splits: dimension %r has %d sizes %s but mesh axis %r has "
                    "%d coordinates" % (name, len(sizes), sizes, mesh_dim.name,
                                        mesh_dim.size))
            for coord, size in enumerate(sizes):
                if (isinstance(size, bool) or not isinstance(size, numbers.Real)
                        or not float(size).is_integer()):
                    raise ValueError(
                        "splits: dimension %r size %r at %s coordinate %d is "
                        "not an integer" % (name, size, mesh_dim.name, coord))
                if size < 0:
                    raise ValueError(
                        "splits: dimension %r has negative size %d at %s "
                        "coordinate %d" % (name, size, mesh_dim.name, coord))
                if size == 0:
                    raise ValueError(
                        "splits: dimension %r has size 0 at %s coordinate %d; "
                        "zero shares are not supported (TensorFlow cannot run "
                        "a convolution with no input channels): give every "
                        "device at least 1 or leave it out of the mesh"
                        % (name, mesh_dim.name, coord))
            validated[name] = tuple(int(s) for s in sizes)
        return validated

    @property
    def splits(self):
        """``{dimension name: tuple of sizes}`` as given (equal sizes included)."""
        return dict(self._splits)

    def split_sizes(self, tensor_dim):
        """Per-coordinate sizes of ``tensor_dim`` if it is split unevenly, else None.

        Sizes that are all equal (``[2, 2]``, what a planner gives equal
        devices) are the even split, so None.

        Raises:
          ValueError: the sizes given for the dimension do not add up to it.
        """
        sizes = self._splits.get(tensor_dim.name)
        if sizes is None:
            return None
        if sum(sizes) != tensor_dim.size:
            raise ValueError(
                "splits: sizes %s for dimension %r add up to %d, but the "
                "dimension has size %d" % (list(sizes), tensor_dim.name,
                                           sum(sizes), tensor_dim.size))
        if len(set(sizes)) == 1:
            return None
        return sizes

    def uneven_dims(self, tensor_shape):
        """The dimensions of ``tensor_shape`` that are split unevenly."""
        return [d for d in tensor_shape.dims if self.split_sizes(d) is not None]

    def _refuse_uneven(self, tensor_shape, what):
        uneven = self.uneven_dims(tensor_shape)
        if uneven:
            raise UnevenSplitError(
                "%s: dimension(s) %s are split unevenly (%s), but this needs "
                "one slice shape for all devices"
                % (what, [d.name for d in uneven],
                   ", ".join("%s=%s" % (d.name, list(self.split_sizes(d)))
                             for d in uneven)),
                uneven)

    # ------------------------------------------------------------------
    # Slice geometry
    # ------------------------------------------------------------------
    def slice_shape(self, tensor_shape, pnum=None):
        """Shape of processor ``pnum``'s slice.

        Without ``pnum`` this is the stock answer and exists only for shapes
        whose slices are all equal; otherwise :class:`UnevenSplitError`.
        """
        if pnum is None:
            self._refuse_uneven(tensor_shape, "slice_shape without a device")
            return super().slice_shape(tensor_shape)
        return [size for _, size in self.slice_extent(tensor_shape, pnum)]

    def slice_begin(self, tensor_shape, pnum):
        return [begin for begin, _ in self.slice_extent(tensor_shape, pnum)]

    def part_sizes(self, tensor_dim, mesh_axis):
        """Per-coordinate sizes of ``tensor_dim`` laid out on ``mesh_axis``.

        The sizes given in ``splits``, else equal parts.

        Raises:
          ValueError: the dimension is not in ``splits`` and cannot be split
            evenly, or its ``splits`` sizes do not add up to it.
        """
        sizes = self.split_sizes(tensor_dim)
        if sizes is not None:
            return sizes
        parts = self.shape[mesh_axis].size
        if tensor_dim.size % parts:
            raise ValueError(
                "dimension %r of size %d cannot be split evenly over "
                "mesh axis %r of size %d; give its sizes in `splits`"
                % (tensor_dim.name, tensor_dim.size, self.shape[mesh_axis].name,
                   parts))
        return (tensor_dim.size // parts,) * parts

    def slice_extent(self, tensor_shape, pnum):
        """[(begin, size)] per tensor axis of processor ``pnum``'s slice."""
        coords = mtf.pnum_to_processor_coordinates(self.shape, pnum)
        layout = self.tensor_layout(tensor_shape)
        extent = []
        for dim, mesh_axis in zip(tensor_shape.dims,
                                  layout.tensor_axis_to_mesh_axis):
            if mesh_axis is None:
                extent.append((0, dim.size))
                continue
            coord = coords[mesh_axis]
            sizes = self.part_sizes(dim, mesh_axis)
            extent.append((sum(sizes[:coord]), sizes[coord]))
        return extent

    def slice_shapes(self, tensor_shape):
        """Every processor's slice shape, in processor order."""
        return [self.slice_shape(tensor_shape, p) for p in range(self.size)]

    def slice_size(self, tensor_shape):
        """Elements in the largest slice (what the busiest device must hold)."""
        return max(mtf.list_product(s) for s in self.slice_shapes(tensor_shape))

    def laid_out_size(self, tensor_shape):
        return sum(mtf.list_product(s) for s in self.slice_shapes(tensor_shape))

    def slicewise_per_device(self, fn, *inputs):
        """Like ``slicewise`` but ``fn(pnum, *slices)`` also gets the processor."""
        return self.slicewise(fn, self.laid_out_pnum(), *inputs)

    # ------------------------------------------------------------------
    # Variables, import and export
    # ------------------------------------------------------------------
    class LaidOutVariable(PlacementMeshImpl.LaidOutVariable):
        """Slice variables of each device's own size, with master copy ops.

        As in stock Mesh-TF, with ``MTF_SEQUENCE_MODE=1`` in the environment
        each variable's master-to-slices copy waits for the previous
        variable's, and ``Lowering.copy_masters_to_slices`` runs the last.
        """

        def __init__(self, variable, mesh_impl):  # pylint: disable=super-init-not-called
            self._variable = variable
            self._mesh_impl = mesh_impl
            shape = variable.outputs[0].shape
            master = variable.get_master()
            if self.slice_is_master:
                self._laid_out_tensor = mesh_impl.LaidOutTensor([master])
                self._copy_slices_to_master = tf.group([])
                self._copy_master_to_slices = tf.group([])
                return
            slices = []
            for pnum, device in enumerate(mesh_impl.devices):
                with tf.device(device):
                    # zeros: a slice's values come from its master (copy_master_to_slices),
                    # never from its initialiser, so the cheapest one (not the random
                    # default, 4-6 ops more a slice to build)
                    slices.append(tf.get_variable(
                        "%s_slice_%d" % (variable.name, pnum),
                        mesh_impl.slice_shape(shape, pnum),
                        dtype=variable.slice_dtype, initializer=tf.zeros_initializer(),
                        collections=[]))
            self._laid_out_tensor = mesh_impl.LaidOutTensor(slices)
            self._copy_master_to_slices = self._copy_from_master(master, shape)
            self._copy_slices_to_master = variable.assign_to_master(
                mesh_impl.combine_slices(
                    [tf.cast(s, variable.master_dtype) for s in slices], shape))

        @property
        def slice_is_master(self):
            """Stock's rule (one device, the master's dtype and device: no slice
            variable), with the devices compared as TensorFlow places them: stock
            compares their strings, so a master on ``/device:CPU:0`` got a copy on
            ``/cpu:0``, the same device (twice the weights' memory and ops to build)."""
            variable, devices = self._variable, self._mesh_impl.devices
            if (len(devices) != 1 or variable.master_dtype != variable.slice_dtype
                    or isinstance(variable, mtf.StackedVariable)):
                return False
            return not devices[0] or _placed_alike(devices[0], variable.master_device)

        def _copy_from_master(self, master, shape):
            mesh_impl = self._mesh_impl
            if os.environ.get("MTF_SEQUENCE_MODE", "") != "1":
                return self.assign_to_slices(
                    mtf.assign_slice, mesh_impl.make_slices(master, shape))
            with tf.control_dependencies(mesh_impl.copy_master_to_slice_ops[-1:]):
                copy = self.assign_to_slices(
                    mtf.assign_slice, mesh_impl.make_slices(master, shape))
            mesh_impl.copy_master_to_slice_ops.append(copy)
            return copy

    def make_slices(self, tf_tensor, tensor_shape):
        if self.device_inputs is not None:
            made = self.device_inputs.slices(
                tf_tensor, [self.slice_extent(tensor_shape, pnum) for pnum in range(self.size)],
                self.devices)
            if made is not None:
                return made
        if self.tensor_layout(tensor_shape).is_fully_replicated:
            return [tf_tensor] * self.size
        slices = []
        with tf.device(tf_tensor.device):
            for pnum in range(self.size):
                extent = self.slice_extent(tensor_shape, pnum)
                slices.append(tf.slice(tf_tensor, [b for b, _ in extent],
                                       [s for _, s in extent]))
        return slices

    # ------------------------------------------------------------------
    # Operations that create slices from a shape
    # ------------------------------------------------------------------
    def broadcast_impl(self, old_slices, old_shape, new_shape):
        def broadcast(pnum, x):
            return tf.broadcast_to(_expand_to(x, old_shape, new_shape),
                                   self.slice_shape(new_shape, pnum))
        return self.slicewise_per_device(broadcast, old_slices)

    def random(self, shape, tf_fn, kwargs):
        """``tf_fn`` (e.g. ``tf.random.uniform``) drawn whole, each device keeping its slice.

        Every device draws the whole tensor with the same seed and keeps its
        own part, so the values do not depend on the splits: dropout masks
        (and augmentation draws) on any uneven mesh equal those of one
        device, and replicated copies agree. Under a graph-level seed
        (``tf.set_random_seed``) the seed is derived from it and the number of random
        tensors this mesh made before, with a stable hash: a seeded graph draws the
        same numbers in every process. Without one, each call draws a fresh key, as
        stock Mesh-TF does.

        A step is the key only when the builder asks for it with ``device_inputs``
        (``hmp.graph.graph.TrainingGraph``): uniform and normal draws are then
        stateless, keyed by (that seed, the device's own step counter, which the graph
        keeps equal to the global step and advances each step), so a run resumed from a
        checkpoint, or rebuilt on a new plan, draws what an uninterrupted run draws at
        the same step, and a step lowered again in the same graph (in another name
        scope: ``TrainingGraph.steps_per_run``) uses the first one's seeds and draws by
        its own step. Otherwise the draws are the random ops' own (stateful): each run
        draws anew, whether or not the graph has a global step, which nothing here
        advances (``hmp.train_step`` does not; Mesh-TF's Adafactor makes one).
        """
        op_key = self._random_op_key()
        seed = zlib.crc32(str(op_key).encode("utf-8")) & 0x7FFFFFFF
        stateless = (STATELESS.get(getattr(tf_fn, "__name__", None))
                     if self.device_inputs is not None else None)
        def random_slice(pnum):
            extent = self.slice_extent(shape, pnum)
            if stateless is not None:
                key = tf.stack([tf.constant(seed, tf.int64),
                                self.device_inputs.step(self.devices[pnum])])
                whole = stateless(shape.to_integer_list, seed=key, **kwargs)
            else:
                whole = tf_fn(shape.to_integer_list, seed=seed, **kwargs)
            return tf.slice(whole, [begin for begin, _ in extent],
                            [size for _, size in extent])
        return self.slicewise_per_device(random_slice)

    def _random_op_key(self):
        graph = tf.get_default_graph()
        self._random_ops += 1
        if graph.seed is None:
            return random.random()
        return "%d/%d" % (graph.seed, self._random_ops)

    # ------------------------------------------------------------------
    # Collectives
    # ------------------------------------------------------------------
    def allreduce(self, x, mesh_axes, reduction_fn_string):
        """All-reduce over ``mesh_axes``: two-level across hosts unless "flat"."""
        if self.allreduce_kind == "flat":
            return super().allreduce(x, mesh_axes, reduction_fn_string)
        def two_level(xs, devices):
            hosts = [self._host_of_device[device] for device in devices]
            return hierarchical_allreduce(xs, devices, hosts, reduction_fn_string)
        return self._collective_with_groups(x, mesh_axes, two_level)

    def ring_lengths(self, mesh_axes):
        """How many devices each ring of an all-reduce over ``mesh_axes`` passes through:
        every device of a group, or (two-level, ``hierarchical_allreduce``) one leader
        per host of the group."""
        lengths, mesh_hosts = set(), self.hosts
        for group in mtf.processor_groups(self.shape, mesh_axes):
            hosts = [mesh_hosts[p] for p in group]
            two_level = self.allreduce_kind != "flat" and is_hierarchical(hosts)
            lengths.add(len(group_by_host(hosts)) if two_level else len(group))
        return sorted(lengths)

    def keep_own_parts(self, x, mesh_axis, split_axis, sizes):
        """Each processor keeps its part, of ``sizes`` along ``mesh_axis``,
        of ``split_axis``, which every slice of ``x`` holds whole.

        The uneven counterpart of stock ``allsplit`` (which cuts equal parts):
        the caller knows the dimension being split and passes its sizes.
        """
        def keep_own_part(pnum, t):
            coord = mtf.pnum_to_processor_coordinates(self.shape, pnum)[mesh_axis]
            begin = [0] * t.shape.ndims
            size = [-1] * t.shape.ndims
            begin[split_axis] = sum(sizes[:coord])
            size[split_axis] = sizes[coord]
            return tf.slice(t, begin, size)
        return self.slicewise_per_device(keep_own_part, x)

    def _refuse_unequal_slices(self, x, what):
        shapes = {tuple(t.shape.as_list()) for t in x.to_laid_out_tensor().tensor_list}
        if len(shapes) > 1:
            raise UnevenSplitError(
                "%s needs equal slices on every device, got slice shapes %s; "
                "an unevenly split dimension cannot be re-split this way"
                % (what, sorted(shapes)), [])

    def alltoall(self, x, mesh_axis, split_axis, concat_axis):
        self._refuse_unequal_slices(x, "all-to-all")
        return super().alltoall(x, mesh_axis, split_axis, concat_axis)

    def receive(self, x, mesh_axis, source_pcoord):
        self._refuse_unequal_slices(x, "receive (shift between processors)")
        return super().receive(x, mesh_axis, source_pcoord)


def _expand_to(x, old_shape, new_shape):
    """Transposes and expands slice ``x`` of ``old_shape`` to ``new_shape``'s rank."""
    if old_shape.ndims == 0 or old_shape == new_shape:
        return x
    kept = [d for d in new_shape.dims if d in old_shape.dims]
    x = tf.transpose(x, [old_shape.dims.index(d) for d in kept])
    for axis, dim in enumerate(new_shape.dims):
        if dim not in old_shape.dims:
            x = tf.expand_dims(x, axis)
    return x
