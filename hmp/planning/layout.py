"""Meshes and layouts: ``"model:3"``, ``"batch:2"``, ``"batch:2;model:2"``.

Two mesh axes exist: ``batch`` (data parallelism: the batch dimension is
split over it) and ``model`` (model parallelism: the convolution filter
dimensions are split over it). Devices fill the mesh in row-major order, so
the device at batch coordinate ``b`` and model coordinate ``m`` is
``devices[b * N + m]`` where ``N`` is the model axis size; to keep that order
unambiguous the batch axis, when both are present, is written first.

A layout is the mesh plus ``splits``: for every tensor dimension laid out on a
mesh axis, its size on each coordinate of that axis, e.g.
``{"filters1": [7, 4, 1], "batch": [60, 40]}`` -- what ``hmp.HeteroMeshImpl``
takes.
"""

from dataclasses import dataclass

from hmp.errors import InvalidInput, is_digits

AXES = ("batch", "model")
ALLOWED = 'allowed: "model:N", "batch:M" or "batch:M;model:N" with M, N >= 1'


@dataclass(frozen=True)
class Mesh:
    """A mesh of ``batch`` rows by ``model`` columns; ``axes`` are those written."""

    batch: int
    model: int
    axes: tuple

    @property
    def size(self):
        return self.batch * self.model

    def __str__(self):
        return ";".join(f"{axis}:{getattr(self, axis)}" for axis in self.axes)


def parse_mesh(text):
    """Parses a mesh string; ValueError saying what is wrong and what is allowed."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidInput(f"bad mesh {text!r}: {ALLOWED}")
    if text.strip().lower() == "auto":   # where a mesh may be chosen, it is written so
        raise InvalidInput(f"bad mesh {text!r}: the cost model's choice is written auto, in "
                           f"lower case; {ALLOWED}")
    sizes = {}
    for part in text.split(";"):
        axis, sep, size = (s.strip() for s in part.partition(":"))
        if not sep:
            raise InvalidInput(f"bad mesh {text!r}: {part.strip()!r} is not AXIS:SIZE; {ALLOWED}")
        if axis not in AXES:
            raise InvalidInput(f"bad mesh {text!r}: axis {axis!r} is unknown; {ALLOWED}")
        if axis in sizes:
            raise InvalidInput(f"bad mesh {text!r}: axis {axis!r} appears twice; {ALLOWED}")
        if not is_digits(size) or int(size) < 1:
            raise InvalidInput(f"bad mesh {text!r}: size {size!r} of axis {axis!r} "
                             f"is not a whole number >= 1; {ALLOWED}")
        sizes[axis] = int(size)
    if list(sizes) == ["model", "batch"]:
        raise InvalidInput(f"bad mesh {text!r}: write the batch axis first "
                         "(devices fill the mesh row-major, batch rows outermost)")
    return Mesh(sizes.get("batch", 1), sizes.get("model", 1), tuple(sizes))


def check_mesh_size(mesh, device_count):
    """``mesh`` (a Mesh) has one position per device, or InvalidInput says it has not."""
    if mesh.size != device_count:
        raise InvalidInput(f"mesh {mesh} has {mesh.size} positions but {device_count} "
                           f"device{'s were' if device_count != 1 else ' was'} given")


def splits_the_model(mesh):
    """True when a plan on ``mesh`` (a mesh string, or "auto": every candidate mesh) may
    have a model axis: then it needs the op-size figures (``DeviceSpec.half_rate_flops``)."""
    return mesh == "auto" or parse_mesh(mesh).model > 1


def candidate_meshes(device_count):
    """Every mesh with ``device_count`` positions: data-, hybrid, then model-parallel."""
    meshes = []
    for batch in range(device_count, 0, -1):
        if device_count % batch == 0:
            model = device_count // batch
            axes = ("batch",) if model == 1 else ("model",) if batch == 1 else AXES
            meshes.append(Mesh(batch, model, axes))
    return meshes


def laid_out_dims(model_spec, mesh):
    """Each dimension the layout splits, with its mesh axis and full size."""
    dims = {}
    if "model" in mesh.axes:
        dims.update({dim: ("model", size) for dim, size in model_spec.split_dims().items()})
    if "batch" in mesh.axes:
        dims["batch"] = ("batch", None)
    return dims


def layout_rules(model_spec, mesh):
    """The Mesh-TF layout rules string: every split dim on ``model``, batch on ``batch``."""
    return ";".join(f"{dim}:{axis}" for dim, (axis, _) in laid_out_dims(model_spec, mesh).items())


def are_sizes(sizes):
    """Whether ``sizes`` is a list (or tuple) of whole numbers >= 1: one dim's split (the
    engine runs no device with a zero share: ``HeteroMeshImpl``)."""
    return isinstance(sizes, (list, tuple)) and all(
        isinstance(s, int) and not isinstance(s, bool) and s >= 1 for s in sizes)


def check_splits(model_spec, mesh, batch_size, splits, source="splits"):
    """Checks that ``splits`` is a layout of ``model_spec`` on ``mesh``; returns it as ints.

    Every laid-out dim (see ``laid_out_dims``) needs one whole number >= 1 per
    coordinate of its axis, summing to its size (``batch_size`` for batch; on more than
    one batch row each at least ``ModelSpec.fewest_replica_samples``), and nothing else
    may be there. Errors start with ``source``.
    """
    if not isinstance(splits, dict):
        raise InvalidInput(f"{source}: must be a dict of dimension -> sizes, got {splits!r}")
    expected = laid_out_dims(model_spec, mesh)
    for dim in splits:
        if dim not in expected:
            raise InvalidInput(
                f"{source}: dimension {dim!r} is not split on mesh {mesh} of model "
                f"{model_spec.name!r} (expected: {', '.join(expected) or 'none'})")
    checked = {}
    for dim, (axis, size) in expected.items():
        size = batch_size if size is None else size
        sizes = splits.get(dim)
        if sizes is None:
            raise InvalidInput(f"{source}: no sizes for dimension {dim!r} (split on {axis!r})")
        if not are_sizes(sizes):
            raise InvalidInput(f"{source}: sizes of {dim!r} must be a list of whole numbers "
                             f">= 1, got {sizes!r}")
        length = getattr(mesh, axis)
        if len(sizes) != length or sum(sizes) != size:
            raise InvalidInput(f"{source}: sizes of {dim!r} are {list(sizes)}; need {length} "
                             f"numbers (axis {axis!r}) summing to {size}")
        if dim == "batch" and length > 1 and min(sizes) < model_spec.fewest_replica_samples:
            raise InvalidInput(
                f"{source}: a batch replica holds {min(sizes)} of the batch {list(sizes)}; "
                f"model {model_spec.name!r} normalises its batch norms over each replica's "
                f"own samples, which needs {model_spec.fewest_replica_samples} a replica: "
                "plan again")
        checked[dim] = [int(s) for s in sizes]
    return checked
