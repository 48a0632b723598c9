"""What a fit trains on, checked before any work: the devices (``--devices``, else this
machine's or the cluster's), their speeds (``--speeds``'s numbers, or None: measured),
a ``--plan`` file's plan, ``--simulate_slowdown``'s factors, and the sessions' config
and target (this process, or its own server, the master for the cluster).

Every seed of a fit shares one :class:`Hardware`; the plan on it is made per seed
(``hmp.run.plan_choice``), where the model is known.
"""

import dataclasses

from hmp import cli, planning
from hmp.errors import InvalidInput, is_positive_number, number_in_text
from hmp.measure.devices import (check_local, default_devices, device_list, parse_memory_caps,
                                 session_config_for)
from hmp.mesh.numerics import require_determinism
from hmp.run.settings import AUTO


@dataclasses.dataclass(frozen=True)
class Hardware:
    """The devices a fit trains on and how its sessions reach them.

    ``devices``: ``--plan``'s when one is given, else ``--devices`` (or this machine's,
    or the cluster's); ``speeds``: one number per device (``--speeds``), or None
    (measured, or the plan given); ``given_plan``: the ``--plan`` file's
    :class:`hmp.planning.Plan`, or None; ``slowdown``: {device: factor}
    (``--simulate_slowdown``); ``cluster``: the workers (``hmp.cluster``), or None.
    """

    devices: list
    speeds: list
    given_plan: object
    slowdown: dict
    cluster: object
    session_config: object
    target: str

    @classmethod
    def of(cls, settings, cluster):
        """The hardware ``settings`` ask for on ``cluster`` (or this machine: None);
        raises :class:`hmp.cli.UsageError` naming the flag of a value it refuses.
        With ``--deterministic``, makes TensorFlow's ops deterministic (before any graph
        runs)."""
        placement = settings.placement
        given_plan, speeds = None, None
        if placement.plan:
            with settings.blame("plan"):   # its model: once it is built
                given_plan = planning.Plan.from_json(placement.plan)
        devices = _devices(settings, cluster, given_plan)
        with settings.blame("memory_caps"):   # before any work
            parse_memory_caps(placement.memory_caps, len(devices))
        if placement.deterministic:   # before any graph runs
            require_determinism()
        if given_plan is None:
            if placement.mesh != AUTO:   # before any profiling
                with settings.blame("mesh", "devices"):
                    planning.check_mesh_size(planning.parse_mesh(placement.mesh),
                                             len(devices))
            speeds = _speeds(settings, devices)
        with settings.blame("simulate_slowdown"):
            slowdown = _slowdown(placement.simulate_slowdown, devices)
        if cluster:
            session_config, target = cluster.session_config(), cluster.target
        else:
            session_config, target = session_config_for(devices), ""
        return cls(devices, speeds, given_plan, slowdown, cluster, session_config, target)


def _devices(settings, cluster, given_plan):
    """The devices of ``given_plan`` (``--plan``'s) or ``--devices``, checked (each one
    there, none twice: ``device_list``), else this machine's devices
    (``hmp.measure.devices.default_devices``) or the cluster's."""
    placement = settings.placement
    given, flag = ((given_plan.devices, "plan") if given_plan
                   else (placement.devices, "devices"))
    if given is None:
        return list(cluster.devices) if cluster else default_devices()
    with settings.blame(flag):
        devices = device_list(given)
        if not cluster:
            check_local(devices)
            return devices
    with settings.blame(flag, "local_workers" if placement.local_workers else "cluster"):
        cluster.check_devices(devices)
        cluster.check_offered(devices)
    return devices


def _speeds(settings, devices):
    """--speeds's numbers, one per device (checked), or None: auto and measure."""
    given = settings.placement.speeds
    if given in ("auto", "measure"):
        return None
    speeds = [number_in_text(s) for s in given.split(",")]
    if None in speeds:
        raise cli.UsageError("--speeds=%r: give auto, measure or one number per device, "
                             "e.g. 70,25,5" % given)
    with settings.blame("speeds"):
        return list(planning.check_speeds(speeds, devices))


def _slowdown(given, devices):
    """{device: factor} from --simulate_slowdown=/cpu:1=3,..."""
    slowdown = {}
    for item in filter(None, given.split(",")):
        device, _, text = item.rpartition("=")
        factor = number_in_text(text)
        if device not in devices or not is_positive_number(factor):
            raise InvalidInput("use DEVICE=FACTOR with a device the run trains on "
                               "(--devices, or --plan's) and a positive number, got %r"
                               % item)
        slowdown[device] = factor
    return slowdown
