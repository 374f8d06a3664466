"""bench.costs.agent_speed reads a process's CPU from the scheduler's nanosecond runtime: it must
agree with the process's own clock, which a 10 ms clock-tick reading could not do."""

from __future__ import annotations

import os
import time

from bench.costs.agent_speed import on_cpu_seconds

BURN_S = 0.2
TOLERANCE_S = 0.012  # a running thread's schedstat may lag by up to one scheduler tick


def _burn(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_on_cpu_seconds_follows_the_process_clock() -> None:
    pid = os.getpid()
    clock0, run0 = time.process_time(), on_cpu_seconds(pid)
    _burn(BURN_S)
    clock1, run1 = time.process_time(), on_cpu_seconds(pid)
    assert abs((run1 - run0) - (clock1 - clock0)) < TOLERANCE_S


def test_on_cpu_seconds_is_finer_than_clock_ticks() -> None:
    """Several readings across short bursts: schedstat's totals are not all multiples of 10 ms,
    while /proc/PID/stat's always are. (The two totals are not compared here: /proc/PID/stat
    also counts threads that have exited, which pytest's process has; the agents have none.)"""
    pid = os.getpid()
    readings = []
    for _ in range(5):
        _burn(0.013)
        readings.append(on_cpu_seconds(pid))
    assert any(round(r * 1e9) % 10_000_000 for r in readings)
