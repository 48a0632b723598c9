"""TensorFlow device names as text, read without TensorFlow: the device a name means
whatever its spelling (``/cpu:0``, ``/device:CPU:0``, ``/job:localhost/replica:0/task:0/
device:CPU:0``), and the check that a list names each device once."""

import re

from hmp.errors import InvalidInput

_FIELD = re.compile(r"^(job):(.+)$|^(replica|task):([0-9]+)$")
_DEVICE = re.compile(r"^(?:device:)?([A-Za-z_]+):([0-9]+|\*)$")


def device_key(name):
    """(job, task, type, index) of a TensorFlow device name: None for this process's job
    (named ``localhost`` or not), task and index 0 when not named, the type in upper
    case; the replica is not part of it. ``name`` itself when it is no device name (its
    own checks say so)."""
    if not name.startswith("/"):
        return name
    fields = {}
    for part in filter(None, name.split("/")):
        field, device = _FIELD.match(part), _DEVICE.match(part)
        if field:
            fields[field.group(1) or field.group(3)] = field.group(2) or field.group(4)
        elif device and "type" not in fields:
            index = device.group(2)
            fields["type"] = device.group(1).upper()
            fields["index"] = int(index) if index.isdigit() else index
        else:
            return name
    job = fields.get("job")
    return (None if job in (None, "localhost") else job, int(fields.get("task", 0)),
            fields.get("type", ""), fields.get("index", 0))


def check_distinct(names):
    """InvalidInput unless ``names`` name distinct devices: "A and B named twice" for a
    name given twice, "A and B name one device" for two spellings of one device.

    The one check that a device list names each device once."""
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise InvalidInput("%s named twice" % " and ".join(twice))
    spellings = {}
    for name in names:
        spellings.setdefault(device_key(name), []).append(name)
    alike = [group for group in spellings.values() if len(group) > 1]
    if alike:
        raise InvalidInput("; ".join("%s name one device" % " and ".join(group)
                                     for group in alike))
