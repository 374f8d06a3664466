"""A single-threaded event loop: one epoll set for sockets, a timer heap, and one deadline source.

An idle loop sleeps in epoll_wait and costs no CPU. The deadline source is the endpoint (through
the driver): its timer is read on every wake-up instead of being pushed onto the heap, because
it moves with nearly every packet. A reader registered `quiet` finishes its own work (the NIC
drain sends what the endpoint has after every round), so a wake-up in which only quiet readers
ran and no timer was due does not call the source's after_wakeup() again.

`hold` is the loop's interrupt moderation: after a wake-up in which a `held` socket's callback
ran (the NICs' frames), the loop does not look at its held sockets again for `hold` seconds,
unless a timer or the source's deadline is due sooner, so frames that arrive meanwhile are read
in one wake-up. Sockets that are not held (the control socket, its clients, netlink, the
wake-up pipe) are served at once throughout, as a NIC's interrupt moderation never delays the
application's own calls. Paced, each frame is otherwise a wake-up of its own, and a wake-up
costs several times what its frames do (docs/benchmarks.md, "Paced"). It delays every frame's
handling by up to `hold`; 0 turns it off.
"""

from __future__ import annotations

import heapq
import itertools
import select
import socket
import time
from collections.abc import Callable
from typing import Protocol

Callback = Callable[[], None]
MAX_HOLD = 0.1  # seconds; longer would pass for a slow network rather than a slow host
# What selectors.EpollSelector reports as readable / writable: errors and hang-ups count as both.
_READ_EVENTS = ~select.EPOLLOUT
_WRITE_EVENTS = ~select.EPOLLIN


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
    def __init__(self, clock: Callable[[], float] = time.monotonic, *, hold: float = 0.0,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        if not 0.0 <= hold <= MAX_HOLD:
            raise ValueError(f"hold={hold!r}: use 0 (off) up to {MAX_HOLD} seconds")
        self.clock = clock
        self.hold = hold
        self._sleep = sleep
        self._epoll = select.epoll()  # every socket
        self._unheld = select.epoll()  # the sockets a hold does not cover
        self._unheld_fds = 0
        self._handlers: dict[int, list] = {}  # fd -> [read, write, quiet, held]
        self._timers: list[tuple[float, int, Timer]] = []
        self._seq = itertools.count()
        self._stopping = False
        self.max_lateness = 0.0  # seconds the source's deadline ran late: a busy or paused host
        self.wakeups = 0  # epoll_wait returns so far: callbacks can tell one wake-up from the next

    def add_reader(self, sock: socket.socket, callback: Callback, *, quiet: bool = False,
                   held: bool = False) -> None:
        """Call `callback` when `sock` is readable; `quiet` and `held`: see the module
        docstring (both are the socket's, for its writer too)."""
        self._set_handler(sock, 0, callback, quiet, held)

    def set_writer(self, sock: socket.socket, callback: Callback | None) -> None:
        self._set_handler(sock, 1, callback)

    def remove(self, sock: socket.socket) -> None:
        fd = sock.fileno()
        handlers = self._handlers.pop(fd, None)
        if handlers is not None:
            self._epoll.unregister(fd)
            if not handlers[3]:
                self._unheld.unregister(fd)
                self._unheld_fds -= 1

    def _set_handler(self, sock: socket.socket, slot: int, callback: Callback | None,
                     quiet: bool | None = None, held: bool = False) -> None:
        fd = sock.fileno()
        handlers = self._handlers.get(fd)
        new = handlers is None
        if handlers is None:
            handlers = self._handlers[fd] = [None, None, False, held]
            self._unheld_fds += not held
        elif held and not handlers[3]:
            raise ValueError(f"fd {fd} is already registered without a hold")
        handlers[slot] = callback
        if quiet is not None:
            handlers[2] = quiet
        mask = (select.EPOLLIN if handlers[0] else 0) | (select.EPOLLOUT if handlers[1] else 0)
        sets = (self._epoll,) if handlers[3] else (self._epoll, self._unheld)
        for epoll in sets:
            if new:
                epoll.register(fd, mask)
            else:
                epoll.modify(fd, mask)

    def call_at(self, when: float, callback: Callback) -> Timer:
        timer = Timer(callback)
        heapq.heappush(self._timers, (when, next(self._seq), timer))
        return timer

    def stop(self) -> None:
        self._stopping = True

    def close(self) -> None:
        self._epoll.close()
        self._unheld.close()

    def run(self, source: DeadlineSource) -> None:
        """Serve until stop(); a wake-up in which a timer or a reader that is not quiet ran, or
        a writer, ends with source.after_wakeup()."""
        self._stopping = False
        poll, unheld, clock, hold = self._epoll.poll, self._unheld.poll, self.clock, self.hold
        resume = 0.0  # with a hold: the held sockets are looked at again from this time on
        while not self._stopping:
            deadline = self._next_deadline(source)
            events = None
            if hold:
                until = resume if deadline is None or resume < deadline else deadline
                wait = until - clock()
                if wait > 0:
                    if self._unheld_fds:
                        events = unheld(wait)  # served during the hold; empty: it is over
                    else:
                        self._sleep(wait)  # nothing runs meanwhile: the deadline stays
            if not events:
                events = poll(-1 if deadline is None else max(0.0, deadline - clock()))
            self.wakeups += 1
            active, held_ran = self._dispatch(events)
            if hold and held_ran:
                resume = clock() + hold
            if self._run_timers(source) or active:
                source.after_wakeup()

    def _dispatch(self, events: list[tuple[int, int]]) -> tuple[bool, bool]:
        """Run the callbacks of one wake-up; (whether one that is not quiet ran, whether a
        held socket's did)."""
        handlers = self._handlers
        active = held_ran = False
        for fd, mask in events:
            callbacks = handlers.get(fd)
            if callbacks is None:
                continue  # removed by a callback that ran before it in this wake-up
            read, write, quiet, held = callbacks
            if mask & _READ_EVENTS and read is not None:
                read()
                active = active or not quiet
                held_ran = held_ran or held
            if mask & _WRITE_EVENTS and write is not None:
                write()
                active = True
                held_ran = held_ran or held
        return active, held_ran

    def _next_deadline(self, source: DeadlineSource) -> float | None:
        timers = self._timers
        while timers and timers[0][2].cancelled:
            heapq.heappop(timers)
        when = source.deadline()
        if not timers:
            return when
        return timers[0][0] if when is None or timers[0][0] < when else when

    def _run_timers(self, source: DeadlineSource) -> bool:
        """Run what is due; whether anything was."""
        now = self.clock()
        when = source.deadline()
        ran = False
        if when is not None and when <= now:
            self.max_lateness = max(self.max_lateness, now - when)
            source.on_deadline(now)
            ran = True
        while self._timers and self._timers[0][0] <= now:
            _, _, timer = heapq.heappop(self._timers)
            if not timer.cancelled:
                timer.callback()
                ran = True
        return ran
