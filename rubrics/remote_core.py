"""The grader's half of a stage it runs itself around the student's endpoints: the
simulator's hosts or the live fabric's agents here, the endpoints in the sandbox
(rubrics.core_server), served_core.endpoint between them.

Why: a stage run inside the submission's process reports whatever that process likes (a
forged "completed and verified"). Here the fabric, the clock, the frames and every figure are
the grader's; the sandbox only answers for its endpoints, and served_core.endpoint believes
nothing it says where the grader can see for itself (routes from the grader's book, memory
as the grader's shadow of what the network delivered, every field checked).

Two ways to reach the sandbox: the simulator calls it directly over the sandbox's pipe
(CoreLink, student_endpoints); the live fabric's agents, each in its host's network
namespace, reach theirs through a Unix socket in a private folder that the grader relays
to the pipe (served_cores, `python -m served_core.agent --served-core PATH`).
"""

from __future__ import annotations

import os
import shutil
import socket
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, TypeVar

from sandbox import contain
from sandbox.pipe import PipeError, PipeSession
from served_core import codec as codec
from served_core.endpoint import (
    CALL_TIMEOUT_S,
    MAX_REPLY,
    RemoteCoreError,
    RemoteEndpoint,
    reply_of,
)

T = TypeVar("T")
LIMITS = contain.Limits(wall_s=600.0, file_bytes=8 << 20, cpu_s=600)


class CoreLink:
    """One sandboxed core_server and the requests to it (a served_core.endpoint.Link)."""

    def __init__(self, session: PipeSession) -> None:
        self.session = session

    def call(self, request: dict[str, Any]) -> dict[str, Any]:
        try:
            raw = self.session.request(codec.line(request), CALL_TIMEOUT_S)
        except PipeError as exc:
            raise RemoteCoreError(f"your endpoints' process: {exc}") from None
        return reply_of(raw)


class RemoteEndpoints:
    """sim.harness.Harness.endpoints for one session: each host's endpoint in the sandbox."""

    def __init__(self, link: CoreLink) -> None:
        self.link = link

    def __call__(self, harness: Any, host: int) -> RemoteEndpoint:
        if harness.config is not None:
            raise ValueError("remote endpoints build their configuration in the sandbox: "
                             "a Harness with its own EndpointConfig cannot use them")
        planes, name = harness.fabric.planes, harness.fabric.host_name(host)
        self.link.call({"op": "new", "h": host, "kind": "sim",
                        "contender": harness.settings.contender, "planes": planes,
                        "rate_bps": harness.settings.rate_bps, "rtt": harness.base_rtt_for(host),
                        "seed": harness.endpoint_seed(host), "name": name})
        return RemoteEndpoint(self.link, host, planes, name)


def _session(copy: Path, contained: bool) -> PipeSession:
    """core_server on the grading copy `copy` (its results folder is the sibling
    grader.workspace lays), in the sandbox unless `contained` is False (the grader's
    --trust-submissions)."""
    env = {"PYTHONPATH": str(copy), "PYTHONDONTWRITEBYTECODE": "1"}
    return PipeSession([sys.executable, "-m", "rubrics.core_server"], copy=copy,
                       results=copy.parent / "results", venv=Path(sys.prefix), env=env,
                       limits=LIMITS, contained=contained)


@contextmanager
def student_endpoints(copy: Path, *, contained: bool = True) -> Iterator[RemoteEndpoints]:
    """The student's endpoints as a Harness.endpoints; ended on leaving, also on an error."""
    with _session(copy, contained) as session:
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


# ---- the live fabric: one relay per agent ------------------------------------------------
class _Relay:
    """A Unix socket whose one connection (the agent's) is relayed, line by line, to a
    sandboxed core_server. When the core stops answering, the agent gets the reason as the
    student's error (a "raised" reply) and the relay ends."""

    def __init__(self, path: Path, session: PipeSession) -> None:
        self.path, self.session = path, session
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(path))
        self.listener.listen(1)
        self.listener.settimeout(0.5)  # accept() wakes to see close() (_closing)
        self._closing = threading.Event()
        self.thread = threading.Thread(target=self._serve, name=f"relay {path.name}",
                                       daemon=True)
        self.thread.start()

    def _accept(self) -> socket.socket | None:
        while not self._closing.is_set():
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return None
            conn.settimeout(0.5)
            return conn
        return None

    def _serve(self) -> None:
        conn = self._accept()
        if conn is None:
            return  # closed before an agent came
        with conn:
            buf = bytearray()
            while True:
                end = buf.find(b"\n")
                if end < 0:
                    if len(buf) > MAX_REPLY:
                        return
                    try:
                        chunk = conn.recv(1 << 20)
                    except TimeoutError:
                        if self._closing.is_set():
                            return
                        continue
                    except OSError:
                        return
                    if not chunk:
                        return
                    buf += chunk
                    continue
                line = bytes(buf[:end + 1])
                del buf[:end + 1]
                failed = False
                try:
                    reply = self.session.request(line, CALL_TIMEOUT_S) + b"\n"
                except PipeError as exc:
                    failed, reply = True, codec.line({"raised": f"(the sandboxed core) {exc}"})
                try:
                    conn.sendall(reply)
                except OSError:
                    return
                if failed:
                    return

    def close(self) -> None:
        self._closing.set()
        self.thread.join(timeout=5.0)
        self.listener.close()


@contextmanager
def served_cores(copy: Path, hosts: list[int], *,
                 contained: bool = True) -> Iterator[dict[int, Path]]:
    """For each host, a sandboxed core_server on the grading copy and a Unix socket (in a
    folder only root can enter) that relays an agent's requests to it: {host: socket path},
    for `--served-core`. Everything is ended and removed on leaving, also on an error."""
    folder = Path(tempfile.mkdtemp(prefix="mrc-cores-"))
    try:
        with ExitStack() as stack:
            paths = {}
            for host in hosts:
                session = stack.enter_context(_session(copy, contained))
                relay = _Relay(folder / f"h{host}.sock", session)
                stack.callback(relay.close)
                paths[host] = relay.path
            yield paths
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        if os.path.exists(folder):
            raise RuntimeError(f"could not remove {folder}")
