"""The event loop one software-switch process runs, whatever number of switches it serves.

Every switch of the process (a softswitch.dataplane.Dataplane) registers its port sockets and
control sockets here; one epoll wait serves them all. The loop blocks without a timeout unless
some switch holds paced packets, so a process of idle switches sleeps in the kernel however
many switches it has. Hundreds of switches in one process cost one interpreter instead of
hundreds (docs/decisions.md, "Many software switches per process").
"""

from __future__ import annotations

import select
import socket
import time
from collections.abc import Callable
from typing import Protocol


class Paced(Protocol):
    """A switch with packets waiting for their pacer (Dataplane)."""

    def next_departure(self) -> float | None: ...

    def drain_all(self, now: float) -> None: ...

    def has_backlog(self) -> bool: ...


class EventLoop:
    """epoll over every socket of the process, plus the switches whose queues hold packets."""

    def __init__(self) -> None:
        self.epoll = select.epoll()
        self.handlers: dict[int, tuple[socket.socket, Callable[[], None]]] = {}
        self.busy: dict[int, Paced] = {}  # id(switch) -> switch with a backlog
        self.stopping = False

    def register(self, sock: socket.socket, handler: Callable[[], None]) -> None:
        self.epoll.register(sock.fileno(), select.EPOLLIN)
        self.handlers[sock.fileno()] = (sock, handler)

    def unregister(self, sock: socket.socket) -> None:
        self.epoll.unregister(sock.fileno())
        del self.handlers[sock.fileno()]

    def mark_busy(self, switch: Paced) -> None:
        self.busy[id(switch)] = switch

    def mark_idle(self, switch: Paced) -> None:
        self.busy.pop(id(switch), None)

    def run(self) -> None:
        poll, handlers, busy = self.epoll.poll, self.handlers, self.busy
        while not self.stopping:
            timeout = self._timeout() if busy else -1
            for fd, _ in poll(timeout):
                entry = handlers.get(fd)
                if entry is not None:  # not closed by an earlier handler of this round
                    entry[1]()
            if busy:
                now = time.monotonic()
                for switch in list(busy.values()):
                    switch.drain_all(now)
                    if not switch.has_backlog():
                        self.mark_idle(switch)

    def _timeout(self) -> float:
        times = [t for s in self.busy.values() for t in (s.next_departure(),) if t is not None]
        if not times:
            return -1
        return max(0.0, min(times) - time.monotonic())

    def close(self) -> None:
        for sock, _ in list(self.handlers.values()):
            self.unregister(sock)
            sock.close()
        self.epoll.close()
