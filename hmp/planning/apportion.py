"""Splits an integer amount of work (filters, samples) over devices by speed.

``apportion(12, [70, 25, 5]) == [8, 3, 1]``: every device gets a whole number
of units in proportion to its speed, so that all finish their share together.

How: first the exact real-valued shares ``x_i = clip(level * speed_i,
minimum, cap_i)`` with the one ``level`` that makes them sum to the total
(water filling: devices held at the minimum or at their cap keep that, the
others share the rest in proportion to speed). Then largest-remainder
rounding: every device gets ``floor(x_i)`` and the units left over go to the
largest fractional parts (faster device first on equal parts, then lower
index). This gives, whenever the real-valued shares are valid:

* exact: the shares sum to ``total``;
* proportional: every share is within one unit of ``x_i`` (without minimum
  or caps binding, ``x_i = total * speed_i / sum(speeds)``);
* monotone: without caps, a faster device never gets less than a slower one,
  and equal speeds get shares within one unit of each other;
* bounded: ``minimum <= share_i <= cap_i``.

With per-device ``offsets`` (a fixed time each device spends whatever its
share, e.g. its per-step overhead) the real shares are ``clip((level -
offset_i) * speed_i, minimum, cap_i)`` instead: every device still finishes at
the same time, and "proportional" and "monotone" hold for ``(level - offset_i)
* speed_i`` in place of ``level * speed_i``.
"""

import math
from numbers import Real

import numpy as np

from hmp.errors import InvalidInput, is_positive_number, whole_number


def describe_device(index, names=None):
    """How messages call device ``index``: ``names[index]`` if given, else ``device 2``."""
    return names[index] if names else f"device {index}"


# The slowest speed check_speeds takes, as a share of the fastest's and absolutely: the
# shares' arithmetic (speed ratios, a level over the speeds) stays finite above them
SLOWEST_SHARE = 1e-30
SLOWEST_SPEED = 1e-100


def check_speeds(speeds, names=None):
    """Returns ``speeds`` as a float array; ValueError on a bad speed.

    Speeds must be finite positive numbers, one per device (one per entry of
    ``names`` when given), none under ``SLOWEST_SHARE`` of the fastest's or
    ``SLOWEST_SPEED``. The error names the device and the value.
    """
    if isinstance(speeds, (str, bytes)) or not hasattr(speeds, "__len__"):
        raise InvalidInput(f"speeds must be a list of numbers, got {speeds!r}")
    if len(speeds) == 0:
        raise InvalidInput("speeds is empty: need one speed per device")
    if names is not None and len(speeds) != len(names):
        raise InvalidInput(
            f"got {len(speeds)} speed{'s' * (len(speeds) != 1)} for {len(names)} "
            f"device{'s' * (len(names) != 1)}: need exactly one speed per device")
    for i, speed in enumerate(speeds):
        if speed is None:
            raise InvalidInput(f"{describe_device(i, names)} has no speed (None)")
        if isinstance(speed, bool) or not isinstance(speed, Real):
            raise InvalidInput(
                f"{describe_device(i, names)} has speed {speed!r}, "
                "which is not a number")
        if not is_positive_number(speed):
            raise InvalidInput(
                f"{describe_device(i, names)} has speed {speed!r}: "
                "speeds must be finite and greater than 0")
    speeds = np.asarray(speeds, dtype=float)
    slowest = int(np.argmin(speeds))
    if speeds[slowest] < SLOWEST_SHARE * speeds.max() or speeds[slowest] < SLOWEST_SPEED:
        raise InvalidInput(
            f"{describe_device(slowest, names)} has speed {speeds[slowest]:g}: speeds must "
            f"be at least {SLOWEST_SPEED:g} and {SLOWEST_SHARE:g} of the fastest's "
            f"({speeds.max():g}); a device that slow gets no work (leave it out)")
    return speeds


def _upper_bounds(caps, n, minimum, names):
    """Returns the caps as a float array (inf for None), checked against minimum."""
    if caps is None:
        return np.full(n, np.inf)
    if len(caps) != n:
        raise InvalidInput(f"got {len(caps)} caps for {n} devices: need one per device")
    bounds = np.full(n, np.inf)
    for i, cap in enumerate(caps):
        if cap is None:
            continue
        cap = whole_number(cap, f"the cap of {describe_device(i, names)}", 0)
        if cap < minimum:
            raise InvalidInput(
                f"{describe_device(i, names)} can take at most {cap} (its cap) "
                f"but needs at least the minimum share {minimum}")
        bounds[i] = cap
    return bounds


def _real_shares(total, speeds, lower, upper, offsets):
    """The real-valued shares ``clip((level - offsets) * speeds, lower, upper)`` summing
    to total.

    ``filled(level)`` is continuous and nondecreasing in ``level`` and linear
    between the breakpoints ``offsets + lower/speeds`` and ``offsets +
    upper/speeds``. A binary search finds the breakpoint interval holding
    ``total``; inside it the set of free (unclipped) devices is fixed, so
    ``level`` is solved exactly.
    """
    def shares(level):
        return np.clip((level - offsets) * speeds, lower, upper)

    def filled(level):
        return shares(level).sum()

    finite = np.isfinite(upper)
    points = np.unique(np.concatenate([offsets + lower / speeds,
                                       offsets[finite] + upper[finite] / speeds[finite]]))
    lo, hi = 0, len(points) - 1
    if filled(points[hi]) < total:  # above every breakpoint: uncapped devices share
        lo = hi
    else:
        while hi - lo > 1:  # invariant: filled(points[lo]) <= total <= filled(points[hi])
            mid = (lo + hi) // 2
            if filled(points[mid]) <= total:
                lo = mid
            else:
                hi = mid
    probe = 2 * points[lo] + 1 if lo == hi else (points[lo] + points[hi]) / 2
    unclipped = (probe - offsets) * speeds
    free = (lower < unclipped) & (unclipped < upper)
    held = np.where(unclipped <= lower, lower, upper)
    fixed = held[~free].sum()
    level = ((total - fixed + (offsets[free] * speeds[free]).sum()) / speeds[free].sum()
             if free.any() else points[lo])
    return shares(level)


def _round(total, shares, speeds, upper):
    """Largest-remainder rounding of real shares that sum to ``total``.

    Values within 1e-9 of an integer are snapped to it first, so float noise
    cannot create or lose a unit. Leftover units go to the largest fractional
    parts among devices below their cap; ties favour the faster device, then
    the lower index, which keeps the result monotone in speed.
    """
    nearest = np.rint(shares)
    shares = np.where(np.abs(shares - nearest) < 1e-9, nearest, shares)
    whole = np.floor(shares).astype(np.int64)
    left = total - int(whole.sum())
    room = np.flatnonzero(whole < upper)
    order = np.lexsort((room, -speeds[room], -(shares[room] - whole[room])))
    whole[room[order[:left]]] += 1
    return whole.tolist()


def apportion(total, speeds, minimum=1, caps=None, *, names=None, unit="units",
              offsets=None):
    """Splits ``total`` whole units over devices in proportion to ``speeds``.

    Args:
      total: the number of units to hand out (filters, samples), an int >= 0.
      speeds: one finite positive number per device; only ratios matter.
      minimum: the least every device gets (0 allowed).
      caps: None, or per device the most it may get (None = no cap). Units a
        capped device cannot take go to the others, in proportion to speed.
      names: optional, how error messages call each device (``"device 2 (/cpu:0)"``).
      unit: what a unit is, for error messages (``"filters"``).
      offsets: None, or per device a fixed time (seconds, >= 0) it spends
        whatever its share: its per-step overhead. Then ``speeds`` are units
        per second (not only ratios) and device ``i`` gets ``(T - offsets_i)
        * speeds_i`` units for the one finish time ``T`` that hands out
        ``total`` (clipped to ``minimum`` and its cap): a device with a large
        overhead gets less than its speed's share, so that all finish
        together. None: all 0, shares in proportion to speed.

    Returns:
      A list of ints, one per device, with the guarantees in the module
      docstring.

    Raises:
      ValueError: on a bad speed (naming the device and value), when
        ``total`` cannot give every device its minimum, or when ``total``
        does not fit under the caps (naming the capped devices).
    """
    speeds = check_speeds(speeds, names)
    total = whole_number(total, f"the number of {unit}", 0)
    minimum = whole_number(minimum, "the minimum share", 0)
    n = len(speeds)
    if total < minimum * n:
        raise InvalidInput(
            f"{total} {unit} cannot give {n} devices at least {minimum} each "
            f"(at most {total // n} each)")
    upper = _upper_bounds(caps, n, minimum, names)
    if upper.sum() < total:
        capped = ", ".join(
            f"{describe_device(i, names)} at most {int(upper[i])}"
            for i in np.flatnonzero(np.isfinite(upper)))
        raise InvalidInput(
            f"{total} {unit} do not fit under the caps: {capped}; {int(upper.sum())} in all")
    lower = np.full(n, float(minimum))
    return _round(total, _real_shares(total, speeds, lower, upper, _offsets(offsets, n, names)),
                  speeds, upper)


def _offsets(offsets, n, names):
    """The offsets as a float array (zeros for None); each finite and >= 0."""
    if offsets is None:
        return np.zeros(n)
    if len(offsets) != n:
        raise InvalidInput(f"got {len(offsets)} offsets for {n} devices: need one per device")
    values = np.asarray(offsets, dtype=float)
    for i, value in enumerate(values):
        if not math.isfinite(value) or value < 0:
            raise InvalidInput(f"{describe_device(i, names)} has overhead {offsets[i]!r}: "
                               "overheads must be finite and >= 0")
    return values


def apportion_in_blocks(total, speeds, block, minimum=1, caps=None, *, names=None,
                        unit="units"):
    """``apportion`` of ``total`` in whole blocks of ``block`` units where it can: every
    share a multiple of ``block`` but one, which holds the last, partial block: of the
    shares that stay at least ``minimum`` without its missing units, the one of the most
    units per speed (the device that would finish last; on a tie the first)
    (``apportion_in_blocks(64, [1.89, 1], 16) == [48, 16]`` where ``apportion`` gives
    ``[42, 22]``; ``apportion_in_blocks(100, [3, 1], 16) == [80, 20]``). For work done in blocks (a convolution's output
    channels, ``DeviceSpec.channel_block``), a share's cost is its blocks: 22 of 64
    filters cost as much as 32. Falls back to ``apportion`` of single units when the
    blocks cannot give every device its minimum within its cap (fewer blocks than
    devices, or no share that can hold the partial block).
    """
    blocks = -(-total // block)
    block_caps = None if caps is None else [None if c is None else c // block for c in caps]
    fewest = max(1, -(-minimum // block))
    fits = blocks >= fewest * len(speeds) and (
        block_caps is None or sum(blocks if c is None else c for c in block_caps) >= blocks)
    if block <= 1 or not fits or any(c is not None and c < fewest for c in block_caps or ()):
        return apportion(total, speeds, minimum, caps, names=names, unit=unit)
    shares = [b * block for b in apportion(blocks, speeds, fewest, block_caps,
                                           names=names, unit=f"blocks of {block} {unit}")]
    missing = blocks * block - total
    holders = [i for i, share in enumerate(shares) if share - missing >= minimum]
    if not holders:
        return apportion(total, speeds, minimum, caps, names=names, unit=unit)
    holder = max(holders, key=lambda i: (shares[i] / speeds[i], -i))
    shares[holder] -= missing
    return shares
