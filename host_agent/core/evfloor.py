"""The floor of an EV set: what a plane sprays on when it has too few usable EVs.

Why per plane: each plane is one NIC port with its own rate. Under random loss every EV is
retired sooner or later (a loss retires its EV at once [paper]; probes bring it back only
after several probe intervals), and a floor counted over the whole set kept spraying on
whichever EVs were left, all on one or two planes: in the simulator at 1% loss per link and a
port bandwidth-delay product of about 250 packets, one NIC queued a thousand packets while
the other three idled (docs/decisions.md, "A floor per plane").

So each usable plane keeps at least `per_plane` EVs in use (ev_min_active spread over the
planes, rounded up): its usable EVs, then stand-ins of its own best first (stand_in_rank).
EVs resting in SKIP count as in use unless the whole set is short of usable EVs: a congested
plane already gets a smaller share by weight (evs, "Spraying"), and a floor that sprayed on
its resting EVs would undo that; when every plane is congested, resting EVs stand in.
A path is silent while one of its EVs has failed (ASSUMED_BAD) since the path last delivered
something (a packet or a probe reply, on any of its EVs). While the set as a whole has
ev_min_active usable EVs, no EV of a silent path stands in: a random loss is followed by
deliveries on the same path within moments, a dead path delivers nothing, so a plane whose
routes are dead passes its turn instead of feeding them (its backups too: they take the same
route). If that leaves no usable plane anything, silent paths' EVs stand in after all, as
they do whenever the set is short of usable EVs: then the floor is about spraying wide at
all, failed EVs least recently failed first, and the network as a whole may be back before
any probe says so. DENIED EVs never stand in.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from host_agent.core.evcontrol import stand_in_rank
from host_agent.core.evindex import EvTables
from host_agent.core.evstate import EvEntry
from host_agent.core.types import EvState, PathInfo


class Floor:
    """Per-plane stand-in lists of one EvSet, read from its tables (a read-only view). The
    lists are dropped whenever the tables change (EvTables.depend); the set calls
    delivered() on every delivery."""

    def __init__(self, tables: EvTables, ev_min_active: int) -> None:
        self._t = tables
        self._planes = tables.planes
        self.per_plane = -(-ev_min_active // len(self._planes))  # ceil: planes cover the floor
        self._delivered_at: dict[PathInfo, float] = {}  # each path's latest delivery
        self._waiting: set[PathInfo] = set()  # silent paths in the lists built so far
        # per plane: stand-ins from live paths only, and (last resort) from any path
        self._lists: dict[int, list[EvEntry] | None] = dict.fromkeys(self._planes)
        self._last_resort: dict[int, list[EvEntry]] | None = None
        self._pos: dict[int, int] = dict.fromkeys(self._planes, 0)
        tables.depend(self.forget)

    def forget(self) -> None:
        self._lists = dict.fromkeys(self._planes)
        self._last_resort = None

    def delivered(self, path: PathInfo, now: float) -> None:
        """Something sent on `path` arrived: it is no longer silent."""
        self._delivered_at[path] = now
        if path in self._waiting:
            self._waiting.discard(path)
            self._lists[path.plane] = None
            self._last_resort = None

    def starved(self, plane: int, usable: int) -> bool:
        """A usable plane with `usable` usable EVs is below its share (SKIP counts as in use)."""
        return self._t.plane_usable[plane] and usable + self._t.skipping[plane] < self.per_plane

    def choose(self, next_plane: Callable[[], int], shortage: bool) -> EvEntry | None:
        """The next EV: the plane whose turn it is (`next_plane`), then the next of its list;
        a plane with an empty list passes its turn. None if every list is empty. `shortage`:
        the set has fewer usable EVs than ev_min_active (read when a list is rebuilt)."""
        lists = [self._live(p, shortage) for p in self._planes]
        if not any(lists):
            if self._last_resort is None:
                self._last_resort = {p: self._plane_list(p, shortage, live_only=False)
                                     for p in self._planes}
            lists = list(self._last_resort.values())
            if not any(lists):
                return None
        by_plane = dict(zip(self._planes, lists, strict=True))
        while True:  # some usable plane has picks, and every usable plane gets turns
            plane = next_plane()
            picks = by_plane[plane]
            if picks:
                pos = self._pos[plane]
                self._pos[plane] = pos + 1
                return picks[pos % len(picks)]

    def _live(self, plane: int, shortage: bool) -> list[EvEntry]:
        picks = self._lists[plane]
        if picks is None:
            picks = self._lists[plane] = self._plane_list(plane, shortage,
                                                          live_only=not shortage)
        return picks

    def _plane_list(self, plane: int, shortage: bool, *, live_only: bool) -> list[EvEntry]:
        if not self._t.plane_usable[plane]:
            return []
        entries = self._t.plane_entries[plane]
        picks = [e for e in entries if e.usable]
        need = self.per_plane - len(picks) - (0 if shortage else self._t.skipping[plane])
        if need > 0:
            silent = self._silent_paths(entries) if live_only else set()
            spare = [e for e in entries
                     if not e.usable and e.state is not EvState.DENIED
                     and e.path not in silent]  # fmt: skip
            spare.sort(key=stand_in_rank)
            picks += spare[:need]
        return picks

    def _silent_paths(self, entries: Sequence[EvEntry]) -> set[PathInfo]:
        """Paths with an EV failed since the path's latest delivery (module docstring)."""
        delivered, silent = self._delivered_at, set()
        for e in entries:
            if (e.state is EvState.ASSUMED_BAD
                    and delivered.get(e.path, -1.0) <= (e.failed_at or 0.0)):
                silent.add(e.path)
        self._waiting |= silent
        return silent
