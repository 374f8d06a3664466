"""Egress queues per port with BMv2-like semantics: strict priority, paced in packets/s.

Like simple_switch with --priority-queues, every port has one FIFO per priority; each
FIFO has a depth limit (packets; tail drop when full) and its own rate limit (packets
per second; 0 = unlimited), and the scheduler serves the highest priority FIFO whose
head may leave. As in BMv2's QueueingLogicPriRL, a packet's departure time is fixed when
it is queued: max(arrival, previous departure of its FIFO + 1/rate). So a pacer never
sends two packets back to back after an idle spell, and a rate change applies to packets
queued after it, not to those already waiting. `enq_qdepth` is the length of the packet's
own priority FIFO before it joins, `deq_qdepth` that FIFO's length after it leaves, as
simple_switch 1.15.1 reports them (`egress_buffers.size(port, priority)`, behavioral-model
PR #1270).

A port may also have a propagation delay (the link's, `--link-delay`): a packet that has
left its FIFO (serialized at the port's rate) goes out on the wire `delay` seconds later.
It waits in the port's flight line meanwhile, which no queue depth counts: a link holds
its bandwidth-delay product in flight, not in the switch's buffer.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from softswitch.errors import SoftSwitchError

DEFAULT_DEPTH = 64  # simple_switch's default queue depth, packets


@dataclass
class Fifo:
    depth: int = DEFAULT_DEPTH
    rate: float = 0.0  # packets/s, 0 = unlimited
    last_departure: float = float("-inf")  # departure time given to the newest packet
    items: deque = field(default_factory=deque)
    drops: int = 0
    sent: int = 0


class PortQueues:
    """All priority FIFOs of one egress port."""

    def __init__(self, priorities: int) -> None:
        self.fifos = [Fifo() for _ in range(priorities)]
        self.occupancy = 0
        self.delay = 0.0  # seconds between leaving the FIFO and leaving the port
        self.flight: deque = deque()  # (time it goes out, frame), in that order

    def hold(self, frame: bytes, left: float) -> None:
        """A frame that left its FIFO at `left`: out on the wire `delay` later."""
        self.flight.append((left + self.delay, frame))

    def landed(self, now: float) -> list[bytes]:
        """Frames whose delay is over at `now`, in order (one delay per port: FIFO order)."""
        out = []
        flight = self.flight
        while flight and flight[0][0] <= now:
            out.append(flight.popleft()[1])
        return out

    def enqueue(self, priority: int, frame: bytes, meta: object, now: float) -> int | None:
        """Queue a frame arriving at `now`; returns enq_qdepth, or None if the FIFO was full
        (dropped)."""
        fifo = self.fifos[priority]
        if len(fifo.items) >= fifo.depth:
            fifo.drops += 1
            return None
        enq_qdepth = len(fifo.items)
        departure = now
        if fifo.rate > 0:
            departure = max(now, fifo.last_departure + 1.0 / fifo.rate)
        fifo.last_departure = departure
        fifo.items.append((frame, meta, enq_qdepth, departure))
        self.occupancy += 1
        return enq_qdepth

    def pass_through(self, priority: int, now: float) -> bool:
        """For a port whose FIFOs are all empty (occupancy 0, the caller checks): True when a
        packet arriving at `now` would leave at once, in which case it is accounted exactly
        as enqueue() then dequeue(now) would (departure time, sent; both depths are 0) and
        the caller sends it; False changes nothing (queue it with enqueue())."""
        fifo = self.fifos[priority]
        if fifo.depth < 1:
            return False
        if fifo.rate > 0:
            departure = fifo.last_departure + 1.0 / fifo.rate
            if departure > now:
                return False
        fifo.last_departure = now
        fifo.sent += 1
        return True

    def ready_at(self) -> float | None:
        """Earliest time any non-empty FIFO may send or a held frame goes out, or None."""
        times = [f.items[0][3] for f in self.fifos if f.items]
        if self.flight:
            times.append(self.flight[0][0])
        return min(times) if times else None

    def dequeue(self, now: float) -> tuple[bytes, object, int, int, int] | None:
        """(frame, meta, priority, enq_qdepth, deq_qdepth) of the next departure allowed at
        `now`; both depths count the packet's own priority FIFO only."""
        for priority in range(len(self.fifos) - 1, -1, -1):  # highest priority first
            fifo = self.fifos[priority]
            if fifo.items and fifo.items[0][3] <= now:
                frame, meta, enq_qdepth, _ = fifo.items.popleft()
                self.occupancy -= 1
                fifo.sent += 1
                return frame, meta, priority, enq_qdepth, len(fifo.items)
        return None

    def set_rate(self, pps: float, priority: int | None = None) -> None:
        for i, fifo in enumerate(self.fifos):
            if priority is None or i == priority:
                fifo.rate = pps

    def set_depth(self, depth: int, priority: int | None = None) -> None:
        for i, fifo in enumerate(self.fifos):
            if priority is None or i == priority:
                fifo.depth = depth

    def stats(self) -> list[dict[str, float]]:
        return [{"priority": i, "depth": f.depth, "rate_pps": f.rate, "queued": len(f.items),
                 "sent": f.sent, "tail_drops": f.drops} for i, f in enumerate(self.fifos)]


class QueueConfigError(SoftSwitchError, ValueError):
    """A bad queue setting; the message says the valid range."""


def check_setting(value: float, what: str, priorities: int, priority: int | None) -> None:
    if value < 0:
        raise QueueConfigError(f"{what} must be >= 0, got {value}")
    if priority is not None and not 0 <= priority < priorities:
        raise QueueConfigError(f"priority must be 0..{priorities - 1}, got {priority}")
