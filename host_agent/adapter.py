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

from host_agent.core import Endpoint, Event, PathInfo, RxMeta, TxPacket
from host_agent.hostconfig import HostConfig, HostConfigError, qpn_for
from host_agent.modes import MRC_MODE, AgentMode
from wire import (
    ETH_TYPE_IPV6,
    IPPROTO_IPV6,
    Envelope,
    WireError,
    decode_frame,
    encode_frame,
)
from wire.layout import ETH_TYPE, OUTER_NEXT_HEADER, TRIMMABLE_DSCPS

SendFrame = Callable[[int, bytes], None]
_IPV6_ETHERTYPE = ETH_TYPE_IPV6.to_bytes(2, "big")


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
        self._peer_of = config.peer_of()
        self._qpns: dict[int, dict[int, int]] = {}  # peer -> lane -> local QPN of its QP
        # per plane: rx_frames, rx_non_mrc, rx_malformed, rx_unknown_peer
        self.rx: list[Counter[str]] = [Counter() for _ in range(config.planes)]
        self.tx_per_plane = [0] * config.planes
        self.data_tx_per_plane = [0] * config.planes
        self.data_tx_per_route: Counter[Hashable] = Counter()
        self.route_plane: dict[Hashable, int] = {}
        self.last_data_tx_route: dict[Hashable, float] = {}
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
            env, payload = decode_frame(frame)
        except WireError:
            rx["rx_malformed"] += 1
            return
        peer = self._peer_of.get(env.inner_src)
        if peer is None:
            rx["rx_unknown_peer"] += 1
            return
        rx["rx_frames"] += 1
        if self.accept_peers:
            self.ensure_connected(peer)
        self.endpoint.receive_packet(payload, RxMeta(peer, plane, env.ev, env.dscp, env.ecn),
                                     now=now)

    # --- endpoint -> network ----------------------------------------------------------------
    def pump(self, now: float) -> None:
        """Send everything the endpoint has ready and hand its events on."""
        ep = self.endpoint
        for tx in ep.packets_to_send(now=now):
            self._send(tx, now)
        event = ep.next_event()
        while event is not None:
            if self.on_event is not None:
                self.on_event(event)
            event = ep.next_event()

    def _send(self, tx: TxPacket, now: float) -> None:
        plane = tx.plane
        own = self._address[plane]
        env = Envelope(self._mac[plane], self._next_hop_mac[plane], own, tx.route,  # type: ignore[arg-type]
                       own, self._peer_address[(tx.peer, plane)], tx.ev, tx.dscp, tx.ecn)  # type: ignore[index]
        self.tx_per_plane[plane] += 1
        if tx.dscp in TRIMMABLE_DSCPS:
            self.data_tx_per_plane[plane] += 1
            self.data_tx_per_route[tx.route] += 1
            self.route_plane[tx.route] = plane
            self.last_data_tx_route[tx.route] = now
            self.last_data_tx_plane[plane] = now
        self._send_frame(plane, encode_frame(env, tx.payload))

    def route_stats(self) -> dict[str, dict[str, float]]:
        """Per source route (outer DA): plane, data packets sent, last one's time."""
        return {str(route): {"plane": self.route_plane[route], "tx_data_packets": count,
                             "last_data_tx": self.last_data_tx_route[route]}
                for route, count in self.data_tx_per_route.items()}
