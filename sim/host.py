"""Glue between a sans-IO Endpoint and a simulated host: frames in, TxPackets out, timers.

The adapter is the simulator's stand-in for the raw-socket driver: it owns no protocol
logic. It wraps each TxPacket in Ethernet/outer/inner IPv6/UDP (outer source = own NIC,
outer destination = the uSID carrier in TxPacket.route), and unwraps received frames into
Endpoint.receive_packet calls, naming the peer by the host whose NIC address is the inner
source.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable
from ipaddress import IPv6Address

from host_agent.core.endpoint import Endpoint
from host_agent.core.events import Event
from host_agent.core.types import PathInfo, RxMeta, TxPacket
from sim.engine import SimulationError
from sim.network import Network
from wire import Envelope, WireError, decode_frame, encode_frame
from wire.layout import TRIMMABLE_DSCPS

# An endpoint that asks to be woken at the same instant this many times in a row is stuck.
_MAX_TIMER_SPINS = 10_000

EventListener = Callable[[float, "HostAdapter", Event], None]


class HostAdapter:
    """Drives one Endpoint on one simulated host; counts what it sent per plane and route."""

    def __init__(self, net: Network, host: int, endpoint: Endpoint,
                 listener: EventListener | None = None) -> None:
        self.net, self.host, self.endpoint = net, host, endpoint
        self.loop = net.loop
        self.listener = listener
        fabric = net.fabric
        nics = [fabric.nic(host, p) for p in range(fabric.planes)]
        # Properties of the topology objects build strings/addresses on each call: cache them.
        self._mac = [nic.mac for nic in nics]
        self._address = [nic.address for nic in nics]
        self._next_hop_mac = [fabric.t0(p, nic.t0).mac for p, nic in enumerate(nics)]
        self._nic_address: dict[tuple[int, int], IPv6Address] = {
            (h, p): fabric.nic(h, p).address
            for h in range(fabric.hosts) for p in range(fabric.planes)
        }
        self._peer_of = {addr: h for (h, _), addr in self._nic_address.items()}
        self._node = net.hosts[host]
        net.attach(host, self)
        self._wake_at: float | None = None
        self._spins = 0
        self._spin_time = -1.0
        self.malformed = 0
        self.data_tx_per_plane = [0] * fabric.planes
        self.tx_per_plane = [0] * fabric.planes
        self.data_tx_per_route: Counter[Hashable] = Counter()
        self.last_data_tx_route: dict[Hashable, float] = {}
        self.last_data_tx_plane: dict[int, float] = {}

    def connect(self, peer: int, local_qpn: int, remote_qpn: int) -> list[PathInfo]:
        """Connect to `peer` over every topology path between the two hosts (all planes, spines)."""
        paths = [PathInfo(p.plane, p.address) for p in self.net.fabric.all_paths(self.host, peer)]
        self.endpoint.connect(peer, local_qpn, remote_qpn, paths)
        return paths

    # --- network -> endpoint ---------------------------------------------------------------
    def on_frame(self, plane: int, frame: bytearray) -> None:
        try:
            env, payload = decode_frame(frame)
        except WireError:
            self.malformed += 1
            return
        peer = self._peer_of.get(env.inner_src)
        if peer is None:
            self.malformed += 1
            return
        now = self.loop.now
        self.endpoint.receive_packet(payload, RxMeta(peer, plane, env.ev, env.dscp, env.ecn),
                                     now=now)
        self.pump()

    def on_nic_state(self, plane: int, up: bool) -> None:
        self.endpoint.set_plane_up(plane, up, now=self.loop.now)
        self.pump()

    # --- endpoint -> network ---------------------------------------------------------------
    def pump(self) -> None:
        """Send what the endpoint has, hand its events on, and (re)arm its timer."""
        now = self.loop.now
        ep = self.endpoint
        for tx in ep.packets_to_send(now=now):
            self._send(tx, now)
        event = ep.next_event()
        while event is not None:
            if self.listener is not None:
                self.listener(now, self, event)
            event = ep.next_event()
        when = ep.get_timer()
        if when is None:
            return
        when = max(when, now)
        if self._wake_at is None or when < self._wake_at:
            self._wake_at = when
            self.loop.at(when, self._on_wake)

    def _send(self, tx: TxPacket, now: float) -> None:
        plane = tx.plane
        own = self._address[plane]
        env = Envelope(self._mac[plane], self._next_hop_mac[plane], own, tx.route,  # type: ignore[arg-type]
                       own, self._nic_address[(tx.peer, plane)], tx.ev, tx.dscp, tx.ecn)  # type: ignore[index]
        self.tx_per_plane[tx.plane] += 1
        if tx.dscp in TRIMMABLE_DSCPS:
            self.data_tx_per_plane[tx.plane] += 1
            self.data_tx_per_route[tx.route] += 1
            self.last_data_tx_route[tx.route] = now
            self.last_data_tx_plane[tx.plane] = now
        self._node.send(tx.plane, bytearray(encode_frame(env, tx.payload)))

    def _on_wake(self) -> None:
        now = self.loop.now
        if self._wake_at is not None and self._wake_at <= now:
            self._wake_at = None
        when = self.endpoint.get_timer()
        if when is not None and when <= now:
            if now == self._spin_time:
                self._spins += 1
                if self._spins > _MAX_TIMER_SPINS:
                    raise SimulationError(f"h{self.host}: endpoint timer stuck at t={now}")
            else:
                self._spin_time, self._spins = now, 0
            self.endpoint.handle_timer(now=now)
        self.pump()
