"""The platform a plan is made for: each device's measured figures (``DeviceSpec``), the
link between them (``LinkSpec``), and the platform file that gives both
(``load_platform``). ``hmp.planning.costmodel`` prices a layout on them.
"""

import dataclasses
from dataclasses import dataclass

from hmp.errors import InvalidInput, is_positive_number, whole_number
from hmp.files import read_json_file


def device_names(devices):
    """The names of ``devices``, each a name or a ``DeviceSpec``."""
    return [d.name if isinstance(d, DeviceSpec) else d for d in devices]


def _positive(value, what, allow_none=False, allow_zero=False):
    """ValueError unless ``value`` is a finite number > 0 (or >= 0, or None)."""
    if value is None and allow_none:
        return
    if not is_positive_number(value, allow_zero):
        raise InvalidInput(f"{what} is {value!r}; must be a finite number "
                         f"{'>= 0' if allow_zero else '> 0'}")


@dataclass(frozen=True)
class DeviceSpec:
    """A device: name, FLOP rate (FLOP/s), memory (bytes) and memory bandwidth (bytes/s).

    Optional, for measured platforms:

    * ``overhead_s``: seconds of every training step this device spends
      whatever its share of the work (launching and scheduling the step's
      ops, small copies). Per-op costs that FLOP rates miss, large for small
      HSI patches; in a split layout every device pays it in full. Measured as
      the intercept of the one-device step time over the batch size (two
      batch sizes), ``flops_per_s`` being the slope's rate.
    * ``host``: the process or machine the device belongs to. Devices of one
      host talk over ``link.local`` and share its processor.
    * ``host_cores``: how many devices of that host can compute at once at
      their full rate (the host's cores or TensorFlow threads, >= 1; None: as
      many as it has). Virtual devices of one process on two cores, or two devices
      of a one-core worker, are not independent processors.
    * ``half_rate_flops``: op-size efficiency. A layer op whose slice has
      ``s`` forward FLOPs per sample runs at ``flops_per_s * s / (s +
      half_rate_flops)``, so its time per sample is ``3 (s + half_rate_flops)
      / flops_per_s``: a fixed cost per sample and layer op that does not
      shrink with the filters (reading the input activations, im2col, output
      tiles that vectorise worse with fewer filters). Splitting a layer's
      filters over ``n`` devices divides ``s``, not this cost, which is why
      split layouts compute slower than their share of a one-device step.
      ``flops_per_s`` is then the peak rate for large ops. Measured from
      one-device steps of the model at full and at half width (same batch),
      never from split layouts. 0 (default): every op runs at ``flops_per_s``.
    * ``elementwise_s_per_element``: seconds per activation element of a
      layer's output that the device holds, for the element-wise work on it
      in a training step (bias add, activation or pooling, and their
      gradients). Outputs of input-split and unsplit layers are whole on every
      device of a model split, so this work is replicated, not divided.
      Measured as a bias add + ReLU and their gradients on an activation-sized
      tensor, alone (two sizes: the slope per element). 0 (default): not priced.

    * ``channel_block``: a convolution's output channels are computed in blocks of
      this many (oneDNN on a CPU lays channels out in blocks of the vector width in
      float32 lanes: 16 with AVX-512, 8 with AVX2), so a device's share of an
      output-split convolution costs its whole blocks: 23 of 64 filters as much as
      32, 41 as much as 48 (``docs/costmodel.md``). 1 (default): no blocks, the cost
      follows the filters (a GPU, or figures given by hand).

    ``half_rate_flops`` and ``elementwise_s_per_element`` are None where they were not
    measured (the profiler without op-size figures): priced as 0. A measured device
    (``hmp.measure.speeds``) also carries its one-device training step's samples per
    second, ``samples_per_s`` (the median of the repeats), ``min_samples_per_s`` and
    ``max_samples_per_s`` (the slowest and fastest repeat), for people and the speed
    cache; None where not measured. The cost model does not read them: its rate is
    ``flops_per_s``.
    """

    name: str
    flops_per_s: float
    mem_bytes: float | None = None
    mem_bw: float | None = None
    overhead_s: float = 0.0
    host: str | None = None
    host_cores: float | None = None
    half_rate_flops: float | None = 0.0
    elementwise_s_per_element: float | None = 0.0
    samples_per_s: float | None = None
    min_samples_per_s: float | None = None
    max_samples_per_s: float | None = None
    channel_block: int = 1

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise InvalidInput(f"device name must be a non-empty string, got {self.name!r}")
        whole_number(self.channel_block, f"channel_block of device {self.name!r}")
        _positive(self.flops_per_s, f"flops_per_s of device {self.name!r}")
        _positive(self.mem_bytes, f"mem_bytes of device {self.name!r}", allow_none=True)
        _positive(self.mem_bw, f"mem_bw of device {self.name!r}", allow_none=True)
        _positive(self.overhead_s, f"overhead_s of device {self.name!r}", allow_zero=True)
        if self.host is not None and (not isinstance(self.host, str) or not self.host):
            raise InvalidInput(f"host of device {self.name!r} must be a non-empty string or "
                             f"None, got {self.host!r}")
        _positive(self.host_cores, f"host_cores of device {self.name!r}", allow_none=True)
        for figure in ("half_rate_flops", "elementwise_s_per_element"):
            _positive(getattr(self, figure), f"{figure} of device {self.name!r}",
                      allow_none=True, allow_zero=True)
        for rate in ("samples_per_s", "min_samples_per_s", "max_samples_per_s"):
            _positive(getattr(self, rate), f"{rate} of device {self.name!r}", allow_none=True)
        if self.host_cores is not None and self.host_cores < 1:
            raise InvalidInput(f"host_cores of device {self.name!r} is {self.host_cores!r}; must "
                             "be >= 1 (a device alone computes at its flops_per_s)")


NESTED_LINKS = ("local", "feed", "loaded")   # a LinkSpec's fields that are links too


@dataclass(frozen=True)
class LinkSpec:
    """The link between devices: bandwidth (bytes/s) and per-hand-over latency (s).

    Optional, for measured platforms (each a LinkSpec, or a dict of one):

    * ``local``: the link between devices of one host (``DeviceSpec.host``),
      e.g. in-process hand-overs between virtual devices while ``self`` is
      gRPC between workers. None: ``self`` everywhere.
    * ``feed``: the client's link to the first device's host, over which the
      batch is fed every step (``scripts/bench_costmodel.py``'s fed steps). None:
      feeding is not priced (the trainer's steps, which feed nothing).
    * ``cpu_share`` (0 to 1, default 0): how much of a hand-over's time is CPU
      work of the hosts at its ends rather than time in a network (1: a
      loopback or in-process "link" on the devices' own cores, where sending
      is serialising and copying; 0: a network that moves data by itself).
      Collectives of different groups that share a host (the batch-axis
      all-reduces of the model columns, the model-axis collectives of the
      batch rows) then cannot overlap on that host's cores: per host they
      take ``max + cpu_share * (sum - max)`` of their times instead of the
      max. Measured as two hand-over chains between the same two devices run
      at once against one alone: ``t_two / t_one - 1``.
    * ``loaded``: the link's bandwidth and latency while the devices at its
      ends compute (its other fields are not used), for the hand-overs that
      run beside the step's compute (module docstring). Measured as the
      hand-over chains while both devices run the model's one-device training
      step in the background. None: the idle figures everywhere.
    * ``barrier_s`` (default 0): the wait at each barrier of a step split over the
      link's devices (module docstring, ``barriers``), beside its hand-overs.
    """

    bandwidth_bytes_per_s: float
    latency_s: float = 0.0
    local: "LinkSpec | None" = None
    feed: "LinkSpec | None" = None
    cpu_share: float = 0.0
    loaded: "LinkSpec | None" = None
    barrier_s: float = 0.0

    def __post_init__(self):
        _positive(self.bandwidth_bytes_per_s, "link bandwidth_bytes_per_s")
        _positive(self.latency_s, "link latency_s", allow_zero=True)
        _positive(self.cpu_share, "link cpu_share", allow_zero=True)
        _positive(self.barrier_s, "link barrier_s", allow_zero=True)
        if self.cpu_share > 1:
            raise InvalidInput(f"link cpu_share is {self.cpu_share!r}; must be between 0 and 1")
        for what in NESTED_LINKS:
            value = getattr(self, what)
            if isinstance(value, dict):
                object.__setattr__(self, what, LinkSpec(**value))
            elif value is not None and not isinstance(value, LinkSpec):
                raise InvalidInput(f"link {what} must be a LinkSpec, a dict or None, "
                                 f"got {value!r}")

    def figures(self):
        """``142 us per hand-over, 2.22 GB/s``: latency and bandwidth, as programs print them
        (and ``, 2.1 ms per barrier`` when ``barrier_s`` is known)."""
        return ("%.3g us per hand-over, %.3g GB/s" % (1e6 * self.latency_s,
                                                      self.bandwidth_bytes_per_s / 1e9)
                + (", %.3g ms per barrier" % (1e3 * self.barrier_s) if self.barrier_s else ""))

    def between(self, hosts):
        """The link a collective among devices of ``hosts`` uses: ``local`` if one host."""
        if self.local is not None and len(set(hosts)) == 1 and None not in hosts:
            return self.local
        return self

    def under_load(self):
        """This link with its (and its local link's) ``loaded`` bandwidth and latency."""
        figures = self.loaded or self
        return dataclasses.replace(
            self, bandwidth_bytes_per_s=figures.bandwidth_bytes_per_s,
            latency_s=figures.latency_s, loaded=None,
            local=self.local.under_load() if self.local is not None else None)


def load_platform(path):
    """Reads devices and link from JSON; returns ``(list[DeviceSpec], LinkSpec | None)``.

    Format::

        {"devices": [{"name": "/gpu:0", "flops_per_s": 1.2e13,
                      "mem_bytes": 8e9, "mem_bw": 4.5e11,
                      "overhead_s": 1e-3, "host": "node1", "host_cores": 2}, ...],
         "link": {"bandwidth_bytes_per_s": 1.2e10, "latency_s": 5e-6,
                  "local": {"bandwidth_bytes_per_s": 5e10, "latency_s": 1e-6},
                  "feed": {"bandwidth_bytes_per_s": 1e9, "latency_s": 1e-4}}}

    Only ``name`` and ``flops_per_s`` are required (see ``DeviceSpec`` and
    ``LinkSpec`` for the others); ``link`` is optional.
    """
    where = f"platform file {path}"
    data = read_json_file(path, where)
    if not isinstance(data, dict) or not isinstance(data.get("devices"), list) or any(
            not isinstance(d, dict) for d in data["devices"]):
        raise InvalidInput(f'{where}: give an object {{"devices": [{{"name": ..., '
                           f'"flops_per_s": ...}}, ...], "link": {{...}} (optional)}}')
    if not data["devices"]:
        raise InvalidInput(f"{where}: no devices")
    try:
        devices = [_spec(DeviceSpec, d, f"device {i}") for i, d in enumerate(data["devices"])]
        link = _link(data["link"], "link") if data.get("link") is not None else None
    except InvalidInput as e:
        raise InvalidInput(f"{where}: {e}") from None
    return devices, link


def _link(entry, what):
    """The LinkSpec of a platform file's ``entry`` (``_spec``), its nested links too; a
    figure refused is named as ``what`` (``link loaded``), not as a LinkSpec's own
    words name it (``link``)."""
    if isinstance(entry, dict):
        entry = {key: _link(value, f"{what} {key}") if key in NESTED_LINKS
                 and isinstance(value, dict) else value for key, value in entry.items()}
    try:
        return _spec(LinkSpec, entry, what)
    except InvalidInput as e:
        words = str(e)
        if words.startswith("link ") and not words.startswith(what):
            raise InvalidInput(what + words[len("link"):]) from None
        raise


def _spec(cls, entry, what):
    """``cls(**entry)`` (a DeviceSpec or LinkSpec of a platform file), or an InvalidInput
    naming a key it lacks or does not know, and the keys allowed."""
    if not isinstance(entry, dict):
        raise InvalidInput(f"{what} must be an object of its figures, got {entry!r}")
    fields = dataclasses.fields(cls)
    allowed = ", ".join(f.name for f in fields)
    unknown = sorted(set(entry) - {f.name for f in fields})
    missing = [f.name for f in fields if f.name not in entry
               and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    if unknown:
        raise InvalidInput("%s has the unknown key%s %s; allowed: %s" % (
            what, "s" if len(unknown) > 1 else "", ", ".join(map(repr, unknown)), allowed))
    if missing:
        raise InvalidInput("%s lacks %s; allowed: %s" % (what, ", ".join(map(repr, missing)),
                                                         allowed))
    try:
        return cls(**entry)
    except InvalidInput:   # the spec's own words name the figure
        raise
    except (TypeError, ValueError) as e:   # a figure of the wrong type
        raise InvalidInput(f"{what}: {e}") from None
