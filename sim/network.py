"""Links, egress ports and switches of a fabric.topology.Fabric, as discrete events.

Model (documented here because tests and scenario figures depend on it):
- Every switch runs the software switch's pipeline (softswitch.pipeline, the P4 program in
  Python) on the tables the controller computes for it (controller.tables.switch_tables),
  written through p4rt.codec into an in-process device state: the simulator, the software
  switch and BMv2 are held to the same golden corpus. Trimming and ECN marking therefore
  follow the P4 program, including its one-queueing-delay-stale depth register.
- Every link is full duplex; each direction is an egress Port with its own rate (bits/s),
  propagation delay and queues. Serialization takes len(frame) * 8 / rate.
- A switch port has the two priority FIFOs the P4 program selects between (high: control and
  trimmed; data: everything else), served strictly by priority. Queue depth counts packets
  *waiting*, not the one on the wire; a frame meeting a full FIFO is tail-dropped. The
  pipeline's egress step runs when a frame starts serialization, with the depth it leaves.
  Host NIC ports have the same two queues, unbounded, and never trim or mark.
- A down link drops whatever is queued, on the wire or offered to it, silently. Random loss
  drops a frame when it is put on the wire, with its port's probability: set_loss sets both
  directions of a link, set_port_loss one (the emulation's loss is a switch port's egress).
- A switch that goes down loses its queues and its table state; when it comes back the
  controller's tables are written again (a reinstall), with fresh registers and counters.
"""

from __future__ import annotations

import random
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from controller.tables import (
    DEFAULT_ECN_THRESHOLD,
    DEFAULT_TRIM_THRESHOLD,
    PortThresholds,
    SwitchTables,
    switch_tables,
)
from fabric.topology import Fabric, Switch, TopologyError
from p4rt import names as N
from p4rt.codec import Codec
from sim.engine import EventLoop
from sim.errors import SimError
from softswitch.errors import P4RTError
from softswitch.pipeline import Pipeline
from softswitch.preload import Preloader
from softswitch.queues import DEFAULT_DEPTH
from softswitch.store import DeviceState
from wire.layout import HIGH_PRIORITY_DSCPS, OUTER, TC_SHIFT, TRIMMABLE_DSCPS

_TC_BYTE_SHIFT = TC_SHIFT - 16  # traffic class inside the first 16 bits of the IPv6 header


class NetworkConfigError(SimError, ValueError):
    """Invalid simulator parameters; the message says what to change."""


@dataclass(frozen=True)
class QueueConfig:
    """Per switch egress port, in packets; thresholds go into the switches' port_config_table.
    The defaults are the emulated switches': simple_switch's queue depth and the
    controller's thresholds."""

    capacity: int = DEFAULT_DEPTH
    ecn_threshold: int = DEFAULT_ECN_THRESHOLD
    trim_threshold: int = DEFAULT_TRIM_THRESHOLD
    priority_capacity: int = 512
    # None: one serializer per port, the high-priority queue served first at the port's rate
    # (a real link). A number: the high-priority queue has a serializer of its own at that
    # many times the port's rate and takes no time from data, as the emulation's ports and
    # NICs are shaped (emulation.nicpacing.CONTROL_RATE_FACTOR); bench.simulated.agreement sets it.
    control_rate_factor: float | None = None

    def __post_init__(self) -> None:
        if self.capacity < 1 or self.priority_capacity < 1:
            raise NetworkConfigError("queue capacities must be at least 1 packet")
        if self.control_rate_factor is not None and not self.control_rate_factor > 0:
            raise NetworkConfigError("control_rate_factor must be None or > 0")
        if not 1 <= self.trim_threshold <= self.capacity:
            raise NetworkConfigError(f"trim_threshold must be 1..capacity ({self.capacity})")
        if not 1 <= self.ecn_threshold <= self.trim_threshold:
            raise NetworkConfigError(f"ecn_threshold must be 1..trim_threshold "
                                     f"({self.trim_threshold}): ECN comes before trimming")

    def thresholds(self) -> PortThresholds:
        return PortThresholds(ecn=self.ecn_threshold, trim=self.trim_threshold)


class HostHandler(Protocol):
    """Receives a host's frames and NIC port state (the endpoint adapter, or a test sink)."""

    def on_frame(self, plane: int, frame: bytes) -> None: ...

    def on_nic_state(self, plane: int, up: bool) -> None: ...


class LinkState:
    """One cable; `epoch` changes on every down so frames in flight across a flap are lost."""

    __slots__ = ("a", "b", "up", "epoch", "ports")

    def __init__(self, a: str, b: str) -> None:
        self.a, self.b = a, b
        self.up = True
        self.epoch = 0
        self.ports: list[Port] = []


def frame_priority(frame: bytes) -> int:
    """The queue a host NIC puts a frame in: the DSCP classes the switches use."""
    dscp = ((frame[OUTER] << 8 | frame[OUTER + 1]) >> _TC_BYTE_SHIFT & 0xFF) >> 2
    return N.PRIORITY_HIGH if dscp in HIGH_PRIORITY_DSCPS else N.PRIORITY_DATA


def frame_dscp(frame: bytes) -> int:
    return ((frame[OUTER] << 8 | frame[OUTER + 1]) >> _TC_BYTE_SHIFT & 0xFF) >> 2


class Port:
    """One direction of a link: two priority FIFOs of (frame, enq_qdepth), a serializer and the
    counters tests look at."""

    def __init__(self, net: Network, node: Node, number: int, link: LinkState, *,
                 switch_port: bool) -> None:
        self.net, self.node, self.number, self.link = net, node, number, link
        self.switch_port = switch_port
        self.rate_bps = net.rate_bps
        self.delay_s = net.delay_s
        self.loss = 0.0  # probability that a frame put on the wire is lost
        self.peer: Port | None = None
        self.fifos: tuple[deque, deque] = (deque(), deque())  # indexed by priority
        self.busy_until = 0.0
        self.wake_pending = False
        self.high_busy_until = 0.0  # the high queue's own serializer (control_rate_factor)
        self.high_wake_pending = False
        self.tx_packets = 0
        self.tx_bytes = 0
        self.data_enqueued = 0  # trimmable (MRC data) frames accepted into the data queue
        self.max_data_queue = 0

    def send(self, frame: bytes, priority: int | None = None) -> None:
        """Queue a frame; a switch passes the pipeline's priority, a host NIC derives it."""
        net = self.net
        if not self.link.up:
            net.sim_drops["link_down"] += 1
            return
        if priority is None:
            priority = frame_priority(frame)
        fifo = self.fifos[priority]
        depth = len(fifo)
        if self.switch_port:
            q = net.queues
            if priority == N.PRIORITY_DATA:
                if depth >= q.capacity:
                    net.sim_drops["tail_drop"] += 1
                    return
                if frame_dscp(frame) in TRIMMABLE_DSCPS:
                    self.data_enqueued += 1
                if depth + 1 > self.max_data_queue:
                    self.max_data_queue = depth + 1
            elif depth >= q.priority_capacity:
                net.sim_drops["priority_full"] += 1
                return
        fifo.append((frame, depth))
        loop = net.loop
        if priority == N.PRIORITY_HIGH and net.queues.control_rate_factor is not None:
            if not self.high_wake_pending:
                self.high_wake_pending = True
                loop.at(max(loop.now, self.high_busy_until), self._wake_high)
            return
        if loop.now >= self.busy_until and not self.wake_pending:
            self._wake()
        elif not self.wake_pending:
            self.wake_pending = True
            loop.at(self.busy_until, self._wake)

    def _wake_high(self) -> None:
        """The high queue's own serializer (QueueConfig.control_rate_factor)."""
        self.high_wake_pending = False
        fifo = self.fifos[N.PRIORITY_HIGH]
        if not fifo:
            return
        factor = self.net.queues.control_rate_factor
        assert factor is not None
        self.high_busy_until = self._start(N.PRIORITY_HIGH, fifo, self.rate_bps * factor)
        if fifo:
            self.high_wake_pending = True
            self.net.loop.at(self.high_busy_until, self._wake_high)

    def _wake(self) -> None:
        """Start the next frame (priority first); re-arm for when the wire frees up."""
        self.wake_pending = False
        data = self.fifos[N.PRIORITY_DATA]
        # with a control class of its own the high queue is _wake_high's, not this serializer's
        high = self.fifos[N.PRIORITY_HIGH] if self.net.queues.control_rate_factor is None else ()
        if high:
            priority, fifo = N.PRIORITY_HIGH, high
        elif data:
            priority, fifo = N.PRIORITY_DATA, data
        else:
            return
        end = self.busy_until = self._start(priority, fifo, self.rate_bps)
        if high or data:
            self.wake_pending = True
            self.net.loop.at(end, self._wake)

    def _start(self, priority: int, fifo: deque, rate_bps: float) -> float:
        """Put fifo's next frame on the wire at rate_bps; returns when it is out."""
        frame, enq_qdepth = fifo.popleft()
        if self.switch_port:
            self.node.pipeline.egress(  # type: ignore[attr-defined]
                self.number, priority, enq_qdepth, len(fifo))
        net = self.net
        loop = net.loop
        end = loop.now + len(frame) * 8 / rate_bps
        self.tx_packets += 1
        self.tx_bytes += len(frame)
        link = self.link
        if self.loss and net.rng.random() < self.loss:
            net.sim_drops["random_loss"] += 1
        else:
            loop.at(end + self.delay_s, self.peer._arrive, frame, link.epoch)  # type: ignore[union-attr]
        return end

    def _arrive(self, frame: bytes, epoch: int) -> None:
        link = self.link
        if not link.up or link.epoch != epoch:
            self.net.sim_drops["link_down"] += 1
            return
        self.node.receive(frame, self)

    def flush(self) -> int:
        lost = sum(len(f) for f in self.fifos)
        for fifo in self.fifos:
            fifo.clear()
        return lost


class Node:
    def __init__(self, net: Network, name: str) -> None:
        self.net, self.name = net, name
        self.ports: dict[int, Port] = {}

    def receive(self, frame: bytes, port: Port) -> None:
        raise NotImplementedError


class SwitchNode(Node):
    """A switch running the P4 program's Python pipeline on the controller's tables."""

    def __init__(self, net: Network, switch: Switch) -> None:
        super().__init__(net, switch.name)
        self.switch = switch
        self.up = True
        self.state = net.program(switch)
        self.pipeline = Pipeline(self.state)
        self.forwarded = 0

    def receive(self, frame: bytes, port: Port) -> None:
        if not self.up:
            self.net.sim_drops["switch_down"] += 1
            return
        result = self.pipeline.ingress(frame, port.number)
        if result is None:
            return  # counted by the pipeline's drop counter
        out_port, priority, out = result
        egress = self.ports.get(out_port)
        if egress is None:
            self.net.sim_drops["no_port"] += 1
            return
        self.forwarded += 1
        egress.send(out, priority)

    def reboot(self) -> None:
        """A switch back from a reboot: empty state, then the controller's reinstall."""
        self.state = self.net.program(self.switch)
        self.pipeline = Pipeline(self.state)


class HostNode(Node):
    """A host's NICs (port number = plane); frames go to whatever handler is attached."""

    def __init__(self, net: Network, name: str, index: int) -> None:
        super().__init__(net, name)
        self.index = index
        self.handler: HostHandler | None = None

    def receive(self, frame: bytes, port: Port) -> None:
        if self.handler is None:
            self.net.sim_drops["no_handler"] += 1
            return
        self.handler.on_frame(port.number, frame)

    def send(self, plane: int, frame: bytes) -> None:
        self.ports[plane].send(frame)


class Network:
    """The fabric as nodes and ports; also the failure-injection surface."""

    def __init__(self, fabric: Fabric, loop: EventLoop, *, rate_bps: float = 10e9,
                 delay_s: float = 1e-6, queues: QueueConfig | None = None, seed: int = 0,
                 program: Callable[[Switch], DeviceState] | None = None) -> None:
        """`program` replaces the controller's tables (the golden corpus runs its own)."""
        if rate_bps <= 0 or delay_s < 0:
            raise NetworkConfigError("rate_bps must be > 0 and delay_s >= 0")
        self.fabric, self.loop = fabric, loop
        self.rate_bps, self.delay_s = rate_bps, delay_s
        self.queues = queues or QueueConfig()
        self.rng = random.Random(seed)
        self.sim_drops: Counter[str] = Counter()
        self.current_tables: dict[str, SwitchTables] = {}  # converged away from the healthy
        self.link_listeners: list[Callable[[LinkState, bool], None]] = []
        self.rate_changes = 0  # link rates set since the start: RTT figures made before are stale
        self.codec = Codec.committed()
        self.preloader = Preloader(self.codec)
        self.program = program or self.controller_tables
        self.switches = {s.name: SwitchNode(self, s) for s in fabric.switches}
        self.hosts = [HostNode(self, fabric.host_name(h), h) for h in range(fabric.hosts)]
        self.nodes: dict[str, Node] = {**self.switches, **{h.name: h for h in self.hosts}}
        self.links: dict[frozenset[str], LinkState] = {}
        for cable in fabric.links:
            self._wire(cable.a, cable.a_port, cable.b, cable.b_port)

    def tables_of(self, switch: Switch) -> SwitchTables:
        """What the controller wants `switch` to hold now: its tables as last converged
        (sim.routing), else those of the healthy fabric."""
        tables = self.current_tables.get(switch.name)
        if tables is None:
            try:
                tables = switch_tables(self.fabric, switch, thresholds=self.queues.thresholds())
            except TopologyError as exc:
                raise NetworkConfigError(str(exc)) from None
        return tables

    def controller_tables(self, switch: Switch) -> DeviceState:
        """A fresh device state holding the controller's tables for `switch`, installed
        without P4Runtime messages (softswitch.preload: each distinct entity compiled once
        per fabric)."""
        tables = self.tables_of(switch)
        state = DeviceState(self.codec.index)
        try:
            self.preloader.install(state, tables.entities())
        except P4RTError as exc:
            raise NetworkConfigError(f"{switch.name}: tables rejected: {exc}") from None
        return state

    def _wire(self, a: str, a_port: int, b: str, b_port: int) -> None:
        state = LinkState(a, b)
        self.links[frozenset((a, b))] = state
        ends = []
        for name, number in ((a, a_port), (b, b_port)):
            node = self.nodes[name]
            port = Port(self, node, number, state, switch_port=isinstance(node, SwitchNode))
            node.ports[number] = port
            ends.append(port)
        ends[0].peer, ends[1].peer = ends[1], ends[0]
        state.ports = ends

    # --- lookup -----------------------------------------------------------------------------
    def link(self, a: str, b: str) -> LinkState:
        try:
            return self.links[frozenset((a, b))]
        except KeyError:
            raise NetworkConfigError(f"no link between {a} and {b} in {self.fabric}") from None

    def host_link(self, host: int, plane: int) -> LinkState:
        nic = self.fabric.nic(host, plane)
        return self.link(self.fabric.host_name(host), self.fabric.t0(plane, nic.t0).name)

    def attach(self, host: int, handler: HostHandler) -> None:
        self.hosts[host].handler = handler

    # --- configuration and failure injection (call now, or schedule with loop.at) ------------
    def set_link_rate(self, link: LinkState, rate_bps: float) -> None:
        if rate_bps <= 0:
            raise NetworkConfigError("link rate must be > 0")
        for port in link.ports:
            port.rate_bps = rate_bps
        self.rate_changes += 1

    def set_loss(self, link: LinkState, probability: float) -> None:
        """Random loss in both directions of a link."""
        for port in link.ports:
            self.set_port_loss(port, probability)

    def set_port_loss(self, port: Port, probability: float) -> None:
        """Random loss on what one port puts on the wire (one direction of its link)."""
        if not 0.0 <= probability < 1.0:
            raise NetworkConfigError(f"loss probability must be in [0, 1), got {probability}")
        port.loss = probability

    def set_link_up(self, link: LinkState, up: bool) -> None:
        if link.up == up:
            return
        link.up = up
        for listener in self.link_listeners:  # the baseline's routing (sim.routing)
            listener(link, up)
        if not up:
            link.epoch += 1
            for port in link.ports:
                self.sim_drops["link_down"] += port.flush()
        for port in link.ports:
            node = port.node
            if isinstance(node, HostNode) and node.handler is not None:
                node.handler.on_nic_state(port.number, up)

    def flap(self, link: LinkState, down_at: float, up_at: float) -> None:
        if up_at <= down_at:
            raise NetworkConfigError("a flap must come back up after it goes down")
        self.loop.at(down_at, self.set_link_up, link, False)
        self.loop.at(up_at, self.set_link_up, link, True)

    def set_switch_up(self, name: str, up: bool) -> None:
        """A dead switch loses its queues and takes its cables down (hosts see loss of signal)."""
        node = self.switches[name]
        if up and not node.up:
            node.reboot()
        node.up = up
        for port in node.ports.values():
            self.set_link_up(port.link, up)

    @property
    def trims(self) -> int:
        return sum(sum(cell[0] for cell in sw.pipeline.trims) for sw in self.switches.values())

    @property
    def ecn_marks(self) -> int:
        return sum(sum(cell[0] for cell in sw.pipeline.ecn_marks)
                   for sw in self.switches.values())

    @property
    def drops(self) -> Counter[str]:
        """Losses by cause: the simulator's (links, queues) and the pipelines' drop reasons."""
        out = Counter(self.sim_drops)
        for sw in self.switches.values():
            for reason, count in sw.pipeline.drop_stats().items():
                if count:
                    out[reason.lower()] += count
        return out

    def counters(self) -> dict[str, object]:
        return {"trims": self.trims, "ecn_marks": self.ecn_marks,
                "drops": dict(sorted(self.drops.items()))}
