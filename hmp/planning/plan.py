"""A layout plan: what ``plan_layout`` decided, why, and what it predicts.

A Plan is everything ``hmp.HeteroMeshImpl`` needs (mesh, layout rules,
devices, splits) plus the cost model's predictions and the candidates it
weighed. It is saved as JSON so that a plan made once can be reused and
checked against the model and devices it is loaded for.
"""

import math
from dataclasses import asdict, dataclass, field
from numbers import Real

from hmp.device_names import check_distinct
from hmp.errors import InvalidInput, whole_number
from hmp.files import read_json_file, write_json
from hmp.formatting import aligned_columns, format_bytes, format_time
from hmp.planning.apportion import check_speeds
from hmp.planning.costmodel import Prediction
from hmp.planning.layout import are_sizes, check_splits, parse_mesh
from hmp.planning.platform import device_names

FORMAT = "hmp-plan/1"
TIME_UNITS = ("s", "relative")


@dataclass
class Candidate:
    """One layout the planner weighed; ``step`` is None when it was infeasible.

    ``devices``: on how many devices (``mesh="auto"`` also tries subsets); None in
    plans written before subsets were tried (all devices). ``ranking``: which
    ``devices`` devices, with ``mesh="auto"``: the fastest alone ("alone") or those of
    highest FLOP rate ("rate"); None for a given mesh and in older plans.
    """

    mesh: str
    step: float | None
    compute: float | None
    comm: float | None
    note: str  # why it is infeasible; empty otherwise
    devices: int | None = None
    ranking: str | None = None


RANKINGS = {"alone": "fastest alone", "rate": "highest rate"}
@dataclass
class Plan:
    """A chosen layout with its predictions. The JSON: docs/planner.md, "The plan file"."""

    model: str
    mesh: str
    layout_rules: str
    batch_size: int
    devices: list
    speeds: list
    splits: dict
    layers: list  # [{"name": "conv1", "split_dim": "filters1" or None, "split_size": 16}, ...]
    time_unit: str  # "s" for speeds in FLOP/s, "relative" for relative speeds
    prediction: Prediction
    memory_caps: list | None
    candidates: list  # of Candidate
    reason: str
    # Devices given to the planner that the plan does not use, slowest last:
    # [{"device": "/cpu:1", "speed": 1e9, "reason": "left out /cpu:1: with it ..."}]
    left_out: list = field(default_factory=list)
    # Split dims left out of the layout rules (every model column computes them whole):
    # [{"dim": "hidden", "saved_s": 1.2e-3 (predicted, or None when given), "reason": ...}]
    replicated: list = field(default_factory=list)
    # With mesh="auto": every device given, priced alone, fastest first:
    # [{"device": "/cpu:0", "step": 6.7e-3 (None: it fits no one-device layout),
    #   "rate": 5e10 (FLOP/s at which it computes the model alone)}]
    alone: list = field(default_factory=list)
    # Each device's DeviceSpec.channel_block, in the order of ``devices`` (empty in older
    # plans and where every device has 1): a re-plan apportions filters in those blocks.
    channel_blocks: list = field(default_factory=list)

    def device_channel_blocks(self):
        """Each device's channel block, in the order of ``devices`` (1 where the plan
        keeps none)."""
        return self.channel_blocks or [1] * len(self.devices)

    def replicated_dims(self):
        return [record["dim"] for record in self.replicated]

    def fastest_alone(self):
        """The device whose one-device layout is predicted fastest (``alone``), or None
        (a given mesh, an older plan, or no device fits alone)."""
        return next((r["device"] for r in self.alone if r["step"] is not None), None)

    def to_dict(self):
        """The plan as the JSON values of a plan file (docs/planner.md, "The plan file")."""
        return {"format": FORMAT, **asdict(self)}

    def to_json(self, path):
        """Writes the plan as JSON, atomically (docs/planner.md, "The plan file")."""
        write_json(path, self.to_dict())

    @classmethod
    def from_json(cls, path, model_spec=None, devices=None):
        """Reads a plan; checks its structure and, if given, its model and devices.

        ``devices`` may be names or DeviceSpecs. Every problem raises
        ValueError naming the file and what is wrong.
        """
        where = f"plan file {path}"
        data = read_json_file(path, where)
        plan = _parse(data, where)
        if model_spec is not None:
            plan.check_model(model_spec, where)
        if devices is not None:
            plan.check_devices(devices, where)
        return plan

    def check_model(self, model_spec, where="plan"):
        """ValueError unless this plan is for ``model_spec`` (name, layers, split sizes)."""
        if self.model != model_spec.name:
            raise InvalidInput(f"{where} is for model {self.model!r}, not the expected "
                             f"model {model_spec.name!r} (the name gives the model, its "
                             "input, precision and batch norm: plan again for the run's)")
        if self.layers != layer_entries(model_spec):
            raise InvalidInput(f"{where}: its layers of model {self.model!r} differ from the "
                             "given model's (was the model changed since planning?)")
        try:
            view = model_spec.replicating(self.replicated_dims())
        except InvalidInput as e:
            raise InvalidInput(f"{where}: {e}") from e
        check_splits(view, parse_mesh(self.mesh), self.batch_size, self.splits, where)

    def check_batch(self, batch_size, where="plan"):
        """InvalidInput unless this plan is for a global batch of ``batch_size`` samples: a
        batch split's samples per device add up to the plan's batch, and its prices are
        for that batch."""
        if batch_size != self.batch_size:
            raise InvalidInput(f"{where} is for a batch of {self.batch_size}, not "
                               f"{batch_size}; train with --batch_size={self.batch_size}, "
                               f"or plan again with scripts/plan_layout.py "
                               f"--batch_size={batch_size}")

    def check_devices(self, devices, where="plan"):
        """ValueError unless this plan is for exactly ``devices`` (count and names, in order).

        The devices the plan left out (``left_out``) may be among ``devices``:
        a plan is for the devices it was planned from.
        """
        names = device_names(devices)
        for name in self.devices:
            if name not in names:
                raise InvalidInput(f"{where}: device {name!r} is not among the given "
                                 f"devices {names}")
        left = {record["device"] for record in self.left_out}
        if [name for name in names if name not in left] != self.devices:
            raise InvalidInput(f"{where}: is for devices {self.devices}"
                             + (f" (left out: {', '.join(sorted(left))})" if left else "")
                             + f", not {names}")

    def explain(self):
        """A readable account: the mesh and why, per device its load, per layer its filters."""
        fmt = self._time_text
        p = self.prediction
        count = len(self.devices)
        lines = [f"Plan for model {self.model!r}, batch {self.batch_size}, "
                 f"{count} device{'s' if count != 1 else ''}: mesh {self.mesh} "
                 f"(layout rules {self.layout_rules!r})",
                 f"Predicted step {fmt(p.step)} = compute {fmt(p.compute)} "
                 f"+ communication {fmt(p.comm)}"
                 + ("" if self.time_unit == "s" else
                    " (u = time units: speeds are relative, communication not priced)"),
                 f"Why: {self.reason}"]
        lines += [f"  {record['reason']}" for record in self.left_out + self.replicated]
        lines += [""]
        if self.alone:
            lines.append("Each device alone, fastest first: " + _shortened(
                [f"{r['device']} {'does not fit' if r['step'] is None else fmt(r['step'])}"
                 for r in self.alone]))
            rate = ("FLOP/s computing the model alone, op-size and element-wise work "
                    "included, per-step overhead aside" if self.time_unit == "s"
                    else "relative speeds")
            lines.append("Candidates on k devices use the k fastest alone or the k of highest "
                         f"FLOP rate ({rate}: " + _shortened(
                             [f"{r['device']} {r['rate']:.3g}" for r in
                              sorted(self.alone, key=lambda r: -r["rate"])]) + ")")
        lines += aligned_columns(self._candidate_rows()) + [""]
        lines += aligned_columns(self._device_rows()) + [""]
        lines += ["Filters per device (\"all\": not split, every device holds the whole layer)"
                  + ("; an output-split convolution's share costs its device's whole "
                     "channel blocks (%s filters)" % ", ".join(
                         str(b) for b in sorted(set(self.channel_blocks)))
                     if self.channel_blocks and set(self.splits) - {"batch"} else "")]
        lines += aligned_columns(self._filter_rows())
        return "\n".join(lines)

    @property
    def _rate_text(self):
        """What the devices' speeds are in: FLOP/s, or relative units."""
        return "FLOP/s" if self.time_unit == "s" else "relative"

    def _time_text(self, seconds):
        return format_time(seconds, self.time_unit != "s")

    def _model_size(self):
        """Devices per model column (all of them without a batch split)."""
        batch = self.splits.get("batch")
        return len(self.devices) // len(batch) if batch else len(self.devices)

    def _candidate_rows(self):
        """``explain``'s table of the candidates weighed: mesh, devices, step."""
        fmt = self._time_text
        subsets = any(c.devices is not None for c in self.candidates)
        rankings = any(c.ranking is not None for c in self.candidates)
        rows = [["mesh", *(["devices"] if subsets else []), *(["of"] if rankings else []),
                 "step", "compute", "comm", "note"]]
        for c in self.candidates:
            times = ["-"] * 3 if c.step is None else [fmt(c.step), fmt(c.compute), fmt(c.comm)]
            count = ([] if not subsets else
                     [str(len(self.devices) + len(self.left_out)
                          if c.devices is None else c.devices)])
            ranking = [RANKINGS.get(c.ranking, "given")] if rankings else []
            rows.append([c.mesh, *count, *ranking, *times, c.note])
        return rows

    def _device_rows(self):
        """``explain``'s table of the devices: speed, samples, load, busy time, memory."""
        p, batch, model_size = self.prediction, self.splits.get("batch"), self._model_size()
        rows = [["#", "device", f"speed ({self._rate_text})", "samples", "load", "busy",
                 "memory", "cap"]]
        for i, name in enumerate(self.devices):
            cap = self.memory_caps[i] if self.memory_caps else None
            rows.append([str(i), name, f"{self.speeds[i]:.4g}",
                         str(batch[i // model_size] if batch else self.batch_size),
                         f"{100 * p.load[i]:.1f}%", self._time_text(p.busy[i]),
                         format_bytes(p.memory[i]), "-" if cap is None else format_bytes(cap)])
        return rows

    def _filter_rows(self):
        """``explain``'s table of each layer's filters per device ("all": not split)."""
        model_size = self._model_size()
        rows = [["layer", "split dim", "size"] + [f"#{i}" for i in range(len(self.devices))]]
        for layer in self.layers:
            dim = layer["split_dim"]
            if dim not in self.splits:   # not split on this mesh: every device holds it
                rows.append([layer["name"], dim or "-", str(layer["split_size"] or "-")]
                            + ["all"] * len(self.devices))
            else:
                sizes = self.splits[dim]
                rows.append([layer["name"], dim, str(layer["split_size"])]
                            + [str(sizes[i % model_size]) for i in range(len(self.devices))])
        return rows


def _shortened(items, shown=8):
    """``items`` joined by commas; beyond ``shown``, the first ones and how many more."""
    more = len(items) - shown
    return ", ".join(items[:shown]) + (f", ... ({more} more)" if more > 0 else "")


def layer_entries(model_spec):
    """The plan's record of the model's layers: name, split dim and its size."""
    return [{"name": l.name, "split_dim": l.split_dim, "split_size": l.split_size}
            for l in model_spec.layers]


# --- reading: every field checked for type and shape, errors name the field ----------

def _fail(where, field, expected, value):
    raise InvalidInput(f"{where}: {field} must be {expected}, got {value!r}")


def _number(value, where, field, optional=False):
    if optional and value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value):
        _fail(where, field, "a finite number" + (" or null" if optional else ""), value)
    return float(value)


def _string(value, where, field, optional=False):
    if optional and value is None:
        return None
    if not isinstance(value, str):
        _fail(where, field, "a string" + (" or null" if optional else ""), value)
    return value


def _list(value, where, field, length=None):
    if not isinstance(value, list) or (length is not None and len(value) != length):
        _fail(where, field, "a list" + ("" if length is None else f" of {length} entries"),
              value)
    return value


def _dict(value, where, field, keys):
    if not isinstance(value, dict):
        _fail(where, field, "an object", value)
    missing = [k for k in keys if k not in value]
    if missing:
        raise InvalidInput(f"{where}: {field} lacks {', '.join(missing)}")
    return value


def _parse(data, where):
    """Builds a Plan from parsed JSON, checking every field."""
    fields = [f for f in Plan.__dataclass_fields__
              if f not in ("left_out", "replicated", "alone", "channel_blocks")]  # optional
    data = _dict(data, where, "the top level", ["format"] + fields)
    if data["format"] != FORMAT:
        _fail(where, "format", repr(FORMAT), data["format"])
    try:
        mesh = parse_mesh(data["mesh"])
    except ValueError as e:
        raise InvalidInput(f"{where}: {e}") from e
    devices = _devices(data, where, mesh)
    n = len(devices)
    batch_size = whole_number(data["batch_size"], f"{where}: batch_size")
    splits, layout_rules = _splits(data, where, mesh, batch_size)
    if data["time_unit"] not in TIME_UNITS:
        _fail(where, "time_unit", f"one of {TIME_UNITS}", data["time_unit"])
    caps = data["memory_caps"]
    if caps is not None:
        caps = [_number(c, where, "memory_caps", optional=True)
                for c in _list(caps, where, "memory_caps", n)]
        if not all(cap is None or cap > 0 for cap in caps):
            _fail(where, "memory_caps", "a number of bytes > 0 or null per device", caps)
    return Plan(
        model=_string(data["model"], where, "model"), mesh=str(mesh),
        layout_rules=layout_rules,
        batch_size=batch_size, devices=devices, speeds=data["speeds"], splits=splits,
        layers=_layers(data, where), time_unit=data["time_unit"],
        prediction=_prediction(data, where, n), memory_caps=caps,
        candidates=_candidates(data, where),
        reason=_string(data["reason"], where, "reason"),
        left_out=_records(data, where, "left_out", "device", "speed", devices,
                          "a device name not among the plan's devices"),
        replicated=_records(data, where, "replicated", "dim", "saved_s", splits,
                            "a split dim the plan does not split", nullable=True),
        alone=_alone(data, where),
        channel_blocks=_channel_blocks(data, where, n))


def _devices(data, where, mesh):
    """The plan's ``devices`` (one per device of ``mesh``, named once each), their
    ``speeds`` checked with them."""
    devices = _list(data["devices"], where, "devices", mesh.size)
    for i, name in enumerate(devices):
        if not isinstance(name, str) or not name:
            _fail(where, f"devices[{i}]", "a non-empty string", name)
    try:
        check_distinct(devices)
    except InvalidInput as e:
        raise InvalidInput(f"{where}: devices: {e}") from None
    speeds = _list(data["speeds"], where, "speeds", len(devices))
    try:
        check_speeds(speeds, devices)
    except ValueError as e:
        raise InvalidInput(f"{where}: {e}") from e
    return devices


def _splits(data, where, mesh, batch_size):
    """``(splits, layout_rules)``: sizes along ``mesh``'s axes (the batch's adding up to
    ``batch_size``) and one layout rule per split dimension."""
    splits = data["splits"]
    if not isinstance(splits, dict) or not all(map(are_sizes, splits.values())):
        _fail(where, "splits", "an object of dimension -> list of whole numbers >= 1", splits)
    for dim, sizes in splits.items():
        length = mesh.batch if dim == "batch" else mesh.model
        if len(sizes) != length:
            _fail(where, f"splits[{dim!r}]", f"{length} sizes for mesh {mesh}", sizes)
    layout_rules = _string(data["layout_rules"], where, "layout_rules")
    pairs = [rule.partition(":")[::2] for rule in layout_rules.split(";") if rule]
    if len(pairs) != len(dict(pairs)) or dict(pairs) != {
            dim: "batch" if dim == "batch" else "model" for dim in splits}:
        _fail(where, "layout_rules", "one rule 'dim:axis' per split dimension", layout_rules)
    if "batch" in splits and sum(splits["batch"]) != batch_size:
        _fail(where, "splits['batch']", f"sizes summing to batch_size {batch_size}",
              splits["batch"])
    return splits, layout_rules


def _layers(data, where):
    """The plan's ``layers`` rows, checked."""
    layers = _list(data["layers"], where, "layers")
    for i, layer in enumerate(layers):
        _dict(layer, where, f"layers[{i}]", ["name", "split_dim", "split_size"])
        _string(layer["name"], where, f"layers[{i}].name")
        _string(layer["split_dim"], where, f"layers[{i}].split_dim", optional=True)
        whole_number(layer["split_size"], f"{where}: layers[{i}].split_size", 0)
    return layers


def _prediction(data, where, n):
    """The plan's ``Prediction`` (per-device lists of ``n`` entries)."""
    pred = _dict(data["prediction"], where, "prediction", Prediction.__dataclass_fields__)
    return Prediction(
        **{k: _number(pred[k], where, f"prediction.{k}") for k in ("step", "compute", "comm")},
        **{k: [_number(v, where, f"prediction.{k}") for v in _list(pred[k], where,
                                                                   f"prediction.{k}", n)]
           for k in ("busy", "load", "memory")})


def _candidates(data, where):
    """The plan's ``Candidate`` rows (``devices`` and ``ranking`` optional)."""
    candidates = []
    for i, c in enumerate(_list(data["candidates"], where, "candidates")):
        c = _dict(c, where, f"candidates[{i}]",
                  [k for k in Candidate.__dataclass_fields__ if k not in ("devices", "ranking")])
        count = c.get("devices")
        if count is not None:
            count = whole_number(count, f"{where}: candidates[{i}].devices")
        ranking = c.get("ranking")
        if ranking is not None and ranking not in RANKINGS:
            _fail(where, f"candidates[{i}].ranking", f"null or one of {list(RANKINGS)}",
                  ranking)
        candidates.append(Candidate(
            mesh=_string(c["mesh"], where, f"candidates[{i}].mesh"),
            note=_string(c["note"], where, f"candidates[{i}].note"), devices=count,
            ranking=ranking,
            **{k: _number(c[k], where, f"candidates[{i}].{k}", optional=True)
               for k in ("step", "compute", "comm")}))
    return candidates


def _channel_blocks(data, where, n):
    """The plan's optional ``channel_blocks`` (absent in older plans: none), checked."""
    blocks = _list(data.get("channel_blocks", []), where, "channel_blocks")
    if blocks and len(blocks) != n:
        _fail(where, "channel_blocks", f"none or {n} entries, one per device", blocks)
    return [whole_number(b, f"{where}: channel_blocks[{i}]") for i, b in enumerate(blocks)]


def _alone(data, where):
    """The plan's optional list ``alone`` (absent in older plans: none), checked."""
    records = _list(data.get("alone", []), where, "alone")
    for i, record in enumerate(records):
        _dict(record, where, f"alone[{i}]", ["device", "step", "rate"])
        _string(record["device"], where, f"alone[{i}].device")
        _number(record["step"], where, f"alone[{i}].step", optional=True)
        _number(record["rate"], where, f"alone[{i}].rate")
    return records


def _records(data, where, field, key, number, taken, expected, nullable=False):
    """The plan's optional list ``field`` (absent in older plans: none) of records
    ``{key, number, "reason"}``, checked; ``record[key]`` must not be in ``taken``
    (``expected`` says what it must be); ``record[number]`` may be null if ``nullable``."""
    records = _list(data.get(field, []), where, field)
    named = set()
    for i, record in enumerate(records):
        _dict(record, where, f"{field}[{i}]", [key, number, "reason"])
        name = _string(record[key], where, f"{field}[{i}].{key}")
        if not name or name in taken:
            _fail(where, f"{field}[{i}].{key}", expected, name)
        if name in named:
            _fail(where, f"{field}[{i}].{key}", f"named once in {field}", name)
        named.add(name)
        _number(record[number], where, f"{field}[{i}].{number}", optional=nullable)
        _string(record["reason"], where, f"{field}[{i}].reason")
    return records
