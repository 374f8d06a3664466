"""Links, egress ports and uSID switches of a fabric.topology.Fabric, as discrete events.

Model (documented here because tests and scenario figures depend on it):
- Every link is full duplex; each direction is an egress Port with its own rate (bits/s),
  propagation delay and queues. Serialization takes len(frame) * 8 / rate.
- A switch port has a strict-priority queue (DSCP CONTROL, TRIMMED, TRIMMED_LASTHOP) and a
  data queue (everything else). Queue occupancy is the number of packets *waiting*, not
  counting the one on the wire. A TRIMMABLE(_RETX) frame longer than the data headers that
  would join a data queue holding >= trim_threshold packets is trimmed (wire-format §5) and
  goes to the priority queue; any other data frame meeting a full data queue is tail-dropped.
  An ECT frame joining a data queue holding >= ecn_threshold packets is marked CE, except on
  host-facing ports. Host NIC ports have the same two queues, unbounded, and never trim/mark.
- A down link drops whatever is queued, on the wire or offered to it, silently. Random loss
  drops a frame when it is put on the wire, with the link's probability, in both directions.
"""

from __future__ import annotations

import random
from collections import Counter, deque
from dataclasses import dataclass
from typing import Protocol

from fabric.topology import Fabric, Switch, shift_usid, usid_prefix
from sim import frames
from sim.engine import EventLoop
from wire import (
    DATA_HEADERS_LEN,
    DSCP_CONTROL,
    DSCP_TRIMMED,
    DSCP_TRIMMED_LASTHOP,
)

PRIORITY_DSCPS = frozenset({DSCP_CONTROL, DSCP_TRIMMED, DSCP_TRIMMED_LASTHOP})


class NetworkConfigError(ValueError):
    """Invalid simulator parameters; the message says what to change."""


@dataclass(frozen=True)
class QueueConfig:
    """Per switch egress port, in packets."""

    capacity: int = 64
    ecn_threshold: int = 8
    trim_threshold: int = 32
    priority_capacity: int = 512

    def __post_init__(self) -> None:
        if self.capacity < 1 or self.priority_capacity < 1:
            raise NetworkConfigError("queue capacities must be at least 1 packet")
        if not 0 <= self.ecn_threshold <= self.capacity:
            raise NetworkConfigError(f"ecn_threshold must be 0..capacity ({self.capacity})")
        if not 0 <= self.trim_threshold <= self.capacity:
            raise NetworkConfigError(f"trim_threshold must be 0..capacity ({self.capacity})")


class HostHandler(Protocol):
    """Receives a host's frames and NIC port state (the endpoint adapter, or a test sink)."""

    def on_frame(self, plane: int, frame: bytearray) -> None: ...

    def on_nic_state(self, plane: int, up: bool) -> None: ...


class LinkState:
    """One cable; `epoch` changes on every down so frames in flight across a flap are lost."""

    __slots__ = ("a", "b", "up", "epoch", "loss", "ports")

    def __init__(self, a: str, b: str) -> None:
        self.a, self.b = a, b
        self.up = True
        self.epoch = 0
        self.loss = 0.0
        self.ports: list[Port] = []


class Port:
    """One direction of a link: queues, serializer and the counters tests look at."""

    def __init__(self, net: Network, node: Node, number: int, link: LinkState, *,
                 switch_port: bool, host_facing: bool) -> None:
        self.net, self.node, self.number, self.link = net, node, number, link
        self.switch_port, self.host_facing = switch_port, host_facing
        self.rate_bps = net.rate_bps
        self.delay_s = net.delay_s
        self.peer: Port | None = None
        self.data: deque[bytearray] = deque()
        self.prio: deque[bytearray] = deque()
        self.busy_until = 0.0
        self.wake_pending = False
        self.tx_packets = 0
        self.tx_bytes = 0
        self.data_enqueued = 0  # trimmable (MRC data) frames accepted into the data queue
        self.max_data_queue = 0

    def send(self, frame: bytearray) -> None:
        net = self.net
        if not self.link.up:
            net.drops["link_down"] += 1
            return
        q = net.queues
        tos = frames.traffic_class(frame)
        dscp = tos >> 2
        if dscp in PRIORITY_DSCPS:
            if self.switch_port and len(self.prio) >= q.priority_capacity:
                net.drops["priority_full"] += 1
                return
            self.prio.append(frame)
        elif not self.switch_port:
            self.data.append(frame)
        else:
            depth = len(self.data)
            trimmable = dscp in frames.TRIMMABLE_DSCPS
            if trimmable and depth >= q.trim_threshold and len(frame) > DATA_HEADERS_LEN:
                if len(self.prio) >= q.priority_capacity:
                    net.drops["priority_full"] += 1
                    return
                new = DSCP_TRIMMED_LASTHOP if self.host_facing else DSCP_TRIMMED
                self.prio.append(frames.trim(frame, new))
                net.trims += 1
            elif depth >= q.capacity:
                net.drops["tail_drop"] += 1
                return
            else:
                ect = (tos & 3) in frames.ECT_CODES
                if ect and not self.host_facing and depth >= q.ecn_threshold:
                    frames.mark_ce(frame)
                    net.ecn_marks += 1
                self.data.append(frame)
                if trimmable:
                    self.data_enqueued += 1
                if depth + 1 > self.max_data_queue:
                    self.max_data_queue = depth + 1
        loop = net.loop
        if loop.now >= self.busy_until and not self.wake_pending:
            self._wake()
        elif not self.wake_pending:
            self.wake_pending = True
            loop.at(self.busy_until, self._wake)

    def _wake(self) -> None:
        """Start the next frame (priority first); re-arm for when the wire frees up."""
        self.wake_pending = False
        frame = self.prio.popleft() if self.prio else (self.data.popleft() if self.data else None)
        if frame is None:
            return
        net = self.net
        loop = net.loop
        end = loop.now + len(frame) * 8 / self.rate_bps
        self.busy_until = end
        self.tx_packets += 1
        self.tx_bytes += len(frame)
        link = self.link
        if link.loss and net.rng.random() < link.loss:
            net.drops["random_loss"] += 1
        else:
            loop.at(end + self.delay_s, self.peer._arrive, frame, link.epoch)  # type: ignore[union-attr]
        if self.prio or self.data:
            self.wake_pending = True
            loop.at(end, self._wake)

    def _arrive(self, frame: bytearray, epoch: int) -> None:
        link = self.link
        if not link.up or link.epoch != epoch:
            self.net.drops["link_down"] += 1
            return
        self.node.receive(frame, self)

    def flush(self) -> int:
        lost = len(self.data) + len(self.prio)
        self.data.clear()
        self.prio.clear()
        return lost


class Node:
    def __init__(self, net: Network, name: str) -> None:
        self.net, self.name = net, name
        self.ports: dict[int, Port] = {}

    def receive(self, frame: bytearray, port: Port) -> None:
        raise NotImplementedError


class SwitchNode(Node):
    """F3216 uN: match block:own-uSID, shift, look the next uSID up in a static neighbour table."""

    def __init__(self, net: Network, switch: Switch) -> None:
        super().__init__(net, switch.name)
        self.switch = switch
        self.up = True
        self.my_prefix = usid_prefix(switch.usid)
        self.fwd: dict[int, Port] = {}
        self.forwarded = 0

    def receive(self, frame: bytearray, port: Port) -> None:
        net = self.net
        if not self.up:
            net.drops["switch_down"] += 1
            return
        if len(frame) < frames.MIN_FRAME:
            net.drops["malformed"] += 1
            return
        hlim = frame[frames.OUTER_HLIM]
        if hlim <= 1:
            net.drops["hop_limit"] += 1
            return
        frame[frames.OUTER_HLIM] = hlim - 1
        dst = frames.outer_dst(frame)
        if dst >> 80 != self.my_prefix:
            net.drops["no_route"] += 1
            return
        dst = shift_usid(dst)
        egress = self.fwd.get(dst >> 80)
        if egress is None:
            net.drops["no_route"] += 1
            return
        frames.set_outer_dst(frame, dst)
        self.forwarded += 1
        egress.send(frame)


class HostNode(Node):
    """A host's NICs (port number = plane); frames go to whatever handler is attached."""

    def __init__(self, net: Network, name: str, index: int) -> None:
        super().__init__(net, name)
        self.index = index
        self.handler: HostHandler | None = None

    def receive(self, frame: bytearray, port: Port) -> None:
        if self.handler is None:
            self.net.drops["no_handler"] += 1
            return
        self.handler.on_frame(port.number, frame)

    def send(self, plane: int, frame: bytearray) -> None:
        self.ports[plane].send(frame)


class Network:
    """The fabric as nodes and ports; also the failure-injection surface."""

    def __init__(self, fabric: Fabric, loop: EventLoop, *, rate_bps: float = 10e9,
                 delay_s: float = 1e-6, queues: QueueConfig | None = None, seed: int = 0) -> None:
        if rate_bps <= 0 or delay_s < 0:
            raise NetworkConfigError("rate_bps must be > 0 and delay_s >= 0")
        self.fabric, self.loop = fabric, loop
        self.rate_bps, self.delay_s = rate_bps, delay_s
        self.queues = queues or QueueConfig()
        self.rng = random.Random(seed)
        self.drops: Counter[str] = Counter()
        self.trims = 0
        self.ecn_marks = 0
        self.switches = {s.name: SwitchNode(self, s) for s in fabric.switches}
        self.hosts = [HostNode(self, fabric.host_name(h), h) for h in range(fabric.hosts)]
        self.nodes: dict[str, Node] = {**self.switches, **{h.name: h for h in self.hosts}}
        self.links: dict[frozenset[str], LinkState] = {}
        for cable in fabric.links:
            self._wire(cable.a, cable.a_port, cable.b, cable.b_port)

    def _wire(self, a: str, a_port: int, b: str, b_port: int) -> None:
        state = LinkState(a, b)
        self.links[frozenset((a, b))] = state
        ends = []
        for name, number, other in ((a, a_port, b), (b, b_port, a)):
            node = self.nodes[name]
            is_switch = isinstance(node, SwitchNode)
            port = Port(self, node, number, state, switch_port=is_switch,
                        host_facing=is_switch and isinstance(self.nodes[other], HostNode))
            node.ports[number] = port
            ends.append(port)
        ends[0].peer, ends[1].peer = ends[1], ends[0]
        state.ports = ends
        for near, far in ((ends[0], ends[1]), (ends[1], ends[0])):
            if isinstance(near.node, SwitchNode):
                near.node.fwd[usid_prefix(self._usid_of(far.node, far.number))] = near

    def _usid_of(self, node: Node, port_number: int) -> int:
        """The uSID that names `node` to its neighbour: a switch's own, or the host NIC's."""
        if isinstance(node, SwitchNode):
            return node.switch.usid
        return self.fabric.nic(node.index, port_number).usid  # type: ignore[attr-defined]

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

    def set_loss(self, link: LinkState, probability: float) -> None:
        if not 0.0 <= probability < 1.0:
            raise NetworkConfigError(f"loss probability must be in [0, 1), got {probability}")
        link.loss = probability

    def set_link_up(self, link: LinkState, up: bool) -> None:
        if link.up == up:
            return
        link.up = up
        if not up:
            link.epoch += 1
            for port in link.ports:
                self.drops["link_down"] += port.flush()
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
        node.up = up
        for port in node.ports.values():
            self.set_link_up(port.link, up)

    def counters(self) -> dict[str, object]:
        return {"trims": self.trims, "ecn_marks": self.ecn_marks,
                "drops": dict(sorted(self.drops.items()))}
