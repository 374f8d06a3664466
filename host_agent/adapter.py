"""Frames <-> the sans-IO endpoint for one host; shared by the raw-socket driver and the simulator.

The adapter owns no protocol logic and no I/O: it wraps each TxPacket in Ethernet/outer/inner
IPv6/UDP (outer source = own NIC, outer destination = the uSID carrier in TxPacket.route), hands
the frame to `send(plane, frame)`, and turns received frames into Endpoint.receive_packet calls,
naming the peer by the host whose NIC address is the inner source. It also keeps per-plane and
per-route transmit counts (how traffic spread; when a failed route stopped carrying data).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable

from host_agent.core import Endpoint, Event, PathInfo, RxMeta
from host_agent.hostconfig import HostConfig, HostConfigError, qpn_for
from host_agent.modes import MRC_MODE, AgentMode
from wire import (
    ETH_TYPE_IPV6,
    IPPROTO_IPV6,
    WireError,
    address_pair,
    decode_frame_fields,
    encode_frame_parts,
    eth_header,
)
from wire.layout import ETH_TYPE, OUTER_NEXT_HEADER, TRIMMABLE_DSCPS

SendFrame = Callable[[int, bytes], None]
_IPV6_ETHERTYPE = ETH_TYPE_IPV6.to_bytes(2, "big")


class _Route:
    """What every frame to one peer over one route from one plane's NIC shares (Ethernet
    header, outer and inner address pairs, packed once) and its data counters."""

    __slots__ = ("route", "peer", "plane", "eth", "outer", "inner", "data_tx", "last_data_tx")

    def __init__(self, route: Hashable, peer: Hashable, plane: int, eth: bytes, outer: bytes,
                 inner: bytes) -> None:
        self.route, self.peer, self.plane = route, peer, plane
        self.eth, self.outer, self.inner = eth, outer, inner
        self.data_tx = 0
        self.last_data_tx = 0.0


class EndpointAdapter:
    """One host's endpoint, its addressing and its traffic counters."""

    def __init__(self, endpoint: Endpoint, config: HostConfig, send: SendFrame, *,
                 on_event: Callable[[Event], None] | None = None,
                 accept_peers: bool = False, mode: AgentMode = MRC_MODE) -> None:
        if endpoint.planes != config.planes:
            raise HostConfigError(f"endpoint has {endpoint.planes} planes, host config "
                                  f"{config.planes}: build both from the same fabric")
        self.endpoint, self.config, self.mode = endpoint, config, mode
        self._send_frame = send
        self.on_event = on_event
        self.accept_peers = accept_peers  # open a QP for a known peer's first packet
        self._mac = [nic.mac for nic in config.nics]
        self._address = [nic.address for nic in config.nics]
        self._next_hop_mac = [nic.next_hop_mac for nic in config.nics]
        self._peer_address = config.peer_address
        self._peer_of = config.peer_of_packed()  # may hold our own addresses: see below
        # id(route) -> its _Route: keyed by identity, as routes (IPv6 addresses) hash slowly;
        # the _Route holds the route, so its id is not reused while it is a key
        self._routes: dict[int, _Route] = {}
        self._all_routes: list[_Route] = []
        self._qpns: dict[int, dict[int, int]] = {}  # peer -> lane -> local QPN of its QP
        # per plane: rx_frames, rx_non_mrc, rx_malformed, rx_unknown_peer
        self.rx: list[Counter[str]] = [Counter() for _ in range(config.planes)]
        self.tx_per_plane = [0] * config.planes
        self.data_tx_per_plane = [0] * config.planes
        self.last_data_tx_plane: dict[int, float] = {}

    # --- connections ------------------------------------------------------------------------
    def connect(self, peer: int, local_qpn: int, remote_qpn: int, *, lane: int = 0,
                initial_psn: int = 0, expected_psn: int = 0) -> list[PathInfo]:
        """Open lane `lane`'s QP to `peer` over the routes the agent mode gives it (MRC: every
        plane and spine); a QP already open on that lane is destroyed first (a re-exchange
        after a restart)."""
        if peer not in self.config.paths:
            raise HostConfigError(f"no paths to host {peer}: known peers are "
                                  f"{sorted(self.config.paths)}")
        paths = self.mode.lane_paths(self.config, peer, lane)
        lanes = self._qpns.setdefault(peer, {})
        if lane in lanes:
            self.endpoint.disconnect(lanes.pop(lane))
        self.endpoint.connect(peer, local_qpn, remote_qpn, paths, initial_psn=initial_psn,
                              expected_psn=expected_psn)
        lanes[lane] = local_qpn
        return list(paths)

    def ensure_connected(self, peer: int) -> list[int]:
        """The local QPNs to `peer` by lane, opening every lane by the QPN convention (PSNs
        from 0) if none is open: for the simulator and agents run without an out-of-band
        exchange."""
        if peer not in self._qpns:
            for lane in range(self.mode.qps):
                self.connect(peer, qpn_for(peer, lane), qpn_for(self.config.host, lane),
                             lane=lane)
        return self.qpns_of(peer)

    def qpn_of(self, peer: int, lane: int = 0) -> int | None:
        return self._qpns.get(peer, {}).get(lane)

    def qpns_of(self, peer: int) -> list[int]:
        """Local QPNs of the open lanes to `peer`, in lane order."""
        lanes = self._qpns.get(peer, {})
        return [lanes[k] for k in sorted(lanes)]

    @property
    def connected(self) -> set[int]:
        return set(self._qpns)

    # --- network -> endpoint ----------------------------------------------------------------
    def receive_frame(self, plane: int, frame: bytes, now: float) -> None:
        """Hand one received frame to the endpoint; anything else is counted and dropped."""
        rx = self.rx[plane]
        if (frame[ETH_TYPE:ETH_TYPE + 2] != _IPV6_ETHERTYPE or len(frame) <= OUTER_NEXT_HEADER
                or frame[OUTER_NEXT_HEADER] != IPPROTO_IPV6):
            rx["rx_non_mrc"] += 1  # e.g. neighbour discovery when IPv6 is left enabled
            return
        try:
            ev, dscp, ecn, inner_src, payload = decode_frame_fields(frame)
        except WireError:
            rx["rx_malformed"] += 1
            return
        peer = self._peer_of.get(inner_src)
        if peer is None or peer == self.config.host:  # no host, or claiming to be this one
            rx["rx_unknown_peer"] += 1
            return
        rx["rx_frames"] += 1
        if self.accept_peers and peer not in self._qpns:
            self.ensure_connected(peer)
        self.endpoint.receive_packet(payload, RxMeta(peer, plane, ev, dscp, ecn), now=now)

    # --- endpoint -> network ----------------------------------------------------------------
    def pump(self, now: float) -> None:
        """Send everything the endpoint has ready and hand its events on."""
        ep = self.endpoint
        send, routes = self._send_frame, self._routes
        tx_per_plane = self.tx_per_plane
        for tx in ep.packets_to_send(now=now):
            plane = tx.plane
            r = routes.get(id(tx.route))
            if r is None or r.route is not tx.route or r.peer != tx.peer or r.plane != plane:
                r = self._new_route(tx.route, tx.peer, plane)
            tx_per_plane[plane] += 1
            dscp = tx.dscp
            if dscp in TRIMMABLE_DSCPS:
                self.data_tx_per_plane[plane] += 1
                self.last_data_tx_plane[plane] = now
                r.data_tx += 1
                r.last_data_tx = now
            send(plane, encode_frame_parts(r.eth, r.outer, r.inner, tx.ev, dscp, tx.ecn,
                                           tx.payload))
        event = ep.next_event()
        while event is not None:
            if self.on_event is not None:
                self.on_event(event)
            event = ep.next_event()

    def _new_route(self, route: Hashable, peer: Hashable, plane: int) -> _Route:
        """Outer addresses: own NIC -> the route's uSID carrier; inner: own NIC -> peer's."""
        own = self._address[plane]
        r = _Route(route, peer, plane, eth_header(self._mac[plane], self._next_hop_mac[plane]),
                   address_pair(own, route),  # type: ignore[arg-type]
                   address_pair(own, self._peer_address[(peer, plane)]))  # type: ignore[index]
        self._routes[id(route)] = r
        self._all_routes.append(r)
        return r

    # --- per-route counters (how traffic spread; when a failed route stopped carrying data) --
    @property
    def data_tx_per_route(self) -> Counter[Hashable]:
        """Data packets sent per route."""
        counts: Counter[Hashable] = Counter()
        for r in self._all_routes:
            if r.data_tx:
                counts[r.route] += r.data_tx
        return counts

    @property
    def route_plane(self) -> dict[Hashable, int]:
        """The plane of every route that carried data."""
        return {r.route: r.plane for r in self._all_routes if r.data_tx}

    @property
    def last_data_tx_route(self) -> dict[Hashable, float]:
        """When each route last carried a data packet."""
        last: dict[Hashable, float] = {}
        for r in self._all_routes:
            if r.data_tx and r.last_data_tx > last.get(r.route, -1.0):
                last[r.route] = r.last_data_tx
        return last

    def route_stats(self) -> dict[str, dict[str, float]]:
        """Per source route (outer DA): plane, data packets sent, last one's time."""
        plane, last = self.route_plane, self.last_data_tx_route
        return {str(route): {"plane": plane[route], "tx_data_packets": count,
                             "last_data_tx": last[route]}
                for route, count in self.data_tx_per_route.items()}
