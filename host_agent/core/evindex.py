"""The tables of one EV set: its layout (which EV takes which path, in which pool), the counts
derived from states and pools, the spray rings, and the caches read on every packet.

One object owns them so that one call, invalidate(), drops every cache a change of state,
pool or plane may have made stale (the floor's and the control chooser's included). EvSet is
the only writer. Floor and ControlChooser read the tables through `EvTables`, a read-only
view: they keep cursors and caches of their own, and register forget() here.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from host_agent.core.errors import LocalProtocolError
from host_agent.core.evstate import EvConfig, EvEntry, Pool
from host_agent.core.types import EvState, PathInfo

INDEX_BITS = 12  # EVs per connection: at most 2**12
TAG_BITS = 32 - INDEX_BITS
INDEX_MASK = (1 << INDEX_BITS) - 1


class EvTables(Protocol):
    """What Floor and ControlChooser may read of an EV set (evs module docstring)."""

    @property
    def planes(self) -> tuple[int, ...]: ...
    @property
    def order(self) -> Sequence[EvEntry]: ...  # every EV in build order: index i is the i-th
    @property
    def plane_entries(self) -> Mapping[int, Sequence[EvEntry]]: ...  # in build order
    @property
    def plane_usable(self) -> Mapping[int, bool]: ...
    @property
    def skipping(self) -> Mapping[int, int]: ...  # EVs resting in SKIP per plane
    @property
    def bad(self) -> Mapping[int, EvEntry]: ...  # ASSUMED_BAD EVs by value

    def depend(self, forget: Callable[[], None]) -> None: ...


def _check_layout(paths: Sequence[PathInfo], config: EvConfig, tag: int, planes: int) -> None:
    if type(tag) is not int or not 0 < tag < 1 << TAG_BITS:
        raise LocalProtocolError(f"tag must be in 1..{(1 << TAG_BITS) - 1:#x}, got {tag!r}")
    if config.evs_per_connection < planes:
        raise LocalProtocolError(
            f"evs_per_connection ({config.evs_per_connection}) is below the number of "
            f"planes ({planes}); raise it so every plane gets an EV")
    total = config.evs_per_connection + config.backups_per_plane * planes
    if total > 1 << INDEX_BITS:
        raise LocalProtocolError(f"{total} EVs per connection exceed {1 << INDEX_BITS}: "
                                 "lower evs_per_connection or backups_per_plane")


class EvIndex:
    """The tables of one EvSet (module docstring). Built from the paths: the i-th EV built
    (actives in build order, then each plane's backups) is tag << INDEX_BITS | i, on its
    plane's paths in turn (evs module docstring, "EV values")."""

    def __init__(self, paths: Sequence[PathInfo], config: EvConfig, tag: int,
                 rng: random.Random, counters: dict[str, int]) -> None:
        if not paths:
            raise LocalProtocolError("EvSet needs at least one path")
        if len(set(paths)) != len(paths):
            raise LocalProtocolError("EvSet paths contain duplicates; pass each route once")
        by_plane: dict[int, list[PathInfo]] = {}
        for path in paths:
            by_plane.setdefault(path.plane, []).append(path)
        self.planes: tuple[int, ...] = tuple(sorted(by_plane))
        _check_layout(paths, config, tag, len(self.planes))
        self.entries: dict[int, EvEntry] = {}  # by EV value, in build order
        self.plane_entries: dict[int, list[EvEntry]] = {p: [] for p in self.planes}
        actives = [self._add(tag, by_plane, self.planes[i % len(self.planes)], Pool.ACTIVE)
                   for i in range(config.evs_per_connection)]  # fmt: skip
        # active slots each plane was built with: a reinstated EV refills one below it
        self.target = {p: len(self.plane_entries[p]) for p in self.planes}
        for plane in self.planes:
            for _ in range(config.backups_per_plane):
                self._add(tag, by_plane, plane, Pool.BACKUP)
        self.order: list[EvEntry] = list(self.entries.values())
        self.path_size: dict[PathInfo, int] = {}  # EVs per path
        for entry in self.order:
            self.path_size[entry.path] = self.path_size.get(entry.path, 0) + 1
        self.plane_usable: dict[int, bool] = dict.fromkeys(self.planes, True)
        self.skipping: dict[int, int] = dict.fromkeys(self.planes, 0)
        self.bad: dict[int, EvEntry] = {}
        self.vacant: dict[int, int] = dict.fromkeys(self.planes, 0)  # active slots unfilled
        self.usable_count = 0  # EVs GOOD, active, on a usable plane
        self.plane_good: dict[int, int] = dict.fromkeys(self.planes, 0)  # the same per plane
        # one ring of active EVs per plane (a NIC port), starting at a random EV so that
        # connections need not all start on one path; a credit per plane for the smooth
        # weighted round robin (EvSet._next_plane), the first turn to the start EV's plane
        start = rng.randrange(len(actives))
        self.rings: dict[int, deque[EvEntry]] = {p: deque() for p in self.planes}
        for entry in actives[start:] + actives[:start]:
            self.rings[entry.path.plane].append(entry)
        self.credit: dict[int, int] = dict.fromkeys(self.planes, 0)
        self.credit[actives[start].path.plane] = 1
        # caches: each is dropped by invalidate()
        self.starved: bool | None = None  # below the floor somewhere (EvSet._below_floor)
        self.deadline: float | None = None  # EvSet.next_deadline(), while deadline_ok
        self.deadline_ok = False
        self.deferred: set[int] = set()  # planes whose last refill deferred, nothing changed
        self._dependents: list[Callable[[], None]] = []
        self._counters = counters  # the EvSet's: swaps, backups_exhausted, swaps_deferred
        for entry in actives:  # into service
            entry.in_ring = True
            self.refresh(entry)

    def _add(self, tag: int, by_plane: dict[int, list[PathInfo]], plane: int,
             pool: Pool) -> EvEntry:
        plane_paths, placed = by_plane[plane], self.plane_entries[plane]
        entry = EvEntry(tag << INDEX_BITS | len(self.entries),
                        plane_paths[len(placed) % len(plane_paths)], pool=pool)
        self.entries[entry.ev] = entry
        placed.append(entry)
        return entry

    def depend(self, forget: Callable[[], None]) -> None:
        """Call `forget` on every invalidate(): a reader's cache built from these tables."""
        self._dependents.append(forget)

    def invalidate(self) -> None:
        """A state, pool, plane or probe changed: drop every cache derived from the tables."""
        self.starved = None
        self.deadline_ok = False
        self.deferred.clear()
        for forget in self._dependents:
            forget()

    def refresh(self, entry: EvEntry) -> None:
        """Recompute the entry's usable flag and the counts of usable EVs; a newly usable EV
        joins its plane's ring (the ring drops unusable EVs lazily, EvSet.choose)."""
        usable = (entry.pool == Pool.ACTIVE and entry.state is EvState.GOOD
                  and self.plane_usable[entry.path.plane])  # fmt: skip
        if usable != entry.usable:
            entry.usable = usable
            self.usable_count += 1 if usable else -1
            self.plane_good[entry.path.plane] += 1 if usable else -1
            if usable and not entry.in_ring:
                entry.in_ring = True
                self.rings[entry.path.plane].append(entry)
        self.invalidate()

    def active_on(self, plane: int) -> int:
        return sum(1 for e in self.plane_entries[plane] if e.pool == Pool.ACTIVE)

    def take_out(self, entry: EvEntry) -> None:
        """Move an EV out of service; an active one leaves a slot for a healthy backup."""
        was_active = entry.pool == Pool.ACTIVE
        entry.pool = Pool.OUT
        if was_active:
            self.vacant[entry.path.plane] += 1
            self.refill(entry.path.plane, avoid=entry.path)

    def refill_all(self) -> None:
        for plane, vacant in self.vacant.items():
            if vacant:
                self.refill(plane)

    def refill(self, plane: int, avoid: PathInfo | None = None) -> None:
        """Fill the plane's vacant active slots with backups (evs module docstring, "Pools")."""
        counters = self._counters
        while self.vacant[plane]:
            if plane in self.deferred:  # no state or pool changed since: it would defer again
                counters["swaps_deferred"] += 1
                return
            backups = [e for e in self.plane_entries[plane]
                       if e.pool == Pool.BACKUP and e.state is EvState.GOOD]  # fmt: skip
            if not backups:
                counters["backups_exhausted"] += 1
                self.vacant[plane] = 0  # a reinstated EV refills the slot instead
                return
            bad: dict[PathInfo, int] = {}
            for e in self.bad.values():
                bad[e.path] = bad.get(e.path, 0) + 1
            chosen = min(backups, key=lambda e: (bad.get(e.path, 0) / self.path_size[e.path],
                                                 e.path == avoid))  # fmt: skip
            if bad.get(chosen.path, 0):
                counters["swaps_deferred"] += 1
                self.deferred.add(plane)
                return
            chosen.pool = Pool.ACTIVE
            self.vacant[plane] -= 1
            counters["swaps"] += 1
            self.refresh(chosen)
