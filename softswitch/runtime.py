"""The software switch's runtime control: JSON lines over a loopback TCP port, the
equivalent of BMv2's runtime CLI (queue rates and depths, the links' delay, statistics,
crash and reboot). A mix-in of softswitch.dataplane.Dataplane, which owns the ports, queues
and pipeline these commands act on. With the run's token, a request counts only inside the
challenge-response of softswitch.control_auth; the token itself is never on the wire.
"""

from __future__ import annotations

import json
import logging
import socket
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING

from softswitch import control_auth as auth
from softswitch.queues import QueueConfigError, check_setting

if TYPE_CHECKING:
    from collections.abc import Callable

    from softswitch.pipeline import Pipeline
    from softswitch.queues import PortQueues

log = logging.getLogger("softswitch.dataplane")

MAX_CONTROL_REQUEST = 4096
MAX_LINK_DELAY_S = 1.0  # a fabric link of a second would be a satellite hop
SOL_PACKET, PACKET_STATISTICS = 263, 6
TPACKET_STATS = struct.Struct("=II")  # tp_packets, tp_drops (reset by each read)


@dataclass
class ControlSession:
    """One control connection: what it sent so far, and the nonces of its exchange."""
    buffer: bytes = b""
    client_nonce: bytes | None = None
    server_nonce: bytes | None = None


class RuntimeControl:
    """The control socket's commands (module docstring)."""

    queues: dict[int, PortQueues]
    priorities: int
    pipeline: Pipeline | None
    stats: dict[str, int]
    socks: dict[int, socket.socket]
    control_token: str | None
    process_stats: dict[str, int] | None
    down: bool
    delay: float
    delayed_ingress: frozenset[int]
    on_detach: Callable[[], None] | None
    on_attach: Callable[[], None] | None
    _detaching: bool
    _control_sessions: dict[socket.socket, ControlSession]

    def register(self, sock: socket.socket, handler: Callable[[], None]) -> None:
        raise NotImplementedError

    def unregister(self, sock: socket.socket) -> None:
        raise NotImplementedError

    def _accept(self, srv: socket.socket) -> None:
        try:
            conn, _ = srv.accept()
        except BlockingIOError:
            return
        conn.setblocking(False)
        self._control_sessions[conn] = ControlSession()
        self.register(conn, lambda: self._control_read(conn))

    def _control_read(self, conn: socket.socket) -> None:
        """Answer each complete line of `conn`; the connection ends after its request (a
        plain one, or the authenticated one that follows a hello)."""
        session = self._control_sessions[conn]
        try:
            chunk = conn.recv(MAX_CONTROL_REQUEST)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        session.buffer += chunk
        while b"\n" in session.buffer:
            line, session.buffer = session.buffer.split(b"\n", 1)
            reply, more = self._control_line(session, line)
            if not self._control_send(conn, reply) or not more:
                break
        else:
            if chunk and len(session.buffer) < MAX_CONTROL_REQUEST:
                return  # the line is not complete yet
        self.unregister(conn)
        del self._control_sessions[conn]
        conn.close()
        if self._detaching and self.on_detach is not None:
            self.on_detach()

    @staticmethod
    def _control_send(conn: socket.socket, reply: dict) -> bool:
        """Send one reply line (blocking, at most a second); False if the client is gone."""
        try:
            conn.settimeout(1.0)
            conn.sendall(json.dumps(reply).encode() + b"\n")
            conn.setblocking(False)
        except OSError as err:
            log.info("control client went away: %s", err)
            return False
        return True

    def _control_line(self, session: ControlSession, line: bytes) -> tuple[dict, bool]:
        """The reply to one line, and whether the connection waits for another (after a
        hello, the authenticated request; softswitch.control_auth)."""
        try:
            msg = json.loads(line)
        except ValueError as err:
            return {"ok": False, "error": f"request is not JSON: {err}"}, False
        if not isinstance(msg, dict):
            return {"ok": False, "error": "request must be a JSON object"}, False
        if session.server_nonce is not None:
            return self._authenticated(session, msg), False
        if "hello" in msg:
            return self._challenge(session, msg["hello"])
        if self.control_token is not None:
            return self._refuse("this request lacks the run's control token (the client "
                                "must prove it: softswitch.control_auth)"), False
        return self.execute(msg), False

    def _challenge(self, session: ControlSession, hello: object) -> tuple[dict, bool]:
        """Prove the token, bound to the client's fresh nonce and one of ours."""
        if self.control_token is None:
            return {"ok": False, "error": "this switch has no control token (started "
                                          "without --control-token-file)"}, False
        try:
            session.client_nonce = auth.parse_nonce(hello)
        except auth.AuthError as err:
            return {"ok": False, "error": f"bad hello: {err}"}, False
        session.server_nonce = auth.new_nonce()
        proof = auth.tag(self.control_token, auth.SERVER, session.client_nonce,
                         session.server_nonce)
        return {"ok": True, "nonce": session.server_nonce.hex(), "proof": proof}, True

    def _authenticated(self, session: ControlSession, msg: dict) -> dict:
        """Execute the request if its MAC binds it to this connection's nonces (so neither a
        client without the token nor a replay of another session's bytes gets through);
        the reply carries a MAC of its own."""
        token, cn, sn = self.control_token, session.client_nonce, session.server_nonce
        assert token is not None and cn is not None and sn is not None
        body = msg.get("body")
        try:
            if not isinstance(body, str):
                raise auth.AuthError("no body")
            auth.check(token, auth.REQUEST, cn, sn, body.encode(), msg.get("mac"))
            req = json.loads(body)
        except (auth.AuthError, ValueError):
            return self._refuse("the request's authentication is wrong (not the run's control "
                                "token, or replayed from another session)")
        reply = self.execute(req) if isinstance(req, dict) else \
            {"ok": False, "error": "request must be a JSON object"}
        reply_body = json.dumps(reply)
        return {"body": reply_body, "mac": auth.tag(token, auth.REPLY, cn, sn,
                                                    reply_body.encode())}

    def _refuse(self, why: str) -> dict:
        self.stats["control_refused"] += 1
        return {"ok": False, "error": f"refused: {why}"}

    def control(self, line: bytes) -> dict:
        """One plain request line (as a client without a token sends it): refused when this
        switch has a token, else executed."""
        reply, _ = self._control_line(ControlSession(), line)
        return reply

    def execute(self, req: dict) -> dict:
        """Execute one runtime command (the equivalent of BMv2's runtime CLI); the caller has
        checked the client's right to send it."""
        try:
            cmd = req.get("cmd")
            if cmd in ("attach", "detach") or self.down:
                return self._power(cmd)
            if cmd in ("set_queue_rate", "set_queue_depth"):
                return self._set_queue(cmd, req)
            if cmd == "set_link_delay":
                return self._set_link_delay(req)
            if cmd == "queues":
                return {"ok": True, "queues": {str(p): q.stats() for p, q in self.queues.items()}}
            if cmd == "stats":
                return self._stats()
            raise ValueError(f"unknown command {cmd!r} (set_queue_rate, set_queue_depth, "
                             "set_link_delay, queues, stats, detach, attach)")
        except (ValueError, TypeError, QueueConfigError, OSError) as err:
            return {"ok": False, "error": str(err)}

    def _stats(self) -> dict:
        self._read_kernel_drops()
        drops = self.pipeline.drop_stats() if self.pipeline else {}
        reply = {"ok": True, "down": self.down, "stats": dict(self.stats), "pipeline": drops}
        if self.process_stats is not None:
            reply["process"] = dict(self.process_stats)
        return reply

    def _power(self, cmd: object) -> dict:
        """detach (the switch crashes; done once the reply is sent), attach (it reboots), and
        the only other command a down switch answers, stats."""
        if cmd == "stats":
            return self._stats()
        if cmd == "detach" and not self.down and self.on_detach is not None:
            self._detaching = True
            return {"ok": True}
        if cmd == "attach" and self.down and self.on_attach is not None:
            self.on_attach()
            return {"ok": True}
        if self.on_detach is None:
            raise ValueError(f"{cmd}: this switch is not served by a softswitch process")
        state = "down" if self.down else "up"
        raise ValueError(f"{cmd!r} refused: the switch is {state} (a down switch answers "
                         "only attach and stats; detach crashes a switch that is up)")

    def _read_kernel_drops(self) -> None:
        """Frames the kernel dropped because a port's socket buffer was full (the switch
        process was not scheduled in time): losses the queues never saw."""
        for sock in self.socks.values():
            _packets, drops = TPACKET_STATS.unpack(
                sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, TPACKET_STATS.size))
            self.stats["rx_kernel_drops"] += drops

    def _set_queue(self, cmd: str, req: dict) -> dict:
        key = "rate" if cmd == "set_queue_rate" else "depth"
        value = req.get(key)
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise ValueError(f"{cmd} needs a numeric {key!r}")
        port, priority = req.get("port"), req.get("priority")
        if port is not None and port not in self.queues:
            raise ValueError(f"port {port} is not a port of this switch "
                             f"({sorted(self.queues)})")
        check_setting(value, key, self.priorities, priority)
        if key == "depth" and (value < 1 or value != int(value)):
            raise ValueError(f"depth must be a whole number of packets >= 1, got {value}")
        for p, q in self.queues.items():
            if port is None or p == port:
                if key == "rate":
                    q.set_rate(float(value), priority)
                else:
                    q.set_depth(int(value), priority)
        return {"ok": True}

    def _set_link_delay(self, req: dict) -> dict:
        """{"delay": seconds, "host_ports": [...]}: every port's link delays what this switch
        sends by `delay`, and frames from the host-facing ports listed arrive `delay` late
        (the host's side of its link). 0 turns it off; frames already held keep theirs."""
        delay, host_ports = req.get("delay"), req.get("host_ports", [])
        if not isinstance(delay, (int, float)) or isinstance(delay, bool) or not (
                0 <= delay <= MAX_LINK_DELAY_S):
            raise ValueError(f"set_link_delay needs a 'delay' in seconds, 0..{MAX_LINK_DELAY_S}")
        if not isinstance(host_ports, list) or not all(p in self.queues for p in host_ports):
            raise ValueError(f"host_ports must list ports of this switch ({sorted(self.queues)})")
        self.delay = float(delay)
        for q in self.queues.values():
            q.delay = self.delay
        self.delayed_ingress = frozenset(host_ports) if self.delay else frozenset()
        return {"ok": True}
