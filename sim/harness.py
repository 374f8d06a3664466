"""Transfers between simulated endpoints: setup, completion tracking, verification, figures.

Definitions used in every scenario result (the README and tests rely on them):
- duration_s: simulated time from the first post_write until every write of every transfer
  is complete at both ends (sender's WriteCompleted and receiver's MessageReceived).
- goodput_bps: transferred bytes * 8 / duration_s (payload bytes only, each counted once).
- capacity_bps: the time-average over [start, end] of the max-flow from the senders' NICs to
  the receivers' NICs over the live fabric (metrics.capacity_bps), re-evaluated whenever a
  failure is injected. goodput_ratio = goodput_bps / capacity_bps.
- base_rtt_s: unloaded RTT of the longest path of the first transfer: a full-MTU data frame
  out and a SACK frame back, store-and-forward at every hop.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from controller.convergence import DEFAULT_DELAY
from fabric.topology import Fabric
from host_agent.core import (
    DEFAULT_MTU,
    MIN_QPN,
    Endpoint,
    EndpointConfig,
    Event,
    EvStateChanged,
    MessageReceived,
    Nscc,
    NsccConfig,
    PeerPlaneChanged,
    WriteCompleted,
    WriteFailed,
)
from host_agent.modes import MRC, AgentMode, roce_endpoint_config, stripe
from sim import metrics, routing
from sim.engine import EventLoop
from sim.host import HostAdapter
from sim.network import Network, QueueConfig
from wire import BTH_LEN, CC_STATE_LEN, DATA_HEADERS_LEN, FRAME_HEADERS_LEN, SACK_LEN


def endpoint_config(mode: AgentMode, planes: int, rate_bps: float, rtt: float) -> EndpointConfig:
    """Timers scaled to the fabric's RTT; NSCC window sized to the host's summed NIC rate
    (a RoCE-like QP: one NIC's rate, and the agent's RoCE-like configuration)."""
    if not mode.is_mrc:
        return roce_endpoint_config(rtt, rate_bps)
    line_rate = planes * rate_bps
    nscc = NsccConfig.for_link(line_rate, rtt, mtu=DEFAULT_MTU)
    return EndpointConfig.for_base_rtt(rtt, line_rate, cc_factory=functools.partial(Nscc, nscc))


@dataclass(frozen=True)
class SimSettings:
    rate_bps: float = 10e9
    delay_s: float = 1e-6
    queues: QueueConfig = field(default_factory=QueueConfig)
    seed: int = 1
    chunk: int = 256 * 1024  # bytes per post_write; the last write of a transfer has no imm
    contender: str = MRC  # an agent mode (host_agent.modes): mrc, roce, roce:K, single_port
    convergence_delay_s: float = DEFAULT_DELAY  # the baseline's routing hold timer (sim.routing)


@dataclass
class Transfer:
    sender: int
    receiver: int
    data: bytes
    send_qpn: int  # lane 0's QPs
    recv_qpn: int
    va: int = 0
    rkey: int = 0
    buffer: bytearray = field(default_factory=bytearray)
    writes: int = 0
    completed: int = 0
    received: int = 0
    received_bytes: int = 0
    failed: list[int] = field(default_factory=list)
    done_at: float | None = None
    progress: list[tuple[float, int]] = field(default_factory=list)  # (time, bytes received)
    lanes: list[tuple[int, int]] = field(default_factory=list)  # (send QPN, receive QPN) per QP

    @property
    def done(self) -> bool:
        return self.completed == self.writes and self.received == self.writes


class Harness:
    def __init__(self, fabric: Fabric, settings: SimSettings,
                 config: EndpointConfig | None = None) -> None:
        self.fabric, self.settings = fabric, settings
        self.mode = AgentMode.parse(settings.contender, fabric.planes)
        self.loop = EventLoop()
        self.net = Network(fabric, self.loop, rate_bps=settings.rate_bps, delay_s=settings.delay_s,
                           queues=settings.queues, seed=settings.seed)
        self.convergence = routing.converge(self.net, settings.convergence_delay_s)
        self.rng = random.Random(settings.seed)
        self.config = config
        self.adapters: dict[int, HostAdapter] = {}
        self.transfers: list[Transfer] = []
        self._by_qpn: dict[tuple[int, int], Transfer] = {}
        self._next_qpn: dict[int, int] = {}
        self.pending = 0
        self.start_time = 0.0
        self.base_rtt = 0.0
        self.end_time: float | None = None
        self.capacity_log: list[tuple[float, float]] = []
        # (time, host, peer, plane, up) for every PeerPlaneChanged an endpoint reported
        self.peer_plane_events: list[tuple[float, int, int, int, bool]] = []
        self.ev_changes = 0
        self.listeners: list[Callable[[float, HostAdapter, Event], None]] = []
        self.on_idle: Callable[[], None] | None = None  # every transfer done: post more?
        self.planned_bytes = 0  # bytes the whole run moves, when more than the transfers hold
        self.starting: list[Transfer] | None = None  # what start() posts; None: every transfer
        self._rtt_table: metrics.RttTable | None = None
        # builds each host's endpoint instead of Endpoint(...): rubrics.remote_core's, whose
        # endpoints live in a sandbox (set before the first transfer)
        self.endpoints: Callable[[Harness, int], Any] | None = None

    # --- setup ------------------------------------------------------------------------------
    def adapter(self, host: int) -> HostAdapter:
        if host not in self.adapters:
            ep = self.endpoints(self, host) if self.endpoints is not None else Endpoint(
                self.config or self.fabric_config(host), planes=self.fabric.planes,
                name=self.fabric.host_name(host), seed=self.endpoint_seed(host))
            self.adapters[host] = HostAdapter(self.net, host, ep, self._on_event, mode=self.mode)
        return self.adapters[host]

    def fabric_config(self, host: int) -> EndpointConfig:
        """endpoint_config for `host` on this fabric, at its RTT."""
        return endpoint_config(self.mode, self.fabric.planes, self.settings.rate_bps,
                               self.base_rtt_for(host))

    def endpoint_seed(self, host: int) -> int:
        return self.settings.seed * 1_000_003 + host

    def base_rtt_for(self, host: int) -> float:
        """The longest unloaded RTT from `host` to any other host (the endpoint's RTT hint)."""
        if self.fabric.hosts < 2:
            return self.path_rtt(host, host)
        data, ack = self._frame_sizes()
        table = self._rtt_table
        if table is None or not table.current(self.net, data, ack):
            table = self._rtt_table = metrics.RttTable(self.net, data, ack)
        return table.longest_rtt_from(host)

    def path_rtt(self, src: int, dst: int) -> float:
        data, ack = self._frame_sizes()
        return max(metrics.path_rtt(self.net, p, data, ack)
                   for p in self.fabric.all_paths(src, dst))

    def _frame_sizes(self) -> tuple[int, int]:
        """Bytes of a full data frame and of a SACK frame: what an RTT is measured with."""
        return (DATA_HEADERS_LEN + self.adapter_mtu(),
                FRAME_HEADERS_LEN + BTH_LEN + SACK_LEN + CC_STATE_LEN)

    def adapter_mtu(self) -> int:
        return (self.config or EndpointConfig()).mtu

    def add_transfer(self, sender: int, receiver: int, size: int) -> Transfer:
        if size <= 0:
            raise ValueError(f"transfer size must be positive, got {size}")
        tx, rx = self.adapter(sender), self.adapter(receiver)
        lanes = [(self._qpn(sender), self._qpn(receiver)) for _ in range(self.mode.qps)]
        t = Transfer(sender, receiver, self.rng.randbytes(size), *lanes[0], lanes=lanes)
        region = rx.endpoint.register_memory(size)
        t.va, t.rkey, t.buffer = region.va, region.rkey, region.buffer
        for lane, (sq, rq) in enumerate(lanes):
            tx.connect(receiver, sq, rq, lane=lane)
            rx.connect(sender, rq, sq, lane=lane)
            self._by_qpn[(sender, sq)] = t
            self._by_qpn[(receiver, rq)] = t
        self.transfers.append(t)
        return t

    def _qpn(self, host: int) -> int:
        qpn = self._next_qpn.get(host, MIN_QPN)
        self._next_qpn[host] = qpn + 1
        return qpn

    # --- running ----------------------------------------------------------------------------
    def start(self) -> None:
        now = self.loop.now
        self.start_time = now
        self.note_capacity()
        first = self.transfers if self.starting is None else self.starting
        for t in first:
            self._post(t, now)
            self.pending += 1
        for t in first:
            self.adapters[t.sender].wake()

    def _post(self, t: Transfer, now: float) -> None:
        """Post a transfer's writes, `chunk` bytes each; with several QPs (roce:K) each write
        is striped over them in MTU-aligned parts, as the agent does, and carries no imm."""
        ep = self.adapters[t.sender].endpoint
        chunk, size = self.settings.chunk, len(t.data)
        for i, off in enumerate(range(0, size, chunk)):
            length = min(chunk, size - off)
            if len(t.lanes) == 1:
                parts = [(0, length)]
            else:
                parts = stripe(length, len(t.lanes), self.adapter_mtu())
            for lane, (part, part_len) in enumerate(parts):
                imm = i if len(t.lanes) == 1 and off + chunk < size else None
                at = off + part
                ep.post_write(t.lanes[lane][0], t.data[at:at + part_len], t.va + at, t.rkey,
                              imm=imm, now=now)
                t.writes += 1

    def repost(self, t: Transfer, data: bytes) -> None:
        """Send `t` again with new data into the same receive buffer, on the same QPs (a
        collective's next phase)."""
        if len(data) != len(t.buffer):
            raise ValueError(f"repost of {len(data)} bytes into a {len(t.buffer)}-byte buffer")
        t.data, t.writes, t.completed, t.received, t.received_bytes = data, 0, 0, 0, 0
        t.done_at = None
        t.progress.clear()
        self._post(t, self.loop.now)
        self.pending += 1
        self.adapters[t.sender].wake()

    def run(self, time_limit: float) -> bool:
        return self.loop.run(until=time_limit, done=lambda: self.pending == 0)

    def at(self, when: float, action: Callable[[], Any]) -> None:
        """Inject a change (failure, repair) at `when` and re-evaluate the usable capacity."""
        def fire() -> None:
            action()
            self.note_capacity()
        self.loop.at(when, fire)

    def note_capacity(self) -> None:
        senders = {t.sender for t in self.transfers}
        receivers = {t.receiver for t in self.transfers}
        capacity = metrics.capacity_bps(self.net, senders, receivers)
        self.capacity_log.append((self.loop.now, capacity))

    def _on_event(self, now: float, adapter: HostAdapter, event: Event) -> None:
        for listener in self.listeners:
            listener(now, adapter, event)
        if isinstance(event, EvStateChanged):
            self.ev_changes += 1
            return
        if isinstance(event, PeerPlaneChanged):
            self.peer_plane_events.append((now, adapter.host, event.peer, event.plane, event.up))  # type: ignore[arg-type]
            return
        if not isinstance(event, (WriteCompleted, MessageReceived, WriteFailed)):
            return
        t = self._by_qpn.get((adapter.host, event.qpn))
        if t is None:
            return
        was_done = t.done
        if isinstance(event, WriteCompleted):
            t.completed += 1
        elif isinstance(event, WriteFailed):
            t.failed.append(event.reason)
            t.completed += 1
        else:
            t.received += 1
            t.received_bytes += event.length
            t.progress.append((now, t.received_bytes))
        if t.done and not was_done:
            t.done_at = now
            self.pending -= 1
            if self.pending == 0:
                self.end_time = now
                if self.on_idle is not None:
                    self.on_idle()

    # --- results ----------------------------------------------------------------------------
    def verified(self) -> bool:
        return all(t.done and not t.failed and bytes(t.buffer) == t.data for t in self.transfers)

    def mean_capacity(self, end: float) -> float:
        log = self.capacity_log
        span = end - self.start_time
        if span <= 0:
            return log[0][1]
        area = 0.0
        for i, (when, capacity) in enumerate(log):
            until = log[i + 1][0] if i + 1 < len(log) else end
            area += capacity * (min(until, end) - min(when, end))
        return area / span

    def endpoint_totals(self) -> dict[str, int]:
        totals: dict[str, int] = {}
        for a in self.adapters.values():  # the counters alone: stats() names every EV's route
            for key, value in a.endpoint.counters().items():
                if isinstance(value, int):
                    totals[key] = totals.get(key, 0) + value
        return totals
