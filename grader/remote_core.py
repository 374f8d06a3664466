"""The grader's half of a stage it runs itself around the student's endpoints: the simulator
here, the endpoints in the sandbox (grader.core_server), grader.core_pipe between them.

Why: a simulator run inside the submission's process reports whatever that process likes (a
forged "completed and verified"). Here the fabric, the clock, the frames and every figure are
the grader's; the sandbox only answers for its endpoints, and nothing it says is believed
where the grader can see for itself:
- a packet may only go where the grader let it (a route index from its own book), and its
  plane and peer are the route's, not the sandbox's word;
- a receiver's memory is the grader's shadow (ShadowRegion): it holds what the simulated
  fabric delivered to that host's NIC and nothing else, so "verified" means the data
  crossed the fabric, whatever the endpoints claim;
- each reply has a deadline and a size limit, and any violation ends the stage with the
  reason (RemoteCoreError), for the student's feedback.
"""

from __future__ import annotations

import collections
import sys
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import wire
from grader import core_pipe, sandbox
from grader.sandbox_pipe import PipeError, PipeSession
from host_agent.core import PathInfo, RxMeta, TxPacket

T = TypeVar("T")
CALL_TIMEOUT_S = 20.0  # one request: far above any endpoint's work on one packet
MAX_PAYLOAD = 1 << 16  # a UDP payload
LIMITS = sandbox.Limits(wall_s=600.0, file_bytes=8 << 20, cpu_s=600)


class RemoteCoreError(RuntimeError):
    """The student's endpoints failed the stage: their code raised, they stopped answering, or
    they answered what the protocol does not allow. The message says which, for the student."""


def _checked(read: Callable[..., T], *args: Any) -> T:
    """read(*args), a protocol violation turned into the student's error."""
    try:
        return read(*args)
    except core_pipe.ProtocolViolation as exc:
        raise RemoteCoreError(f"your endpoints' process sent {exc}") from None


@dataclass
class ShadowRegion:
    """A receiver's registered memory as the grader sees it: filled only from the data
    packets the simulated fabric delivered to the host (RemoteEndpoint.receive_packet)."""
    va: int
    rkey: int
    length: int
    buffer: bytearray

    def place(self, va: int, payload: bytes) -> None:
        if self.va <= va and va + len(payload) <= self.va + self.length:
            self.buffer[va - self.va:va - self.va + len(payload)] = payload


class CoreLink:
    """One sandboxed core_server and the requests to it."""

    def __init__(self, session: PipeSession) -> None:
        self.session = session
        self.calls = 0

    def call(self, request: dict[str, Any]) -> dict[str, Any]:
        self.calls += 1
        try:
            reply = core_pipe.parse(self.session.request(core_pipe.line(request),
                                                         CALL_TIMEOUT_S))
        except (PipeError, core_pipe.ProtocolViolation) as exc:
            raise RemoteCoreError(f"your endpoints' process: {exc}") from None
        if "raised" in reply:
            raise RemoteCoreError(f"your code raised {str(reply['raised'])[:1500]}")
        return reply


class RemoteEndpoint:
    """An Endpoint's interface for sim.host.HostAdapter, answered by the sandbox."""

    def __init__(self, link: CoreLink, handle: int, planes: int, name: str) -> None:
        self.link, self.h, self.planes, self.name = link, handle, planes, name
        self._routes: list[tuple[Hashable, PathInfo]] = []  # index -> (peer, path)
        self._index: dict[tuple[Hashable, PathInfo], int] = {}
        self._regions: dict[int, ShadowRegion] = {}
        self._events: collections.deque = collections.deque()
        self._timer: float | None = None

    def _call(self, op: str, **args: Any) -> dict[str, Any]:
        reply = self.link.call({"op": op, "h": self.h, **args})
        self._timer = _checked(core_pipe.timer, reply.get("timer"))
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
        self._call("connect", peer=peer, local_qpn=local_qpn, remote_qpn=remote_qpn,
                   paths=rows, initial_psn=initial_psn, expected_psn=expected_psn)

    def disconnect(self, qpn: int) -> None:
        self._call("disconnect", qpn=qpn)

    def register_memory(self, length: int) -> ShadowRegion:
        reply = self._call("register", size=length)
        va = _checked(core_pipe.integer, reply.get("va"), "va")
        rkey = _checked(core_pipe.integer, reply.get("rkey"), "rkey", 0, 0xFFFFFFFF)
        if any(r.rkey == rkey for r in self._regions.values()):
            raise RemoteCoreError(f"register_memory gave rkey {rkey:#x} twice")
        region = ShadowRegion(va, rkey, length, bytearray(length))
        self._regions[rkey] = region
        return region

    def post_write(self, qpn: int, data: bytes, remote_va: int, rkey: int, *,
                   imm: int | None = None, now: float) -> None:
        self._call("post_write", qpn=qpn, data=core_pipe.pack(data), va=remote_va, rkey=rkey,
                   imm=imm, now=now)

    # ---- the sans-IO calls -------------------------------------------------------------
    def receive_packet(self, data: bytes, meta: RxMeta, *, now: float) -> None:
        self._shadow(data)
        self._call("receive", data=core_pipe.pack(data), now=now,
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
                or len(events) > core_pipe.MAX_EVENTS:
            raise RemoteCoreError("your endpoints' process: a pump reply without tx and events")
        self._events.extend(_checked(core_pipe.decode_event, e) for e in events)
        return [_checked(self._packet, row) for row in rows]

    def _packet(self, row: Any) -> TxPacket:
        if not isinstance(row, list) or len(row) != 5:
            raise core_pipe.ProtocolViolation(f"a packet row {str(row)[:60]}")
        index = core_pipe.integer(row[0], "route", 0, len(self._routes) - 1)
        peer, path = self._routes[index]
        return TxPacket(peer, path.plane, path.route,
                        core_pipe.integer(row[1], "ev", 0, 0xFFFFFFFF),
                        core_pipe.integer(row[2], "dscp", 0, 63),
                        core_pipe.integer(row[3], "ecn", 0, 3),
                        core_pipe.unpack(row[4], MAX_PAYLOAD))

    def next_event(self) -> Any:
        return self._events.popleft() if self._events else None

    def get_timer(self) -> float | None:
        return self._timer

    # ---- figures -----------------------------------------------------------------------
    def stats(self) -> dict[str, int]:
        """The endpoint's own counters: the student's word, for feedback, never for a grade."""
        got = self._call("stats").get("stats")
        if not isinstance(got, dict):
            raise RemoteCoreError("your endpoints' process: stats that are not a table")
        return {str(k)[:80]: v for k, v in list(got.items())[:500] if type(v) is int}


class RemoteEndpoints:
    """sim.harness.Harness.endpoints for one session: each host's endpoint in the sandbox."""

    def __init__(self, link: CoreLink) -> None:
        self.link = link

    def __call__(self, harness: Any, host: int) -> RemoteEndpoint:
        if harness.config is not None:
            raise ValueError("remote endpoints build their configuration in the sandbox: "
                             "a Harness with its own EndpointConfig cannot use them")
        planes, name = harness.fabric.planes, harness.fabric.host_name(host)
        self.link.call({"op": "new", "h": host, "contender": harness.settings.contender,
                        "planes": planes, "rate_bps": harness.settings.rate_bps,
                        "rtt": harness.base_rtt_for(host), "seed": harness.endpoint_seed(host),
                        "name": name})
        return RemoteEndpoint(self.link, host, planes, name)


@contextmanager
def student_endpoints(copy: Path, *, contained: bool = True) -> Iterator[RemoteEndpoints]:
    """core_server on the grading copy `copy` (its results folder is the sibling
    grader.workspace lays), in the sandbox unless `contained` is False (the grader's
    --trust-submissions), as a Harness.endpoints; ended on leaving, also on an error."""
    env = {"PYTHONPATH": str(copy), "PYTHONDONTWRITEBYTECODE": "1"}
    with PipeSession([sys.executable, "-m", "grader.core_server"], copy=copy,
                     results=copy.parent / "results", venv=Path(sys.prefix), env=env,
                     limits=LIMITS, contained=contained) as session:
        yield RemoteEndpoints(CoreLink(session))


def served_run(ctx: Any, body: Callable[[RemoteEndpoints], T]) -> T | dict[str, str]:
    """body(endpoints) with the student's endpoints served from the sandbox on ctx.copy (a
    grader.judging.JudgeContext in `measure`): its result, or {"raised": why} when the
    student's endpoints failed the stage or made the simulation fail."""
    from sim.engine import SimulationError

    if ctx.copy is None:
        return {"raised": "the grader has no grading copy to serve your endpoints from"}
    try:
        with student_endpoints(ctx.copy, contained=ctx.contained) as endpoints:
            return body(endpoints)
    except (RemoteCoreError, SimulationError) as exc:
        return {"raised": str(exc)}
