"""Fake clock and event queue: the only notion of time in the simulator."""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any

from sim.errors import SimError


class SimulationError(SimError, RuntimeError):
    """The simulation cannot continue (event budget exhausted, time went backwards)."""


class EventLoop:
    """A heap of (time, sequence, callback): equal times run in scheduling order, so runs repeat."""

    def __init__(self) -> None:
        self.now = 0.0
        self._heap: list[tuple[float, int, Callable[..., Any], tuple[Any, ...]]] = []
        self._seq = 0
        self.events_run = 0

    def at(self, when: float, fn: Callable[..., Any], *args: Any) -> None:
        if when < self.now:
            raise SimulationError(f"event scheduled in the past: {when} < now {self.now}")
        heapq.heappush(self._heap, (when, self._seq, fn, args))
        self._seq += 1

    def after(self, delay: float, fn: Callable[..., Any], *args: Any) -> None:
        self.at(self.now + delay, fn, *args)

    def run(self, *, until: float, done: Callable[[], bool] | None = None,
            max_events: int = 50_000_000) -> bool:
        """Run events up to time `until`; stop early once `done()` is true. Returns done()."""
        heap = self._heap
        pop = heapq.heappop
        budget = max_events
        while heap and heap[0][0] <= until:
            when, _, fn, args = pop(heap)
            self.now = when
            fn(*args)
            budget -= 1
            if budget <= 0:
                raise SimulationError(f"more than {max_events} events: livelock or run too long")
            if done is not None and done():
                self.events_run += max_events - budget
                return True
        self.events_run += max_events - budget
        return done() if done is not None else False
