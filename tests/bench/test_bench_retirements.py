"""bench.runner.retirements: EVs retired during a failure run, split into the failed routes'
and the healthy routes', from two readings of the agent's per-EV counters."""

from __future__ import annotations

from collections import Counter

from bench.runner import retirements

FAILED = {"r0"}


def test_counts_only_what_the_run_added() -> None:
    before = (7, Counter({"r0": 3, "r1": 1}))
    after = (7, Counter({"r0": 23, "r1": 1, "r2": 2}))
    assert retirements(before, after, FAILED) == {"failed_route_retirements": 20,
                                                  "healthy_route_retirements": 2}


def test_clean_run_counts_zero() -> None:
    reading = (7, Counter({"r0": 20, "r1": 0}))
    assert retirements(reading, reading, FAILED) == {"failed_route_retirements": 0,
                                                     "healthy_route_retirements": 0}


def test_new_qp_counts_from_zero() -> None:
    """A QP replaced between the readings starts its counters again: the old ones are not
    subtracted (that would go negative)."""
    before = (7, Counter({"r0": 30, "r1": 5}))
    after = (9, Counter({"r0": 4, "r1": 1}))
    assert retirements(before, after, FAILED) == {"failed_route_retirements": 4,
                                                  "healthy_route_retirements": 1}
