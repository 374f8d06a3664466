"""Runs one sans-IO Endpoint over AF_PACKET raw sockets, one per host NIC (one NIC per plane).

Single-threaded and event driven: one selector waits on the NIC sockets, a NETLINK_ROUTE socket
(link up/down, so a cable pull reaches Endpoint.set_plane_up without polling) and any readers
the agent adds (control socket, signal wake-up); its timeout is the endpoint's get_timer() or the
earliest agent timer. An idle driver therefore sleeps in select() and costs no CPU.

Sockets are bound to ETH_P_IPV6, so the kernel hands us only IPv6 frames and never the frames we
send ourselves (those reach ETH_P_ALL taps only); PACKET_OUTGOING is still checked in case a
caller binds differently.
"""

from __future__ import annotations

import errno
import heapq
import itertools
import logging
import selectors
import socket
import struct
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from ipaddress import IPv6Address

from fabric.hostpaths import HostPath
from host_agent.core.endpoint import Endpoint
from host_agent.core.events import Event
from host_agent.core.types import PathInfo, RxMeta, TxPacket
from wire import (
    DSCP_TRIMMABLE,
    DSCP_TRIMMABLE_RETX,
    ETH_TYPE_IPV6,
    IPPROTO_IPV6,
    Envelope,
    WireError,
    decode_frame,
    encode_frame,
)

log = logging.getLogger(__name__)

ETH_P_IPV6 = ETH_TYPE_IPV6
SO_SNDBUFFORCE = 32  # not exported by Python's socket module; root may exceed wmem_max
SO_RCVBUFFORCE = 33
SOCKET_BUFFER = 4 << 20
SOL_PACKET, PACKET_STATISTICS = 263, 6
TPACKET_STATS = struct.Struct("=II")  # tp_packets, tp_drops
RX_BATCH = 4  # frames per socket per round: few, so planes stay in arrival order
RX_ROUNDS = 32  # rounds per wake-up: bounds how long netlink, control and timers wait
MAX_FRAME = 65535

RTMGRP_LINK = 1
RTM_NEWLINK, RTM_DELLINK = 16, 17
NLMSG_HDR = struct.Struct("=IHHII")
IFINFOMSG = struct.Struct("=BxHiII")
IFF_UP, IFF_RUNNING = 0x1, 0x40

_ETHERTYPE_AT = slice(12, 14)
_OUTER_NEXT_HEADER_AT = 20
_IPV6_ETHERTYPE = ETH_TYPE_IPV6.to_bytes(2, "big")

_DATA_DSCP = (DSCP_TRIMMABLE, DSCP_TRIMMABLE_RETX)

# Exceptions from send() that mean "this NIC cannot take the frame now", not a program error.
_TX_DOWN = {errno.ENETDOWN, errno.ENXIO, errno.ENODEV, errno.ENETUNREACH}


class DriverError(RuntimeError):
    """The driver cannot run with the given NICs or paths; the message says what to fix."""


@dataclass(frozen=True)
class NicConfig:
    """One host NIC as the driver needs it: where to send and what to write in the frame."""

    plane: int
    ifname: str
    mac: str
    address: IPv6Address
    next_hop_mac: str  # the T0's MAC: every frame's destination MAC


@dataclass(frozen=True)
class HostConfig:
    """A host's NICs and, per peer, its paths and NIC addresses (from fabric.hostpaths)."""

    host: int
    planes: int
    nics: tuple[NicConfig, ...]  # indexed by plane
    paths: dict[int, tuple[PathInfo, ...]]  # peer host -> every route to it
    peer_address: dict[tuple[int, int], IPv6Address]  # (peer, plane) -> peer NIC address

    @classmethod
    def from_paths(cls, host: int, planes: int, paths: Iterable[HostPath]) -> HostConfig:
        mine = [p for p in paths if p.src_host == host]
        nics: dict[int, NicConfig] = {}
        routes: dict[int, list[PathInfo]] = {}
        peer_address: dict[tuple[int, int], IPv6Address] = {}
        for p in mine:
            nic = NicConfig(p.plane, p.src_ifname, p.src_mac, p.src_addr, p.next_hop_mac)
            if nics.setdefault(p.plane, nic) != nic:
                raise DriverError(f"path set disagrees about host {host}'s NIC on plane "
                                  f"{p.plane}: {nics[p.plane]} vs {nic}; re-export it")
            routes.setdefault(p.dst_host, []).append(PathInfo(plane=p.plane, route=p.route))
            peer_address[(p.dst_host, p.plane)] = p.dst_addr
        missing = sorted(set(range(planes)) - set(nics))
        if missing:
            raise DriverError(f"the path set has no paths from host {host} on planes {missing}: "
                              "check --host and that the path set covers this host")
        return cls(host, planes, tuple(nics[p] for p in range(planes)),
                   {peer: tuple(r) for peer, r in routes.items()}, peer_address)

    def peer_of(self) -> dict[IPv6Address, int]:
        return {addr: peer for (peer, _), addr in self.peer_address.items()}


class _Timer:
    __slots__ = ("callback", "cancelled")

    def __init__(self, callback: Callable[[], None]) -> None:
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class Driver:
    """Owns the selector, the NIC and netlink sockets, and the endpoint's clock."""

    def __init__(self, endpoint: Endpoint, config: HostConfig, *,
                 on_event: Callable[[Event], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if endpoint.planes != config.planes:
            raise DriverError(f"endpoint has {endpoint.planes} planes, host config "
                              f"{config.planes}: build both from the same fabric")
        self.endpoint = endpoint
        self.config = config
        self.clock = clock
        self.on_event = on_event
        self.stats: dict[int, Counter[str]] = {p: Counter() for p in range(config.planes)}
        # route -> [plane, data packets sent, time of the last one]: per-path traffic, and when
        # a sender stopped using a failed link (time to bypass)
        self._route_tx: dict[object, list] = {}
        self.plane_up = [False] * config.planes
        self._peer_of = config.peer_of()
        self._connected: set[int] = set()
        self._sel = selectors.DefaultSelector()
        self._handlers: dict[int, list[Callable[[], None] | None]] = {}  # fd -> [read, write]
        self._timers: list[tuple[float, int, _Timer]] = []
        self.max_timer_lateness = 0.0  # seconds (see _run_timers)
        self._seq = itertools.count()
        self._socks: list[socket.socket] = []
        self._backlog: list[deque[bytes]] = [deque() for _ in range(config.planes)]
        self._ifindex: dict[int, int] = {}  # ifindex -> plane
        self._netlink: socket.socket | None = None
        self._stopping = False

    # ---- lifecycle ---------------------------------------------------------------------------

    def open(self) -> None:
        """Open the netlink socket first, then one raw socket per NIC, then read link states."""
        self._netlink = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
        self._netlink.bind((0, RTMGRP_LINK))
        self._netlink.setblocking(False)
        self.add_reader(self._netlink, self._on_netlink)
        for nic in self.config.nics:
            try:
                index = socket.if_nametoindex(nic.ifname)
                sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_IPV6))
            except OSError as exc:
                self.close()
                raise DriverError(f"cannot open plane {nic.plane} NIC {nic.ifname!r}: {exc} "
                                  "(run in the host's namespace, as root)") from exc
            for opt in (SO_SNDBUFFORCE, SO_RCVBUFFORCE):
                sock.setsockopt(socket.SOL_SOCKET, opt, SOCKET_BUFFER)
            sock.bind((nic.ifname, ETH_P_IPV6))
            sock.setblocking(False)
            self._socks.append(sock)
            _check_mac(nic)
            self._ifindex[index] = nic.plane
            self.add_reader(sock, self._drain_nics)
        now = self.clock()
        for nic in self.config.nics:
            up = read_operstate(nic.ifname)
            self.plane_up[nic.plane] = up
            if not up:
                self.endpoint.set_plane_up(nic.plane, False, now=now)
        self.pump()

    def close(self) -> None:
        for sock in [*self._socks, self._netlink]:
            if sock is not None:
                self.remove(sock)
                sock.close()
        self._socks.clear()
        self._netlink = None
        self._sel.close()

    def stop(self) -> None:
        self._stopping = True

    # ---- loop plumbing (also used by the agent for its control socket and timers) ------------

    def add_reader(self, sock: socket.socket, callback: Callable[[], None]) -> None:
        self._set_handler(sock, 0, callback)

    def set_writer(self, sock: socket.socket, callback: Callable[[], None] | None) -> None:
        self._set_handler(sock, 1, callback)

    def remove(self, sock: socket.socket) -> None:
        if self._handlers.pop(sock.fileno(), None) is not None:
            self._sel.unregister(sock)

    def _set_handler(self, sock: socket.socket, slot: int,
                     callback: Callable[[], None] | None) -> None:
        fd = sock.fileno()
        handlers = self._handlers.get(fd)
        if handlers is None:
            handlers = self._handlers[fd] = [None, None]
            handlers[slot] = callback
            self._sel.register(sock, self._mask(handlers), handlers)
            return
        handlers[slot] = callback
        self._sel.modify(sock, self._mask(handlers), handlers)

    @staticmethod
    def _mask(handlers: list[Callable[[], None] | None]) -> int:
        return ((selectors.EVENT_READ if handlers[0] else 0)
                | (selectors.EVENT_WRITE if handlers[1] else 0))

    def call_at(self, when: float, callback: Callable[[], None]) -> _Timer:
        timer = _Timer(callback)
        heapq.heappush(self._timers, (when, next(self._seq), timer))
        return timer

    def run(self) -> None:
        """Serve until stop(); every wake-up ends with pump() so output never waits."""
        self._stopping = False
        while not self._stopping:
            deadline = self._next_deadline()
            timeout = None if deadline is None else max(0.0, deadline - self.clock())
            for key, mask in self._sel.select(timeout):
                read, write = key.data
                if mask & selectors.EVENT_READ and read is not None:
                    read()
                if mask & selectors.EVENT_WRITE and write is not None:
                    write()
            self._run_timers()
            self.pump()

    def _next_deadline(self) -> float | None:
        while self._timers and self._timers[0][2].cancelled:
            heapq.heappop(self._timers)
        times = [t for t in (self.endpoint.get_timer(),
                             self._timers[0][0] if self._timers else None) if t is not None]
        return min(times, default=None)

    def _run_timers(self) -> None:
        now = self.clock()
        when = self.endpoint.get_timer()
        if when is not None and when <= now:
            # how late the endpoint's timer ran: a busy or paused host shows up here first
            self.max_timer_lateness = max(self.max_timer_lateness, now - when)
            self.endpoint.handle_timer(now=now)
        while self._timers and self._timers[0][0] <= now:
            _, _, timer = heapq.heappop(self._timers)
            if not timer.cancelled:
                timer.callback()

    # ---- endpoint glue -----------------------------------------------------------------------

    def ensure_connected(self, peer: int) -> int:
        """Open the QP pair to `peer` if needed; returns the local QPN (see qpn_for)."""
        local = qpn_for(peer)
        if peer not in self._connected:
            paths = self.config.paths.get(peer)
            if not paths:
                raise DriverError(f"no paths to host {peer}: known peers are "
                                  f"{sorted(self.config.paths)}")
            self.endpoint.connect(peer, local, qpn_for(self.config.host), paths)
            self._connected.add(peer)
            log.info("connected to host %d: local QPN %#x, %d paths", peer, local, len(paths))
        return local

    @property
    def connected(self) -> set[int]:
        return set(self._connected)

    def pump(self) -> None:
        """Send everything the endpoint has ready and hand its events to the agent."""
        for tx in self.endpoint.packets_to_send(now=self.clock()):
            self._send(tx)
        event = self.endpoint.next_event()
        while event is not None:
            if self.on_event is not None:
                self.on_event(event)
            event = self.endpoint.next_event()

    def _send(self, tx: TxPacket) -> None:
        nic = self.config.nics[tx.plane]
        peer_addr = self.config.peer_address[(tx.peer, tx.plane)]  # type: ignore[index]
        env = Envelope(nic.mac, nic.next_hop_mac, nic.address, tx.route,  # type: ignore[arg-type]
                       nic.address, peer_addr, tx.ev, tx.dscp, tx.ecn)
        frame = encode_frame(env, tx.payload)
        stats = self.stats[tx.plane]
        if tx.dscp in _DATA_DSCP:
            record = self._route_tx.setdefault(tx.route, [tx.plane, 0, 0.0])
            record[1] += 1
            record[2] = self.clock()
        if self._backlog[tx.plane]:
            self._queue(tx.plane, frame)
            return
        try:
            self._socks[tx.plane].send(frame)
            stats["tx_frames"] += 1
        except (BlockingIOError, InterruptedError):
            self._queue(tx.plane, frame)
        except OSError as exc:
            self._tx_error(tx.plane, exc)

    def _queue(self, plane: int, frame: bytes) -> None:
        backlog = self._backlog[plane]
        backlog.append(frame)
        self.stats[plane]["tx_queued"] += 1
        if len(backlog) == 1:
            self.set_writer(self._socks[plane], lambda: self._flush(plane))

    def _flush(self, plane: int) -> None:
        backlog, sock = self._backlog[plane], self._socks[plane]
        while backlog:
            try:
                sock.send(backlog[0])
                self.stats[plane]["tx_frames"] += 1
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                self._tx_error(plane, exc)
            backlog.popleft()
        self.set_writer(sock, None)

    def _tx_error(self, plane: int, exc: OSError) -> None:
        """A NIC that is down drops the frame; the core recovers it like any other loss."""
        key = "tx_dropped_down" if exc.errno in _TX_DOWN else "tx_errors"
        self.stats[plane][key] += 1
        if key == "tx_errors":
            log.warning("plane %d send failed: %s", plane, exc)

    def _drain_nics(self) -> None:
        """Read every NIC until empty (bounded), sending after each round.

        Timers run only after this, so a SACK already sitting in a socket buffer is never
        mistaken for a timeout because the loop was busy with another NIC's backlog.
        """
        for _ in range(RX_ROUNDS):
            busy = False
            for plane in range(self.config.planes):
                busy |= self._read_batch(plane)
            self.pump()
            if not busy:
                return

    def _read_batch(self, plane: int) -> bool:
        """Up to RX_BATCH frames from one NIC; True if the socket may hold more."""
        sock, stats = self._socks[plane], self.stats[plane]
        for _ in range(RX_BATCH):
            try:
                frame, addr = sock.recvfrom(MAX_FRAME)
            except (BlockingIOError, InterruptedError):
                return False
            except OSError as exc:  # e.g. ENETDOWN reported once when the link goes down
                stats["rx_socket_errors"] += 1
                log.info("plane %d receive error: %s", plane, exc)
                return False
            if addr[2] == socket.PACKET_OUTGOING:
                stats["rx_outgoing_ignored"] += 1
                continue
            self._on_frame(plane, frame, stats)
        return True

    def _on_frame(self, plane: int, frame: bytes, stats: Counter[str]) -> None:
        if (frame[_ETHERTYPE_AT] != _IPV6_ETHERTYPE or len(frame) <= _OUTER_NEXT_HEADER_AT
                or frame[_OUTER_NEXT_HEADER_AT] != IPPROTO_IPV6):
            stats["rx_non_mrc"] += 1  # e.g. neighbour discovery when IPv6 is left enabled
            return
        try:
            env, payload = decode_frame(frame)
        except WireError:
            stats["rx_malformed"] += 1
            return
        peer = self._peer_of.get(env.inner_src)
        if peer is None:
            stats["rx_unknown_peer"] += 1
            return
        stats["rx_frames"] += 1
        self.ensure_connected(peer)
        meta = RxMeta(peer, plane, env.ev, env.dscp, env.ecn)
        try:
            self.endpoint.receive_packet(payload, meta, now=self.clock())
        except Exception:  # a core bug on one packet must not take every QP of the host down
            stats["rx_core_errors"] += 1
            log.exception("endpoint failed on a packet from host %d plane %d", peer, plane)

    # ---- link state --------------------------------------------------------------------------

    def _on_netlink(self) -> None:
        assert self._netlink is not None
        while True:
            try:
                data = self._netlink.recv(65536)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # ENOBUFS: events were lost; re-read every NIC's state
                log.warning("netlink: %s; re-reading link states", exc)
                for nic in self.config.nics:
                    self._set_plane(nic.plane, read_operstate(nic.ifname))
                continue
            for index, up in parse_link_messages(data):
                plane = self._ifindex.get(index)
                if plane is not None:
                    self._set_plane(plane, up)

    def _set_plane(self, plane: int, up: bool) -> None:
        if self.plane_up[plane] == up:
            return
        self.plane_up[plane] = up
        self.stats[plane]["link_changes"] += 1
        log.info("plane %d NIC %s is %s", plane, self.config.nics[plane].ifname,
                 "up" if up else "down")
        self.endpoint.set_plane_up(plane, up, now=self.clock())

    def driver_stats(self) -> dict[int, dict[str, int]]:
        """Per-plane counters, including frames the kernel dropped for want of buffer space."""
        for plane, sock in enumerate(self._socks):
            _packets, drops = TPACKET_STATS.unpack(
                sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, TPACKET_STATS.size))
            self.stats[plane]["rx_kernel_drops"] += drops  # the kernel resets them on each read
        return {p: dict(c) for p, c in self.stats.items()}

    def route_stats(self) -> dict[str, dict[str, float]]:
        """Per source route (outer DA): plane, data packets handed to the NIC, last one's time."""
        return {str(route): {"plane": plane, "tx_data_packets": count, "last_data_tx": last}
                for route, (plane, count, last) in self._route_tx.items()}


def qpn_for(host: int) -> int:
    """QPN convention: a host's QP towards peer P is 0x100 + P, so the peer's is 0x100 + me."""
    return 0x100 + host


def read_operstate(ifname: str) -> bool:
    """A NIC counts as up when the kernel says it is operational (or cannot tell: 'unknown')."""
    try:
        with open(f"/sys/class/net/{ifname}/operstate", encoding="ascii") as f:
            return f.read().strip() in ("up", "unknown")
    except OSError:
        return False


def parse_link_messages(data: bytes) -> list[tuple[int, bool]]:
    """(ifindex, up) for each RTM_NEWLINK/RTM_DELLINK in a netlink datagram; malformed tails end
    parsing instead of raising, since the kernel is the only sender."""
    out: list[tuple[int, bool]] = []
    offset = 0
    while offset + NLMSG_HDR.size <= len(data):
        length, msg_type, _flags, _seq, _pid = NLMSG_HDR.unpack_from(data, offset)
        if length < NLMSG_HDR.size or offset + length > len(data):
            break
        if msg_type in (RTM_NEWLINK, RTM_DELLINK) and length >= NLMSG_HDR.size + IFINFOMSG.size:
            _family, _type, index, flags, _change = IFINFOMSG.unpack_from(
                data, offset + NLMSG_HDR.size)
            up = msg_type == RTM_NEWLINK and flags & IFF_UP != 0 and flags & IFF_RUNNING != 0
            out.append((index, up))
        offset += (length + 3) & ~3
    return out



def _check_mac(nic: NicConfig) -> None:
    """Frames carry the fabric model's MAC; a NIC with another one works on veths (packet sockets
    see PACKET_OTHERHOST frames) but not behind a MAC-filtering NIC, so say so."""
    try:
        with open(f"/sys/class/net/{nic.ifname}/address", encoding="ascii") as f:
            actual = f.read().strip()
    except OSError:
        return
    if actual != nic.mac:
        log.warning("%s has MAC %s, the fabric model says %s: set it with "
                    "`ip link set %s address %s`", nic.ifname, actual, nic.mac, nic.ifname, nic.mac)
