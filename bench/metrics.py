"""Figures computed from measurements: stalls, rates over time, percentiles, ratios, capacity.

A delivery timeline is a list of (seconds since the flow started, cumulative bytes delivered)
samples in time order, as a receiver (kernel flows) or the receiving agent (MRC messages)
recorded them. Between samples the delivered count is taken to be constant (a step function):
a sample is the moment bytes were seen to arrive, so nothing is interpolated that was not seen.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from bench.errors import BenchmarkError
from fabric.capacity import max_flow
from fabric.topology import Fabric

Timeline = Sequence[tuple[float, int]]


class MetricError(BenchmarkError, ValueError):
    """A measurement is unusable for a figure (empty, unordered, out of range)."""


def check_timeline(samples: Timeline) -> None:
    """Reject timelines that would make every later figure meaningless."""
    last_t, last_b = -math.inf, -1
    for t, b in samples:
        if not math.isfinite(t) or t < last_t:
            raise MetricError(f"timeline times must be finite and non-decreasing (got {t} after "
                              f"{last_t})")
        if b < last_b:
            raise MetricError(f"cumulative bytes went down ({b} after {last_b}) at t={t}")
        last_t, last_b = t, b


def delivered_at(samples: Timeline, t: float) -> int:
    """Cumulative bytes delivered by time t (0 before the first sample)."""
    got = 0
    for when, b in samples:
        if when > t:
            break
        got = b
    return got


def progress_times(samples: Timeline) -> list[float]:
    """The times at which the delivered count went up."""
    out, last = [], 0
    for t, b in samples:
        if b > last:
            out.append(t)
            last = b
    return out


def longest_stall(samples: Timeline, *, after: float | None = None,
                  until: float | None = None) -> float:
    """Longest time between two consecutive increases of delivered bytes.

    Measured from the first delivery on, so connection setup is not a stall. With `after`
    (a failure time), only gaps that end after it count, and the gap spanning it counts whole.
    With `until` (the end of observation), a flow that stopped delivering before then has a
    last gap up to `until`: a flow that never recovers stalls until it is given up.
    """
    check_timeline(samples)
    times = progress_times(samples)
    if until is not None and times and until > times[-1]:
        times.append(until)
    gaps = [(b - a, b) for a, b in zip(times, times[1:], strict=False)]
    if after is not None:
        gaps = [(g, end) for g, end in gaps if end > after]
    return max((g for g, _ in gaps), default=0.0)


def rate_bps(samples: Timeline, t0: float, t1: float) -> float:
    """Mean goodput over [t0, t1] in bits/s."""
    if t1 <= t0:
        raise MetricError(f"rate over an empty interval [{t0}, {t1}]")
    return (delivered_at(samples, t1) - delivered_at(samples, t0)) * 8 / (t1 - t0)


def goodput_series(samples: Timeline, interval: float, end: float | None = None
                   ) -> list[tuple[float, float]]:
    """(interval start, bits/s over that interval) from 0 to `end` (default: last sample)."""
    if interval <= 0:
        raise MetricError(f"interval must be positive, got {interval}")
    check_timeline(samples)
    if end is None:
        end = samples[-1][0] if samples else 0.0
    out = []
    n = max(1, math.ceil(end / interval)) if end > 0 else 0
    for i in range(n):
        a = i * interval
        out.append((a, rate_bps(samples, a, a + interval)))
    return out


def completion_time(samples: Timeline, total: int) -> float | None:
    """When the last of `total` bytes arrived, or None if they never all did."""
    for t, b in samples:
        if b >= total:
            return t
    return None


def percentile(values: Iterable[float], q: float) -> float:
    """q-th percentile (0..100), linear between closest ranks (numpy's default method)."""
    data = sorted(values)
    if not data:
        raise MetricError("percentile of no values")
    if not 0 <= q <= 100:
        raise MetricError(f"percentile q must be 0..100, got {q}")
    pos = (len(data) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(data) - 1)
    return data[lo] + (data[hi] - data[lo]) * (pos - lo)


def distribution(values: Sequence[float]) -> dict[str, float]:
    """The summary every per-flow or per-step figure reports."""
    return {"count": len(values), "min": min(values), "p50": percentile(values, 50),
            "p99": percentile(values, 99), "max": max(values),
            "mean": sum(values) / len(values)}


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """numerator / denominator, or None when either is missing or the denominator is 0."""
    if numerator is None or denominator is None or denominator == 0:
        return None
    return numerator / denominator


def capacity_pps(fabric: Fabric, port_rate_pps: float, senders: Iterable[int],
                 receivers: Iterable[int], dead_links: Iterable[tuple[str, str]] = ()) -> float:
    """Max-flow in packets/s from the senders' NICs to the receivers' NICs, every port at
    `port_rate_pps` (fabric.capacity, the one definition)."""
    return max_flow(fabric, senders, receivers, port_rate_pps, down_links=dead_links)
