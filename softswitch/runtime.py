"""The software switch's runtime control: JSON lines over a loopback TCP port, the
equivalent of BMv2's runtime CLI (queue rates and depths, the links' delay, statistics,
crash and reboot). A mix-in of softswitch.dataplane.Dataplane, which owns the ports, queues
and pipeline these commands act on.
"""

from __future__ import annotations

import hmac
import json
import logging
import socket
import struct
from typing import TYPE_CHECKING

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
    _control_buffers: dict[socket.socket, bytes]

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
        self._control_buffers[conn] = b""
        self.register(conn, lambda: self._control_read(conn))

    def _control_read(self, conn: socket.socket) -> None:
        try:
            chunk = conn.recv(MAX_CONTROL_REQUEST)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        buf = self._control_buffers[conn] + chunk
        if chunk and b"\n" not in buf and len(buf) < MAX_CONTROL_REQUEST:
            self._control_buffers[conn] = buf
            return
        self.unregister(conn)
        del self._control_buffers[conn]
        if b"\n" in buf:
            reply = self.control(buf.split(b"\n", 1)[0])
            try:
                conn.setblocking(True)
                conn.settimeout(1.0)
                conn.sendall(json.dumps(reply).encode() + b"\n")
            except OSError as err:
                log.info("control client went away: %s", err)
        conn.close()
        if self._detaching and self.on_detach is not None:
            self.on_detach()

    def control(self, line: bytes) -> dict:
        """Execute one runtime command (the equivalent of BMv2's runtime CLI)."""
        try:
            req = json.loads(line)
            if not isinstance(req, dict):
                raise ValueError("request must be a JSON object")
            if self.control_token is not None and not hmac.compare_digest(
                    str(req.get("token", "")).encode(), self.control_token.encode()):
                self.stats["control_refused"] += 1
                return {"ok": False, "error": "refused: this request lacks the run's control "
                                              "token"}
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
