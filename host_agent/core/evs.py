"""The per-connection entropy-value (EV) set: which source route each packet takes.

An EV names one source route (PathInfo). A connection sprays packets over `evs_per_connection`
active EVs spread equally over planes and, within a plane, round-robin over that plane's paths
[paper]. Each plane also holds `backups_per_plane` GOOD backup EVs that replace active EVs that
fail, so the active count per plane stays [paper].

States change only through evstate.TRANSITIONS; a (state, trigger) pair that is not in it
raises LocalProtocolError. Reasons reported by drain_changes() are the triggers (EvTrigger).

Rules chosen where the sources are silent [choice]:
- EV values: the i-th EV built (actives in build order, then each plane's backups) is
  tag << INDEX_BITS | i. The tag is the connection's secret (drawn by the endpoint from its
  random source, 1..2**TAG_BITS-1): a blind forger cannot name an EV of ours, so it cannot
  forge an answer (docs/security.md). The index i is the EV's place in the layout, which both
  ends share, so our EV i uses the spine the peer's EV i uses (evcontrol.ControlChooser).
- Pools (evstate.Pool): every EV is ACTIVE (sprayed on), BACKUP (standby) or OUT (ASSUMED_BAD
  or DENIED). A retired active EV is replaced by a GOOD backup of its plane, preferring paths
  with the smallest share of ASSUMED_BAD EVs, then another path than the retired EV's. If
  every remaining backup sits on a failing path (at least half of its EVs ASSUMED_BAD: a dead
  path, since random loss spreads over all paths) the slot stays empty, as a dead path would
  only eat the backup, until a delivery, timer or reinstatement finds a healthy backup.
  An EV reinstated by probes or allowed again goes back to ACTIVE if its plane has fewer
  active EVs than it was built with, else to BACKUP.
- Spraying: one ring of active EVs per plane; the planes take turns by weight, and within a
  plane the usable EVs take turns. A plane's weight is its active slots minus its EVs
  resting in SKIP (at least 1). Each plane is one NIC port with its own rate, so a plane
  that lost EVs to a failure (a dead route retired) keeps its port's share, spread over the
  EVs it has left; one ring over every plane gave it fewer packets while the other ports,
  already at their rate, queued the rest (docs/benchmarks.md, link failure). Congestion is
  different: EVs in SKIP lower their plane's weight, so the excess spreads over every plane
  instead of all landing on the congested plane's other spine (planes in plain turns slowed
  permutation flows, docs/decisions.md). A plane with no usable EV passes its turn.
- Floor, per plane (evfloor): while a usable plane has fewer usable EVs (GOOD, active) than
  its share of ev_min_active (rounded up), or the set fewer than ev_min_active, choose() takes
  the plane by weight as above and sprays over that plane's usable EVs plus stand-ins of its
  own, best first: GOOD backups, then SKIP EVs (soonest expiry first), then ASSUMED_BAD EVs
  least recently failed first (the failure that is oldest is the likeliest to have healed).
  A failed EV stands in only once its path has delivered again, while any plane has
  something else. DENIED EVs are never used, so choose() returns None when no plane is
  usable or every EV on the usable planes is DENIED.
- Probes: an ASSUMED_BAD EV on a usable plane is probed every probe_interval (one probe
  outstanding at a time); a reply is a success, no reply within probe_timeout a failure that
  resets the run of successes. Ordinary deliveries on an ASSUMED_BAD EV do not count.

Timers are lazy (sans-IO): choose() expires SKIPs itself; the endpoint should call advance(now)
when next_deadline() passes, then send a probe for each EV in probes_due(now).
"""

from __future__ import annotations

import heapq
import random
from collections import deque
from collections.abc import Sequence

from host_agent.core.errors import LocalProtocolError
from host_agent.core.evcontrol import ControlChooser
from host_agent.core.evfloor import Floor
from host_agent.core.evstate import TRANSITIONS, EvConfig, EvEntry, EvTrigger, Pool
from host_agent.core.types import EvState, PathInfo

INDEX_BITS = 12  # EVs per connection: at most 2**12
TAG_BITS = 32 - INDEX_BITS
INDEX_MASK = (1 << INDEX_BITS) - 1
ACTIVE, BACKUP, OUT = Pool.ACTIVE, Pool.BACKUP, Pool.OUT
T = EvTrigger


class EvSet:
    """EVs of one connection (one QP towards one peer); sans-IO, times passed in."""

    def __init__(
        self,
        paths: Sequence[PathInfo],
        config: EvConfig | None = None,
        rng: random.Random | None = None,
        *,
        tag: int = 1,
    ) -> None:
        self.config = config if config is not None else EvConfig()
        rng = rng if rng is not None else random.Random(0)
        if not paths:
            raise LocalProtocolError("EvSet needs at least one path")
        if len(set(paths)) != len(paths):
            raise LocalProtocolError("EvSet paths contain duplicates; pass each route once")
        if type(tag) is not int or not 0 < tag < 1 << TAG_BITS:
            raise LocalProtocolError(f"tag must be in 1..{(1 << TAG_BITS) - 1:#x}, got {tag!r}")
        by_plane: dict[int, list[PathInfo]] = {}
        for path in paths:
            by_plane.setdefault(path.plane, []).append(path)
        self.planes: tuple[int, ...] = tuple(sorted(by_plane))
        total = self.config.evs_per_connection + self.config.backups_per_plane * len(self.planes)
        if self.config.evs_per_connection < len(self.planes):
            raise LocalProtocolError(
                f"evs_per_connection ({self.config.evs_per_connection}) is below the number of "
                f"planes ({len(self.planes)}); raise it so every plane gets an EV"
            )
        if total > 1 << INDEX_BITS:
            raise LocalProtocolError(f"{total} EVs per connection exceed {1 << INDEX_BITS}: "
                                     "lower evs_per_connection or backups_per_plane")
        self._entries: dict[int, EvEntry] = {}  # in build order: index i is the i-th
        self._plane_entries: dict[int, list[EvEntry]] = {p: [] for p in self.planes}
        self._target: dict[int, int] = dict.fromkeys(self.planes, 0)
        used: dict[int, int] = dict.fromkeys(self.planes, 0)  # EVs placed per plane so far

        def add(plane: int, pool: Pool) -> EvEntry:
            ev = tag << INDEX_BITS | len(self._entries)
            plane_paths = by_plane[plane]
            entry = EvEntry(ev, plane_paths[used[plane] % len(plane_paths)], pool=pool)
            used[plane] += 1
            self._entries[ev] = entry
            self._plane_entries[plane].append(entry)
            return entry

        actives = [
            add(self.planes[i % len(self.planes)], ACTIVE)
            for i in range(self.config.evs_per_connection)
        ]
        for plane in self.planes:
            self._target[plane] = used[plane]
            for _ in range(self.config.backups_per_plane):
                add(plane, BACKUP)
        self._order: list[EvEntry] = list(self._entries.values())
        self._plane_usable: dict[int, bool] = dict.fromkeys(self.planes, True)
        start = rng.randrange(len(actives))  # connections need not all start on one path
        # one ring of active EVs per plane (a NIC port); _next_plane picks the ring: choose()
        self._rings: dict[int, deque[EvEntry]] = {p: deque() for p in self.planes}
        for entry in actives[start:] + actives[:start]:
            self._rings[entry.path.plane].append(entry)
        # _next_plane's smooth weighted round robin: a credit per plane, the first turn to the
        # start EV's plane; _skipping counts each plane's EVs resting in SKIP (its weight)
        self._credit: dict[int, int] = dict.fromkeys(self.planes, 0)
        self._credit[actives[start].path.plane] = 1
        self._skipping: dict[int, int] = dict.fromkeys(self.planes, 0)
        self._usable_count = 0
        self._plane_good: dict[int, int] = dict.fromkeys(self.planes, 0)  # usable EVs per plane
        self._starved: bool | None = None  # below the floor somewhere (_below_floor), cached
        self._deadline: float | None = None  # next_deadline(), while _deadline_ok
        self._deadline_ok = False  # cleared by every change of state, pool, plane or probe
        self._deferred: set[int] = set()  # planes whose last _refill deferred, nothing changed
        self._skip_heap: list[tuple[float, int]] = []
        self._bad: dict[int, EvEntry] = {}
        self._vacant: dict[int, int] = dict.fromkeys(self.planes, 0)  # active slots unfilled
        self._path_size: dict[PathInfo, int] = {}
        for entry in self._entries.values():
            self._path_size[entry.path] = self._path_size.get(entry.path, 0) + 1
        self._floor = Floor(self.planes, self._plane_entries, self._plane_usable,
                            self._skipping, self.config.ev_min_active)
        self._changes: list[tuple[int, EvState, EvState, EvTrigger]] = []
        self.counters: dict[str, int] = dict.fromkeys(
            ("chosen", "control_chosen", "floor_picks", "control_fallback", "ecn",
             "nack_trimmed", "nack_trimmed_lasthop", "losses", "delivered", "skips",
             "skip_extensions", "skip_expired", "retired", "reinstated", "swaps",
             "backups_exhausted", "swaps_deferred", "denied", "allowed", "probes_sent",
             "probe_replies", "probe_timeouts", "probe_results_ignored"), 0)  # fmt: skip
        self._control = ControlChooser(self.planes, self._plane_entries, self._plane_usable,
                                       self._order, self._bad, self.counters)
        for entry in actives:  # into service last: _refresh needs the tables above
            entry.in_ring = True
            self._refresh(entry)

    # ----- lookups
    def __contains__(self, ev: object) -> bool:
        return ev in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def entry(self, ev: int) -> EvEntry:
        try:
            return self._entries[ev]
        except KeyError:
            raise LocalProtocolError(f"EV {ev!r} is not in this EV set") from None

    def entries(self) -> list[EvEntry]:
        return list(self._entries.values())

    def states(self) -> dict[int, EvState]:
        return {ev: e.state for ev, e in self._entries.items()}

    def active(self, plane: int | None = None) -> list[EvEntry]:
        """EVs in the active pool (any state), optionally of one plane."""
        return [e for e in self._entries.values()
                if e.pool == ACTIVE and (plane is None or e.path.plane == plane)]  # fmt: skip

    def drain_changes(self) -> list[tuple[int, EvState, EvState, EvTrigger]]:
        changes, self._changes = self._changes, []
        return changes

    # ----- bookkeeping
    def _refresh(self, entry: EvEntry) -> None:
        """Recompute the cached usable flag; the ring drops unusable EVs lazily in choose()."""
        usable = (
            entry.pool == ACTIVE
            and entry.state is EvState.GOOD
            and self._plane_usable[entry.path.plane]
        )
        if usable != entry.usable:
            entry.usable = usable
            self._usable_count += 1 if usable else -1
            self._plane_good[entry.path.plane] += 1 if usable else -1
            if usable and not entry.in_ring:
                entry.in_ring = True
                self._rings[entry.path.plane].append(entry)
        self._floor.forget()
        self._starved = None
        self._control.forget()  # its candidates depend on usability and the ASSUMED_BAD set
        self._deadline_ok = False
        self._deferred.clear()

    def _apply(self, entry: EvEntry, trigger: EvTrigger, now: float | None) -> None:
        """Run one table transition plus the side effects of entering/leaving states."""
        self._deferred.clear()
        old = entry.state
        new = TRANSITIONS.get((old, trigger))
        if new is None:
            raise LocalProtocolError(
                f"illegal EV transition: EV {entry.ev:#x} in state {old.name} "
                f"has no transition for trigger {str(trigger)!r}"
            )
        entry.state = new
        if old is EvState.SKIP and new is not EvState.SKIP:
            entry.skip_until = None
            self._skipping[entry.path.plane] -= 1
        elif new is EvState.SKIP and old is not EvState.SKIP:
            self._skipping[entry.path.plane] += 1
        if old is EvState.ASSUMED_BAD and new is not EvState.ASSUMED_BAD:
            del self._bad[entry.ev]
            entry.next_probe_at = entry.probe_sent_at = None
            entry.probe_successes = 0
        if new is EvState.SKIP:
            assert now is not None
            entry.skip_until = now + self.config.skip_time
            heapq.heappush(self._skip_heap, (entry.skip_until, entry.ev))
            self.counters["skips" if old is not EvState.SKIP else "skip_extensions"] += 1
        elif new is EvState.ASSUMED_BAD:
            assert now is not None
            entry.failed_at = now
            entry.probe_successes = 0
            if old is not EvState.ASSUMED_BAD:
                self.counters["retired"] += 1
                entry.counters["retired"] += 1
                self._bad[entry.ev] = entry
                entry.next_probe_at = now + self.config.probe_interval
                self._take_out(entry)
        elif new is EvState.DENIED and old is not EvState.DENIED:
            self.counters["denied"] += 1
            self._take_out(entry)
        elif new is EvState.GOOD and old in (EvState.ASSUMED_BAD, EvState.DENIED):
            self.counters["reinstated" if old is EvState.ASSUMED_BAD else "allowed"] += 1
            active = sum(1 for e in self._plane_entries[entry.path.plane] if e.pool == ACTIVE)
            entry.pool = ACTIVE if active < self._target[entry.path.plane] else BACKUP
            if entry.pool == ACTIVE and self._vacant[entry.path.plane]:
                self._vacant[entry.path.plane] -= 1
        if new is not old:
            self._changes.append((entry.ev, old, new, trigger))
        self._refresh(entry)
        if old is EvState.ASSUMED_BAD and new is not old:
            self._refill_all()  # its path may be healthy again

    def _take_out(self, entry: EvEntry) -> None:
        """Move an EV out of service; an active one leaves a slot for a healthy backup."""
        was_active = entry.pool == ACTIVE
        entry.pool = OUT
        if was_active:
            self._vacant[entry.path.plane] += 1
            self._refill(entry.path.plane, avoid=entry.path)

    def _refill(self, plane: int, avoid: PathInfo | None = None) -> None:
        """Fill the plane's vacant active slots with backups (module docstring, "Pools")."""
        while self._vacant[plane]:
            if plane in self._deferred:  # no state or pool changed since: it would defer again
                self.counters["swaps_deferred"] += 1
                return
            backups = [e for e in self._plane_entries[plane]
                       if e.pool == BACKUP and e.state is EvState.GOOD]  # fmt: skip
            if not backups:
                self.counters["backups_exhausted"] += 1
                self._vacant[plane] = 0  # a reinstated EV refills the slot instead
                return
            bad: dict[PathInfo, int] = {}
            for e in self._bad.values():
                bad[e.path] = bad.get(e.path, 0) + 1
            chosen = min(backups, key=lambda e: (bad.get(e.path, 0) / self._path_size[e.path],
                                                 e.path == avoid))  # fmt: skip
            if bad.get(chosen.path, 0):
                self.counters["swaps_deferred"] += 1
                self._deferred.add(plane)
                return
            chosen.pool = ACTIVE
            self._vacant[plane] -= 1
            self.counters["swaps"] += 1
            self._refresh(chosen)

    def _expire_skips(self, now: float) -> None:
        heap = self._skip_heap
        while heap and heap[0][0] <= now:
            until, ev = heapq.heappop(heap)
            entry = self._entries[ev]
            if entry.state is EvState.SKIP and entry.skip_until == until:
                self.counters["skip_expired"] += 1
                self._apply(entry, T.SKIP_EXPIRED, now)

    def _refill_all(self) -> None:
        for plane, vacant in self._vacant.items():
            if vacant:
                self._refill(plane)

    def advance(self, now: float) -> None:
        """Apply every timer due at `now`: SKIP expiry and probe timeouts."""
        deadline = self.next_deadline()
        if deadline is None or now < deadline:  # nothing expires: skip the scan of _bad
            self._refill_all()
            return
        self._expire_skips(now)
        self._refill_all()
        for entry in list(self._bad.values()):
            sent = entry.probe_sent_at
            if sent is not None and now >= sent + self.config.probe_timeout:
                self.on_probe_timeout(entry.ev, now)

    def next_deadline(self) -> float | None:
        """Earliest time advance()/probes_due() has work: SKIP expiry or probe schedule.
        Kept until the next change (the endpoint asks on every wake-up and every poll)."""
        if self._deadline_ok:
            return self._deadline
        heap = self._skip_heap
        while heap:  # drop stale heap heads so the deadline is exact
            until, ev = heap[0]
            entry = self._entries[ev]
            if entry.state is EvState.SKIP and entry.skip_until == until:
                break
            heapq.heappop(heap)
        times = [heap[0][0]] if heap else []
        for entry in self._bad.values():
            if entry.probe_sent_at is not None:
                times.append(entry.probe_sent_at + self.config.probe_timeout)
            elif self._plane_usable[entry.path.plane] and entry.next_probe_at is not None:
                times.append(entry.next_probe_at)
        self._deadline, self._deadline_ok = min(times, default=None), True
        return self._deadline

    # ----- choosing
    def choose(self, now: float) -> EvEntry | None:
        """EV for the next data packet: the plane by weight (_next_plane), then round-robin
        over that plane's usable EVs (module docstring, "Spraying"); O(planes) per packet plus
        one pop per loss of usability. Below the floor, the floor rule (module docstring)."""
        self._expire_skips(now)
        if not self._below_floor():
            # BEGIN exercise 4 spray
            entry = None
            while entry is None:
                ring = self._rings[self._next_plane()]
                while ring:
                    candidate = ring.popleft()
                    if candidate.usable:
                        ring.append(candidate)
                        entry = candidate
                        break
                    candidate.in_ring = False
            # END exercise 4 spray
        else:
            entry = self._floor.choose(self._next_plane, self._shortage())
            if entry is None:
                return None
            if not entry.usable:
                self.counters["floor_picks"] += 1
        self.counters["chosen"] += 1
        entry.counters["chosen"] += 1
        return entry

    def _next_plane(self) -> int:
        """The plane whose turn it is (module docstring, "Spraying"): smooth weighted round
        robin over the usable planes, each weighted by its active slots minus its EVs resting
        in SKIP (at least 1); equal weights give the planes in turn."""
        credit, skipping, target = self._credit, self._skipping, self._target
        best = -1
        total = 0
        for plane in self.planes:
            if not self._plane_usable[plane]:
                continue
            weight = max(1, target[plane] - skipping[plane])
            total += weight
            credit[plane] += weight
            if best < 0 or credit[plane] > credit[best]:
                best = plane
        credit[best] -= total
        return best

    def _below_floor(self) -> bool:
        """Fewer than ev_min_active usable EVs, or a usable plane below its share of them."""
        if self._starved is None:
            starved, good = self._floor.starved, self._plane_good
            self._starved = self._shortage() or any(starved(p, good[p]) for p in self.planes)
        return self._starved

    def _shortage(self) -> bool:
        return self._usable_count < self.config.ev_min_active

    def choose_control(
        self, now: float, *, plane: int | None = None, echo_ev: int | None = None
    ) -> EvEntry | None:
        """EV for a SACK/NACK, answering a packet that arrived on `plane` with EV `echo_ev`
        (the peer's EV): the rule of evcontrol.ControlChooser.choose."""
        self._expire_skips(now)
        return self._control.choose(plane, -1 if echo_ev is None else echo_ev & INDEX_MASK)

    # ----- feedback
    def _feedback(self, ev: int, now: float, counter: str, trigger: EvTrigger | None) -> None:
        entry = self.entry(ev)
        entry.counters[counter] += 1
        self.counters[counter] += 1
        if trigger is not None:
            self._apply(entry, trigger, now)

    def on_ecn(self, ev: int, now: float) -> None:
        """CE echo or SACK M=SKIP_ONCE: congestion inside the fabric on this EV's path."""
        self._feedback(ev, now, "ecn", T.ECN)

    def on_nack_trimmed(self, ev: int, now: float) -> None:
        self._feedback(ev, now, "nack_trimmed", T.NACK_TRIMMED)

    def on_nack_trimmed_lasthop(self, ev: int, now: float) -> None:
        """Trimmed at the receiver's last hop: incast, not a path problem; counted only."""
        self._feedback(ev, now, "nack_trimmed_lasthop", None)

    def on_loss(self, ev: int, now: float) -> None:
        """Timeout or untrimmed loss: assume the path failed and retire the EV at once."""
        self._feedback(ev, now, "losses", T.LOSS)

    def on_path_dark(self, path: PathInfo, now: float) -> None:
        """The loss detector found `path` dead (recovery module docstring). Every EV on it
        takes that source route, so all of them retire now, not one per loss [choice]."""
        for entry in self._plane_entries[path.plane]:
            if entry.path == path and entry.state in (EvState.GOOD, EvState.SKIP):
                self._apply(entry, T.PATH_DARK, now)

    def on_delivered(self, ev: int, now: float) -> None:
        self._feedback(ev, now, "delivered", None)
        self._floor.delivered(self._entries[ev].path, now)
        if any(self._vacant.values()):
            self._refill_all()

    def set_denied(self, ev: int, denied: bool) -> None:
        """Management only; DENIED is left only through set_denied(ev, False)."""
        self._apply(self.entry(ev), T.DENY if denied else T.ALLOW, None)

    def set_plane_usable(self, plane: int, usable: bool) -> None:
        """Local port down, or the peer reported its port down: EV states are kept, the
        plane's EVs are just not chosen (nor probed) until it is usable again."""
        if plane not in self._plane_usable:
            raise LocalProtocolError(f"plane {plane!r} has no paths in this EV set")
        self._plane_usable[plane] = bool(usable)
        for entry in self._plane_entries[plane]:
            self._refresh(entry)

    # ----- probing
    def probes_due(self, now: float) -> list[EvEntry]:
        """ASSUMED_BAD EVs on usable planes whose next probe is due and none outstanding."""
        self.advance(now)
        deadline = self.next_deadline()
        if deadline is None or now < deadline:  # every due probe is part of the deadline
            return []
        return [
            e for e in self._bad.values()
            if e.probe_sent_at is None and self._plane_usable[e.path.plane]
            and e.next_probe_at is not None and e.next_probe_at <= now
        ]  # fmt: skip

    def on_probe_sent(self, ev: int, now: float) -> None:
        entry = self.entry(ev)
        if entry.state is not EvState.ASSUMED_BAD or entry.probe_sent_at is not None:
            raise LocalProtocolError(
                f"cannot probe EV {ev:#x}: only an ASSUMED_BAD EV without an outstanding "
                f"probe is probed (state {entry.state.name}, outstanding since "
                f"{entry.probe_sent_at})"
            )
        entry.probe_sent_at = now
        entry.next_probe_at = now + self.config.probe_interval
        self._deadline_ok = False
        entry.counters["probes_sent"] += 1
        self.counters["probes_sent"] += 1

    def _outstanding(self, ev: int) -> EvEntry | None:
        """The entry if it has a probe in flight; late or stray answers are counted, ignored."""
        entry = self.entry(ev)
        if entry.state is not EvState.ASSUMED_BAD or entry.probe_sent_at is None:
            self.counters["probe_results_ignored"] += 1
            return None
        entry.probe_sent_at = None
        self._deadline_ok = False
        return entry

    # BEGIN exercise 5 probe-results
    def on_probe_reply(self, ev: int, now: float) -> bool:
        """True if a probe was outstanding on `ev` (only then is the reply believed)."""
        entry = self._outstanding(ev)
        if entry is None:
            return False
        entry.counters["probe_replies"] += 1
        self.counters["probe_replies"] += 1
        self._floor.delivered(entry.path, now)
        entry.probe_successes += 1
        if entry.probe_successes >= self.config.probe_successes_to_reinstate:
            self._apply(entry, T.PROBE_SUCCESS_ENOUGH, now)
        return True

    def on_probe_timeout(self, ev: int, now: float) -> None:
        entry = self._outstanding(ev)
        if entry is None:
            return
        entry.counters["probe_timeouts"] += 1
        self.counters["probe_timeouts"] += 1
        entry.probe_successes = 0
    # END exercise 5 probe-results
