"""Who holds a TCP port on this machine, read from /proc rather than by connecting to it.

Any local user may listen on a loopback port before a switch does (issue 54). Connecting
to the port, as the readiness probe used to, cannot tell the switch from that user's
listener; /proc can: /proc/net/tcp and tcp6 give each socket's port, state, owner uid and
inode, and /proc/PID/fd shows which inodes a process holds. So a port counts as our switch's
only when a socket listening on it is one of that process's descriptors (`Snapshot`),
and a port another listener holds is named with its uid (`holder`) before a run starts.
"""

from __future__ import annotations

import contextlib
import errno
import os
import pwd
import socket
from dataclasses import dataclass
from pathlib import Path

from safety.errors import SafetyError

TCP_TABLES = (Path("/proc/net/tcp"), Path("/proc/net/tcp6"))
LISTEN = 0x0A  # include/net/tcp_states.h: TCP_LISTEN


@dataclass(frozen=True)
class TcpSocket:
    """One line of /proc/net/tcp(6)."""
    port: int
    state: int
    uid: int
    inode: int


def socket_table(tables: tuple[Path, ...] = TCP_TABLES) -> list[TcpSocket]:
    """Every TCP socket of this network namespace (IPv4 and IPv6)."""
    out = []
    for table in tables:
        try:
            lines = table.read_text().splitlines()[1:]
        except FileNotFoundError:  # no IPv6 in this kernel
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 10:
                continue
            out.append(TcpSocket(int(fields[1].rsplit(":", 1)[1], 16), int(fields[3], 16),
                                 int(fields[7]), int(fields[9])))
    return out


def listening(port: int, table: list[TcpSocket] | None = None) -> list[TcpSocket]:
    """The sockets listening on `port`, on any address."""
    return [s for s in (socket_table() if table is None else table)
            if s.port == port and s.state == LISTEN]


def socket_inodes(pid: int) -> set[int]:
    """The inodes of the sockets process `pid` holds (empty if it is gone)."""
    out = set()
    fd_dir = Path(f"/proc/{pid}/fd")
    with contextlib.suppress(FileNotFoundError, ProcessLookupError):
        for entry in os.scandir(fd_dir):
            with contextlib.suppress(OSError):  # closed while we looked
                target = os.readlink(entry.path)
                if target.startswith("socket:["):
                    out.add(int(target[8:-1]))
    return out


def describe_uid(uid: int) -> str:
    """'uid 65534 (nobody)', or just the uid when no passwd entry names it."""
    try:
        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except KeyError:
        return f"uid {uid}"


class ForeignListener(SafetyError, RuntimeError):
    """Someone other than the process we started listens on a port of its switch."""


class Snapshot:
    """The socket table, read once, and the socket inodes of the processes asked about, read
    after it (so a socket the table shows as ours is among them): one reading for the many
    ports of a switch process."""

    def __init__(self) -> None:
        self.table = socket_table()
        self._inodes: dict[int, set[int]] = {}

    def listens(self, port: int, pid: int) -> bool:
        """Whether process `pid` listens on `port` (True) or nobody does yet (False); raises
        ForeignListener when another socket listens on it, whether or not ours does too
        (with SO_REUSEPORT both can, and it would take some of the switch's connections)."""
        sockets = listening(port, self.table)
        if not sockets:
            return False
        if pid not in self._inodes:
            self._inodes[pid] = socket_inodes(pid)
        foreign = [s for s in sockets if s.inode not in self._inodes[pid]]
        if foreign:
            holders = ", ".join(sorted({describe_uid(s.uid) for s in foreign}))
            raise ForeignListener(f"port {port} is listened on by a socket that is not our "
                                  f"switch process {pid}'s ({holders}); not trusting it")
        return True


def bindable(port: int) -> bool:
    """Whether a switch could bind `port` now, on every address, as the switches bind
    (SO_REUSEADDR: a closed connection's TIME_WAIT does not count as in use)."""
    try:
        probe = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)  # and 0.0.0.0
        address: tuple = ("::", port)
    except OSError:  # IPv6 off in this kernel
        probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        address = ("0.0.0.0", port)
    with probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as err:
            if err.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
            raise
    return True


def holder(port: int, table: list[TcpSocket]) -> str | None:
    """None if `port` is free for a switch; else who holds it, as a log line can say it."""
    sockets = listening(port, table)
    if sockets:
        return "listened on by " + ", ".join(sorted({describe_uid(s.uid) for s in sockets}))
    if not bindable(port):
        return "in use (a socket /proc/net/tcp does not show listening; holder unknown)"
    return None
