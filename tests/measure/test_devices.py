"""hmp.measure.devices: a device list is its names, none twice; check_local refuses a GPU
this machine lacks in one line that lists every device it has, and a cluster's device; a
TensorFlow error is told by its line that says what happened (hmp.errors.op_error_line)."""

import pytest
import tensorflow as tf

from hmp.device_names import device_key
from hmp.errors import op_error_line
from hmp.measure import devices


@pytest.mark.parametrize("gpus, allowed", [
    (0, "/cpu:0, /cpu:N (N >= 1: virtual CPUs)"),
    (2, "/cpu:0, /cpu:N (N >= 1: virtual CPUs) and /gpu:0 to /gpu:1"),
])
def test_a_missing_gpu_is_refused_naming_what_is_allowed(monkeypatch, gpus, allowed):
    monkeypatch.setattr(devices, "gpu_count", lambda: gpus)
    for gpu in ("/gpu:7", "/device:GPU:7", "/job:localhost/replica:0/task:0/device:GPU:7"):
        with pytest.raises(devices.InvalidInput) as refused:
            devices.check_local(["/cpu:0", gpu])
        assert str(refused.value) == ("%s is not a device of this machine, which has %d GPU%s; "
                                      "allowed: %s" % (gpu, gpus, "" if gpus == 1 else "s",
                                                       allowed))
    devices.check_local(["/cpu:0", "/device:GPU:%d" % (gpus - 1)] if gpus else ["/cpu:0"])


def test_a_device_of_a_clusters_task_is_not_one_of_this_process():
    devices.check_local(["/cpu:0", "/job:localhost/replica:0/task:0/device:CPU:1"])
    with pytest.raises(devices.InvalidInput) as refused:
        devices.check_local(["/cpu:0", "/job:worker/task:1/device:CPU:0"])
    assert str(refused.value) == (
        "/job:worker/task:1/device:CPU:0 is a device of a cluster's task (job worker), not of "
        "this machine: name this machine's, e.g. /cpu:0 (hmp.train trains on a cluster's "
        "with --cluster or --local_workers)")


@pytest.mark.parametrize("name, message", [
    ("cpu", "'cpu' names no device type and index >= 0"),   # a type without its index
    ("/cpu:-1", "'/cpu:-1' names no device type and index >= 0"),
    ("/job:worker/task:1", "'/job:worker/task:1' names no device type and index >= 0"),
    ("gpu0", "'gpu0' is not a TensorFlow device string (")])
def test_a_name_without_a_device_type_and_index_is_refused(name, message):
    with pytest.raises(devices.InvalidInput) as refused:
        devices.check_local([name])
    assert str(refused.value).startswith(message), str(refused.value)


@pytest.mark.parametrize("name", [
    "/cpu:0", "/CPU:1", "/device:CPU:0", "/device:GPU:3", "/gpu:3",
    "/job:localhost/replica:0/task:0/device:CPU:0", "/job:worker/task:1/cpu:2",
    "/job:worker/replica:0/task:12/device:GPU:1", "/job:client/task:0/device:CPU:0"])
def test_a_device_names_key_is_the_device_tensorflow_reads_in_it(name):
    """hmp.device_names reads names without TensorFlow (the planner loads none): its key
    is what TensorFlow's own parser reads (this process's job None, named or not)."""
    spec = tf.DeviceSpec.from_string(name)
    assert device_key(name) == (None if spec.job in (None, "localhost") else spec.job,
                                spec.task or 0, spec.device_type.upper(), spec.device_index)


def test_a_device_list_is_its_names_and_refuses_none_or_one_named_twice():
    assert devices.device_list(" /cpu:0, /job:worker/task:1/device:CPU:0,") == [
        "/cpu:0", "/job:worker/task:1/device:CPU:0"]
    assert devices.device_list("/cpu:0,/job:worker/task:0/cpu:0,/gpu:0,/cpu:1") == [
        "/cpu:0", "/job:worker/task:0/cpu:0", "/gpu:0", "/cpu:1"]   # four devices
    assert devices.device_list(("/cpu:0", "/cpu:1")) == ["/cpu:0", "/cpu:1"]
    for given, minimum, message in [
            (" , ", 1, "give at least one TensorFlow device, e.g. /cpu:0"),
            ("/gpu:0", 2, "give at least 2 TensorFlow devices, e.g. /cpu:0,/cpu:1"),
            ("/cpu:1, /cpu:1", 1, "/cpu:1 named twice"),
            (["/gpu:0", " /gpu:0", "/cpu:0", "/cpu:0"], 2, "/cpu:0 and /gpu:0 named twice"),
            # one device in two spellings: TensorFlow's placement would put two mesh
            # positions' work on it
            ("/cpu:0,/device:CPU:0", 1, "/cpu:0 and /device:CPU:0 name one device"),
            ("/job:localhost/replica:0/task:0/device:CPU:0,/cpu:1,/cpu:0", 1,
             "/job:localhost/replica:0/task:0/device:CPU:0 and /cpu:0 name one device"),
            ("/GPU:1,/cpu:1,/gpu:1,/job:worker/task:1/cpu:1,/job:worker/task:1/device:CPU:1",
             1, "/GPU:1 and /gpu:1 name one device; /job:worker/task:1/cpu:1 and "
                "/job:worker/task:1/device:CPU:1 name one device")]:
        with pytest.raises(devices.InvalidInput) as refused:
            devices.device_list(given, minimum)
        assert str(refused.value) == message


@pytest.mark.parametrize("message, line", [
    # TensorFlow 2's graph execution: the reason after an opening and a blank line
    ("Graph execution error:\n\nCannot assign a device for operation x: /gpu:0\n"
     "\t [[{{node x}}]]", "Cannot assign a device for operation x: /gpu:0"),
    # a remote task's message: its header and rules say nothing
    ("From /job:worker/replica:0/task:1:\n=====\nSocket closed\n", "Socket closed"),
    ("", "UnavailableError"),
    ("x" * 130, "x" * 117 + "..."),
])
def test_a_tensorflow_error_is_told_by_its_first_line_that_says_what_happened(message, line):
    error = tf.errors.UnavailableError(None, None, message)
    assert op_error_line(error) == line


class _ListedDevice:   # what tensorflow.python.client.device_lib lists of a device
    def __init__(self, name, device_type, memory_limit):
        self.name, self.device_type, self.memory_limit = name, device_type, memory_limit


@pytest.mark.parametrize("gpu", ["/gpu:1", "/device:GPU:1",
                                 "/job:localhost/replica:0/task:0/device:GPU:1"])
def test_a_local_gpus_memory_is_found_however_its_name_is_spelled(monkeypatch, gpu):
    """Each local GPU's memory as TensorFlow lists it (a cluster task's unknown), whether
    the list spells it short or in full (in full it was left unknown: uncapped)."""
    from tensorflow.python.client import device_lib
    monkeypatch.setattr(device_lib, "list_local_devices", lambda: [
        _ListedDevice("/device:CPU:0", "CPU", 0), _ListedDevice("/device:GPU:0", "GPU", 8e9),
        _ListedDevice("/device:GPU:1", "GPU", 80e9)])
    assert devices.memory_bytes([gpu, "/job:worker/task:0/device:GPU:0", "/cpu:0"]) == [
        80e9, None, float(devices.host_memory_bytes())]
