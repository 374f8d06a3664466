"""Exercise 4, spraying and SACK in the agent: the student writes the part of EvSet.choose that
picks the next usable EV (host_agent/core/evs.py) and Receiver._sack, the SACK a receiver sends
for every data packet (host_agent/core/receiver.py).

Stages: (1) unit checks: spraying over an EvSet (spread over every active EV and plane, never
an EV that is retired, skipped or on an unusable plane, EVs that become usable again are
sprayed on again, a plane that lost EVs keeps its share) and SACKs of a Receiver fed a
scripted arrival order around the PSN wrap (cumulative ack, echoed fields, bitmap bits for
arrivals up to 64 PSNs ahead and beyond);
(2) the fabric simulator (sim/, a fake clock): a transfer under 1 % random loss on every link
completes, verified, with data on every plane; (3) the live Mininet transfer.
"""

from __future__ import annotations

import collections
import traceback
from collections.abc import Callable, Iterator
from typing import Any

from grader.live import transfer_check
from grader.report import Check, not_run

PLANES, SPINES = 4, 2
EVS, BACKUPS, MIN_ACTIVE = 16, 2, 4
ROUNDS = 200  # choices per usable EV in the spreading checks (a random choice stays
# within TOLERANCE of its share with a margin of about 5 standard deviations)
TOLERANCE = 0.35  # an EV's (or plane's) share may be off its fair share by this fraction
SIM_SIZE = 1024 * 1024
SIM_MIN_PLANE_SHARE = 0.5  # each plane carries at least half of its fair share of data


def _crash(exc: BaseException) -> str:
    tb = traceback.extract_tb(exc.__traceback__)
    where = f" at {tb[-1].filename.rsplit('/', 3)[-1]}:{tb[-1].lineno}" if tb else ""
    text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    return f"{text}{where}"


def _guard(cid: str, title: str, points: int, hint: str,
           body: Callable[[], tuple[bool, str, str, str]]) -> Check:
    """Run one check's body; the student's exception is the observed value."""
    try:
        passed, expected, observed, fail_hint = body()
    except Exception as exc:
        return Check(cid, title, points, False, expected="no exception",
                     observed=_crash(exc), hint=hint)
    return Check(cid, title, points, passed, expected=expected, observed=observed,
                 hint="" if passed else fail_hint)


# ---- spraying ---------------------------------------------------------------------------------
def _evset() -> Any:
    import random

    from host_agent.core.evs import EvSet
    from host_agent.core.evstate import EvConfig
    from host_agent.core.types import PathInfo

    paths = [PathInfo(p, ("route", p, s)) for p in range(PLANES) for s in range(SPINES)]
    config = EvConfig(evs_per_connection=EVS, backups_per_plane=BACKUPS,
                      ev_min_active=MIN_ACTIVE)
    return EvSet(paths, config, random.Random(7), tag=0x5EED)


def _usable(entry: Any, unusable_planes: set[int]) -> bool:
    from host_agent.core.evstate import Pool
    from host_agent.core.types import EvState
    return (entry.pool == Pool.ACTIVE and entry.state is EvState.GOOD
            and entry.path.plane not in unusable_planes)


def _spray(evs: Any, n: int, now: float) -> collections.Counter:
    counts: collections.Counter = collections.Counter()
    for _ in range(n):
        entry = evs.choose(now)
        counts[None if entry is None else entry.ev] += 1
    return counts


def _picks_per_plane(evs: Any, counts: collections.Counter) -> collections.Counter:
    """Packets per plane, from packets per EV (None: choose() found no EV)."""
    by_plane: collections.Counter = collections.Counter()
    for ev, k in counts.items():
        if ev is not None:
            by_plane[evs.entry(ev).path.plane] += k
    return by_plane


def _spread_problems(evs: Any, counts: collections.Counter, usable: list[Any]) -> list[str]:
    total = sum(counts.values())
    fair = total / len(usable)
    out = []
    for e in usable:
        got = counts.get(e.ev, 0)
        if abs(got - fair) > TOLERANCE * fair:
            out.append(f"EV {e.ev:#x} (plane {e.path.plane}) chosen {got} times, its fair share "
                       f"is {fair:.0f}")
    by_plane = _picks_per_plane(evs, collections.Counter({e.ev: counts.get(e.ev, 0)
                                                          for e in usable}))
    planes = sorted({e.path.plane for e in usable})
    for p in planes:
        share = total * sum(1 for e in usable if e.path.plane == p) / len(usable)
        if abs(by_plane[p] - share) > TOLERANCE * share:
            out.append(f"plane {p} got {by_plane[p]} of {total} packets, its fair share is "
                       f"{share:.0f}")
    return out


SPRAY_HINT = ("choose() must take the plane from self._next_plane() and rotate over that "
              "plane's ring of active EVs: take the EV at the front (ring.popleft()), and if "
              "it is usable put it back at the end and return it")


def _check_spread() -> Check:
    def body():
        evs = _evset()
        usable = [e for e in evs.entries() if _usable(e, set())]
        n = ROUNDS * len(usable)
        counts = _spray(evs, n, 0.0)
        problems = _spread_problems(evs, counts, usable)
        distinct = sum(1 for e in usable if counts.get(e.ev))
        expected = (f"{n} choices spread over all {len(usable)} active EVs on {PLANES} planes, "
                    f"about {ROUNDS} each (within {TOLERANCE:.0%})")
        observed = (f"{distinct} distinct EVs chosen" +
                    (f"; {len(problems)} off their share, e.g. {problems[0]}" if problems else
                     ", each within its share"))
        return (not problems, expected, observed,
                "spraying sends each packet on the next EV: " + SPRAY_HINT +
                "; returning the first usable EV every time puts every packet on one path")
    return _guard("spray.spread", "choose() sprays packets evenly over every active EV and "
                  "plane", 3, SPRAY_HINT, body)


def _degrade(evs: Any) -> tuple[list[Any], list[Any], int]:
    """Retire one EV on planes 0-2, skip one on planes 0-1, take plane 3 away: returns the
    retired and skipped EVs and the unusable plane."""
    actives = {p: [e for e in evs.active(p)] for p in range(PLANES)}
    retired = [actives[p][0] for p in range(3)]
    skipped = [actives[p][1] for p in range(2)]
    for e in retired:
        evs.on_loss(e.ev, 0.0)
    for e in skipped:
        evs.on_ecn(e.ev, 0.0)
    evs.set_plane_usable(3, False)
    return retired, skipped, 3


def _check_usable_only() -> Check:
    def body():
        evs = _evset()
        retired, skipped, dead_plane = _degrade(evs)
        usable = [e for e in evs.entries() if _usable(e, {dead_plane})]
        n = ROUNDS * len(usable)
        counts = _spray(evs, n, 0.0)
        wrong = []
        for ev, k in counts.items():
            if ev is None:
                wrong.append(f"choose() returned None {k} times")
                continue
            e = evs.entry(ev)
            if not _usable(e, {dead_plane}):
                why = ("retired: ASSUMED_BAD" if e in retired else
                       "skipped after an ECN echo" if e in skipped else
                       f"on plane {e.path.plane}, whose port is down" if
                       e.path.plane == dead_plane else f"{e.state.name} in pool {e.pool}")
                wrong.append(f"EV {ev:#x} ({why}) chosen {k} times")
        missing = [e for e in usable if not counts.get(e.ev)]
        expected = (f"{n} choices only among the {len(usable)} usable EVs (GOOD, active, on a "
                    f"usable plane: retired EVs' backups included), each of them chosen")
        problems = wrong + [f"usable EV {e.ev:#x} (plane {e.path.plane}) never chosen"
                            for e in missing]
        observed = ("only usable EVs, all of them" if not problems else
                    f"{len(problems)} problems, e.g. {problems[0]}")
        return (not problems, expected, observed,
                "an EV in the ring is not always usable: one retired by a loss, skipped after "
                "an ECN mark or on a plane whose port is down stays in the ring until choose() "
                "meets it; test entry.usable and take such an EV out of the ring instead of "
                "sending on it")
    return _guard("spray.usable-only", "choose() never sprays on a retired, skipped or "
                  "plane-down EV", 3, SPRAY_HINT, body)


def _check_plane_share() -> Check:
    def body():
        evs = _evset()
        survivor = evs.active(0)[0]
        while True:  # retire plane 0's EVs one by one; backups swap in until none is left
            doomed = [e for e in evs.entries() if e.path.plane == 0 and e is not survivor
                      and _usable(e, set())]
            if not doomed:
                break
            evs.on_loss(doomed[0].ev, 0.0)
        usable = [e for e in evs.entries() if _usable(e, set())]
        n = ROUNDS * len(usable)
        counts = _spray(evs, n, 0.0)
        by_plane = _picks_per_plane(evs, counts)
        fair = n / PLANES
        off = [p for p in range(PLANES) if abs(by_plane[p] - fair) > TOLERANCE * fair]
        expected = (f"plane 0 has one usable EV left, planes 1-{PLANES - 1} have "
                    f"{len(usable) - 1} between them: each plane still gets about "
                    f"{fair:.0f} of {n} packets (its NIC port's share, within {TOLERANCE:.0%})")
        observed = ", ".join(f"plane {p}: {by_plane[p]}" for p in range(PLANES))
        return (not off, expected, observed,
                "each plane is one NIC port with its own rate: take the plane from "
                "self._next_plane() and spray within that plane's ring, instead of one "
                "rotation over every plane's EVs")
    return _guard("spray.plane-share", "each usable plane gets its share of the packets, "
                  "however many EVs it has left", 2, SPRAY_HINT, body)


def _check_comes_back() -> Check:
    def body():
        evs = _evset()
        retired, skipped, dead_plane = _degrade(evs)
        usable_before = [e for e in evs.entries() if _usable(e, {dead_plane})]
        _spray(evs, ROUNDS * len(usable_before), 0.0)  # meets every unusable EV in the ring
        evs.set_plane_usable(dead_plane, True)
        later = 2 * evs.config.skip_time  # the skips have expired by then
        usable = [e for e in evs.entries() if _usable(e, set())
                  or e in skipped]  # choose(later) expires the skips itself
        counts = _spray(evs, ROUNDS * len(usable), later)
        missing = [e for e in usable if not counts.get(e.ev)]
        expected = (f"after plane {dead_plane} comes back and the skips expire, all "
                    f"{len(usable)} usable EVs are chosen again")
        if missing:
            m = missing[0]
            why = "back from SKIP" if m in skipped else "its plane came back"
            observed = (f"{len(missing)} never chosen again, e.g. EV {m.ev:#x} on plane "
                        f"{m.path.plane} ({why})")
        else:
            observed = "all chosen again"
        return (not missing, expected, observed,
                "an EV taken out of the ring must be marked so (entry.in_ring = False): when it "
                "becomes usable again, EvSet._refresh puts back only EVs not marked in_ring")
    return _guard("spray.comes-back", "EVs usable again (SKIP expired, plane back) are sprayed "
                  "on again", 2, SPRAY_HINT, body)


# ---- SACK -------------------------------------------------------------------------------------
START = (1 << 24) - 5  # the receiver's first expected PSN: the script crosses the PSN wrap
WINDOW = 256
LOCAL_QPN, REMOTE_QPN = 0x12345, 0x0ABCDE
# (PSN - START, EV, CE-marked): in-order, reordered, a gap, duplicates below and above cack,
# arrivals up to 64 ahead (the bitmap) and beyond 64 ahead (the offset must move)
SCRIPT = (
    (0, 0x101, False), (1, 0x102, False), (3, 0x103, True), (2, 0x104, False),
    (6, 0x105, False), (9, 0x106, False), (5, 0x107, True), (4, 0x108, False),
    (40, 0x109, False), (70, 0x10A, False), (7, 0x10B, False), (3, 0x10C, False),
    (9, 0x10D, True), (8, 0x10E, False), (100, 0x10F, False), (200, 0x110, True),
    (10, 0x111, False), (75, 0x112, False), (230, 0x113, False),
)
FAR = 64  # a trigger more than this above cack is the sack.far check's


def _receiver() -> tuple[Any, Any]:
    import random

    from host_agent.core.memory import MemoryTable
    from host_agent.core.receiver import Receiver

    memory = MemoryTable(random.Random(3))
    region = memory.register(8 * 1024)
    stats: collections.defaultdict = collections.defaultdict(int)
    rx = Receiver(window=WINDOW, memory=memory, local_qpn=LOCAL_QPN, remote_qpn=REMOTE_QPN,
                  expected_psn=START, stats=stats, emit=lambda _e: None)
    return rx, region


class _SackRun:
    """Feeds SCRIPT to the student's receiver and keeps what a correct SACK must say."""

    def __init__(self) -> None:
        import wire

        self.rows: list[dict[str, Any]] = []
        rx, region = _receiver()
        received: set[int] = set()  # offsets from START
        cack = 0
        rcvd = 0
        for step, (k, ev, ce) in enumerate(SCRIPT):
            psn = (START + k) % wire.PSN_MOD
            payload = bytes([k & 0xFF]) * 8
            fields = (wire.OP_WRITE_ONLY, LOCAL_QPN, psn, k, region.va + 8 * k, region.rkey,
                      len(payload), None, payload)
            ecn = wire.ECN_CE if ce else wire.ECN_ECT0
            raw = rx.on_data(fields, wire.DSCP_TRIMMABLE, ecn, ev)
            rel = k - cack
            if k not in received and 0 <= rel < WINDOW:
                received.add(k)
                rcvd += len(payload)
                while cack in received:
                    cack += 1
            self.rows.append({"step": step, "k": k, "psn": psn, "ev": ev, "ce": ce,
                              "rel": rel, "cack": cack, "above": {x for x in received
                                                                   if x >= cack},
                              "rcvd": rcvd, "sack": wire.decode_packet(raw)})
        self.probe = wire.decode_packet(rx.probe_reply(0x77777, wire.ECN_CE))
        self.final_cack = cack


def _where(row: dict[str, Any]) -> str:
    return (f"after PSN {row['psn']} (start+{row['k']}) arrived as step {row['step'] + 1} of "
            f"{len(SCRIPT)}, cack = start+{row['cack']}")


def _check_cack(run: _SackRun) -> Check:
    import wire

    def body():
        bad = []
        for row in run.rows:
            got = row["sack"]
            if not isinstance(got, wire.SackPacket):
                bad.append(f"{_where(row)}: answered with {type(got).__name__}, not a SACK")
                continue
            want = (START + row["cack"]) % wire.PSN_MOD
            if got.sack.cack_psn != want or got.bth.psn != want:
                bad.append(f"{_where(row)}: SACK says cack_psn {got.sack.cack_psn} (BTH PSN "
                           f"{got.bth.psn}), expected {want}")
        return (not bad, "every SACK carries the cumulative ack (the first PSN not yet "
                "received) as cack_psn and as its BTH PSN",
                "all right" if not bad else f"{len(bad)} SACKs wrong, e.g. {bad[0]}",
                "use self.cack as it is when _sack runs: on_data has already advanced it")
    return _guard("sack.cack", "SACKs carry the cumulative ack", 2,
                  "the traceback says where _sack raised", body)


def _check_fields(run: _SackRun) -> Check:
    import wire

    def body():
        bad = []
        for row in run.rows:
            got = row["sack"]
            if not isinstance(got, wire.SackPacket):
                bad.append(f"{_where(row)}: not a SACK")
                continue
            s, cc = got.sack, got.cc
            cack = row["cack"]
            trigger = row["k"] - cack  # the trigger relative to the cack the SACK carries
            want = {"ack_psn_offset": trigger, "entropy": row["ev"],
                    "m": wire.M_SKIP_ONCE if row["ce"] else wire.M_NONE, "probe_resp": False,
                    "spdcid": LOCAL_QPN & 0xFFFF, "dpdcid": REMOTE_QPN & 0xFFFF,
                    "ooo_count": len(row["above"]), "rcvd_bytes": row["rcvd"],
                    "dest_qp": REMOTE_QPN}
            have = {"ack_psn_offset": s.ack_psn_offset, "entropy": s.entropy, "m": s.m,
                    "probe_resp": s.probe_resp, "spdcid": s.spdcid, "dpdcid": s.dpdcid,
                    "ooo_count": cc.ooo_count, "rcvd_bytes": cc.rcvd_bytes,
                    "dest_qp": got.bth.dest_qp}
            for key, value in want.items():
                if have[key] != value:
                    bad.append(f"{_where(row)}: {key} = {have[key]}, expected {value}")
        p = run.probe
        if not isinstance(p, wire.SackPacket):
            bad.append(f"probe_reply answered with {type(p).__name__}, not a SACK")
        else:
            want = {"probe_resp": True, "entropy": 0x77777, "ack_psn_offset": 0,
                    "m": wire.M_NONE}
            have = {"probe_resp": p.sack.probe_resp, "entropy": p.sack.entropy,
                    "ack_psn_offset": p.sack.ack_psn_offset, "m": p.sack.m}
            for key, value in want.items():
                if have[key] != value:
                    bad.append(f"the reply to a CE-marked PROBE of EV 0x77777: {key} = "
                               f"{have[key]}, expected {value}")
        return (not bad, "ack_psn_offset = trigger PSN - cack (signed, negative for a "
                "duplicate below cack, across the PSN wrap), the EV echoed, M = SKIP_ONCE for "
                "a CE-marked packet, ooo_count = PSNs received above cack, rcvd_bytes; a probe "
                "reply has probe_resp = 1, offset 0, M = NONE",
                "all right" if not bad else f"{len(bad)} wrong, e.g. {bad[0]}",
                "see docs/wire-format.md §2.6-2.7; PSNs are 24-bit serial numbers, so take "
                "differences as wire.psn_diff does, never as plain subtraction")
    return _guard("sack.fields", "SACKs echo the EV and say which PSN triggered them", 2,
                  "the traceback says where _sack raised", body)


def _claims(row: dict[str, Any]) -> tuple[int, set[int]]:
    """(sack_offset, PSNs as offsets from START the bitmap says arrived)."""
    s = row["sack"].sack
    base = row["cack"] + s.sack_offset
    return s.sack_offset, {base + i for i in range(64) if s.sack_bitmap >> i & 1}


def _bitmap_problems(run: _SackRun, far: bool) -> tuple[list[str], int]:
    import wire

    bad, n = [], 0
    for row in run.rows:
        if not isinstance(row["sack"], wire.SackPacket) or (row["rel"] > FAR) != far:
            continue
        if row["rel"] >= WINDOW:
            continue  # refused (out of the receiver's window): a NACK, not ours to judge
        n += 1
        offset, claimed = _claims(row)
        cack = row["cack"]
        window = set(range(cack + offset, cack + offset + 64))
        truth = row["above"] & window
        trigger = row["k"]
        if claimed != truth:
            extra, lost = sorted(claimed - truth), sorted(truth - claimed)
            detail = []
            if extra:
                detail.append("claims " + ", ".join(f"cack+{x - cack}" for x in extra[:4]) +
                              " that did not arrive")
            if lost:
                detail.append("misses " + ", ".join(f"cack+{x - cack}" for x in lost[:4]))
            bitmap = row["sack"].sack.sack_bitmap
            bad.append(f"{_where(row)}: sack_offset {offset}, bitmap {bitmap:#x} "
                       f"{' and '.join(detail)}")
        elif trigger >= cack and trigger not in window:
            bad.append(f"{_where(row)}: the trigger cack+{trigger - cack} is outside the bitmap "
                       f"(sack_offset {offset} covers cack+{offset}..cack+{offset + 63})")
    return bad, n


def _check_bitmap(run: _SackRun) -> Check:
    def body():
        bad, n = _bitmap_problems(run, far=False)
        return (not bad, f"in all {n} SACKs for arrivals at most {FAR} PSNs above cack, bitmap "
                "bit i (LSB first) is set exactly when PSN cack + sack_offset + i arrived",
                "all right" if not bad else f"{len(bad)} wrong, e.g. {bad[0]}",
                "bit r of self._bits is PSN cack + r; the SACK's bit i is PSN cack + "
                "sack_offset + i, so shift self._bits right by sack_offset and keep 64 bits")
    return _guard("sack.bitmap", "the SACK bitmap marks exactly the PSNs received above cack",
                  3, "the traceback says where _sack raised", body)


def _check_far(run: _SackRun) -> Check:
    def body():
        bad, n = _bitmap_problems(run, far=True)
        return (not bad, f"in all {n} SACKs for arrivals more than {FAR} PSNs above cack, the "
                "64-bit window moves (sack_offset > 1) so the triggering PSN is inside it, "
                "and the bits are still exact",
                "all right" if not bad else f"{len(bad)} wrong, e.g. {bad[0]}",
                "a bitmap of 64 bits starting at cack + 1 cannot show an arrival 100 PSNs "
                "ahead: choose sack_offset so the trigger is the window's last bit then")
    return _guard("sack.far", "arrivals more than 64 PSNs ahead stay visible in the SACK", 2,
                  "the traceback says where _sack raised", body)


# ---- the simulator ----------------------------------------------------------------------------
def _check_sim() -> list[Check]:
    cid1, title1 = "sim.lossy-transfer", ("a 1 MiB write across the simulated 4-plane fabric "
                                          "with 1 % loss on every link completes, verified")
    cid2, title2 = "sim.every-plane", "the sender's data is spread over every plane"
    try:
        from sim.scenarios import run_scenario
        result = run_scenario("loss", size=SIM_SIZE)
    except Exception as exc:
        crash = _crash(exc)
        return [Check(cid1, title1, 3, False, expected="the simulation runs", observed=crash,
                      hint="the traceback shows the line of your code that raised"),
                not_run(cid2, title2, 2, "the simulation crashed")]
    ok = bool(result.get("ok"))
    first = Check(cid1, title1, 3, ok, expected="completed and verified byte for byte",
                  observed=("completed and verified" if ok else
                            f"completed={result.get('completed')} ok={ok} after "
                            f"{result.get('duration_s', 0) * 1e3:.2f} ms simulated, "
                            f"{result.get('retransmits')} retransmits, "
                            f"{result.get('timeouts')} timeouts"),
                  hint="" if ok else "the unit checks passed, so look at the SACKs the "
                       "receiver sends out of order: a wrong bit makes the sender skip a "
                       "retransmission or repeat one forever")
    sender = result.get("data_tx_per_plane", {}).get("h0", [])
    total = sum(sender)
    fair = total / len(sender) if sender else 0
    low = [p for p, n in enumerate(sender) if n < SIM_MIN_PLANE_SHARE * fair] if total else []
    spread = bool(sender) and total > 0 and not low
    second = Check(cid2, title2, 2, spread,
                   expected=f"each of the {len(sender) or 4} planes carries at least "
                            f"{SIM_MIN_PLANE_SHARE:.0%} of its fair share of data packets",
                   observed=f"data packets per plane {sender}",
                   hint="" if spread else "spraying must cover every plane: see spray.spread")
    return [first, second]


def grade(ctx: Any) -> Iterator[Check]:
    units = [_check_spread(), _check_usable_only(), _check_comes_back(), _check_plane_share()]
    try:
        run: _SackRun | None = _SackRun()
        crash = ""
    except Exception as exc:
        run, crash = None, _crash(exc)
    sack_checks = (("sack.cack", "SACKs carry the cumulative ack", 2, _check_cack),
                   ("sack.fields", "SACKs echo the EV and say which PSN triggered them", 2,
                    _check_fields),
                   ("sack.bitmap", "the SACK bitmap marks exactly the PSNs received above "
                    "cack", 3, _check_bitmap),
                   ("sack.far", "arrivals more than 64 PSNs ahead stay visible in the SACK",
                    2, _check_far))
    for cid, title, points, fn in sack_checks:
        if run is None:
            units.append(Check(cid, title, points, False,
                               expected="the receiver answers every data packet with a SACK",
                               observed=crash, hint="the traceback shows where your _sack "
                               "raised (the TODO in host_agent/core/receiver.py)"))
        else:
            units.append(fn(run))
    yield from units
    if not all(c.passed for c in units):
        yield not_run("sim.lossy-transfer", "a write across the simulated fabric with loss "
                      "completes", 3, "fix the unit checks above first")
        yield not_run("sim.every-plane", "the sender's data is spread over every plane", 2,
                      "fix the unit checks above first")
        yield not_run("live.transfer", "a write crosses a Mininet fabric with your agents", 4,
                      "fix the unit checks above first")
        return
    sims = _check_sim()
    yield from sims
    if not all(c.passed for c in sims):
        yield not_run("live.transfer", "a write crosses a Mininet fabric with your agents", 4,
                      "fix the simulator checks first")
        return
    yield transfer_check(ctx, "live.transfer", 4,
                         hint="the unit and simulator checks passed: look at the agents' "
                              "logs in the report for a crash on real traffic")
