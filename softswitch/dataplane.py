"""Packet I/O: AF_PACKET sockets, egress queues and the runtime control socket, one event loop.

The loop blocks in epoll with a timeout only while a paced queue holds packets, so an
idle switch sleeps in the kernel (no polling). Frames the switch itself sent are not
delivered to it at all (PACKET_IGNORE_OUTGOING; where the kernel lacks it, they are
received and skipped as PACKET_OUTGOING). Every frame goes through the pipeline, which
counts and drops anything malformed; the loop never lets a bad frame escape as an exception.

Per frame: one recv_into a preallocated buffer (each ready socket is read until EAGAIN,
at most RX_BATCH frames), one copy of the frame that the pipeline rewrites in place, and
one send. A frame whose port queues are empty and whose pacer allows it leaves at once,
without passing through the FIFO (PortQueues.pass_through: same departure time, depths
and counters as queueing and dequeuing it).
"""

from __future__ import annotations

import errno
import logging
import select
import socket
import time
from collections import deque
from collections.abc import Callable

from softswitch import tagged
from softswitch.loop import EventLoop
from softswitch.pipeline import Pipeline
from softswitch.queues import PortQueues
from softswitch.runtime import SOL_PACKET, ControlSession, RuntimeControl
from softswitch.store import DeviceState

log = logging.getLogger("softswitch.dataplane")

ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4
RX_BATCH = 64  # frames taken from one socket per wakeup before serving others
RCVBUF = 4 << 20  # about 3,500 full frames: a switch paused by a busy host loses none
SO_RCVBUFFORCE = 33  # not in Python's socket module; lets root exceed net.core.rmem_max
PACKET_IGNORE_OUTGOING = 23  # Linux >= 4.20
MAX_FRAME = 65535
TX_QUIET = (errno.ENOBUFS, errno.EAGAIN, errno.EMSGSIZE)  # counted, not logged
_monotonic = time.monotonic  # one global load per frame instead of a module attribute too


class Dataplane(RuntimeControl):
    """Ports, queues and the current pipeline of one switch; `loop` is the process's event
    loop, shared by every switch the process serves (its own when not given)."""

    def __init__(self, ports: dict[int, str], priorities: int,
                 loop: EventLoop | None = None) -> None:
        self.loop = loop if loop is not None else EventLoop()
        self._owns_loop = loop is None
        self.priorities = priorities
        self.queues = {p: PortQueues(priorities) for p in ports}
        self.names = dict(ports)
        self.pipeline: Pipeline | None = None
        self.stats = {"rx": 0, "tx": 0, "no_pipeline": 0, "no_port": 0, "tail_drop": 0,
                      "tx_error": 0, "rx_kernel_drops": 0, "control_refused": 0}
        self.control_token: str | None = None
        self._registered: dict[int, socket.socket] = {}
        self.socks: dict[int, socket.socket] = {}
        self.backlog: dict[int, PortQueues] = {}  # ports with queued or held packets
        self._wake_at: float | None = None  # the time the loop will call on_due for
        self.delay = 0.0  # the links' propagation delay, seconds (set_link_delay)
        self.delayed_ingress: frozenset[int] = frozenset()  # host-facing ports, when delayed
        self._arrivals: deque = deque()  # (time it arrives, frame, port) from those ports
        self._rx = bytearray(MAX_FRAME)
        self._pending: list[select.epoll] = []  # per port: is another frame waiting?
        self._control_sessions: dict[socket.socket, ControlSession] = {}
        self.control_listener: socket.socket | None = None
        self.on_detach: Callable[[], None] | None = None  # set by softswitch.__main__.Process
        self.on_attach: Callable[[], None] | None = None
        self.process_stats: dict[str, int] | None = None  # the process's P4Runtime counters
        self.down = False  # crashed: only `attach` and `stats` are answered
        self._detaching = False

    @property
    def stopping(self) -> bool:
        return self.loop.stopping

    @stopping.setter
    def stopping(self, value: bool) -> None:
        self.loop.stopping = value

    # ---- setup ---------------------------------------------------------------------

    def register(self, sock: socket.socket, handler: Callable[[], None]) -> None:
        self.loop.register(sock, handler)
        self._registered[sock.fileno()] = sock

    def unregister(self, sock: socket.socket) -> None:
        self.loop.unregister(sock)
        del self._registered[sock.fileno()]

    def open_ports(self) -> None:
        """Two sockets per port: untagged frames, and frames whose VLAN tag the kernel
        removed, which the reader puts back (softswitch.tagged says why)."""
        for port, ifname in self.names.items():
            # protocol 0: nothing is received until bind names the port (a socket made
            # with ETH_P_ALL takes every interface's frames until then)
            s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
            try:
                _set_rcvbuf(s)
                tagged.attach_filter(s, tagged=False)
                s.bind((ifname, ETH_P_ALL))
                t = tagged.tagged_socket(ifname, ETH_P_ALL)
            except OSError as err:
                s.close()
                raise OSError(f"cannot open port {port} on interface {ifname!r}: {err}") from err
            try:
                for sock in (s, t):
                    sock.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
                read = self._reader(port, s)
            except OSError:
                read = self._reader_skipping_outgoing(port, s)
            for sock in (s, t):
                sock.setblocking(False)
            self.socks[port] = s
            self.register(s, read)
            self.register(t, self._reader_tagged(port, t))

    def open_control(self, port: int, token: str | None = None) -> None:
        """The runtime control socket, on loopback only; with `token`, a request must come
        from a client that proves it knows the token (softswitch.control_auth), since any
        local user can connect to a loopback port."""
        srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            srv.bind(("127.0.0.1", port))
            srv.listen(8)
            srv.setblocking(False)
        except OSError:
            srv.close()
            raise
        self.take_control(srv, token)

    def take_control(self, srv: socket.socket, token: str | None) -> None:
        """Serve runtime control on the listening socket `srv` (opened here, or handed over
        by the switch this one replaces: hand_over_control)."""
        self.control_token = token
        self.control_listener = srv
        self.register(srv, lambda: self._accept(srv))

    def hand_over_control(self) -> socket.socket | None:
        """Take the control listener off this switch, still open, for the switch that
        replaces it (a crash and reboot, softswitch.__main__.Process): closed and bound
        again, the port would be free for a moment, and any local user could listen on it
        and receive the controller's requests."""
        srv, self.control_listener = self.control_listener, None
        if srv is not None:
            self.unregister(srv)
        return srv

    def add_wakeup(self, sock: socket.socket, on_wake: Callable[[], None]) -> None:
        self.register(sock, on_wake)

    def set_state(self, state: DeviceState) -> None:
        """Install a new pipeline (called from the P4Runtime thread; one assignment)."""
        self.pipeline = Pipeline(state)

    # ---- event loop ----------------------------------------------------------------

    def run(self) -> None:
        """Serve until `stopping` (the loop's; a process of many switches runs the loop)."""
        self.loop.run()

    def close(self) -> None:
        """Close this switch's sockets (and the loop, if it is this switch's own)."""
        for sock in self.release():
            sock.close()
        if self._owns_loop:
            self.loop.close()

    def release(self) -> list[socket.socket]:
        """Take this switch's sockets off the loop and hand them to the caller to close:
        closing a packet socket waits for an RCU grace period (about 12 ms), so a process
        of hundreds of ports closes them side by side (softswitch.__main__)."""
        socks = list(self._registered.values())
        for sock in socks:
            self.unregister(sock)
        for pending in self._pending:
            pending.close()
        self._pending.clear()
        self._wake_at = None  # the calls the loop still holds for this switch are dropped
        return socks

    # ---- the loop's view of this switch's queues (softswitch.loop.Paced) -----------

    def next_departure(self) -> float | None:
        times = [t for q in self.backlog.values() for t in (q.ready_at(),) if t is not None]
        if self._arrivals:
            times.append(self._arrivals[0][0])
        return min(times) if times else None

    def has_backlog(self) -> bool:
        return bool(self.backlog or self._arrivals)

    def _wake(self, when: float | None) -> None:
        """Have the loop call on_due at `when`, unless it already will at that time or
        sooner."""
        if when is not None and (self._wake_at is None or when < self._wake_at):
            self._wake_at = when
            self.loop.wake_at(when, self)

    def on_due(self, when: float, now: float) -> None:
        """The loop's call for `when`: send what is due and ask for the next time. A call
        for a time since moved (an earlier one was asked for) is dropped."""
        if when != self._wake_at:
            return
        self._wake_at = None
        self.drain_all(now)
        self._wake(self.next_departure())

    def _reader(self, port: int, sock: socket.socket) -> Callable[[], None]:
        buf, recv_into, stats, ingress = self._rx, sock.recv_into, self.stats, self._ingress
        # After the first frame of a wakeup, "anything left?" is asked of an epoll that
        # watches only this socket: an empty epoll_wait costs a quarter of a recv that
        # fails with EAGAIN and raises (0.3 against 1.2 us). Only when more is waiting
        # does the loop read on until EAGAIN, up to RX_BATCH frames.
        pending = select.epoll()
        pending.register(sock.fileno(), select.EPOLLIN)
        self._pending.append(pending)
        more = pending.poll

        def read() -> None:
            for i in range(RX_BATCH):
                try:
                    n = recv_into(buf)
                except BlockingIOError:
                    return
                except OSError as err:
                    log.warning("port %d receive error: %s", port, err)
                    return
                stats["rx"] += 1
                ingress(buf[:n], port)
                if not i and not more(0):
                    return
        return read

    def _reader_skipping_outgoing(self, port: int, sock: socket.socket) -> Callable[[], None]:
        """For kernels without PACKET_IGNORE_OUTGOING: our own frames come back; skip them."""
        buf, recvfrom_into = self._rx, sock.recvfrom_into

        def receive() -> tuple[bytearray, tuple]:
            n, addr = recvfrom_into(buf)
            return buf[:n], addr
        return self._addressed_reader(port, receive)

    def _reader_tagged(self, port: int, sock: socket.socket) -> Callable[[], None]:
        """Tagged frames, tag restored (softswitch.tagged)."""
        buf, view = self._rx, memoryview(self._rx)

        def receive() -> tuple[bytearray, tuple]:
            n, anc, _flags, addr = sock.recvmsg_into([buf], tagged.ANC_SIZE)
            return tagged.retag(view[:n], anc), addr
        return self._addressed_reader(port, receive)

    def _addressed_reader(self, port: int, receive: Callable[[], tuple[bytearray, tuple]]
                          ) -> Callable[[], None]:
        """Up to RX_BATCH frames from `receive` (frame, sender address), skipping the frames
        this switch sent (PACKET_OUTGOING, on kernels that return them)."""
        stats, ingress = self.stats, self._ingress

        def read() -> None:
            for _ in range(RX_BATCH):
                try:
                    frame, addr = receive()
                except BlockingIOError:
                    return
                except OSError as err:
                    log.warning("port %d receive error: %s", port, err)
                    return
                if addr[2] == PACKET_OUTGOING:
                    continue
                stats["rx"] += 1
                ingress(frame, port)
        return read

    def _ingress(self, frame: bytearray, port: int) -> None:
        """A frame from a host-facing port of a delayed fabric arrives `delay` later: the
        host's link delays it (the host's end has no switch to do it); others go on."""
        if port in self.delayed_ingress:
            when = _monotonic() + self.delay
            self._arrivals.append((when, frame, port))
            self._wake(when)
            return
        self._process(frame, port)

    def _process(self, frame: bytearray, port: int) -> None:
        pipeline = self.pipeline
        if pipeline is None:
            self.stats["no_pipeline"] += 1
            return
        result = pipeline.forward(frame, port)
        if result is None:
            return
        out_port, priority, out = result
        q = self.queues.get(out_port)
        if q is None:
            self.stats["no_port"] += 1
            return
        now = _monotonic()
        if q.occupancy or not q.pass_through(priority, now):
            if q.enqueue(priority, out, pipeline, now) is None:
                self.stats["tail_drop"] += 1
                return
            self._drain(out_port, q, now)
            return
        # the frame leaves at once: _send, inlined, as this is every frame's path on a
        # switch whose ports keep up
        pipeline.egress(out_port, priority, 0, 0)
        if q.delay:
            q.hold(out, now)
            self.backlog[out_port] = q
            self._wake(q.ready_at())
            return
        sock = self.socks.get(out_port)
        if sock is None:
            return
        try:
            sock.send(out)
        except OSError as err:
            self._send_failed(out_port, err)
            return
        self.stats["tx"] += 1

    def _send(self, port: int, frame: bytearray) -> None:
        sock = self.socks.get(port)
        if sock is None:
            return
        try:
            sock.send(frame)
        except OSError as err:
            self._send_failed(port, err)
            return
        self.stats["tx"] += 1

    def _send_failed(self, port: int, err: OSError) -> None:
        self.stats["tx_error"] += 1
        if err.errno not in TX_QUIET:
            log.warning("port %d send error: %s", port, err)

    def _drain(self, port: int, q: PortQueues, now: float) -> None:
        while True:
            item = q.dequeue(now)
            if item is None:
                break
            frame, pipeline, priority, enq_qdepth, deq_qdepth = item
            pipeline.egress(port, priority, enq_qdepth, deq_qdepth)
            if q.delay:
                q.hold(frame, now)
            else:
                self._send(port, frame)
        if q.flight:
            for frame in q.landed(now):
                self._send(port, frame)
        if q.occupancy or q.flight:
            self.backlog[port] = q
            self._wake(q.ready_at())
        else:
            self.backlog.pop(port, None)

    def drain_all(self, now: float) -> None:
        arrivals = self._arrivals
        while arrivals and arrivals[0][0] <= now:
            _, frame, port = arrivals.popleft()
            self._process(frame, port)
        for port, q in list(self.backlog.items()):
            self._drain(port, q, now)


def _set_rcvbuf(sock: socket.socket) -> None:
    """RCVBUF even above rmem_max when we are root (SO_RCVBUF alone is silently capped)."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RCVBUF)
    except PermissionError:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)
