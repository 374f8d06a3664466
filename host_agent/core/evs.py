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
  already at their rate, queued the rest (CHANGELOG.md, "Measurements": the link failure
  of ac0a4a4). Congestion is different: EVs in SKIP lower their plane's weight, so the
  excess spreads over every plane instead of all landing on the congested plane's other
  spine (planes in plain turns slowed permutation flows, docs/decisions.md). A plane with
  no usable EV passes its turn.
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
from collections.abc import Callable, Sequence

from host_agent.core.errors import LocalProtocolError
from host_agent.core.evcontrol import ControlChooser
from host_agent.core.evfloor import Floor
from host_agent.core.evindex import INDEX_BITS, INDEX_MASK, TAG_BITS, EvIndex
from host_agent.core.evstate import TRANSITIONS, EvConfig, EvEntry, EvTrigger, Pool
from host_agent.core.types import EvState, PathInfo

__all__ = ["INDEX_BITS", "INDEX_MASK", "TAG_BITS", "EvSet"]
ACTIVE, BACKUP, OUT = Pool.ACTIVE, Pool.BACKUP, Pool.OUT
T = EvTrigger


class EvSet:
    """EVs of one connection (one QP towards one peer); sans-IO, times passed in. Its tables
    and caches are one EvIndex (`_ix`); state changes go through _apply and the effect
    tables at the end of this module."""

    def __init__(
        self,
        paths: Sequence[PathInfo],
        config: EvConfig | None = None,
        rng: random.Random | None = None,
        *,
        tag: int = 1,
    ) -> None:
        self.config = config if config is not None else EvConfig()
        self.counters: dict[str, int] = dict.fromkeys(
            ("chosen", "control_chosen", "floor_picks", "control_fallback", "ecn",
             "nack_trimmed", "nack_trimmed_lasthop", "losses", "delivered", "skips",
             "skip_extensions", "skip_expired", "retired", "reinstated", "swaps",
             "backups_exhausted", "swaps_deferred", "denied", "allowed", "probes_sent",
             "probe_replies", "probe_timeouts", "probe_results_ignored"), 0)  # fmt: skip
        self._ix = ix = EvIndex(paths, self.config, tag,
                                rng if rng is not None else random.Random(0), self.counters)
        self.planes = ix.planes
        self._skip_heap: list[tuple[float, int]] = []
        self._changes: list[tuple[int, EvState, EvState, EvTrigger]] = []
        self._floor = Floor(ix, self.config.ev_min_active)
        self._control = ControlChooser(ix, self.counters)

    # ----- lookups
    def __contains__(self, ev: object) -> bool:
        return ev in self._ix.entries

    def __len__(self) -> int:
        return len(self._ix.entries)

    def entry(self, ev: int) -> EvEntry:
        try:
            return self._ix.entries[ev]
        except KeyError:
            raise LocalProtocolError(f"EV {ev!r} is not in this EV set") from None

    def entries(self) -> list[EvEntry]:
        return list(self._ix.entries.values())

    def states(self) -> dict[int, EvState]:
        return {ev: e.state for ev, e in self._ix.entries.items()}

    def active(self, plane: int | None = None) -> list[EvEntry]:
        """EVs in the active pool (any state), optionally of one plane."""
        return [e for e in self._ix.entries.values()
                if e.pool == ACTIVE and (plane is None or e.path.plane == plane)]  # fmt: skip

    def drain_changes(self) -> list[tuple[int, EvState, EvState, EvTrigger]]:
        changes, self._changes = self._changes, []
        return changes

    # ----- bookkeeping
    def _apply(self, entry: EvEntry, trigger: EvTrigger, now: float | None) -> None:
        """Run one table transition (evstate.TRANSITIONS), then the effects of leaving the
        old state and entering the new one (_ON_LEAVE, _ON_ENTER at the end of the module)."""
        old = entry.state
        new = TRANSITIONS.get((old, trigger))
        if new is None:
            raise LocalProtocolError(
                f"illegal EV transition: EV {entry.ev:#x} in state {old.name} "
                f"has no transition for trigger {str(trigger)!r}"
            )
        self._ix.deferred.clear()
        entry.state = new
        if new is not old:
            leave = _ON_LEAVE.get(old)
            if leave is not None:
                leave(self, entry, now)
            self._changes.append((entry.ev, old, new, trigger))
        enter = _ON_ENTER.get(new)
        if enter is not None:
            enter(self, entry, old, now)
        self._ix.refresh(entry)
        if old is EvState.ASSUMED_BAD and new is not old:
            self._ix.refill_all()  # its path may be healthy again

    def _leave_skip(self, entry: EvEntry, now: float | None) -> None:
        entry.skip_until = None
        self._ix.skipping[entry.path.plane] -= 1

    def _leave_assumed_bad(self, entry: EvEntry, now: float | None) -> None:
        del self._ix.bad[entry.ev]
        entry.next_probe_at = entry.probe_sent_at = None
        entry.probe_successes = 0

    def _enter_skip(self, entry: EvEntry, old: EvState, now: float | None) -> None:
        """Rest the EV for skip_time; more congestion while resting restarts the time."""
        assert now is not None
        if old is not EvState.SKIP:
            self._ix.skipping[entry.path.plane] += 1
        entry.skip_until = now + self.config.skip_time
        heapq.heappush(self._skip_heap, (entry.skip_until, entry.ev))
        self.counters["skips" if old is not EvState.SKIP else "skip_extensions"] += 1

    def _enter_assumed_bad(self, entry: EvEntry, old: EvState, now: float | None) -> None:
        """Retire the EV (a further loss only restarts its run of probe successes)."""
        assert now is not None
        entry.failed_at = now
        entry.probe_successes = 0
        if old is not EvState.ASSUMED_BAD:
            self.counters["retired"] += 1
            entry.counters["retired"] += 1
            self._ix.bad[entry.ev] = entry
            entry.next_probe_at = now + self.config.probe_interval
            self._ix.take_out(entry)

    def _enter_denied(self, entry: EvEntry, old: EvState, now: float | None) -> None:
        if old is not EvState.DENIED:
            self.counters["denied"] += 1
            self._ix.take_out(entry)

    def _enter_good(self, entry: EvEntry, old: EvState, now: float | None) -> None:
        """Back from ASSUMED_BAD or DENIED: active if its plane is short of actives."""
        if old not in (EvState.ASSUMED_BAD, EvState.DENIED):
            return
        self.counters["reinstated" if old is EvState.ASSUMED_BAD else "allowed"] += 1
        plane = entry.path.plane
        entry.pool = ACTIVE if self._ix.active_on(plane) < self._ix.target[plane] else BACKUP
        if entry.pool == ACTIVE and self._ix.vacant[plane]:
            self._ix.vacant[plane] -= 1

    def _expire_skips(self, now: float) -> None:
        heap = self._skip_heap
        while heap and heap[0][0] <= now:
            until, ev = heapq.heappop(heap)
            entry = self._ix.entries[ev]
            if entry.state is EvState.SKIP and entry.skip_until == until:
                self.counters["skip_expired"] += 1
                self._apply(entry, T.SKIP_EXPIRED, now)

    def advance(self, now: float) -> None:
        """Apply every timer due at `now`: SKIP expiry and probe timeouts."""
        deadline = self.next_deadline()
        if deadline is None or now < deadline:  # nothing expires: skip the scan of _bad
            self._ix.refill_all()
            return
        self._expire_skips(now)
        self._ix.refill_all()
        for entry in list(self._ix.bad.values()):
            sent = entry.probe_sent_at
            if sent is not None and now >= sent + self.config.probe_timeout:
                self.on_probe_timeout(entry.ev, now)

    def next_deadline(self) -> float | None:
        """Earliest time advance()/probes_due() has work: SKIP expiry or probe schedule.
        Kept until the next change (the endpoint asks on every wake-up and every poll)."""
        if self._ix.deadline_ok:
            return self._ix.deadline
        heap = self._skip_heap
        while heap:  # drop stale heap heads so the deadline is exact
            until, ev = heap[0]
            entry = self._ix.entries[ev]
            if entry.state is EvState.SKIP and entry.skip_until == until:
                break
            heapq.heappop(heap)
        times = [heap[0][0]] if heap else []
        for entry in self._ix.bad.values():
            if entry.probe_sent_at is not None:
                times.append(entry.probe_sent_at + self.config.probe_timeout)
            elif self._ix.plane_usable[entry.path.plane] and entry.next_probe_at is not None:
                times.append(entry.next_probe_at)
        self._ix.deadline, self._ix.deadline_ok = min(times, default=None), True
        return self._ix.deadline

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
                ring = self._ix.rings[self._next_plane()]
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
        credit, skipping, target = self._ix.credit, self._ix.skipping, self._ix.target
        best = -1
        total = 0
        for plane in self.planes:
            if not self._ix.plane_usable[plane]:
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
        if self._ix.starved is None:
            starved, good = self._floor.starved, self._ix.plane_good
            self._ix.starved = self._shortage() or any(starved(p, good[p]) for p in self.planes)
        return self._ix.starved

    def _shortage(self) -> bool:
        return self._ix.usable_count < self.config.ev_min_active

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
        for entry in self._ix.plane_entries[path.plane]:
            if entry.path == path and entry.state in (EvState.GOOD, EvState.SKIP):
                self._apply(entry, T.PATH_DARK, now)

    def on_delivered(self, ev: int, now: float) -> None:
        self._feedback(ev, now, "delivered", None)
        self._floor.delivered(self._ix.entries[ev].path, now)
        if any(self._ix.vacant.values()):
            self._ix.refill_all()

    def set_denied(self, ev: int, denied: bool) -> None:
        """Management only; DENIED is left only through set_denied(ev, False)."""
        self._apply(self.entry(ev), T.DENY if denied else T.ALLOW, None)

    def set_plane_usable(self, plane: int, usable: bool) -> None:
        """Local port down, or the peer reported its port down: EV states are kept, the
        plane's EVs are just not chosen (nor probed) until it is usable again."""
        if plane not in self._ix.plane_usable:
            raise LocalProtocolError(f"plane {plane!r} has no paths in this EV set")
        if self._ix.plane_usable[plane] == bool(usable):
            return  # every EV's usable flag already follows it (refresh on each change)
        self._ix.plane_usable[plane] = bool(usable)
        for entry in self._ix.plane_entries[plane]:
            self._ix.refresh(entry)

    # ----- probing
    def probes_due(self, now: float) -> list[EvEntry]:
        """ASSUMED_BAD EVs on usable planes whose next probe is due and none outstanding."""
        self.advance(now)
        deadline = self.next_deadline()
        if deadline is None or now < deadline:  # every due probe is part of the deadline
            return []
        return [
            e for e in self._ix.bad.values()
            if e.probe_sent_at is None and self._ix.plane_usable[e.path.plane]
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
        self._ix.deadline_ok = False
        entry.counters["probes_sent"] += 1
        self.counters["probes_sent"] += 1

    def _outstanding(self, ev: int) -> EvEntry | None:
        """The entry if it has a probe in flight; late or stray answers are counted, ignored."""
        entry = self.entry(ev)
        if entry.state is not EvState.ASSUMED_BAD or entry.probe_sent_at is None:
            self.counters["probe_results_ignored"] += 1
            return None
        entry.probe_sent_at = None
        self._ix.deadline_ok = False
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


# The effects of a transition, beside evstate.TRANSITIONS: leaving a state (only when the state
# changes) undoes what entering it did; entering one runs on every transition into it, a
# SKIP extended or a further loss on an ASSUMED_BAD EV included.
_ON_LEAVE: dict[EvState, Callable[[EvSet, EvEntry, float | None], None]] = {
    EvState.SKIP: EvSet._leave_skip,
    EvState.ASSUMED_BAD: EvSet._leave_assumed_bad,
}
_ON_ENTER: dict[EvState, Callable[[EvSet, EvEntry, EvState, float | None], None]] = {
    EvState.SKIP: EvSet._enter_skip,
    EvState.ASSUMED_BAD: EvSet._enter_assumed_bad,
    EvState.DENIED: EvSet._enter_denied,
    EvState.GOOD: EvSet._enter_good,
}
