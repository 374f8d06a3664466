"""Exercise 4's sandboxed half: runs the student's EvSet.choose and Receiver._sack on the
grader's scenarios and writes down what they did, as plain JSON data.

Nothing here says whether an answer is right: rubrics.ex4.judge decides that from
these records, in the grader's own process. The student's modules (host_agent.core.evs and
host_agent.core.receiver, and everything the simulator imports) are imported inside the
functions, never at module level, because ex4 imports this module's scenario constants in the
trusted process too.

Records:
- a spraying scenario: {"entries": [EV row, ...], "picks": [pick row, ...], ...} or
  {"raised": text}. An EV row is {"ev", "plane", "pool", "state"} (every EV of the set before
  the spray); a pick row is {"ev", "n"} plus the chosen EV's plane, pool and state after the
  spray ("ev" None: choose() returned None "n" times).
- the SACK script: {"sacks": [SACK row per SCRIPT step], "probe": SACK row} or {"raised"}; a
  SACK row is {"type": the decoded packet's class name} plus, for a SackPacket, its fields.
The simulator's stage is not here: rubrics.ex4.measure runs it in the grader's own
process, around the student's endpoints served from the sandbox (rubrics.remote_core).
"""

from __future__ import annotations

import collections
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from grader.challenge import rng

PLANES, SPINES = 4, 2
EVS, BACKUPS, MIN_ACTIVE = 16, 2, 4
ROUNDS = 200  # choices per usable EV in the spreading checks
DEAD_PLANE = 3  # the plane _degrade takes away
SIM_SIZE = 1024 * 1024

WINDOW = 256
PSN_SPAN = 1 << 24
MIN_QPN = 0x100  # host_agent.core.endpoint's lowest queue pair number
# (PSN - start, EV, CE-marked): in-order, reordered, a gap, duplicates below and above cack,
# arrivals up to 64 ahead (the bitmap) and beyond 64 ahead (the offset must move). The start
# and the EVs of each run come from its challenge (Scenario): the EVs below are placeholders.
SCRIPT = (
    (0, 0x101, False), (1, 0x102, False), (3, 0x103, True), (2, 0x104, False),
    (6, 0x105, False), (9, 0x106, False), (5, 0x107, True), (4, 0x108, False),
    (40, 0x109, False), (70, 0x10A, False), (7, 0x10B, False), (3, 0x10C, False),
    (9, 0x10D, True), (8, 0x10E, False), (100, 0x10F, False), (200, 0x110, True),
    (10, 0x111, False), (75, 0x112, False), (230, 0x113, False),
)
SACK_FIELDS = ("cack_psn", "ack_psn_offset", "entropy", "m", "probe_resp", "spdcid", "dpdcid",
               "sack_offset", "sack_bitmap")

Row = dict[str, Any]


@dataclass(frozen=True)
class Scenario:
    """One grading run's spraying and SACK scenario, drawn from its challenge: the EV set's
    tag and seed, the receiver's first PSN (close enough to the wrap that the script crosses
    it), its queue pair numbers and the EVs the arrivals and the probe carry. The sandbox
    builds the scenario from it, the judge holds the records to it: a record of another run
    names other EVs, PSNs and QPNs."""
    tag: int
    seed: int
    start: int
    local_qpn: int
    remote_qpn: int
    probe_ev: int
    script: tuple[tuple[int, int, bool], ...]


def scenario(challenge: str) -> Scenario:
    r = rng(challenge, "ex4")
    evs = r.sample(range(1, 1 << 20), len(SCRIPT) + 1)
    return Scenario(tag=r.randrange(1, 1 << 20), seed=r.getrandbits(32),
                    start=PSN_SPAN - r.randint(2, 60), local_qpn=r.randrange(MIN_QPN, PSN_SPAN),
                    remote_qpn=r.randrange(MIN_QPN, PSN_SPAN), probe_ev=evs[-1],
                    script=tuple((k, evs[i], ce) for i, (k, _, ce) in enumerate(SCRIPT)))


def crash(exc: BaseException) -> str:
    """The student's exception as one line and the file:line it came from."""
    tb = traceback.extract_tb(exc.__traceback__)
    where = f" at {tb[-1].filename.rsplit('/', 3)[-1]}:{tb[-1].lineno}" if tb else ""
    text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    return f"{text}{where}"


def usable(row: Row, unusable_planes: Iterable[int] = ()) -> bool:
    """An EV row spraying may choose: GOOD, in the active pool, on a usable plane. Shared by
    observe (how many choices to make) and the judge (which choices were right)."""
    return (row["pool"] == "active" and row["state"] == "GOOD"
            and row["plane"] not in set(unusable_planes))


# ---- spraying ---------------------------------------------------------------------------------
def _evset(sc: Scenario) -> Any:
    import random

    from host_agent.core.evs import EvSet
    from host_agent.core.evstate import EvConfig
    from host_agent.core.types import PathInfo

    paths = [PathInfo(p, ("route", p, s)) for p in range(PLANES) for s in range(SPINES)]
    config = EvConfig(evs_per_connection=EVS, backups_per_plane=BACKUPS,
                      ev_min_active=MIN_ACTIVE)
    return EvSet(paths, config, random.Random(sc.seed), tag=sc.tag)


def _row(entry: Any) -> Row:
    return {"ev": entry.ev, "plane": entry.path.plane, "pool": str(entry.pool),
            "state": entry.state.name}


def _entries(evs: Any) -> list[Row]:
    return [_row(e) for e in evs.entries()]


def _spray(evs: Any, n: int, now: float) -> list[Row]:
    """n choices at `now`, counted per EV, with each chosen EV's state after the spray."""
    counts: collections.Counter = collections.Counter()
    chosen: dict[int, Any] = {}
    for _ in range(n):
        entry = evs.choose(now)
        ev = None if entry is None else entry.ev
        counts[ev] += 1
        if entry is not None:
            chosen[ev] = entry
    return [{"ev": None, "n": k} if ev is None else {**_row(chosen[ev]), "n": k}
            for ev, k in counts.items()]


def _degrade(evs: Any) -> tuple[list[int], list[int]]:
    """Retire one EV on planes 0-2, skip one on planes 0-1, take DEAD_PLANE away: returns the
    retired and the skipped EVs."""
    actives = {p: list(evs.active(p)) for p in range(PLANES)}
    retired = [actives[p][0].ev for p in range(3)]
    skipped = [actives[p][1].ev for p in range(2)]
    for ev in retired:
        evs.on_loss(ev, 0.0)
    for ev in skipped:
        evs.on_ecn(ev, 0.0)
    evs.set_plane_usable(DEAD_PLANE, False)
    return retired, skipped


def _spread(sc: Scenario) -> Row:
    evs = _evset(sc)
    entries = _entries(evs)
    n = ROUNDS * sum(usable(r) for r in entries)
    return {"entries": entries, "picks": _spray(evs, n, 0.0)}


def _usable_only(sc: Scenario) -> Row:
    evs = _evset(sc)
    retired, skipped = _degrade(evs)
    entries = _entries(evs)
    n = ROUNDS * sum(usable(r, {DEAD_PLANE}) for r in entries)
    return {"entries": entries, "retired": retired, "skipped": skipped,
            "picks": _spray(evs, n, 0.0)}


def _comes_back(sc: Scenario) -> Row:
    evs = _evset(sc)
    retired, skipped = _degrade(evs)
    before = sum(usable(r, {DEAD_PLANE}) for r in _entries(evs))
    _spray(evs, ROUNDS * before, 0.0)  # meets every unusable EV in the ring
    evs.set_plane_usable(DEAD_PLANE, True)
    later = 2 * evs.config.skip_time  # the skips have expired by then
    entries = _entries(evs)
    n = ROUNDS * sum(usable(r) or r["ev"] in skipped for r in entries)  # choose(later)
    # expires the skips itself
    return {"entries": entries, "retired": retired, "skipped": skipped,
            "picks": _spray(evs, n, later)}


def _plane_share(sc: Scenario) -> Row:
    evs = _evset(sc)
    survivor = evs.active(0)[0]
    for _ in range(len(evs)):  # retire plane 0's EVs one by one; backups swap in until none
        doomed = [e for e in evs.entries() if e.path.plane == 0 and e is not survivor
                  and usable(_row(e))]
        if not doomed:
            break
        evs.on_loss(doomed[0].ev, 0.0)
    entries = _entries(evs)
    n = ROUNDS * sum(usable(r) for r in entries)
    return {"entries": entries, "survivor": survivor.ev, "picks": _spray(evs, n, 0.0)}


def _guarded(body: Callable[..., Row], *args: Any) -> Row:
    try:
        return body(*args)
    except Exception as exc:  # the student's code may raise anything: the judge reports it
        return {"raised": crash(exc)}


def observe_spray(sc: Scenario) -> dict[str, Row]:
    """Each spraying scenario, keyed by the check that judges it."""
    return {"spread": _guarded(_spread, sc), "usable-only": _guarded(_usable_only, sc),
            "comes-back": _guarded(_comes_back, sc), "plane-share": _guarded(_plane_share, sc)}


# ---- SACK -------------------------------------------------------------------------------------
def _receiver(sc: Scenario) -> tuple[Any, Any]:
    import random

    from host_agent.core.memory import MemoryTable
    from host_agent.core.receiver import Receiver

    memory = MemoryTable(random.Random(sc.seed))
    region = memory.register(8 * 1024)
    stats: collections.defaultdict = collections.defaultdict(int)
    rx = Receiver(window=WINDOW, memory=memory, local_qpn=sc.local_qpn,
                  remote_qpn=sc.remote_qpn, expected_psn=sc.start, stats=stats,
                  emit=lambda _e: None)
    return rx, region


def _sack_row(raw: bytes) -> Row:
    """The decoded answer's fields (only its class name when it is not a SACK)."""
    import wire

    got = wire.decode_packet(raw)
    if not isinstance(got, wire.SackPacket):
        return {"type": type(got).__name__}
    row: Row = {"type": "SackPacket", "bth_psn": int(got.bth.psn),
                "dest_qp": int(got.bth.dest_qp), "ooo_count": int(got.cc.ooo_count),
                "rcvd_bytes": int(got.cc.rcvd_bytes)}
    for name in SACK_FIELDS:
        value = getattr(got.sack, name)
        row[name] = bool(value) if name == "probe_resp" else int(value)
    return row


def _sack_script(sc: Scenario) -> Row:
    import wire

    rx, region = _receiver(sc)
    sacks = []
    for k, ev, ce in sc.script:
        psn = (sc.start + k) % wire.PSN_MOD
        payload = bytes([k & 0xFF]) * 8
        fields = (wire.OP_WRITE_ONLY, sc.local_qpn, psn, k, region.va + 8 * k, region.rkey,
                  len(payload), None, payload)
        ecn = wire.ECN_CE if ce else wire.ECN_ECT0
        sacks.append(_sack_row(rx.on_data(fields, wire.DSCP_TRIMMABLE, ecn, ev)))
    return {"sacks": sacks, "probe": _sack_row(rx.probe_reply(sc.probe_ev, wire.ECN_CE))}


def observe_sack(sc: Scenario) -> Row:
    """What the student's receiver answered to each arrival of the script, then to a probe."""
    return _guarded(_sack_script, sc)
