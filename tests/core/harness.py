"""A tiny deterministic two-endpoint harness for the sans-IO core.

Not a fabric simulator: each (endpoint, plane, spine) route is just a delay line with seeded
faults (drop, duplicate, reorder via jitter, trim, CE mark) and a kill switch. Two optional
pieces model what the Mininet emulation adds (tests/core/test_core_emulation_jitter.py):
- Link.bottleneck: a FIFO in front of an endpoint's NIC on one plane that serves one data
  packet per service time (a rate-limited last hop: queueing delay that grows with bursts);
  with Link.trim_at, a packet finding that many ahead of it is cut to its headers and
  delivered at once as TRIMMED_LASTHOP (the switch's high-priority queue);
- Harness.stall(name, start, end): the endpoint's process does nothing in [start, end) (a
  busy or descheduled Python agent); what arrived meanwhile is then read NIC by NIC, every
  frame of plane 0 before any of plane 1 and so on, before anything is sent or any timer
  runs, as a host that drains one socket after another does.
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass, field

import wire
from host_agent.core import Endpoint, EndpointConfig, EvConfig, Event, PathInfo, RxMeta, TxPacket

BASE_RTT = 10e-6
HEADERS = wire.BTH_LEN + wire.METH_LEN + wire.RETH_LEN  # what a trimmed data payload keeps
QP_A, QP_B = 0x100, 0x200


def small_config(**overrides: object) -> EndpointConfig:
    ev = overrides.pop("ev", None) or EvConfig.for_base_rtt(
        BASE_RTT, evs_per_connection=16, backups_per_plane=2, ev_min_active=4)
    return EndpointConfig.for_base_rtt(BASE_RTT, ev=ev, **overrides)


@dataclass
class Faults:
    drop: float = 0.0
    dup: float = 0.0
    trim: float = 0.0
    trim_lasthop: float = 0.0
    ce: float = 0.0
    jitter: float = 0.0  # extra uniform delay (s): reorders packets


@dataclass
class Link:
    """Everything the harness lets a test break."""

    faults: Faults = field(default_factory=Faults)
    dead_routes: set = field(default_factory=set)  # (src, plane, spine)
    dead_planes: set = field(default_factory=set)  # (node, plane): that NIC port is down
    route_delay: dict = field(default_factory=dict)  # route -> extra one-way delay (s), FIFO
    bottleneck: dict = field(default_factory=dict)  # (dst, plane) -> service time (s) per data
    trim_at: int | None = None  # a bottleneck holding this many packets trims (last hop)
    filter: object = None  # optional callable(src, TxPacket) -> bool: False drops it


class Harness:
    def __init__(self, *, planes: int = 2, spines: int = 2, seed: int = 1,
                 config: EndpointConfig | None = None, psn_a: int = 0, psn_b: int = 0) -> None:
        cfg = config or small_config()
        self.planes, self.spines = planes, spines
        self.now = 0.0
        self.rng = random.Random(seed)
        self.link = Link()
        self.eps = {"A": Endpoint(cfg, planes=planes, name="A", seed=seed),
                    "B": Endpoint(cfg, planes=planes, name="B", seed=seed + 1)}
        self.events: dict[str, list[Event]] = {"A": [], "B": []}
        self.event_times: dict[str, list[float]] = {"A": [], "B": []}  # when each was taken
        # (time, seq, stage, dst, src, meta, payload); stage "in" = reaches a bottleneck
        self._queue: list[tuple[float, int, str, str, str, RxMeta, bytes]] = []
        self._seq = 0
        self._busy: dict[tuple[str, int], float] = {}  # bottleneck -> when it is free
        self._stalls: dict[str, list[tuple[float, float]]] = {"A": [], "B": []}
        self._held: dict[str, list[tuple[int, int, str, RxMeta, bytes]]] = {"A": [], "B": []}
        self.sent: list[tuple[str, TxPacket]] = []  # every packet handed to the wire
        self.record = True
        for me, peer, lq, rq, sp, ep in (("A", "B", QP_A, QP_B, psn_a, psn_b),
                                         ("B", "A", QP_B, QP_A, psn_b, psn_a)):
            self.eps[me].connect(peer, lq, rq, self.paths(me), initial_psn=sp, expected_psn=ep)

    def paths(self, me: str) -> list[PathInfo]:
        return [PathInfo(p, (me, p, s)) for p in range(self.planes) for s in range(self.spines)]

    @property
    def a(self) -> Endpoint:
        return self.eps["A"]

    @property
    def b(self) -> Endpoint:
        return self.eps["B"]

    def _transmit(self, src: str, tx: TxPacket) -> None:
        if self.record:
            self.sent.append((src, tx))
        link, f, rng = self.link, self.link.faults, self.rng
        dst = tx.peer
        if (src, tx.plane) in link.dead_planes or (dst, tx.plane) in link.dead_planes:
            return
        if tx.route in link.dead_routes or (link.filter and not link.filter(src, tx)):
            return
        if rng.random() < f.drop:
            return
        payload, dscp, ecn = tx.payload, tx.dscp, tx.ecn
        if dscp in (wire.DSCP_TRIMMABLE, wire.DSCP_TRIMMABLE_RETX) and len(payload) > HEADERS:
            r = rng.random()
            if r < f.trim:
                payload, dscp = payload[:HEADERS], wire.DSCP_TRIMMED
            elif r < f.trim + f.trim_lasthop:
                payload, dscp = payload[:HEADERS], wire.DSCP_TRIMMED_LASTHOP
        if ecn != wire.ECN_NOT_ECT and rng.random() < f.ce:
            ecn = wire.ECN_CE
        meta = RxMeta(src, tx.plane, tx.ev, dscp, ecn)
        copies = 2 if rng.random() < f.dup else 1
        stage = "in" if (dst, tx.plane) in link.bottleneck and dscp in wire.DATA_DSCPS else "rx"
        for _ in range(copies):
            delay = BASE_RTT / 2 + rng.random() * f.jitter + link.route_delay.get(tx.route, 0.0)
            self._push(self.now + delay, stage, dst, src, meta, payload)

    def _push(self, t: float, stage: str, dst: str, src: str, meta: RxMeta, payload: bytes) -> None:
        self._seq += 1
        heapq.heappush(self._queue, (t, self._seq, stage, dst, src, meta, payload))

    # ---- stalls --------------------------------------------------------------------------
    def stall(self, name: str, start: float, end: float) -> None:
        """`name`'s process does nothing in [start, end) (module docstring)."""
        assert start < end
        self._stalls[name].append((start, end))
        self._stalls[name].sort()

    def _stalled_until(self, name: str, t: float) -> float | None:
        for start, end in self._stalls[name]:
            if start <= t < end:
                return end
        return None

    def _release(self, name: str) -> None:
        """End of a stall: read what arrived, NIC by NIC, then send and run timers."""
        held, self._held[name] = self._held[name], []
        for _plane, _seq, _src, meta, payload in sorted(held, key=lambda x: (x[0], x[1])):
            self.eps[name].receive_packet(payload, meta, now=self.now)

    def flush(self) -> None:
        for name, ep in self.eps.items():
            if self._stalled_until(name, self.now) is not None:
                continue
            for tx in ep.packets_to_send(now=self.now):
                self._transmit(name, tx)
            while (ev := ep.next_event()) is not None:
                self.events[name].append(ev)
                self.event_times[name].append(self.now)

    def step(self) -> bool:
        """Advance to the next delivery or timer; False when nothing is left to do."""
        self.flush()
        timers = [t for t in (self._wake_time(name) for name in self.eps) if t is not None]
        t_net = self._queue[0][0] if self._queue else None
        t_timer = min(timers, default=None)
        if t_net is None and t_timer is None:
            return False
        if t_timer is not None and (t_net is None or t_timer < t_net):
            self.now = max(self.now, t_timer)
            for name, ep in self.eps.items():
                if self._stalled_until(name, self.now) is not None:
                    continue
                if self._held[name]:
                    self._release(name)
                timer = ep.get_timer()
                if timer is not None and timer <= self.now:
                    ep.handle_timer(now=self.now)
        else:
            t, _, stage, dst, src, meta, payload = heapq.heappop(self._queue)
            self.now = max(self.now, t)
            if stage == "in":  # reaches the bottleneck: leaves after the packets before it
                key = (dst, meta.plane)
                service = self.link.bottleneck[key]
                busy = max(self.now, self._busy.get(key, 0.0))
                trim_at = self.link.trim_at
                if (trim_at is not None and (busy - self.now) / service >= trim_at
                        and meta.dscp in (wire.DSCP_TRIMMABLE, wire.DSCP_TRIMMABLE_RETX)):
                    meta = RxMeta(meta.peer, meta.plane, meta.ev, wire.DSCP_TRIMMED_LASTHOP,
                                  meta.ecn)
                    self._push(self.now, "rx", dst, src, meta, payload[:HEADERS])
                    return True
                self._busy[key] = busy + service
                self._push(self._busy[key], "rx", dst, src, meta, payload)
                return True
            if self._stalled_until(dst, self.now) is not None:
                self._seq += 1
                self._held[dst].append((meta.plane, self._seq, src, meta, payload))
                return True
            self.eps[dst].receive_packet(payload, meta, now=self.now)
        self.flush()
        return True

    def _wake_time(self, name: str) -> float | None:
        """When `name` next has work of its own: its timer, or the end of a stall that holds
        input; a stalled endpoint's timer waits for the stall's end."""
        times = [self.eps[name].get_timer()]
        if self._held[name]:
            times.append(self.now)
        t = min((x for x in times if x is not None), default=None)
        if t is not None:
            end = self._stalled_until(name, max(t, self.now))
            if end is not None:
                t = end
        return t

    def run(self, until: float = 1.0, stop=None, max_steps: int = 2_000_000) -> None:
        """Run until idle, `until` (s), or stop() is true."""
        for _ in range(max_steps):
            if self.now >= until or (stop is not None and stop()):
                return
            if not self.step():
                return
        raise AssertionError("harness exceeded max_steps (livelock?)")

    def of_type(self, name: str, cls: type) -> list:
        return [e for e in self.events[name] if isinstance(e, cls)]

    def timeline(self, name: str) -> list[tuple[float, Event]]:
        """(time taken, event) of each of `name`'s events, in order."""
        return list(zip(self.event_times[name], self.events[name], strict=True))


def pattern(n: int, seed: int = 0) -> bytes:
    return random.Random(seed).randbytes(n)
