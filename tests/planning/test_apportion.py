"""apportion: exact, proportional within one unit, monotone, minimum, caps; clear errors."""

import math

import numpy as np
import pytest

from hmp.errors import is_positive_number
from hmp.planning import apportion
from hmp.planning.apportion import apportion_in_blocks


def water_filled(total, speeds, minimum, caps):
    """Reference real-valued shares clip(level * s, minimum, cap) summing to total, by bisection."""
    speeds = np.asarray(speeds, dtype=float)
    upper = np.array([np.inf if c is None else c for c in caps], dtype=float)
    lo, hi = 0.0, 1.0
    while np.clip(hi * speeds, minimum, upper).sum() < total:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if np.clip(mid * speeds, minimum, upper).sum() < total else (lo, mid)
    return np.clip(hi * speeds, minimum, upper)


# --- hand examples -------------------------------------------------------------------

def test_paper_speeds():
    # quotas 12 * (0.70, 0.25, 0.05) = 8.4, 3.0, 0.6 -> floors 8, 3, 0 and one unit left
    # over, which goes to the largest fraction (0.6): [8, 3, 1].
    assert apportion(12, [70, 25, 5]) == [8, 3, 1]


def test_relative_scale_does_not_matter():
    assert apportion(12, [7e12, 2.5e12, 5e11]) == apportion(12, [70, 25, 5])


def test_ties_differ_by_at_most_one_lower_index_first():
    assert apportion(10, [1, 1, 1]) == [4, 3, 3]
    assert apportion(9, [2, 2, 2]) == [3, 3, 3]


def test_faster_device_wins_even_when_shares_are_equal_in_floating_point():
    # Both real shares come out as 9.5 in floating point; the faster still gets 10.
    slow = 1.9712530081643451
    assert apportion(19, [slow, np.nextafter(slow, 2)], minimum=0) == [9, 10]


def test_minimum_is_given_and_the_rest_shared_by_speed():
    # quotas 9.8, 0.1, 0.1: the slow ones are held at 2, the fast one takes the other 6.
    assert apportion(10, [100, 1, 1], minimum=2) == [6, 2, 2]
    assert apportion(3, [100, 1, 1], minimum=0) == [3, 0, 0]
    assert apportion(0, [1, 2], minimum=0) == [0, 0]


def test_cap_moves_excess_to_others_in_proportion():
    # device 0 may take 6 of its 8.4; the other 6 go 25:5 -> 5, 1.
    assert apportion(12, [70, 25, 5], caps=[6, None, None]) == [6, 5, 1]
    # caps that just fit the total are filled exactly.
    assert apportion(9, [1, 1, 1], caps=[2, 3, 4]) == [2, 3, 4]


def test_extreme_speed_ratios():
    assert apportion(5, [1e-9, 1.0, 1e9]) == [1, 1, 3]
    assert apportion(5, [1e-9, 1.0, 1e9], minimum=0) == [0, 0, 5]


def test_1024_devices():
    speeds = np.random.default_rng(1).uniform(1, 100, 1024)
    shares = apportion(100_000, speeds)
    assert sum(shares) == 100_000
    assert np.all(np.abs(np.array(shares) - 100_000 * speeds / speeds.sum()) < 1)


# --- properties over many seeded random inputs -----------------------------------------

def random_case(rng, capped):
    n = int(rng.integers(1, 40))
    if rng.random() < 0.3:  # few distinct speeds: many ties
        speeds = rng.choice([1.0, 2.0, 5.0, 70.0], n)
    else:
        speeds = np.exp(rng.normal(0, 2, n))
    minimum = int(rng.integers(0, 3))
    caps = [None] * n
    total = minimum * n + int(rng.integers(0, 500))
    if capped:
        caps = [None if rng.random() < 0.5 else int(minimum + rng.integers(0, 30))
                for _ in range(n)]
        room = sum(math.inf if c is None else c for c in caps)
        total = int(min(total, room))
    return total, speeds.tolist(), minimum, caps


@pytest.mark.parametrize("capped", [False, True])
def test_properties_on_random_inputs(capped):
    rng = np.random.default_rng(2024 + capped)
    for _ in range(400):
        total, speeds, minimum, caps = random_case(rng, capped)
        shares = np.array(apportion(total, speeds, minimum, caps if capped else None))
        case = (total, speeds, minimum, caps)
        assert shares.sum() == total, case
        assert shares.min() >= minimum, case
        upper = np.array([np.inf if c is None else c for c in caps])
        assert np.all(shares <= upper), case
        exact = water_filled(total, speeds, minimum, caps)
        assert np.all(np.abs(shares - exact) < 1 + 1e-9), case
        if minimum == 0 and not capped:
            assert np.all(np.abs(shares - total * np.array(speeds) / sum(speeds)) < 1), case
        if not capped:
            s = np.array(speeds)
            faster = s[:, None] > s[None, :]
            assert np.all(shares[:, None] >= shares[None, :], where=faster), case
            tied = s[:, None] == s[None, :]
            assert np.all(np.abs(shares[:, None] - shares[None, :]) <= 1, where=tied), case


# --- errors --------------------------------------------------------------------------

@pytest.mark.parametrize("speeds, message", [
    ([70, 0, 5], "device 1 has speed 0"),
    ([70, -3, 5], "device 1 has speed -3"),
    ([70, 25, float("nan")], "device 2 has speed nan"),
    ([70, float("inf")], "device 1 has speed inf"),
    # shares of speeds that far apart overflow: [1, 1e-310] gave [2, 2] (not 32)
    ([1, 1e-310], r"device 1 has speed 1e-310: speeds must be at least 1e-100 and 1e-30 of "
                  r"the fastest's \(1\); a device that slow gets no work \(leave it out\)"),
    ([1e-310, 1e-310], "device 0 has speed 1e-310"),
    ([1e9, 1e-22], "device 1 has speed 1e-22"),
    ([70, None, 5], r"device 1 has no speed \(None\)"),
    ([70, "fast"], "device 1 has speed 'fast', which is not a number"),
    ([], "speeds is empty"),
    ("70,25", "speeds must be a list"),
])
def test_bad_speeds(speeds, message):
    with pytest.raises(ValueError, match=message):
        apportion(12, speeds)


def test_bad_speed_is_named_by_device_name():
    with pytest.raises(ValueError, match=r"/cpu:0 has speed 0"):
        apportion(12, [70, 0], names=["/gpu:0", "/cpu:0"])
    with pytest.raises(ValueError, match="got 2 speeds for 1 device: need"):
        apportion(10, [1.0, 2.0], names=["a"])
    with pytest.raises(ValueError, match="got 2 speeds for 3 devices"):
        apportion(12, [70, 5], names=["a", "b", "c"])


def test_too_few_units_for_the_minimum():
    with pytest.raises(ValueError, match="12 filters cannot give 16 devices at least 1 each"):
        apportion(12, [1] * 16, unit="filters")


def test_total_above_caps_names_the_capped_devices():
    with pytest.raises(ValueError, match=r"^10 units do not fit under the caps: device 0 at "
                                         r"most 3, device 1 at most 0, device 2 at most 4; 7 "
                                         r"in all$"):
        apportion(10, [1, 1, 1], minimum=0, caps=[3, 0, 4])


@pytest.mark.parametrize("kwargs, message", [
    (dict(total=-1), "the number of units must be a whole number >= 0, got -1"),
    (dict(total=2.5), "the number of units must be a whole number >= 0, got 2.5"),
    (dict(minimum=-1), "the minimum share must be a whole number >= 0"),
    (dict(caps=[3, 3]), "got 2 caps for 3 devices"),
    (dict(caps=[3, 0, None]), r"device 1 can take at most 0 \(its cap\) but needs at least"),
    (dict(caps=[3, -1, None]), "the cap of device 1 must be a whole number >= 0, got -1"),
])
def test_bad_arguments(kwargs, message):
    args = dict(total=12, speeds=[70, 25, 5]) | kwargs
    with pytest.raises(ValueError, match=message):
        apportion(**args)


# --- per-device overheads (offsets) ------------------------------------------------------

def finish_level(total, speeds, offsets, minimum):
    """Reference: the finish time T with sum(max(minimum, s_i (T - o_i))) == total, by bisection."""
    speeds, offsets = np.asarray(speeds, float), np.asarray(offsets, float)
    lo, hi = 0.0, 1.0
    while np.maximum(minimum, speeds * (hi - offsets)).sum() < total:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if np.maximum(minimum, speeds * (mid - offsets)).sum() < total \
            else (lo, mid)
    return hi


@pytest.mark.parametrize("total, speeds, offsets", [
    (512, [11672.0, 4418.0], [0.004, 0.027]),
    (256, [3000.0, 1000.0, 500.0], [0.0, 0.01, 0.2]),   # the last one's overhead > T
    (100, [2.0, 1.0], [0.0, 0.0]),
])
def test_offsets_make_devices_finish_together(total, speeds, offsets):
    shares = apportion(total, speeds, 1, offsets=offsets)
    level = finish_level(total, speeds, offsets, 1)
    real = np.maximum(1, np.asarray(speeds) * (level - np.asarray(offsets)))
    assert sum(shares) == total
    assert np.all(np.abs(np.array(shares) - real) < 1)
    finish = np.asarray(offsets) + np.array(shares) / np.asarray(speeds)
    free = real > 1
    # every device that is not held at the minimum finishes within one sample of the others
    assert np.all(np.abs(finish[free] - level) <= 1 / np.asarray(speeds)[free])


def test_zero_offsets_are_the_plain_proportional_split():
    assert apportion(100, [2.0, 1.0], offsets=[0, 0]) == apportion(100, [2, 1]) == [67, 33]


def test_a_larger_overhead_gets_fewer_units_than_its_speed_share():
    plain = apportion(512, [11672.0, 4418.0])
    with_overhead = apportion(512, [11672.0, 4418.0], offsets=[0.004, 0.027])
    assert with_overhead[1] < plain[1] and with_overhead[0] > plain[0]


@pytest.mark.parametrize("offsets, message", [
    ([0.0], "got 1 offsets for 2 devices"),
    ([0.0, -1.0], "device 1 has overhead -1.0: overheads must be finite and >= 0"),
    ([0.0, float("nan")], "device 1 has overhead nan"),
])
def test_bad_offsets_are_named(offsets, message):
    with pytest.raises(ValueError, match=message):
        apportion(10, [1.0, 1.0], offsets=offsets)


@pytest.mark.parametrize("value, positive, non_negative", [
    (1, True, True), (2.5, True, True), (np.float32(3.0), True, True), (0, False, True),
    (0.0, False, True), (-1e-9, False, False), (float("inf"), False, False),
    (float("nan"), False, False), (True, False, False), ("1", False, False),
    (None, False, False)])
def test_the_one_test_of_amounts(value, positive, non_negative):
    assert is_positive_number(value) is positive
    assert is_positive_number(value, allow_zero=True) is non_negative


# --- in channel blocks -----------------------------------------------------------------

def test_in_blocks_each_share_is_whole_blocks_but_the_largest():
    # 4 blocks of 16 at 1.89:1 -> 2.61, 1.39 blocks -> [3, 1]; by single filters [42, 22]
    assert apportion_in_blocks(64, [1.89, 1], 16) == [48, 16]
    assert apportion(64, [1.89, 1]) == [42, 22]
    # 100 filters = 7 blocks (the last of 4): [5, 2] blocks; the slow device, which
    # would finish last, holds the partial one
    assert apportion_in_blocks(100, [3, 1], 16) == [80, 20]
    assert apportion_in_blocks(17, [5, 1], 16) == [16, 1]
    assert apportion_in_blocks(64, [1, 1, 1, 1], 16) == [16] * 4


@pytest.mark.parametrize("total", [16, 33, 64, 100, 129])
@pytest.mark.parametrize("speeds", [[1, 1], [1.89, 1], [5, 2, 1], [1, 3, 3]])
def test_in_blocks_costs_the_blocks_apportion_gives(total, speeds):
    block = 8
    blocks = math.ceil(total / block)
    shares = apportion_in_blocks(total, speeds, block)
    if blocks < len(speeds):   # a block each is more than there is: single filters
        assert shares == apportion(total, speeds)
        return
    assert sum(shares) == total and min(shares) >= 1
    assert [math.ceil(s / block) for s in shares] == apportion(blocks, speeds)
    assert sum(s % block != 0 for s in shares) <= 1


def test_in_blocks_falls_back_to_single_units_where_blocks_cannot_serve():
    assert apportion_in_blocks(8, [1, 1], 16) == apportion(8, [1, 1]) == [4, 4]   # one block
    # a cap under one block
    assert apportion_in_blocks(64, [2, 1], 16, caps=[None, 10]) == apportion(
        64, [2, 1], caps=[None, 10]) == [54, 10]
    assert apportion_in_blocks(64, [2, 1], 1) == apportion(64, [2, 1])
    # a minimum of 20 filters is two blocks each; the partial block goes where the share
    # keeps its minimum, or nowhere
    assert apportion_in_blocks(64, [2, 1], 16, minimum=20) == [32, 32]
    # (49 = 4 blocks less 15: a share of 32 less 15 is under 20)
    assert apportion_in_blocks(49, [1, 2], 16, minimum=20) == apportion(49, [1, 2], 20) \
        == [20, 29]
    assert apportion_in_blocks(56, [1, 2], 16, minimum=20) == [24, 32]   # the slow one holds it
