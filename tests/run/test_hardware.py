"""hmp.run.hardware.Hardware.of: the devices a run trains on, and the slowdown simulated
on them."""

import pytest

from hmp import cli
from hmp.graph.from_graph import model_spec
from hmp.planning import plan_layout
from hmp.run.hardware import Hardware
from hmp.run.settings import Settings
from models import model_config


@pytest.fixture(name="plan_file")
def fixture_plan_file(tmp_path):
    """A batch split over /cpu:0 and /cpu:1, the default devices being /cpu:0 alone."""
    plan = plan_layout(model_spec(model_config("cnn2d", 5, 8, 3, 4)), ["/cpu:0", "/cpu:1"],
                       [2, 1], 12, "batch:2")
    path = tmp_path / "plan.json"
    plan.to_json(str(path))
    return str(path)


def test_a_plans_devices_are_the_ones_a_slowdown_names(plan_file):
    hardware = Hardware.of(Settings.of(plan=plan_file, simulate_slowdown="/cpu:1=3"), None)
    assert hardware.devices == hardware.given_plan.devices == ["/cpu:0", "/cpu:1"]
    assert hardware.slowdown == {"/cpu:1": 3.0}


def test_a_slowdown_of_a_device_the_run_does_not_train_on_is_refused(plan_file):
    for given in ("/cpu:2=3", "/cpu:1=\u00b2", "/cpu:1=1_0", "/cpu:1=inf", "/cpu:1=-2"):
        with pytest.raises(cli.UsageError, match=r"^--simulate_slowdown=%s: use "
                           r"DEVICE=FACTOR with a device the run trains on \(--devices, or "
                           r"--plan's\) and a positive number, got '%s'$" % (given, given)):
            Hardware.of(Settings.of(plan=plan_file, simulate_slowdown=given), None)
    hardware = Hardware.of(Settings.of(plan=plan_file, simulate_slowdown="/cpu:1=1e1"), None)
    assert hardware.slowdown == {"/cpu:1": 10.0}   # a number in any decimal form
