"""Conventional-network baseline: the controller plays a routing protocol with a hold timer.

MRC tables never change. For baseline (plain IPv6) traffic, a link-down report is acted on only
after `delay` seconds (default 3 s, like a BGP hold timer); then every switch of that plane gets
its baseline routes and ECMP groups recomputed without the dead link. A link that comes back
before its timer fires cancels the change, as a flap shorter than a hold time would.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from controller.install import InstallError
from controller.tables import (
    LinkKey,
    PortThresholds,
    SwitchTables,
    check_links,
    link_key,
    switch_tables,
)
from fabric.topology import Fabric, TopologyError

log = logging.getLogger("controller.convergence")

DEFAULT_DELAY = 3.0


class Scheduler(Protocol):
    def call_later(self, delay: float, fn: Callable[[], None]) -> None: ...


class Writer(Protocol):
    """What convergence needs from the installer (controller.install.Controller has it)."""

    def apply(self, name: str, new: SwitchTables) -> list: ...


class ThreadScheduler:
    """Wall-clock timers; `cancel` stops the ones still pending (on shutdown)."""

    def __init__(self) -> None:
        self._timers: set[threading.Timer] = set()
        self._lock = threading.Lock()

    def call_later(self, delay: float, fn: Callable[[], None]) -> None:
        def run() -> None:
            with self._lock:
                self._timers.discard(timer)
            fn()

        timer = threading.Timer(delay, run)
        timer.daemon = True
        with self._lock:
            self._timers.add(timer)
        timer.start()

    def cancel(self) -> None:
        with self._lock:
            timers, self._timers = self._timers, set()
        for t in timers:
            t.cancel()


@dataclass(frozen=True)
class Applied:
    """One convergence step that reached the switches (or failed to)."""

    link: LinkKey
    up: bool
    updates: dict[str, int]  # switch -> number of updates written
    errors: tuple[str, ...]


class Convergence:
    def __init__(self, fabric: Fabric, writer: Writer, delay: float = DEFAULT_DELAY,
                 scheduler: Scheduler | None = None,
                 thresholds: PortThresholds | None = None) -> None:
        if delay < 0:
            raise TopologyError(f"convergence delay must be >= 0 seconds, got {delay}")
        self.fabric, self.writer, self.delay = fabric, writer, delay
        self.scheduler = scheduler or ThreadScheduler()
        self.thresholds = thresholds
        self.reported: set[LinkKey] = set()  # down as last notified
        self.applied: frozenset[LinkKey] = frozenset()  # down as the switches know it
        self.history: list[Applied] = []
        self._lock = threading.Lock()

    def link_down(self, a: str, b: str) -> None:
        self._notify(a, b, up=False)

    def link_up(self, a: str, b: str) -> None:
        self._notify(a, b, up=True)

    def _notify(self, a: str, b: str, up: bool) -> None:
        (key,) = check_links(self.fabric, [link_key(a, b)])
        with self._lock:
            if up:
                self.reported.discard(key)
            else:
                self.reported.add(key)
        log.info("link %s %s: converging in %.1fs", " - ".join(sorted(key)),
                 "up" if up else "down", self.delay)
        self.scheduler.call_later(self.delay, lambda: self._settle(key, up))

    def _settle(self, key: LinkKey, up: bool) -> None:
        with self._lock:
            if (key not in self.reported) != up:
                return  # flapped back within the hold time
            applied = self.applied - {key} if up else self.applied | {key}
            if applied == self.applied:
                return
            self.applied = applied
            plane = next(self.fabric.by_name[n].plane for n in key if n in self.fabric.by_name)
            updates, errors = {}, []
            for switch in self.fabric.switches:
                if switch.plane != plane:
                    continue
                new = switch_tables(self.fabric, switch, applied, self.thresholds)
                try:
                    written = self.writer.apply(switch.name, new)
                except InstallError as err:
                    errors.append(str(err))
                    log.error("convergence write failed: %s", err)
                    continue
                if written:
                    updates[switch.name] = len(written)
            self.history.append(Applied(key, up, updates, tuple(errors)))
