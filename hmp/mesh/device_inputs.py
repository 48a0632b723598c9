"""What each device of a training step reads, kept or fed on the device itself.

A lowered step imports TensorFlow tensors made outside the mesh: the fed pixel indices
and labels, the ``training``, ``symmetry`` and field-look placeholders, the learning
rate and the random draws' key, both functions of the global step. Stock Mesh-TF slices
an import where the tensor lies (the master's task) and every other device receives its
slice at the start of each step: on a cluster, a dozen hand-overs before another task
can start, and a device that waits on them starts late. With
``DeviceInputs`` (``HeteroMeshImpl(..., device_inputs=...)``):

* a fed placeholder is fed to each device directly: the import makes a placeholder of
  the device's slice on each device (``slices``), and :meth:`feed` turns a feed of
  the whole value into the feed of every device's slice. TensorFlow receives every fed
  value on the master's task and sends it on to the device's task within the step, so
  another task's first op waits for that hand-over at every step;
* a placeholder marked ``keep`` (the step's pixel indices and labels) is also kept on
  the devices: each device holds its slices of a run of steps (``rows``, loaded once
  per epoch by :meth:`load`, one hand-over per epoch) and a step that does not feed it
  reads the row of its own step counter, so no hand-over precedes a device's step;
* each device keeps its own step counter (a local variable, not saved), equal to the
  global step: the random draws are keyed by it (``step``) and a tensor registered as
  a function of the global step (``of_step``: the learning rate, Adafactor's decay) is
  computed from it on each device. ``increments`` advance the counters at a step's end, each after
  its device's reads of it; ``sync()`` sets them to the global step after the weights
  (and the step) are initialised or restored.

The placeholders, counters and functions of the step lie on the CPU of the device's own
task (a GPU's host: what TensorFlow keeps in host memory anyway, and no kernel a GPU may
lack), a CPU device on itself. The values are the same as without: a split still equals
one device.
"""

import numpy as np
import tensorflow.compat.v1 as tf

PLACEHOLDERS = ("Placeholder", "PlaceholderWithDefault")


class DeviceInputs:
    """The per-device inputs of one training graph (shared by its lowered steps)."""

    def __init__(self, global_step):
        self.global_step = global_step
        self._counters = {}   # device: its step counter (a local int64 variable)
        self._reads = {}   # device: the reads of its counter since the last increments
        # placeholder: {(devices, their slices' extents): the devices' placeholders}
        self._fed = {}
        self._of_step = {}   # tensor: the function of a step tensor it is
        self._kept = {}   # placeholder: its role ("pixel_indices"): kept on the devices
        # (device, role, extent): _Rows, shared by the placeholders of a role (one per
        # lowered step of a run of several)
        self._rows = {}
        # device: the step its rows begin at (a local int64 variable), and the op setting
        # it to the global step (made once, with the variable: a load adds no op)
        self._first = {}

    # -- the step counters --------------------------------------------------
    def step(self, device):
        """The step of ``device`` (an int64 scalar on its host, ``host_of``): its
        counter, read."""
        if device not in self._counters:
            with tf.device(host_of(device)), tf.control_dependencies(None), \
                    tf.name_scope(None):
                self._counters[device] = tf.Variable(
                    0, dtype=tf.int64, trainable=False, name="step_counter",
                    collections=[tf.GraphKeys.LOCAL_VARIABLES])
        with tf.device(host_of(device)):
            read = self._counters[device].read_value()
        self._reads.setdefault(device, []).append(read)
        return read

    def of_step(self, tensor, function):
        """Registers ``tensor`` (made from the global step) as ``function(step)``: an
        import of it computes ``function`` on each device from the device's step."""
        self._of_step[tensor] = function

    def increments(self):
        """Ops adding 1 to every counter, each after the reads of it made since the last
        call (the step's): a step's last ops."""
        ops = []
        for device, counter in self._counters.items():
            with tf.device(host_of(device)), \
                    tf.control_dependencies(self._reads.get(device, [])):
                ops.append(counter.assign_add(1).op)
        self._reads = {}
        return ops

    def sync(self):
        """A new op setting every counter to the global step (after the weights and the step
        are initialised or restored); a no-op without counters."""
        ops = []
        for device, counter in self._counters.items():
            with tf.device(host_of(device)):
                ops.append(counter.assign(tf.cast(self.global_step, tf.int64)).op)
        return tf.group(*ops)

    # -- imports --------------------------------------------------------------
    def slices(self, tf_tensor, extents, devices):
        """Each device's slice of ``tf_tensor`` made on the device itself (``extents``:
        per device, ``(begin, size)`` of each dimension), or None when ``tf_tensor`` is
        neither fed nor a function of the step."""
        if tf_tensor in self._of_step:
            function = self._of_step[tf_tensor]
            out = []
            for device, extent in zip(devices, extents):
                with tf.device(host_of(device)):
                    whole = function(self.step(device))
                    out.append(_sliced(whole, extent))
            return out
        if tf_tensor.op.type not in PLACEHOLDERS:
            return None
        default = (tf.get_static_value(tf_tensor.op.inputs[0])
                   if tf_tensor.op.type == "PlaceholderWithDefault" else None)
        if tf_tensor.op.type == "PlaceholderWithDefault" and default is None:
            return None   # a default that is not a constant: sliced where it lies
        where = (tuple(devices), tuple(tuple(extent) for extent in extents))
        made = self._fed.setdefault(tf_tensor, {})
        if where in made:
            return made[where]
        name = tf_tensor.op.name.split("/")[-1]   # its own, as the profiler knows it
        role = self._kept.get(tf_tensor)
        out = []
        for device, extent in zip(devices, extents):
            shape = [size for _, size in extent]
            if role is not None:
                row = self._row(device, role, tuple(extent), tf_tensor.dtype)
            with tf.device(host_of(device)), tf.control_dependencies(None), \
                    tf.name_scope(None):
                if role is not None:
                    placeholder = tf.placeholder_with_default(row, shape, name=name)
                elif default is None:
                    placeholder = tf.placeholder(tf_tensor.dtype, shape, name=name)
                else:
                    placeholder = tf.placeholder_with_default(
                        tf.constant(_cut(default, extent), tf_tensor.dtype), shape, name=name)
            out.append(placeholder)
        made[where] = out
        return out

    # -- kept inputs --------------------------------------------------------------
    def keep(self, placeholder, role):
        """Marks a fed ``placeholder`` (before the lowering imports it) as one of the
        ``role`` (one per kind of input: the placeholders of a run's several steps
        share it) kept on the devices: a step that does not feed it reads its row."""
        self._kept[placeholder] = role

    def _row(self, device, role, extent, dtype):
        """The row of ``device``'s own step in its kept slices ``extent`` of ``role``."""
        key = (device, role, extent)
        if key not in self._rows:
            with tf.device(host_of(device)), tf.control_dependencies(None), \
                    tf.name_scope(None):
                if device not in self._first:
                    first = tf.Variable(0, dtype=tf.int64, trainable=False,
                                        name="rows_first_step",
                                        collections=[tf.GraphKeys.LOCAL_VARIABLES])
                    self._first[device] = (
                        first, first.assign(tf.cast(self.global_step, tf.int64)).op)
                self._rows[key] = _Rows(role, [size for _, size in extent], dtype)
        step = self.step(device)
        with tf.device(host_of(device)):
            return self._rows[key].at(step - self._first[device][0])

    def load(self, values):
        """``(ops, feed)`` that keep ``values`` (``{role: [the whole fed value of each
        step]}``, every role's steps alike) on the devices, each its slices: the next
        step (from the global step now) reads the first, and the run starts over after
        the last. Raises ValueError unless ``values`` has every role kept (and no other),
        each with the same number of steps."""
        kept = {role for _, role, _ in self._rows}
        if set(values) != kept:
            raise ValueError("the roles kept on the devices are %s, got %s"
                             % (", ".join(sorted(kept)), ", ".join(sorted(values))))
        counts = {len(steps) for steps in values.values()}
        if len(counts) != 1 or 0 in counts:
            raise ValueError("every role needs the same number of steps, at least 1; got "
                             + ", ".join("%s %d" % (r, len(v)) for r, v in values.items()))
        ops = [rows.assign for rows in self._rows.values()]
        ops += [at_global_step for _, at_global_step in self._first.values()]
        feed = {rows.value: np.stack([_cut(np.asarray(v), extent) for v in values[role]])
                for (_, role, extent), rows in self._rows.items()}
        return ops, feed

    def feed(self, feed):
        """``feed`` with each value of a placeholder fed on the devices given to each
        device's placeholder instead, cut to its slice (and to the placeholder itself
        only if something else reads it)."""
        out = {}
        for placeholder, value in feed.items():
            made, whole = self._fed.get(placeholder, {}), np.asarray(value)
            for (_, extents), owns in made.items():
                out.update((own, _cut(whole, extent)) for own, extent in zip(owns, extents))
            if not made or placeholder.consumers():
                out[placeholder] = value
        return out


class _Rows:
    """A device's kept slices of one role: a local variable of ``[steps] + shape``, its
    op loading a fed value of any count of steps, and rows by step."""

    def __init__(self, role, shape, dtype):
        self.variable = tf.Variable(
            tf.zeros([0] + shape, dtype), trainable=False, shape=[None] + shape,
            name=role + "_rows", collections=[tf.GraphKeys.LOCAL_VARIABLES])
        self.value = tf.placeholder(dtype, [None] + shape, name=role + "_rows_fed")
        self.assign = self.variable.assign(self.value, read_value=False)

    def at(self, steps_in):
        """The row ``steps_in`` (an int64 scalar) steps after the first, cyclically."""
        rows = self.variable.read_value()
        return tf.gather(rows, tf.math.floormod(steps_in, tf.shape(rows, out_type=tf.int64)[0]))


def host_of(device):
    """Where ``device``'s inputs lie: itself for a CPU (or no device), else the first CPU
    of its task (``/job:worker/task:1/device:GPU:0`` -> ``.../device:CPU:0``)."""
    spec = tf.DeviceSpec.from_string(device)
    if spec.device_type is None or spec.device_type.upper() == "CPU":
        return device
    return spec.replace(device_type="CPU", device_index=0).to_string()


def _cut(value, extent):
    """The numpy slice ``extent`` ((begin, size) per dimension) of ``value``."""
    return value[tuple(slice(begin, begin + size) for begin, size in extent)]


def _sliced(tensor, extent):
    """The TensorFlow slice ``extent`` of ``tensor`` (itself for a scalar)."""
    if not extent:
        return tensor
    return tf.slice(tensor, [begin for begin, _ in extent], [size for _, size in extent])
