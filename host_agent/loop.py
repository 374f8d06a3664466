"""A single-threaded event loop: one selector for sockets, a timer heap, and one deadline source.

An idle loop sleeps in select() and costs no CPU. The deadline source is the endpoint (through
the driver): its timer is read on every wake-up instead of being pushed onto the heap, because
it moves with nearly every packet.
"""

from __future__ import annotations

import heapq
import itertools
import selectors
import socket
import time
from collections.abc import Callable
from typing import Protocol

Callback = Callable[[], None]


class DeadlineSource(Protocol):
    def deadline(self) -> float | None: ...

    def on_deadline(self, now: float) -> None: ...

    def after_wakeup(self) -> None: ...


class Timer:
    __slots__ = ("callback", "cancelled")

    def __init__(self, callback: Callback) -> None:
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class EventLoop:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._sel = selectors.DefaultSelector()
        self._handlers: dict[int, list[Callback | None]] = {}  # fd -> [read, write]
        self._timers: list[tuple[float, int, Timer]] = []
        self._seq = itertools.count()
        self._stopping = False
        self.max_lateness = 0.0  # seconds the source's deadline ran late: a busy or paused host
        self.wakeups = 0  # select() returns so far: callbacks can tell one wake-up from the next

    def add_reader(self, sock: socket.socket, callback: Callback) -> None:
        self._set_handler(sock, 0, callback)

    def set_writer(self, sock: socket.socket, callback: Callback | None) -> None:
        self._set_handler(sock, 1, callback)

    def remove(self, sock: socket.socket) -> None:
        if self._handlers.pop(sock.fileno(), None) is not None:
            self._sel.unregister(sock)

    def _set_handler(self, sock: socket.socket, slot: int, callback: Callback | None) -> None:
        fd = sock.fileno()
        handlers = self._handlers.get(fd)
        if handlers is None:
            handlers = self._handlers[fd] = [None, None]
            handlers[slot] = callback
            self._sel.register(sock, self._mask(handlers), handlers)
            return
        handlers[slot] = callback
        self._sel.modify(sock, self._mask(handlers), handlers)

    @staticmethod
    def _mask(handlers: list[Callback | None]) -> int:
        return ((selectors.EVENT_READ if handlers[0] else 0)
                | (selectors.EVENT_WRITE if handlers[1] else 0))

    def call_at(self, when: float, callback: Callback) -> Timer:
        timer = Timer(callback)
        heapq.heappush(self._timers, (when, next(self._seq), timer))
        return timer

    def stop(self) -> None:
        self._stopping = True

    def close(self) -> None:
        self._sel.close()

    def run(self, source: DeadlineSource) -> None:
        """Serve until stop(); every wake-up ends with source.after_wakeup()."""
        self._stopping = False
        while not self._stopping:
            deadline = self._next_deadline(source)
            timeout = None if deadline is None else max(0.0, deadline - self.clock())
            events = self._sel.select(timeout)
            self.wakeups += 1
            for key, mask in events:
                read, write = key.data
                if mask & selectors.EVENT_READ and read is not None:
                    read()
                if mask & selectors.EVENT_WRITE and write is not None:
                    write()
            self._run_timers(source)
            source.after_wakeup()

    def _next_deadline(self, source: DeadlineSource) -> float | None:
        while self._timers and self._timers[0][2].cancelled:
            heapq.heappop(self._timers)
        times = [t for t in (source.deadline(), self._timers[0][0] if self._timers else None)
                 if t is not None]
        return min(times, default=None)

    def _run_timers(self, source: DeadlineSource) -> None:
        now = self.clock()
        when = source.deadline()
        if when is not None and when <= now:
            self.max_lateness = max(self.max_lateness, now - when)
            source.on_deadline(now)
        while self._timers and self._timers[0][0] <= now:
            _, _, timer = heapq.heappop(self._timers)
            if not timer.cancelled:
                timer.callback()
