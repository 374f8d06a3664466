"""An endpoint that lives in another process: the Endpoint interface, answered over a line
protocol (served_core.codec) by a process that holds the real one.

Why: grading a student's endpoint without trusting it. The grader's simulator and the
agents' raw-socket drivers run the fabric, the clock and every measurement; the student's
core runs contained elsewhere (rubrics.core_server in sandbox.contain) and answers for its
endpoint only. Nothing it answers is believed where the caller can see for itself:
- a packet may only go where the caller let it (a route index from the caller's own book),
  and its plane and peer are the route's, not the served process's word;
- a receiver's memory is the caller's shadow (ShadowRegion): it holds what the network
  delivered to this host's NICs and nothing else, so "verified" means the data crossed the
  network, whatever the endpoints claim;
- every field and event is type- and range-checked, and any violation ends the run with the
  reason (RemoteCoreError), for the student's feedback.

A Link carries one request and returns one reply: rubrics.remote_core's over a sandbox's pipe,
SocketLink over a Unix socket (an agent whose core the grader serves: served_core.agent).
"""

from __future__ import annotations

import collections
import socket
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import wire
from host_agent.core import EvState, PathInfo, RxMeta, TxPacket
from served_core import codec
from served_core.errors import ServedCoreError

T = TypeVar("T")
MAX_PAYLOAD = 1 << 16  # a UDP payload
CALL_TIMEOUT_S = 20.0  # one request: far above any endpoint's work on one packet
MAX_REPLY = 32 << 20


class RemoteCoreError(ServedCoreError, RuntimeError):
    """The served endpoint failed the run: its code raised, it stopped answering, or it
    answered what the protocol does not allow. The message says which, for the student."""


class Link(Protocol):
    def call(self, request: dict[str, Any]) -> dict[str, Any]: ...


def _checked(read: Callable[..., T], *args: Any) -> T:
    """read(*args), a protocol violation turned into the student's error."""
    try:
        return read(*args)
    except (ValueError, TypeError) as exc:  # ProtocolViolation, or a row of the wrong shape
        raise RemoteCoreError(f"your endpoints' process sent {exc}") from None


def _ints(table: Any, what: str) -> dict[str, int]:
    if not isinstance(table, dict) or len(table) > 500:
        raise RemoteCoreError(f"your endpoints' process: {what} that are not a table")
    return {str(k)[:80]: v for k, v in table.items() if type(v) is int}


def _per_ev(rows: Any, planes: int) -> dict[int, dict[int, dict[str, Any]]]:
    """[[qpn, [[ev, plane, state], ...]], ...] as Endpoint.stats()["per_ev"] has it."""
    if not isinstance(rows, list) or len(rows) > 256:
        raise codec.ProtocolViolation("a per-EV table that is not a list")
    table: dict[int, dict[int, dict[str, Any]]] = {}
    for qpn, evs in rows:
        if not isinstance(evs, list) or len(evs) > 1 << 12:
            raise codec.ProtocolViolation("a connection's EVs that are not a list")
        table[codec.integer(qpn, "qpn", 0, 0xFFFFFF)] = {
            codec.integer(ev, "ev", 0, 0xFFFFFFFF): {
                "plane": codec.integer(plane, "plane", 0, planes - 1),
                "state": codec.ev_state(state).name} for ev, plane, state in evs}
    return table


def reply_of(raw: bytes) -> dict[str, Any]:
    """A served process's reply line as a request's result: RemoteCoreError for a line the
    protocol does not allow, or for the student's code having raised."""
    try:
        reply = codec.parse(raw)
    except codec.ProtocolViolation as exc:
        raise RemoteCoreError(f"your endpoints' process: {exc}") from None
    if "raised" in reply:
        raise RemoteCoreError(f"your code raised {str(reply['raised'])[:1500]}")
    return reply


class SocketLink:
    """A Link over a connected Unix stream socket (the grader's relay to a sandbox)."""

    def __init__(self, path: str, timeout: float = CALL_TIMEOUT_S) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(path)
        self._buf = bytearray()

    def call(self, request: dict[str, Any]) -> dict[str, Any]:
        try:
            self.sock.sendall(codec.line(request))
            while b"\n" not in self._buf:
                if len(self._buf) > MAX_REPLY:
                    raise RemoteCoreError("your endpoints' process: a reply over the limit")
                chunk = self.sock.recv(1 << 20)
                if not chunk:
                    raise RemoteCoreError("your endpoints' process: the core's relay closed")
                self._buf += chunk
        except OSError as exc:  # a timeout included
            raise RemoteCoreError(f"your endpoints' process: {exc}") from None
        end = self._buf.index(b"\n")
        raw = bytes(self._buf[:end])
        del self._buf[:end + 1]
        return reply_of(raw)

    def close(self) -> None:
        self.sock.close()


@dataclass(frozen=True)
class _Connection:
    peer: Hashable


@dataclass
class ShadowRegion:
    """A receiver's registered memory as the caller sees it: filled only from the data
    packets the network delivered to the host (RemoteEndpoint.receive_packet)."""
    va: int
    rkey: int
    length: int
    buffer: bytearray

    def place(self, va: int, payload: bytes) -> None:
        if self.va <= va and va + len(payload) <= self.va + self.length:
            self.buffer[va - self.va:va - self.va + len(payload)] = payload


class RemoteEndpoint:
    """An Endpoint's interface (for EndpointAdapter, the simulator's HostAdapter and the
    agent's Commands), answered by a served process (`link`), believed only where it must be:
    see the module docstring. `config` is the caller's own copy of the configuration the
    served endpoint was built with (the agent reads its timers from it)."""

    def __init__(self, link: Link, handle: int, planes: int, name: str,
                 config: Any = None) -> None:
        self.link, self.h, self.planes, self.name, self.config = link, handle, planes, name, config
        self._peers: dict[int, Hashable] = {}  # local QPN -> peer
        self._routes: list[tuple[Hashable, PathInfo]] = []  # index -> (peer, path)
        self._index: dict[tuple[Hashable, PathInfo], int] = {}
        self._regions: dict[int, ShadowRegion] = {}
        self._events: collections.deque = collections.deque()
        self._timer: float | None = None

    def _call(self, op: str, **args: Any) -> dict[str, Any]:
        reply = self.link.call({"op": op, "h": self.h, **args})
        self._timer = _checked(codec.timer, reply.get("timer"))
        return reply

    # ---- set-up ------------------------------------------------------------------------
    def connect(self, peer: Hashable, local_qpn: int, remote_qpn: int, paths: list[PathInfo],
                *, initial_psn: int = 0, expected_psn: int = 0) -> None:
        rows = []
        for path in paths:
            key = (peer, path)
            if key not in self._index:
                self._index[key] = len(self._routes)
                self._routes.append(key)
            rows.append([path.plane, self._index[key]])
        self._peers[local_qpn] = peer
        self._call("connect", peer=peer, local_qpn=local_qpn, remote_qpn=remote_qpn,
                   paths=rows, initial_psn=initial_psn, expected_psn=expected_psn)

    def disconnect(self, qpn: int) -> None:
        self._call("disconnect", qpn=qpn)
        self._peers.pop(qpn, None)

    def connection(self, qpn: int) -> Any:
        """What the caller may ask of a connection here: its peer (the caller's own record)."""
        return _Connection(self._peers[qpn])

    def register_memory(self, length: int) -> ShadowRegion:
        reply = self._call("register", size=length)
        va = _checked(codec.integer, reply.get("va"), "va")
        rkey = _checked(codec.integer, reply.get("rkey"), "rkey", 0, 0xFFFFFFFF)
        if any(r.rkey == rkey for r in self._regions.values()):
            raise RemoteCoreError(f"register_memory gave rkey {rkey:#x} twice")
        region = ShadowRegion(va, rkey, length, bytearray(length))
        self._regions[rkey] = region
        return region

    def deregister_memory(self, rkey: int) -> None:
        self._call("deregister", rkey=rkey)
        self._regions.pop(rkey, None)

    def post_write(self, qpn: int, data: bytes, remote_va: int, rkey: int, *,
                   imm: int | None = None, now: float) -> int:
        reply = self._call("post_write", qpn=qpn, data=codec.pack(data), va=remote_va,
                           rkey=rkey, imm=imm, now=now)
        return _checked(codec.integer, reply.get("wr_id"), "wr_id")

    # ---- the sans-IO calls -------------------------------------------------------------
    def receive_packet(self, data: bytes, meta: RxMeta, *, now: float) -> None:
        self._shadow(data)
        self._call("receive", data=codec.pack(data), now=now,
                   meta=[meta.peer, meta.plane, meta.ev, meta.dscp, meta.ecn])

    def _shadow(self, data: bytes) -> None:
        """A delivered, untrimmed data packet is placed in the grader's shadow memory."""
        if not data or data[0] not in wire.DATA_OPCODES:
            return
        try:
            pkt = wire.decode_packet(bytes(data))
        except wire.WireError:
            return  # the endpoint counts and drops it; the shadow holds nothing of it
        region = self._regions.get(pkt.reth.rkey)
        if region is not None and not pkt.trimmed:
            region.place(pkt.reth.va, pkt.payload)

    def handle_timer(self, *, now: float) -> None:
        self._call("timer", now=now)

    def set_plane_up(self, plane: int, up: bool, *, now: float) -> None:
        self._call("plane", plane=plane, up=up, now=now)

    def packets_to_send(self, *, now: float) -> list[TxPacket]:
        reply = self._call("pump", now=now)
        rows, events = reply.get("tx"), reply.get("events")
        if not isinstance(rows, list) or not isinstance(events, list) \
                or len(events) > codec.MAX_EVENTS:
            raise RemoteCoreError("your endpoints' process: a pump reply without tx and events")
        self._events.extend(_checked(codec.decode_event, e) for e in events)
        return [_checked(self._packet, row) for row in rows]

    def _packet(self, row: Any) -> TxPacket:
        if not isinstance(row, list) or len(row) != 5:
            raise codec.ProtocolViolation(f"a packet row {str(row)[:60]}")
        index = codec.integer(row[0], "route", 0, len(self._routes) - 1)
        peer, path = self._routes[index]
        return TxPacket(peer, path.plane, path.route,
                        codec.integer(row[1], "ev", 0, 0xFFFFFFFF),
                        codec.integer(row[2], "dscp", 0, 63),
                        codec.integer(row[3], "ecn", 0, 3),
                        codec.unpack(row[4], MAX_PAYLOAD))

    def next_event(self) -> Any:
        return self._events.popleft() if self._events else None

    def get_timer(self) -> float | None:
        return self._timer

    # ---- figures and management: the served endpoint's word, for display, never a grade --
    def counters(self) -> dict[str, int]:
        return _ints(self._call("counters").get("counters"), "counters")

    def stats(self) -> dict[str, Any]:
        """counters() plus each connection's EVs with their plane and state (nothing else of
        Endpoint.stats(): the agent shows these, the rest is absent here)."""
        reply = self._call("stats")
        result: dict[str, Any] = _ints(reply.get("stats"), "stats")
        result["per_ev"] = _checked(_per_ev, reply.get("per_ev"), self.planes)
        return result

    def ev_states(self, qpn: int) -> dict[int, EvState]:
        rows = self._call("ev_states", qpn=qpn).get("states")
        if not isinstance(rows, list) or len(rows) > 1 << 16:
            raise RemoteCoreError("your endpoints' process: EV states that are not a list")
        return {_checked(codec.integer, ev, "ev", 0, 0xFFFFFFFF):
                _checked(codec.ev_state, state) for ev, state in rows}

    def ev_view(self, qpn: int, paths: bool = False) -> dict[int, list[object]]:
        return {ev: [state.name] for ev, state in self.ev_states(qpn).items()}

    def set_ev_denied(self, qpn: int, ev: int, denied: bool) -> None:
        self._call("deny", qpn=qpn, ev=ev, denied=denied)

    def peer_planes_up(self, peer: Hashable) -> set[int]:
        planes = self._call("peer_planes", peer=peer).get("planes")
        if not isinstance(planes, list) or len(planes) > self.planes:
            raise RemoteCoreError("your endpoints' process: peer planes that are not a list")
        return {_checked(codec.integer, p, "plane", 0, self.planes - 1) for p in planes}
