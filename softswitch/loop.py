"""The event loop one software-switch process runs, whatever number of switches it serves.

Every switch of the process (a softswitch.dataplane.Dataplane) registers its port sockets and
control sockets here; one epoll wait serves them all. The loop blocks without a timeout unless
some switch holds paced packets, so a process of idle switches sleeps in the kernel however
many switches it has. Hundreds of switches in one process cost one interpreter instead of
hundreds (docs/decisions.md, "Many software switches per process").
"""

from __future__ import annotations

import heapq
import itertools
import select
import socket
import time
from collections.abc import Callable
from typing import Protocol


class Paced(Protocol):
    """A switch with packets waiting for their pacer (Dataplane)."""

    def on_due(self, when: float, now: float) -> None: ...


class EventLoop:
    """epoll over every socket of the process, plus a heap of the times at which some switch
    has packets due (a pacer's next departure, a delayed frame's arrival). A wake-up serves
    only the switches whose time has come: the cost of a paced frame does not grow with the
    number of switches and ports the process serves."""

    def __init__(self) -> None:
        self.epoll = select.epoll()
        self.handlers: dict[int, tuple[socket.socket, Callable[[], None]]] = {}
        self._due: list[tuple[float, int, Paced]] = []  # (when, order, switch): a heap
        self._order = itertools.count()
        self.stopping = False

    def register(self, sock: socket.socket, handler: Callable[[], None]) -> None:
        self.epoll.register(sock.fileno(), select.EPOLLIN)
        self.handlers[sock.fileno()] = (sock, handler)

    def unregister(self, sock: socket.socket) -> None:
        self.epoll.unregister(sock.fileno())
        del self.handlers[sock.fileno()]

    def wake_at(self, when: float, switch: Paced) -> None:
        """Call switch.on_due(when, now) once `when` has come; the switch drops the calls it
        has since moved (it asked again for an earlier time, or was drained before)."""
        heapq.heappush(self._due, (when, next(self._order), switch))

    def run(self) -> None:
        poll, handlers, due = self.epoll.poll, self.handlers, self._due
        while not self.stopping:
            timeout = max(0.0, due[0][0] - time.monotonic()) if due else -1
            for fd, _ in poll(timeout):
                entry = handlers.get(fd)
                if entry is not None:  # not closed by an earlier handler of this round
                    entry[1]()
            if due:
                now = time.monotonic()
                while due and due[0][0] <= now:
                    when, _, switch = heapq.heappop(due)
                    switch.on_due(when, now)

    def close(self) -> None:
        for sock, _ in list(self.handlers.values()):
            self.unregister(sock)
            sock.close()
        self.epoll.close()
