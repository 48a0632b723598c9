"""hmp.measure.devices.check_local: a GPU this machine lacks is refused in one line that
lists every device it has."""

import pytest

from hmp.measure import devices


@pytest.mark.parametrize("gpus, allowed", [
    (0, "/cpu:0, /cpu:N (N >= 1: virtual CPUs)"),
    (2, "/cpu:0, /cpu:N (N >= 1: virtual CPUs) and /gpu:0 to /gpu:1"),
])
def test_a_missing_gpu_is_refused_naming_what_is_allowed(monkeypatch, gpus, allowed):
    monkeypatch.setattr(devices, "gpu_count", lambda: gpus)
    with pytest.raises(devices.InvalidInput) as refused:
        devices.check_local(["/cpu:0", "/gpu:7"])
    assert str(refused.value) == ("/gpu:7 is not a device of this machine, which has %d GPU%s; "
                                  "allowed: %s" % (gpus, "" if gpus == 1 else "s", allowed))
