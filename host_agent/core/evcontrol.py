"""Which EV of a connection carries its answers (SACKs, NACKs): a rule of its own, apart from
spraying data (evs.py), that reads the EV set's tables and keeps its own cursors and cache."""

from __future__ import annotations

from host_agent.core.evindex import EvTables
from host_agent.core.evstate import EvEntry
from host_agent.core.types import EvState


def stand_in_rank(entry: EvEntry) -> tuple[int, float]:
    """Best stand-in for a usable EV first (evs module docstring, "Floor")."""
    if entry.state is EvState.GOOD:
        return (0, 0.0)
    if entry.state is EvState.SKIP:
        return (1, entry.skip_until or 0.0)
    return (2, entry.failed_at or 0.0)


class ControlChooser:
    """Control EVs for an EvSet, read from its tables (a read-only view); `counters` are the
    set's own. Its cache is dropped whenever the tables change (EvTables.depend)."""

    def __init__(self, tables: EvTables, counters: dict[str, int]) -> None:
        self._t = tables
        self._planes = tables.planes
        self._counters = counters
        self._plane_pos = 0
        self._cursor: dict[int, int] = dict.fromkeys(self._planes, 0)
        # (plane, echoed EV index) -> _for_arrival's candidates; forget() clears it
        self._arrival: dict[tuple[int, int], list[EvEntry]] = {}
        tables.depend(self.forget)

    def forget(self) -> None:
        self._arrival.clear()

    def choose(self, plane: int | None, echo_index: int) -> EvEntry | None:
        """EV for a SACK/NACK. Answering a packet that arrived on `plane` with the peer's EV
        of index `echo_index` (-1: none): see _for_arrival. Otherwise round-robin over usable
        planes, then over the plane's GOOD active EVs; a plane without one falls back to its
        best stand-in, so every usable plane with a non-DENIED EV keeps at least one control
        EV."""
        if plane is not None and self._t.plane_usable.get(plane):
            entry = self._for_arrival(plane, echo_index)
            if entry is not None:
                self._counters["control_chosen"] += 1
                return entry
        for _ in self._planes:
            plane = self._planes[self._plane_pos % len(self._planes)]
            self._plane_pos += 1
            if not self._t.plane_usable[plane]:
                continue
            entry = self._on_plane(plane)
            if entry is not None:
                self._counters["control_chosen"] += 1
                return entry
        return None

    def _for_arrival(self, plane: int, echo_index: int) -> EvEntry | None:
        """Answer on the plane the packet came in on (it works at least one way), on the
        reverse of its path when the EV layout tells it, else on a path of that plane with no
        ASSUMED_BAD EV of ours. The layout rule [choice]: both ends build their EV sets with
        the same EvConfig and list each plane's paths in the same spine order
        (fabric.topology does), so the peer's EV with index n uses the spine our EV n uses.
        A peer with another layout is caught only when our EV n is on another plane; then
        (and when our EVs on that path are failing) the plane rule alone applies.
        The candidates depend only on usability and the ASSUMED_BAD set, so they are kept
        per (plane, echoed index) until forget()."""
        key = (plane, echo_index)
        candidates = self._arrival.get(key)
        if candidates is None:
            candidates = self._arrival[key] = self._candidates(plane, echo_index)
        if candidates:
            return self._rotate(plane, candidates)
        return self._on_plane(plane)

    def _candidates(self, plane: int, index: int) -> list[EvEntry]:
        # paths by identity: the index holds one PathInfo per route (it refuses duplicates),
        # and comparing or hashing a PathInfo's addresses costs a microsecond each time
        entries = self._t.plane_entries[plane]
        bad = {id(e.path) for e in self._t.bad.values()}
        mirror = self._t.order[index] if 0 <= index < len(self._t.order) else None
        if mirror is not None and mirror.path.plane == plane and id(mirror.path) not in bad:
            path = mirror.path
            same = [e for e in entries if e.usable and e.path is path]
            if same:
                return same
        return [e for e in entries if e.usable and id(e.path) not in bad]

    def _rotate(self, plane: int, candidates: list[EvEntry]) -> EvEntry:
        self._cursor[plane] += 1
        return candidates[self._cursor[plane] % len(candidates)]

    def _on_plane(self, plane: int) -> EvEntry | None:
        entries = self._t.plane_entries[plane]
        start = self._cursor[plane]
        for k in range(len(entries)):
            entry = entries[(start + k) % len(entries)]
            if entry.usable:
                self._cursor[plane] = (start + k + 1) % len(entries)
                return entry
        spare = [e for e in entries if e.state is not EvState.DENIED]
        if not spare:
            return None
        self._counters["control_fallback"] += 1
        return min(spare, key=stand_in_rank)
