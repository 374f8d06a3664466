"""A tiny deterministic two-endpoint harness for the sans-IO core.

Not a fabric simulator: each (endpoint, plane, spine) route is just a delay line with seeded
faults (drop, duplicate, reorder via jitter, trim, CE mark) and a kill switch.
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
        self._queue: list[tuple[float, int, str, str, RxMeta, bytes]] = []
        self._seq = 0
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
        for _ in range(copies):
            delay = BASE_RTT / 2 + rng.random() * f.jitter + link.route_delay.get(tx.route, 0.0)
            self._seq += 1
            heapq.heappush(self._queue, (self.now + delay, self._seq, dst, src, meta, payload))

    def flush(self) -> None:
        for name, ep in self.eps.items():
            for tx in ep.packets_to_send(now=self.now):
                self._transmit(name, tx)
            while (ev := ep.next_event()) is not None:
                self.events[name].append(ev)

    def step(self) -> bool:
        """Advance to the next delivery or timer; False when nothing is left to do."""
        self.flush()
        timers = [t for t in (ep.get_timer() for ep in self.eps.values()) if t is not None]
        t_net = self._queue[0][0] if self._queue else None
        t_timer = min(timers, default=None)
        if t_net is None and t_timer is None:
            return False
        if t_timer is not None and (t_net is None or t_timer < t_net):
            self.now = max(self.now, t_timer)
            for ep in self.eps.values():
                timer = ep.get_timer()
                if timer is not None and timer <= self.now:
                    ep.handle_timer(now=self.now)
        else:
            t, _, dst, src, meta, payload = heapq.heappop(self._queue)
            self.now = max(self.now, t)
            self.eps[dst].receive_packet(payload, meta, now=self.now)
        self.flush()
        return True

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


def pattern(n: int, seed: int = 0) -> bytes:
    return random.Random(seed).randbytes(n)
