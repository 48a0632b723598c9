"""hmp.measure.calibration: the op-size fit against a hand computation, the element-wise
slope, the half width (measured on virtual CPUs: tests/measure/test_speeds.py)."""

import pytest

from hmp.graph.from_graph import model_spec
from hmp.measure import calibration
from models import model_config

# (forward FLOPs, activation elements, layer ops with FLOPs) per sample at two widths.
FULL, HALF = (5e6, 3e4, 4), (1.4e6, 1.6e4, 4)


def step_per_sample(totals, peak, half_rate, elementwise):
    """The cost model's per-sample time of a device alone: 3 (F + L h) / peak + E e."""
    flops, elements, ops = totals
    return 3 * (flops + ops * half_rate) / peak + elements * elementwise


def test_the_fit_recovers_peak_and_half_rate_from_both_widths():
    # By hand: full 3 (5e6 + 4 x 2e5) / 1e11 + 3e4 x 8e-10 = 174 + 24 = 198 us;
    # half 3 (1.4e6 + 8e5) / 1e11 + 1.6e4 x 8e-10 = 66 + 12.8 = 78.8 us.
    full, half = step_per_sample(FULL, 1e11, 2e5, 8e-10), step_per_sample(HALF, 1e11, 2e5,
                                                                          8e-10)
    assert (full, half) == pytest.approx((198e-6, 78.8e-6), rel=1e-12)
    peak, half_rate, elementwise = calibration.fit_op_size(198e-6, 78.8e-6, FULL, HALF,
                                                           8e-10)
    assert peak == pytest.approx(1e11, rel=1e-9)
    assert half_rate == pytest.approx(2e5, rel=1e-9) and elementwise == 8e-10
    # Without the element-wise term the same times give a lower peak and a larger h:
    # (198 - 78.8) us for 3 x 3.6e6 FLOPs -> 9.06e10, h = (198e-6 x 9.06e10 / 3 - 5e6) / 4.
    peak, half_rate, _ = calibration.fit_op_size(198e-6, 78.8e-6, FULL, HALF, 0.0)
    assert peak == pytest.approx(3 * 3.6e6 / 119.2e-6, rel=1e-9)
    assert half_rate == pytest.approx((198e-6 * peak / 3 - 5e6) / 4, rel=1e-9)


@pytest.mark.parametrize("half_per_sample", [
    None,       # not measured (width 1)
    250e-6,     # half width slower than full: noise
    20e-6,      # the line would put h below 0: clipped, the peak is the full step's
])
def test_the_fit_falls_back_to_no_op_size_term(half_per_sample):
    fitted = calibration.fit_op_size(198e-6, half_per_sample, FULL, HALF, 8e-10)
    assert fitted == pytest.approx((3 * 5e6 / (198e-6 - 3e4 * 8e-10), 0.0, 8e-10), rel=1e-12)


def test_elementwise_work_longer_than_the_step_is_noise():
    # 3e4 elements x 7e-9 s = 210 us > 198 us: no time left for the FLOPs, so e = 0.
    fitted = calibration.fit_op_size(198e-6, 78.8e-6, FULL, HALF, 7e-9)
    assert fitted[2] == 0.0
    assert fitted == pytest.approx(calibration.fit_op_size(198e-6, 78.8e-6, FULL, HALF, 0.0),
                                   rel=1e-12)


def test_the_elementwise_slope_is_per_element_of_the_first_layer_output():
    spec = model_spec(model_config("cnn2d", patch=5, bands=4, n_classes=3, width=2))
    elements = spec.layers[0].output_elems_per_sample   # 5 x 5 x 4 filters
    assert elements == 100
    assert calibration.elementwise_slope(2.5e-3, 1e-3, 64, 16, spec) == pytest.approx(
        1.5e-3 / (100 * 48), rel=1e-12)
    assert calibration.elementwise_slope(1e-3, 1.1e-3, 64, 16, spec) == 0.0   # noise


@pytest.mark.parametrize("width, half", [(0, 16), (5, 2), (2, 1), (1, None)])
def test_half_width_resolves_the_model_default(width, half):
    config = model_config("cnn2d", patch=5, bands=4, n_classes=3, width=width)  # default 32
    halved = calibration.half_width(config)
    assert (halved.width if halved else None) == half


def test_the_profiling_line_says_where_no_op_size_effect_was_found():
    from hmp.planning import DeviceSpec
    measured = DeviceSpec("/cpu:0", 1.54e11, half_rate_flops=1.31e5,
                          elementwise_s_per_element=7.6e-10)
    assert calibration.describe(measured) == (
        "peak 154 GFLOP/s, half rate at 0.131 MFLOP per sample and op, element-wise "
        "0.76 ns per element")
    flat = DeviceSpec("/cpu:0", 1.54e11, half_rate_flops=0.0, elementwise_s_per_element=0.0)
    assert calibration.describe(flat) == (
        "peak 154 GFLOP/s, no op-size effect measured, no element-wise cost measured")
    unmeasured = DeviceSpec("/cpu:0", 1.54e11, half_rate_flops=None)
    assert calibration.describe(unmeasured) == ""
