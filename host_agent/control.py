"""Local control protocol of a host agent: JSON lines over a UNIX stream socket.

Request: one JSON object per line, {"cmd": NAME, ...arguments, "id": optional}. Response: one
JSON object per line, {"ok": true, ...} or {"ok": false, "error": MESSAGE}, echoing "id". A
handler may answer later (an RDMA write answers when it completes), so a client that pipelines
requests should match responses by "id".

The server lives in the agent's event loop (no threads): it only needs add_reader/set_writer/
remove from its loop. The client is blocking and standalone, for the CLI, tests and the Mininet
scripts.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import stat
from collections.abc import Callable
from typing import Any, Protocol

from host_agent.errors import HostAgentError

log = logging.getLogger(__name__)

MAX_LINE = 1 << 20  # a request longer than this is refused and the client dropped
Reply = Callable[[dict[str, Any]], None]
Handler = Callable[[dict[str, Any], Reply], None]


class ControlError(HostAgentError, RuntimeError):
    """The agent refused a request, or could not be reached; the message says why."""


class AgentUnreachable(ControlError):
    """No agent listens on the socket path."""


class Loop(Protocol):
    def add_reader(self, sock: socket.socket, callback: Callable[[], None]) -> None: ...

    def set_writer(self, sock: socket.socket, callback: Callable[[], None] | None) -> None: ...

    def remove(self, sock: socket.socket) -> None: ...


class RequestError(HostAgentError, ValueError):
    """A request names an unknown command or carries bad arguments (answered, not fatal)."""


class _Client:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.inbuf = bytearray()
        self.outbuf = bytearray()
        self.closed = False


class ControlServer:
    def __init__(self, path: str, loop: Loop, handler: Handler) -> None:
        self.path = path
        self._loop = loop
        self._handler = handler
        self._clients: dict[int, _Client] = {}
        _remove_stale_socket(path)
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind(path)
        self._inode = os.stat(path).st_ino
        self._sock.listen(16)
        self._sock.setblocking(False)
        loop.add_reader(self._sock, self._accept)

    def close(self) -> None:
        """Close every client and the listener; remove the socket file only if it is still ours."""
        for client in list(self._clients.values()):
            self._drop(client)
        self._loop.remove(self._sock)
        self._sock.close()
        with contextlib.suppress(FileNotFoundError):
            if os.stat(self.path).st_ino == self._inode:
                os.unlink(self.path)

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self._sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            sock.setblocking(False)
            client = _Client(sock)
            self._clients[sock.fileno()] = client
            self._loop.add_reader(sock, lambda c=client: self._read(c))

    def _read(self, client: _Client) -> None:
        try:
            data = client.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._drop(client)
            return
        client.inbuf += data
        while not client.closed:
            end = client.inbuf.find(b"\n")
            if end < 0:
                if len(client.inbuf) > MAX_LINE:
                    log.warning("control client sent a line over %d bytes: dropped", MAX_LINE)
                    self._drop(client)
                return
            line = bytes(client.inbuf[:end])
            del client.inbuf[: end + 1]
            if line.strip():
                self._dispatch(client, line)

    def _dispatch(self, client: _Client, line: bytes) -> None:
        request_id: Any = None

        def reply(response: dict[str, Any]) -> None:
            if request_id is not None:
                response = {**response, "id": request_id}
            self._send(client, response)

        try:
            request = json.loads(line)
            if not isinstance(request, dict) or not isinstance(request.get("cmd"), str):
                raise RequestError('a request is a JSON object with a string "cmd"')
            request_id = request.get("id")
            self._handler(request, reply)
        except ValueError as exc:  # RequestError, json.JSONDecodeError
            reply({"ok": False, "error": str(exc)})
        except Exception as exc:  # a handler bug must not take the agent (and its peers) down
            log.exception("control request %r failed", line[:200])
            reply({"ok": False, "error": f"internal error: {type(exc).__name__}: {exc}"})

    def _send(self, client: _Client, response: dict[str, Any]) -> None:
        if client.closed:
            return
        client.outbuf += json.dumps(response, default=str).encode() + b"\n"
        self._flush(client)

    def _flush(self, client: _Client) -> None:
        while client.outbuf:
            try:
                sent = client.sock.send(client.outbuf)
            except (BlockingIOError, InterruptedError):
                self._loop.set_writer(client.sock, lambda: self._flush(client))
                return
            except OSError:
                self._drop(client)
                return
            del client.outbuf[:sent]
        self._loop.set_writer(client.sock, None)

    def _drop(self, client: _Client) -> None:
        if client.closed:
            return
        client.closed = True
        self._clients.pop(client.sock.fileno(), None)
        self._loop.remove(client.sock)
        client.sock.close()


def _remove_stale_socket(path: str) -> None:
    """Reuse a path left by a crashed agent, but never steal a live agent's socket."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise ControlError(f"{path} exists and is not a socket: pick another --socket path")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(path)
    except (ConnectionRefusedError, FileNotFoundError):
        os.unlink(path)
        return
    finally:
        probe.close()
    raise ControlError(f"an agent is already listening on {path}: shut it down or pick another")


class ControlClient:
    """Blocking client. call() sends one request and waits for its answer; submit() and
    next_reply() pipeline many requests on one connection (answers matched by id)."""

    def __init__(self, path: str, timeout: float | None = 60.0) -> None:
        self.path = path
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.settimeout(timeout)
        try:
            self._sock.connect(path)
        except OSError as exc:
            self._sock.close()
            raise AgentUnreachable(f"cannot reach the agent at {path}: {exc}") from exc
        self._buf = bytearray()
        self._next_id = 1
        self._early: dict[int, dict[str, Any]] = {}  # answers read while waiting for another
        self._pending: set[int] = set()

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> ControlClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def call(self, cmd: str, **args: Any) -> dict[str, Any]:
        """Raise ControlError when the agent answers ok=false or the connection breaks."""
        request_id = self.submit(cmd, **args)
        response = self._wait(cmd, request_id)
        if not response.get("ok"):
            raise ControlError(f"{cmd}: {response.get('error', 'refused')}")
        return response

    def submit(self, cmd: str, **args: Any) -> int:
        """Send a request without waiting for its answer; returns the request's id."""
        request_id = self._next_id
        self._next_id += 1
        request = {"cmd": cmd, **{k: v for k, v in args.items() if v is not None},
                   "id": request_id}
        try:
            self._sock.sendall(json.dumps(request).encode() + b"\n")
        except OSError as exc:
            raise ControlError(f"{cmd}: connection to {self.path} failed: {exc}") from exc
        self._pending.add(request_id)
        return request_id

    def next_reply(self) -> tuple[int, dict[str, Any]]:
        """The next answer to any submitted request, as (id, response); an ok=false answer is
        returned, not raised, so the caller can tell which request failed."""
        if self._early:
            request_id = next(iter(self._early))
            return request_id, self._early.pop(request_id)
        if not self._pending:
            raise ControlError("next_reply: no request is waiting for an answer")
        try:
            response = self._read_line()
        except OSError as exc:
            raise ControlError(f"connection to {self.path} failed: {exc}") from exc
        return self._claim(response)

    def _wait(self, cmd: str, request_id: int) -> dict[str, Any]:
        try:
            while request_id not in self._early:
                got, response = self._claim(self._read_line())
                self._early[got] = response
        except OSError as exc:
            raise ControlError(f"{cmd}: connection to {self.path} failed: {exc}") from exc
        return self._early.pop(request_id)

    def _claim(self, response: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        request_id = response.pop("id", None)
        if request_id not in self._pending:
            raise ControlError(f"agent answered a request never sent: id {request_id!r}")
        self._pending.discard(request_id)
        return request_id, response

    def _read_line(self) -> dict[str, Any]:
        while b"\n" not in self._buf:
            chunk = self._sock.recv(65536)
            if not chunk:
                raise ConnectionResetError("the agent closed the connection")
            self._buf += chunk
        end = self._buf.index(b"\n")
        line = bytes(self._buf[:end])
        del self._buf[: end + 1]
        try:
            response = json.loads(line)
        except ValueError as exc:
            raise ControlError(f"agent sent a line that is not JSON: {line[:80]!r}") from exc
        if not isinstance(response, dict):
            raise ControlError(f"agent sent a non-object response: {line[:80]!r}")
        return response
