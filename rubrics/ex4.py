"""Exercise 4, spraying and SACK in the agent: the student writes the part of EvSet.choose that
picks the next usable EV (host_agent/core/evs.py) and Receiver._sack, the SACK a receiver sends
for every data packet (host_agent/core/receiver.py).

Stages: (1) unit checks: spraying over an EvSet (spread over every active EV and plane, never
an EV that is retired, skipped or on an unusable plane, EVs that become usable again are
sprayed on again, a plane that lost EVs keeps its share) and SACKs of a Receiver fed a
scripted arrival order around the PSN wrap (cumulative ack, echoed fields, bitmap bits for
arrivals up to 64 PSNs ahead and beyond); (2) the fabric simulator (sim/, a fake clock): a
transfer under 1 % random loss on every link completes, verified, with data on every plane;
(3) the live Mininet transfer.

`observe` (in the sandbox) runs the student's code through rubrics.ex4_observe and
reports what it did: the EVs chosen and their states, each SACK's fields, the simulator's
counts. `judge` (in the grader's process) decides every check from those records alone: the
fair shares, the right SACK for each arrival (replayed from SCRIPT in
rubrics.ex4_sack) and the gating.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from grader.report import Check, CheckSpec, failed, not_run
from rubrics.ex4_observe import (
    DEAD_PLANE,
    PLANES,
    ROUNDS,
    SIM_SIZE,
    Row,
    Scenario,
    scenario,
    usable,
)
from rubrics.ex4_sack import Verdict, sack_checks
from rubrics.live import judge_transfer, measure_served_transfer
from rubrics.remote_core import served_run

TOLERANCE = 0.35  # an EV's (or plane's) share may be off its fair share by this fraction (a
# random choice over ROUNDS per EV stays within it with a margin of about 5 standard deviations)
SIM_MIN_PLANE_SHARE = 0.5  # each plane carries at least half of its fair share of data

CHECKS = (
    CheckSpec("spray.spread", "choose() sprays packets evenly over every active EV and plane", 3),
    CheckSpec("spray.usable-only", "choose() never sprays on a retired, skipped or plane-down "
              "EV", 3),
    CheckSpec("spray.comes-back", "EVs usable again (SKIP expired, plane back) are sprayed on "
              "again", 2),
    CheckSpec("spray.plane-share", "each usable plane gets its share of the packets, however "
              "many EVs it has left", 2),
    CheckSpec("sack.cack", "SACKs carry the cumulative ack", 2),
    CheckSpec("sack.fields", "SACKs echo the EV and say which PSN triggered them", 2),
    CheckSpec("sack.bitmap", "the SACK bitmap marks exactly the PSNs received above cack", 3),
    CheckSpec("sack.far", "arrivals more than 64 PSNs ahead stay visible in the SACK", 2),
    CheckSpec("sim.lossy-transfer", "a 1 MiB write across the simulated 4-plane fabric with 1 % "
              "loss on every link completes, verified", 3),
    CheckSpec("sim.every-plane", "the sender's data is spread over every plane", 2),
    CheckSpec("live.transfer", "a write crosses a Mininet fabric with your agents", 4),
)
SPEC = {s.id: s for s in CHECKS}


def observe(ctx: Any) -> dict[str, Any]:
    """In the sandbox: the unit stages' records. The simulator and the live transfer are not
    run here: `measure` runs them in the grader's process around the student's endpoints."""
    from rubrics.ex4_observe import observe_sack, observe_spray

    sc = scenario(ctx.challenge)
    return {"spray": observe_spray(sc), "sack": observe_sack(sc)}


def measure(obs: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """Here, once the units pass: the lossy transfer on the grader's own simulator, then (if
    that passes) the live transfer on the grader's own fabric and agents, the student's
    endpoints served from the sandbox (rubrics.remote_core) in both: completion, verification
    and packets per plane are the grader's observations."""
    if not all(c.passed for c in _units(obs, scenario(ctx.challenge))):
        return {}
    measured: dict[str, Any] = {"sim": served_run(ctx, lossy_transfer)}
    if all(c.passed for c in _judge_sim(measured["sim"])):
        measured["live"] = measure_served_transfer(ctx)
    return measured


def lossy_transfer(endpoints: Any = None) -> Row:
    """The simulator's "loss" scenario (1 % loss on every link) with `endpoints` (None: this
    process's own, for tests), as the judge reads it."""
    from sim.scenarios import run_scenario

    result = run_scenario("loss", size=SIM_SIZE, endpoints=endpoints)
    return {"ok": bool(result.get("ok")), "completed": result.get("completed"),
            "duration_s": result.get("duration_s", 0),
            "retransmits": result.get("retransmits"), "timeouts": result.get("timeouts"),
            "data_tx_per_plane": list(result.get("data_tx_per_plane", {}).get("h0", []))}


def judge(obs: dict[str, Any], ctx: Any) -> Iterator[Check]:
    """Outside the sandbox: every check from `obs`, held to this run's scenario (drawn from
    the challenge the grader keeps, never from the report), later stages not run after a
    failure."""
    units = _units(obs, scenario(ctx.challenge))
    yield from units
    if not all(c.passed for c in units):
        yield not_run("sim.lossy-transfer", "a write across the simulated fabric with loss "
                      "completes", 3, "fix the unit checks above first")
        yield not_run("sim.every-plane", "the sender's data is spread over every plane", 2,
                      "fix the unit checks above first")
        yield not_run("live.transfer", "a write crosses a Mininet fabric with your agents", 4,
                      "fix the unit checks above first")
        return
    sims = _judge_sim((ctx.measured or {}).get("sim"))
    yield from sims
    if not all(c.passed for c in sims):
        yield not_run("live.transfer", "a write crosses a Mininet fabric with your agents", 4,
                      "fix the simulator checks first")
        return
    yield judge_transfer((ctx.measured or {}).get("live"), ctx.target, "live.transfer", 4,
                         hint="the unit and simulator checks passed: look at the agents' "
                              "logs in the report for a crash on real traffic")


def _units(obs: dict[str, Any], sc: Scenario) -> list[Check]:
    spray = obs["spray"]
    checks = [_spray_check("spray.spread", spray["spread"], _spread, sc),
              _spray_check("spray.usable-only", spray["usable-only"], _usable_only, sc),
              _spray_check("spray.comes-back", spray["comes-back"], _comes_back, sc),
              _spray_check("spray.plane-share", spray["plane-share"], _plane_share, sc)]
    return checks + sack_checks(obs["sack"], SPEC, sc)


# ---- spraying ---------------------------------------------------------------------------------
SPRAY_HINT = ("choose() must take the plane from self._next_plane() and rotate over that "
              "plane's ring of active EVs: take the EV at the front (ring.popleft()), and if "
              "it is usable put it back at the end and return it")


def _foreign(obs: Row, sc: Scenario) -> list[Any]:
    """EVs of the record that this run's EV set cannot have made: each EV is the set's tag
    (this run's, from its challenge) above an index (host_agent.core.evindex)."""
    from host_agent.core.evindex import INDEX_BITS

    evs = [row["ev"] for key in ("entries", "picks") for row in obs[key]]
    return [ev for ev in evs if ev is not None and (type(ev) is not int
                                                     or ev >> INDEX_BITS != sc.tag)]


def _spray_check(cid: str, obs: Row, body: Callable[[Row], Verdict], sc: Scenario) -> Check:
    """One spraying scenario's verdict; the student's exception is the observed value."""
    spec = SPEC[cid]
    if "raised" in obs:
        return Check(cid, spec.title, spec.points, False, expected="no exception",
                     observed=str(obs["raised"]), hint=SPRAY_HINT)
    if _foreign(obs, sc):
        raise ValueError("the spray record names EVs this run's EV set does not have")
    passed, expected, observed, fail_hint = body(obs)
    return Check(cid, spec.title, spec.points, passed, expected=expected, observed=observed,
                 hint="" if passed else fail_hint)


def _entries(obs: Row) -> list[Row]:
    """The EV set's EVs before the spray, one row per EV (the last row of a repeated EV)."""
    return list({row["ev"]: row for row in obs["entries"]}.values())


def _picks(obs: Row, n: int) -> dict[Any, tuple[int, Row]]:
    """Choices per EV (None: choose() found none) with the EV's row; refuses a report whose
    choices do not add up to the n the scenario makes."""
    out: dict[Any, tuple[int, Row]] = {}
    for row in obs["picks"]:
        k = row["n"]
        if type(k) is not int or k < 0:
            raise ValueError(f"a pick count {k!r} is not a count")
        out[row["ev"]] = (out.get(row["ev"], (0, row))[0] + k, row)
    total = sum(k for k, _ in out.values())
    if total != n:
        raise ValueError(f"{total} choices reported where the scenario makes {n}")
    return out


def _spread_problems(counts: dict[Any, int], good: list[Row]) -> list[str]:
    total = sum(counts.values())
    fair = total / len(good)
    out = []
    for e in good:
        got = counts.get(e["ev"], 0)
        if abs(got - fair) > TOLERANCE * fair:
            out.append(f"EV {e['ev']:#x} (plane {e['plane']}) chosen {got} times, its fair "
                       f"share is {fair:.0f}")
    for p in sorted({e["plane"] for e in good}):
        share = total * sum(1 for e in good if e["plane"] == p) / len(good)
        got = sum(counts.get(e["ev"], 0) for e in good if e["plane"] == p)
        if abs(got - share) > TOLERANCE * share:
            out.append(f"plane {p} got {got} of {total} packets, its fair share is "
                       f"{share:.0f}")
    return out


def _spread(obs: Row) -> Verdict:
    good = [e for e in _entries(obs) if usable(e)]
    n = ROUNDS * len(good)
    counts = {ev: k for ev, (k, _) in _picks(obs, n).items()}
    hint = ("spraying sends each packet on the next EV: " + SPRAY_HINT +
            "; returning the first usable EV every time puts every packet on one path")
    expected = (f"{n} choices spread over all {len(good)} active EVs on {PLANES} planes, "
                f"about {ROUNDS} each (within {TOLERANCE:.0%})")
    if not good:
        return False, expected, "the EV set has no usable EV (GOOD, active) to spray on", hint
    problems = _spread_problems(counts, good)
    distinct = sum(1 for e in good if counts.get(e["ev"]))
    observed = (f"{distinct} distinct EVs chosen" +
                (f"; {len(problems)} off their share, e.g. {problems[0]}" if problems else
                 ", each within its share"))
    return not problems, expected, observed, hint


def _usable_only(obs: Row) -> Verdict:
    retired, skipped = set(obs["retired"]), set(obs["skipped"])
    good = [e for e in _entries(obs) if usable(e, {DEAD_PLANE})]
    n = ROUNDS * len(good)
    picks = _picks(obs, n)
    wrong = []
    for ev, (k, e) in picks.items():
        if ev is None:
            wrong.append(f"choose() returned None {k} times")
            continue
        if not usable(e, {DEAD_PLANE}):
            why = ("retired: ASSUMED_BAD" if ev in retired else
                   "skipped after an ECN echo" if ev in skipped else
                   f"on plane {e['plane']}, whose port is down" if
                   e["plane"] == DEAD_PLANE else f"{e['state']} in pool {e['pool']}")
            wrong.append(f"EV {ev:#x} ({why}) chosen {k} times")
    missing = [e for e in good if not picks.get(e["ev"], (0,))[0]]
    expected = (f"{n} choices only among the {len(good)} usable EVs (GOOD, active, on a "
                f"usable plane: retired EVs' backups included), each of them chosen")
    problems = wrong + [f"usable EV {e['ev']:#x} (plane {e['plane']}) never chosen"
                        for e in missing]
    observed = ("only usable EVs, all of them" if not problems else
                f"{len(problems)} problems, e.g. {problems[0]}")
    return (not problems, expected, observed,
            "an EV in the ring is not always usable: one retired by a loss, skipped after "
            "an ECN mark or on a plane whose port is down stays in the ring until choose() "
            "meets it; test entry.usable and take such an EV out of the ring instead of "
            "sending on it")


def _plane_share(obs: Row) -> Verdict:
    good = [e for e in _entries(obs) if usable(e)]
    n = ROUNDS * len(good)
    by_plane: dict[Any, int] = {}
    for ev, (k, e) in _picks(obs, n).items():
        if ev is not None:
            by_plane[e["plane"]] = by_plane.get(e["plane"], 0) + k
    fair = n / PLANES
    off = [p for p in range(PLANES) if abs(by_plane.get(p, 0) - fair) > TOLERANCE * fair]
    expected = (f"plane 0 has one usable EV left, planes 1-{PLANES - 1} have "
                f"{len(good) - 1} between them: each plane still gets about "
                f"{fair:.0f} of {n} packets (its NIC port's share, within {TOLERANCE:.0%})")
    observed = ", ".join(f"plane {p}: {by_plane.get(p, 0)}" for p in range(PLANES))
    return (not off, expected, observed,
            "each plane is one NIC port with its own rate: take the plane from "
            "self._next_plane() and spray within that plane's ring, instead of one "
            "rotation over every plane's EVs")


def _comes_back(obs: Row) -> Verdict:
    skipped = set(obs["skipped"])  # choose(later) expired their skips itself: usable too
    good = [e for e in _entries(obs) if usable(e) or e["ev"] in skipped]
    picks = _picks(obs, ROUNDS * len(good))
    missing = [e for e in good if not picks.get(e["ev"], (0,))[0]]
    expected = (f"after plane {DEAD_PLANE} comes back and the skips expire, all "
                f"{len(good)} usable EVs are chosen again")
    if missing:
        m = missing[0]
        why = "back from SKIP" if m["ev"] in skipped else "its plane came back"
        observed = (f"{len(missing)} never chosen again, e.g. EV {m['ev']:#x} on plane "
                    f"{m['plane']} ({why})")
    else:
        observed = "all chosen again"
    return (not missing, expected, observed,
            "an EV taken out of the ring must be marked so (entry.in_ring = False): when it "
            "becomes usable again, EvIndex.refresh puts back only EVs not marked in_ring")


# ---- the simulator ----------------------------------------------------------------------------
def _judge_sim(obs: Row | None) -> list[Check]:
    """sim.lossy-transfer and sim.every-plane from measure's record."""
    lossy, every = SPEC["sim.lossy-transfer"], SPEC["sim.every-plane"]
    if obs is None:
        return [failed(lossy, "not measured: the grader did not run the simulator"),
                failed(every, "not measured: the grader did not run the simulator")]
    if "raised" in obs:
        return [Check(lossy.id, lossy.title, 3, False, expected="the simulation runs",
                      observed=str(obs["raised"]),
                      hint="the traceback shows the line of your code that raised"),
                not_run(every.id, every.title, 2, "the simulation crashed")]
    ok = obs["ok"] is True
    first = Check(lossy.id, lossy.title, 3, ok, expected="completed and verified byte for byte",
                  observed=("completed and verified" if ok else
                            f"completed={obs.get('completed')} ok={ok} after "
                            f"{obs.get('duration_s', 0) * 1e3:.2f} ms simulated, "
                            f"{obs.get('retransmits')} retransmits, "
                            f"{obs.get('timeouts')} timeouts"),
                  hint="" if ok else "the unit checks passed, so look at the SACKs the "
                       "receiver sends out of order: a wrong bit makes the sender skip a "
                       "retransmission or repeat one forever")
    sender = obs["data_tx_per_plane"]
    if not isinstance(sender, list) or not all(type(n) is int for n in sender):
        raise TypeError("data_tx_per_plane is a list of packet counts")
    total = sum(sender)
    fair = total / len(sender) if sender else 0
    low = [p for p, n in enumerate(sender) if n < SIM_MIN_PLANE_SHARE * fair] if total else []
    spread = bool(sender) and total > 0 and not low
    second = Check(every.id, every.title, 2, spread,
                   expected=f"each of the {len(sender) or 4} planes carries at least "
                            f"{SIM_MIN_PLANE_SHARE:.0%} of its fair share of data packets",
                   observed=f"data packets per plane {sender}",
                   hint="" if spread else "spraying must cover every plane: see spray.spread")
    return [first, second]
