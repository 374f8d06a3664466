"""Egress queues per port with BMv2-like semantics: strict priority, paced in packets/s.

Like simple_switch with --priority-queues, every port has one FIFO per priority; each
FIFO has a depth limit (packets; tail drop when full) and its own rate limit (packets
per second; 0 = unlimited), and the scheduler serves the highest priority FIFO whose
pacer allows a departure. `enq_qdepth` is the length of the packet's own priority FIFO
before it joins, `deq_qdepth` that FIFO's length after it leaves, as simple_switch 1.15.1
reports them (`egress_buffers.size(port, priority)`, behavioral-model PR #1270).
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

DEFAULT_DEPTH = 64  # simple_switch's default queue depth, packets


@dataclass
class Fifo:
    depth: int = DEFAULT_DEPTH
    rate: float = 0.0  # packets/s, 0 = unlimited
    next_time: float = 0.0  # earliest departure of the head under the pacer
    items: deque = field(default_factory=deque)
    drops: int = 0
    sent: int = 0


class PortQueues:
    """All priority FIFOs of one egress port."""

    def __init__(self, priorities: int) -> None:
        self.fifos = [Fifo() for _ in range(priorities)]
        self.occupancy = 0

    def enqueue(self, priority: int, frame: bytes, meta: object) -> int | None:
        """Queue a frame; returns enq_qdepth, or None if the FIFO was full (dropped)."""
        fifo = self.fifos[priority]
        if len(fifo.items) >= fifo.depth:
            fifo.drops += 1
            return None
        enq_qdepth = len(fifo.items)
        fifo.items.append((frame, meta, enq_qdepth))
        self.occupancy += 1
        return enq_qdepth

    def ready_at(self) -> float | None:
        """Earliest time any non-empty FIFO may send, or None when all are empty."""
        times = [f.next_time for f in self.fifos if f.items]
        return min(times) if times else None

    def dequeue(self, now: float) -> tuple[bytes, object, int, int, int] | None:
        """(frame, meta, priority, enq_qdepth, deq_qdepth) of the next departure allowed at
        `now`; both depths count the packet's own priority FIFO only."""
        for priority in range(len(self.fifos) - 1, -1, -1):  # highest priority first
            fifo = self.fifos[priority]
            if fifo.items and fifo.next_time <= now:
                frame, meta, enq_qdepth = fifo.items.popleft()
                self.occupancy -= 1
                fifo.sent += 1
                if fifo.rate > 0:
                    fifo.next_time = max(fifo.next_time, now - 1.0 / fifo.rate) + 1.0 / fifo.rate
                return frame, meta, priority, enq_qdepth, len(fifo.items)
        return None

    def set_rate(self, pps: float, priority: int | None = None) -> None:
        for i, fifo in enumerate(self.fifos):
            if priority is None or i == priority:
                fifo.rate = pps
                fifo.next_time = time.monotonic() if pps > 0 else 0.0

    def set_depth(self, depth: int, priority: int | None = None) -> None:
        for i, fifo in enumerate(self.fifos):
            if priority is None or i == priority:
                fifo.depth = depth

    def stats(self) -> list[dict[str, float]]:
        return [{"priority": i, "depth": f.depth, "rate_pps": f.rate, "queued": len(f.items),
                 "sent": f.sent, "tail_drops": f.drops} for i, f in enumerate(self.fifos)]


class QueueConfigError(ValueError):
    """A bad queue setting; the message says the valid range."""


def check_setting(value: float, what: str, priorities: int, priority: int | None) -> None:
    if value < 0:
        raise QueueConfigError(f"{what} must be >= 0, got {value}")
    if priority is not None and not 0 <= priority < priorities:
        raise QueueConfigError(f"priority must be 0..{priorities - 1}, got {priority}")
