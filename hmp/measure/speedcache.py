"""Measured device speeds and link figures, kept so that the next run need not profile.

An entry is the measurement of one setting -- ``cache_key``: the model
(name, width, patch, bands, classes, precision and batch norm: a sync batch split's
barriers are in the link's measured wait), the work before it (``Recipe.input_work``:
the scene's bands, in-graph projection, augmentation), batch size, optimizer, device names,
the cluster's worker addresses (None outside ``--cluster`` mode), and the
hmp and TensorFlow versions -- with per device its samples/s (median, min, max),
FLOP/s, per-step overhead, channel block (``hmp.measure.channel_blocks``) and op-size figures
(``half_rate_flops`` and ``elementwise_s_per_element``, None when not measured:
profiling for a plan that cannot split the model skips them), the link (a
``LinkSpec``, or None) and when it was measured. In memory a device's figures are
the planner's ``DeviceSpec`` (as ``hmp.measure.speeds`` measures it, on its host:
``linkprobe.with_hosts``); in the file, an object of the keys ``SPEED_FIELDS``
(``speed_json``, ``speed_of``). An entry with op-size figures also serves a run that
needs none; one without them does not serve a run that needs them.
``hmp.train`` keeps entries in the run folder (``<model_dir>/speeds.json``) and
in a user cache (``user_cache_path``: ``$HMP_CACHE_DIR/speeds.json`` or
``~/.cache/hmp/speeds.json``).

A file that cannot be read or does not have the expected structure is
ignored with a one-line warning (and replaced at the next write); writes go
to a temporary file in the same folder and then ``os.replace`` it, so a
reader never sees half a file. Each file keeps the ``MAX_ENTRIES`` newest
entries.
"""

import dataclasses
import datetime
import json
import os

import tensorflow as tf_module

import hmp
from hmp import files
from hmp.measure.linkprobe import with_hosts
from hmp.planning import DeviceSpec, LinkSpec

FORMAT = "hmp-speeds/6"  # /2: each speed has its overhead_s; /3: and its op-size figures;
# /4: the link has its wait per barrier (LinkSpec.barrier_s); /5: each speed its channel_block;
# /6: barrier_s net of a two-device all-reduce priced at one hand-over (it was two)
FILE_NAME = "speeds.json"
OP_SIZE_FIGURES = ("half_rate_flops", "elementwise_s_per_element")
# A device's figures in the file, in this order: its name, then DeviceSpec fields.
SPEED_FIELDS = ("device", "samples_per_s", "min_samples_per_s", "max_samples_per_s",
                "flops_per_s", "overhead_s", "channel_block", *OP_SIZE_FIGURES)
MAX_ENTRIES = 64


def cache_key(config, batch_size, optimizer, devices, workers=None, input_work=None):
    """What a measurement depends on, as a JSON-able dict (entries match it exactly);
    ``input_work``: the step's work before the model (``Recipe.input_work``)."""
    return {"model": config.name, "width": config.width, "patch": config.patch,
            "bands": config.bands, "classes": config.n_classes, "input": input_work,
            "precision": config.precision, "batch_norm": config.batch_norm,
            "batch_size": batch_size,
            "optimizer": optimizer, "devices": list(devices),
            "workers": list(workers) if workers is not None else None,
            "hmp": hmp.__version__, "tensorflow": tf_module.__version__}


def user_cache_path():
    """``$HMP_CACHE_DIR/speeds.json``, else ``~/.cache/hmp/speeds.json``."""
    folder = os.environ.get("HMP_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "hmp")
    return os.path.join(folder, FILE_NAME)


def speed_json(spec):
    """A measured device's figures (a ``DeviceSpec``) as the file keeps them."""
    return {"device": spec.name, **{f: getattr(spec, f) for f in SPEED_FIELDS[1:]}}


def speed_of(data, device):
    """The DeviceSpec (not yet on its host) of ``device``'s figures as the file keeps
    them, or ValueError saying what is wrong."""
    if not isinstance(data, dict) or set(data) != set(SPEED_FIELDS) \
            or data["device"] != device:
        raise ValueError("an entry's speed of %r is not an object of %s"
                         % (device, ", ".join(SPEED_FIELDS)))
    if any(data[f] is None for f in SPEED_FIELDS[1:-len(OP_SIZE_FIGURES)]):
        raise ValueError("an entry's speed of %r lacks a figure" % device)
    return DeviceSpec(device, **{f: data[f] for f in SPEED_FIELDS[1:]})


@dataclasses.dataclass
class Entry:
    """One measurement: per device its figures, the link, when."""

    key: dict
    measured_at: str  # ISO 8601, UTC
    speeds: list  # a DeviceSpec per device, in the key's device order, on its host
    link: LinkSpec | None

    @property
    def has_op_size(self):
        """True when every device's op-size figures were measured."""
        return all(getattr(s, f) is not None for s in self.speeds for f in OP_SIZE_FIGURES)

    def to_json(self):
        return {"key": self.key, "measured_at": self.measured_at,
                "speeds": [speed_json(s) for s in self.speeds],
                "link": dataclasses.asdict(self.link) if self.link is not None else None}


def new_entry(key, measured, link):
    """An Entry of measured DeviceSpecs and a LinkSpec (or None), measured now."""
    return Entry(key, datetime.datetime.now(datetime.timezone.utc).isoformat(
                     timespec="seconds"), list(measured), link)


def _parse_entry(data):
    """An Entry from JSON, or ValueError saying what is wrong."""
    if not isinstance(data, dict) or set(data) != {"key", "measured_at", "speeds", "link"}:
        raise ValueError("an entry is not an object of key, measured_at, speeds and link")
    key, speeds = data["key"], data["speeds"]
    if not isinstance(key, dict) or not isinstance(key.get("devices"), list):
        raise ValueError("an entry's key has no device list")
    if not isinstance(data["measured_at"], str):
        raise ValueError("an entry's measured_at is not a string")
    if not isinstance(speeds, list) or len(speeds) != len(key["devices"]):
        raise ValueError("an entry has not one speed per device")
    speeds = with_hosts([speed_of(s, d) for s, d in zip(speeds, key["devices"])])
    try:
        link = LinkSpec(**data["link"]) if data["link"] is not None else None
    except (TypeError, ValueError) as error:
        raise ValueError("an entry's link is not a LinkSpec: %s" % error) from None
    return Entry(key, data["measured_at"], speeds, link)


def load(path, warn):
    """The entries of ``path``: [] if it does not exist; [] and ``warn(line)`` if corrupt."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        found = data.get("format") if isinstance(data, dict) else None
        if isinstance(found, str) and found.startswith("hmp-speeds/") and found != FORMAT:
            raise ValueError("%s, written by another version of hmp; this one reads %s"
                             % (found, FORMAT))
        if found != FORMAT:
            raise ValueError("not a %s file" % FORMAT)
        if not isinstance(data.get("entries"), list):
            raise ValueError("no list of entries")
        return [_parse_entry(e) for e in data["entries"]]
    except (FileNotFoundError, NotADirectoryError):
        return []
    except (OSError, UnicodeDecodeError, ValueError, TypeError) as error:
        warn("warning: ignoring the speed cache %s (%s)"
             % (path, str(error).splitlines()[0] if str(error) else type(error).__name__))
        return []


def lookup(paths, key, warn, op_size=False):
    """``(entry, path)`` of the first file of ``paths`` with an entry for ``key`` (with
    op-size figures if ``op_size``), or None."""
    for path in paths:
        for entry in reversed(load(path, warn)):
            if entry.key == key and (entry.has_op_size or not op_size):
                return entry, path
    return None


def store(paths, entry, warn):
    """Adds ``entry`` to every file of ``paths`` (replacing one of the same key), atomically.

    A file that cannot be written gets ``warn(line)``; the run goes on.
    """
    for path in paths:
        entries = [e for e in load(path, lambda line: None) if e.key != entry.key]
        entries = (entries + [entry])[-MAX_ENTRIES:]
        try:
            files.write_json(path, {"format": FORMAT,
                                     "entries": [e.to_json() for e in entries]})
        except OSError as error:
            warn("warning: cannot write the speed cache %s (%s)" % (path, error.strerror))


def measured_or_cached(key, paths, measure, force=False, say=print, warn=print,
                       op_size=False):
    """The entry for ``key``: from the first of ``paths`` that has it, else ``measure()``.

    ``measure()`` returns ``(DeviceSpecs, LinkSpec or None)``; a new
    measurement is stored in every file of ``paths``, and one found in a later
    file is copied to the first (the run folder records what its plan used).
    ``force``: measure even when cached. ``say`` gets one line on reuse,
    ``warn`` one per unreadable or unwritable file. ``op_size``: only an entry with
    op-size figures will do (``measure`` then measures them). Returns ``(entry, path)``,
    path None when measured now.
    """
    found = None if force else lookup(paths, key, warn, op_size)
    if found is None:
        measured, link = measure()
        entry = new_entry(key, measured, link)
        store(paths, entry, warn)
        return entry, None
    entry, path = found
    say("speeds: reusing the measurement of %s from %s (--speeds=measure measures again)"
        % (entry.measured_at, path))
    if path != paths[0]:
        store(paths[:1], entry, warn)
    return entry, path
