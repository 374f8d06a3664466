"""Exercise 5, path retirement and probing: the student writes the EV state machine as data
(host_agent.core.evstate.TRANSITIONS) and the probe-result rule (EvSet.on_probe_reply and
on_probe_timeout: how many consecutive replies reinstate an ASSUMED_BAD EV).

Stages: (1) unit checks: every (state, trigger) cell of the table against the MRC rules
written out below (not read from the project, which is the student's copy there), illegal
pairs raising LocalProtocolError when EvSet applies them, and the probe rule driven through
EvSet's public calls; (2) the simulator: one spine link of plane 0 dies mid-transfer and heals
later; the sender's EVs on that route must retire within a bound, the others keep their
state, and the retired ones come back after the heal, by probes, not sooner than the rule
allows; (3) the live Mininet transfer.

`observe` (in the sandbox) runs the unit scenarios of ex5_observe and reports what the
student's code did; `measure` runs the simulator in the grader's process around the student's
endpoints served from the sandbox (rubrics.remote_core) and records what the sender's NIC put
on the fabric; `judge` holds both against the rules here. The simulator checks read an EV's
state off the wire (a retired EV carries probes and no data), never off the endpoint's word.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from grader.report import Check, CheckSpec, failed, not_run
from rubrics import ex5_observe as scen
from rubrics.ex5_observe import STATES, B
from rubrics.live import judge_transfer, measure_served_transfer
from rubrics.remote_core import served_run

G, S, D = "GOOD", "SKIP", "DENIED"
# The reference machine, by trigger (EvTrigger values): state -> next state, None = illegal.
# Sources: design brief section 3 (Sender) [paper][blog][ocp-api]; evstate.py's comments.
EXPECTED: dict[str, dict[str, str | None]] = {
    "ecn": {G: S, S: S, B: B, D: D},
    "nack_trimmed": {G: S, S: S, B: B, D: D},
    "loss": {G: B, S: B, B: B, D: D},
    "path_dark": {G: B, S: B, B: None, D: None},
    "skip_expired": {G: None, S: G, B: None, D: None},
    "probe_success_enough": {G: None, S: None, B: G, D: None},
    "deny": {G: D, S: D, B: D, D: None},
    "allow": {G: None, S: None, B: None, D: G},
}
ILLEGAL = [(s, t) for t, row in EXPECTED.items() for s, new in row.items() if new is None]
TABLE_CHECKS = (  # (check id, title, triggers, hint)
    ("ex5.table.ecn", "ECN (CE echo, SACK M=SKIP_ONCE) rests an EV, it does not retire it",
     ("ecn",), "ECN means congestion inside the fabric, not a broken path: a GOOD or SKIP EV "
     "goes to SKIP (again: the skip time restarts); ASSUMED_BAD and DENIED EVs stay where "
     "they are (the mark is late news of a packet sent before)"),
    ("ex5.table.trim", "a NACK(TRIMMED) rests an EV like ECN",
     ("nack_trimmed",), "a trim inside the fabric is congestion on that path: GOOD/SKIP -> "
     "SKIP, ASSUMED_BAD/DENIED unchanged. Only TRIMMED_LASTHOP is ignored, and that one never "
     "reaches the table (EvSet.on_nack_trimmed_lasthop only counts it)"),
    ("ex5.table.loss", "a loss, or a dead path, retires an EV at once",
     ("loss", "path_dark"), "an untrimmed loss is taken as a path failure: GOOD and SKIP go "
     "straight to ASSUMED_BAD, a further loss on ASSUMED_BAD keeps it there (restarting its "
     "probe run), DENIED ignores it. PATH_DARK only ever hits GOOD and SKIP EVs "
     "(EvSet.on_path_dark), so leave it out for the other states"),
    ("ex5.table.skip-expiry", "a SKIP EV returns to GOOD when its skip time ends",
     ("skip_expired",), "SKIP_EXPIRED is only legal from SKIP, and leads to GOOD"),
    ("ex5.table.probe", "only enough probe successes bring an ASSUMED_BAD EV back",
     ("probe_success_enough",), "PROBE_SUCCESS_ENOUGH is only legal from ASSUMED_BAD, and "
     "leads to GOOD"),
    ("ex5.table.management", "DENY and ALLOW are management's alone",
     ("deny", "allow"), "DENY takes GOOD, SKIP or ASSUMED_BAD to DENIED; ALLOW is only legal "
     "from DENIED and leads to GOOD; denying a DENIED EV twice is an error"),
)
RETIRE_BOUND_RTTS = 10  # the reference retires them within about 2 base RTTs
SIM_TITLE = "simulator: a spine link fails and heals mid-transfer"  # of a sim check not run
SIM_TITLES = {
    "ex5.sim.transfer": "the simulated transfer completes across the link failure and "
                        "arrives intact",
    "ex5.sim.retire": f"the EVs on the dead route retire within {RETIRE_BOUND_RTTS} base RTTs "
                      f"and data stops using it",
    "ex5.sim.healthy": "EVs on healthy routes keep their state",
    "ex5.sim.reinstate": "the healed route's EVs come back by probes, not too soon",
}
SIM_IDS = (("ex5.sim.transfer", 2), ("ex5.sim.retire", 2), ("ex5.sim.healthy", 2),
           ("ex5.sim.reinstate", 3))
LIVE_TITLE = "a write crosses a Mininet fabric with your EV state machine"
CHECKS = (
    *(CheckSpec(check_id, title, 2) for check_id, title, _, _ in TABLE_CHECKS),
    CheckSpec("ex5.illegal", "pairs outside the machine raise LocalProtocolError", 2),
    CheckSpec("ex5.reinstate", "an ASSUMED_BAD EV is reinstated after exactly "
              "probe_successes_to_reinstate consecutive probe replies", 3),
    CheckSpec("ex5.probe-timeout", "a probe timeout restarts the run of successes", 2),
    CheckSpec("ex5.probe-stray", "only the answer to an outstanding probe counts", 1),
    *(CheckSpec(check_id, SIM_TITLES[check_id], points) for check_id, points in SIM_IDS),
    CheckSpec("live.transfer", LIVE_TITLE, 3),
)
_SPEC = {spec.id: spec for spec in CHECKS}


def observe(ctx: Any) -> dict[str, Any]:
    """In the sandbox: every unit scenario's raw outcome. The simulator and the live transfer
    are not run here: `measure` runs them in the grader's process around the student's
    endpoints."""
    ks = scen.reinstate_ks(ctx.challenge)
    return {
        "table": {t: scen.guarded(lambda t=t: scen.table_row(t)) for t in EXPECTED},
        "illegal": scen.guarded(lambda: scen.illegal_outcomes(ILLEGAL)),
        "reinstate": scen.guarded(lambda: scen.reinstate_runs(ks)),
        "timeout": scen.guarded(scen.timeout_run),
        "stray": scen.guarded(scen.stray_run),
    }


def measure(obs: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """Here, once the units pass: the simulation, then (if it passes) the live transfer, both
    the grader's own around the student's endpoints served from the sandbox
    (rubrics.remote_core); the record is the grader's, so it needs no checking."""
    if not all(c.passed for c in _unit_checks(obs, scen.reinstate_ks(ctx.challenge))):
        return {}
    sim = served_run(ctx, scen.simulate)
    measured = {"sim": {"error": sim["raised"]} if "raised" in sim else {"data": sim}}
    if _sim_passed(list(_sim_checks(measured["sim"]))):
        measured["live"] = measure_served_transfer(ctx)
    return measured


def judge(obs: dict[str, Any], ctx: Any) -> Iterator[Check]:
    """In the grader's process: the verdicts on `obs`, stage by stage."""
    units = list(_unit_checks(obs, scen.reinstate_ks(ctx.challenge)))
    yield from units
    if not all(c.passed for c in units):
        for check_id, points in SIM_IDS:
            yield not_run(check_id, SIM_TITLE, points, "fix the unit checks above first")
        yield not_run("live.transfer", LIVE_TITLE, 3, "fix the unit checks above first")
        return
    sims = list(_sim_checks((ctx.measured or {}).get("sim")))
    yield from sims
    done = {c.id for c in sims}
    for check_id, points in SIM_IDS:
        if check_id not in done:
            yield not_run(check_id, SIM_TITLE, points, "the simulation did not run to the end")
    if not _sim_passed(sims):
        yield not_run("live.transfer", LIVE_TITLE, 3, "fix the simulator checks above first")
        return
    yield judge_transfer((ctx.measured or {}).get("live"), ctx.target, "live.transfer", 3,
                         hint="the unit and simulator checks pass, so look at the agents' "
                              "logs: did the agents start with your modules?")


def _sim_passed(sims: list[Check]) -> bool:
    return len(sims) == len(SIM_IDS) and all(c.passed for c in sims)


# ----- stage 1 -------------------------------------------------------------------------------

def _unit(check_id: str, hint: str, expected: str, problem: str) -> Check:
    """A unit check's verdict: it holds when there is no problem to report."""
    spec = _SPEC[check_id]
    return Check(check_id, spec.title, spec.points, not problem, expected=expected,
                 observed=problem or "as expected", hint=hint)


def _data(entry: dict[str, Any]) -> tuple[Any, str]:
    """(the scenario's data, "") or (None, the crash's text): never an empty crash."""
    if "error" in entry:
        return None, str(entry["error"]) or "the check raised"
    return entry["data"], ""


def _as_list(value: Any, what: str, most: int) -> list[Any]:
    if not isinstance(value, list) or len(value) > most:
        raise ValueError(f"{what}: expected a list of at most {most} items")
    return value


def _unit_checks(obs: dict[str, Any], ks: tuple[int, ...]) -> Iterator[Check]:
    for check_id, _, triggers, hint in TABLE_CHECKS:
        yield _table_check(check_id, triggers, hint, obs["table"])
    yield _illegal_check(obs["illegal"])
    yield _reinstate_check(obs["reinstate"], ks)
    yield _timeout_check(obs["timeout"])
    yield _stray_check(obs["stray"])


def _show(new: Any) -> str:
    return "illegal (absent)" if new is None else str(new)


def _table_check(check_id: str, triggers: tuple[str, ...], hint: str,
                 table: dict[str, Any]) -> Check:
    expected = "; ".join(f"{s} --{t}--> {_show(EXPECTED[t][s])}" for t in triggers
                         for s in STATES)
    rows = {}
    for t in triggers:
        rows[t], crash = _data(table[t])
        if crash:
            return _unit(check_id, hint, expected, crash)
    wrong = [f"{s} --{t}--> {_show(rows[t][s])} (expected {_show(EXPECTED[t][s])})"
             for t in triggers for s in STATES if rows[t][s] != EXPECTED[t][s]]
    return _unit(check_id, hint, expected, "; ".join(wrong))


def _illegal_check(entry: dict[str, Any]) -> Check:
    """Every pair the machine does not allow raises LocalProtocolError inside EvSet (the EV
    is put into the state by hand, so the check does not depend on other table cells)."""
    hint = ("a (state, trigger) pair that is not in TRANSITIONS is illegal and EvSet "
            "raises: that is how a bug elsewhere (e.g. probing a GOOD EV, or expiring a "
            "skip that was never set) shows up at once. Remove the entries listed")
    expected = (f"LocalProtocolError for each of {len(ILLEGAL)} pairs, e.g. GOOD --allow--> "
                f"and GOOD --probe_success_enough-->")
    outcomes, crash = _data(entry)
    if crash:
        return _unit("ex5.illegal", hint, expected, crash)
    if len(_as_list(outcomes, "illegal", len(ILLEGAL))) != len(ILLEGAL):
        raise ValueError(f"illegal: {len(outcomes)} outcomes for {len(ILLEGAL)} pairs")
    accepted = []
    for (state, trigger), seen in zip(ILLEGAL, outcomes, strict=True):
        if (seen["state"], seen["trigger"]) != (state, trigger):
            raise ValueError(f"illegal: outcome of {seen['state']}/{seen['trigger']} where "
                             f"{state}/{trigger} was due")
        if seen["raised"] == "LocalProtocolError":
            continue
        accepted.append(f"{state} --{trigger}--> " + (
            f"(accepted, then {seen['raised']})" if seen["raised"] is not None
            else str(seen["after"])))
    return _unit("ex5.illegal", hint, expected,
                 "accepted: " + "; ".join(accepted) if accepted else "")


def _retire_problem(retire: dict[str, Any]) -> str:
    """Why the scenario could not start from an ASSUMED_BAD EV ("" if it could)."""
    if "refused" in retire:
        return (f"AssertionError: could not retire an EV to test the rule: on_loss raised "
                f"\"{retire['refused']}\": fix the table checks first")
    if retire["state"] != B:
        return (f"AssertionError: on_loss left the EV {retire['state']}, not ASSUMED_BAD: "
                f"fix the table checks first")
    return ""


def _reinstate_problem(runs: dict[str, Any], ks: tuple[int, ...]) -> str:
    problems = []
    for k in ks:
        run = runs[str(k)]
        stop = _retire_problem(run["retire"])
        if stop:
            return stop
        states = _as_list(run["states"], f"reinstate k={k}", k)
        for i, got in enumerate(states, start=1):
            want = G if i == k else B
            if got != want:
                problems.append(f"probe_successes_to_reinstate={k}: {got} after reply {i} "
                                f"(expected {want})")
                break
        else:
            if len(states) != k:
                raise ValueError(f"reinstate k={k}: the run stops after {len(states)} "
                                 f"replies, still ASSUMED_BAD")
    return "; ".join(problems)


def _reinstate_check(entry: dict[str, Any], ks: tuple[int, ...]) -> Check:
    runs, crash = _data(entry)
    return _unit("ex5.reinstate",
                 "count the replies in entry.probe_successes and apply "
                 "EvTrigger.PROBE_SUCCESS_ENOUGH only when the count reaches "
                 "self.config.probe_successes_to_reinstate (read the config, do not hard-code "
                 "3): one reply can be luck on a flapping link",
                 f"with k = {', '.join(map(str, ks))}: ASSUMED_BAD after replies 1..k-1, "
                 f"GOOD after reply k", crash or _reinstate_problem(runs, ks))


def _timeout_problem(run: dict[str, Any]) -> str:
    stop = _retire_problem(run["retire"])
    if stop:
        return stop
    after = _as_list(run["after"], "timeout", len(scen.TIMEOUT_RUN))
    seen = [f"{'reply' if answered else 'timeout'} -> {state} (probe_successes={count})"
            for answered, (state, count) in zip(scen.TIMEOUT_RUN, after, strict=False)]
    if [state for state, _ in after] != [B, B, B, B, B, G]:
        return "after each result: " + ", ".join(seen)
    return ""


def _timeout_check(entry: dict[str, Any]) -> Check:
    run, crash = _data(entry)
    return _unit("ex5.probe-timeout",
                 "on_probe_timeout must set entry.probe_successes back to 0: the rule counts "
                 "*consecutive* replies, so reply, reply, timeout, reply, reply is not enough",
                 "reply, reply, timeout, reply, reply: ASSUMED_BAD; one more reply: GOOD",
                 crash or _timeout_problem(run))


def _stray_problem(run: dict[str, Any]) -> str:
    stop = _retire_problem(run["retire"])
    if stop:
        return stop
    problems = []
    unasked, good = run["unasked"], run["good"]
    if unasked["answer"] != "False" or unasked["state"] != B:
        problems.append(f"a reply with no probe outstanding returned {unasked['answer']} and "
                        f"left the EV {unasked['state']}")
    if "raised" in good:
        problems.append(f"a reply on a GOOD EV raised {good['raised']}")
    elif good["answer"] != "False" or good["state"] != G:
        problems.append(f"a reply on a GOOD EV returned {good['answer']} and left it "
                        f"{good['state']}")
    if run["state_then"] != B:
        return "; ".join(problems) or f"the stray replies left the EV {run['state_then']}"
    if run["answered"] != "True":
        problems.append(f"the reply to an outstanding probe returned {run['answered']}, "
                        f"not True")
    return "; ".join(problems)


def _stray_check(entry: dict[str, Any]) -> Check:
    run, crash = _data(entry)
    return _unit("ex5.probe-stray",
                 "start both methods with entry = self._outstanding(ev) and stop (return False "
                 "from on_probe_reply) when it is None: a late, duplicated or forged reply must "
                 "not count towards reinstatement",
                 "False and no state change for a reply without an outstanding probe; True for "
                 "the answer to one", crash or _stray_problem(run))


# ----- stage 2: the simulator ----------------------------------------------------------------

def _number(value: Any, what: str, positive: bool = False) -> float:
    """A finite time or count from the report; what else would make the arithmetic below
    raise something other than ValueError (OverflowError, ZeroDivisionError) is refused."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or abs(value) > 1e9 or (positive and value <= 0):
        raise ValueError(f"sim: {what} is not a {'positive ' if positive else ''}finite "
                         f"number: {value!r:.40}")
    return float(value)


def _times(value: Any, what: str) -> list[float]:
    return [_number(t, what) for t in _as_list(value, what, 1 << 20)]


def sim_figures(sim: dict[str, Any]) -> dict[str, Any]:
    """The figures the simulator checks judge, from ex5_observe.simulate()'s record of what
    the sender's NIC sent: the EVs seen on the failed route (the project's fabric model says
    which routes cross the link), when each was first probed after the failure, and each one's
    data and probes after the heal."""
    rtt = _number(sim["rtt"], "rtt", positive=True)
    t_fail, t_heal = _number(sim["t_fail"], "t_fail"), _number(sim["t_heal"], "t_heal")
    dead_routes = scen.dead_routes()
    rows = {int(ev): row for ev, row in dict(sim["evs"]).items()}
    dead = {ev for ev, row in rows.items() if row["route"] in dead_routes}
    data = {ev: _times(row["data"], "data times") for ev, row in rows.items()}
    probes = {ev: _times(row["probes"], "probe times") for ev, row in rows.items()}
    last = max((t for ev in dead for t in data[ev] if t_fail <= t < t_heal), default=-1.0)
    finished = sim["finished"] is True
    return {
        "ok": finished and sim["verified"] is True, "rtt": rtt, "t_fail": t_fail,
        "t_heal": t_heal, "k": _number(sim["k"], "k", positive=True),
        "interval": _number(sim["interval"], "interval"),
        "timeout": _number(sim["timeout"], "timeout"), "dead": dead,
        "data_after_rtts": (last - t_fail) / rtt if last > t_fail else 0.0,
        "first_probe": {ev: min((t for t in probes[ev] if t >= t_fail), default=None)
                        for ev in dead},
        "hurt": sorted(ev for ev in rows if ev not in dead
                       and any(t_fail <= t < t_heal for t in probes[ev])),
        "healed_probes": {ev: [t for t in probes[ev] if t >= t_heal] for ev in dead},
        "healed_data": {ev: [t for t in data[ev] if t >= t_heal] for ev in dead},
        "error": "" if finished else
        f"not finished after {_number(sim['now'], 'now') * 1e3:.2f} ms",
    }


def _sim_checks(entry: dict[str, Any] | None) -> Iterator[Check]:
    title = SIM_TITLES["ex5.sim.transfer"]
    if entry is None:
        yield failed(_SPEC["ex5.sim.transfer"], "not measured: the grader did not run the "
                                                "simulator")
        return
    sim, crash = _data(entry)
    if crash:
        yield Check("ex5.sim.transfer", title, 2, False, expected="completed and verified",
                    observed=crash,
                    hint="the traceback shows where the simulation raised in your code")
        return
    r = sim_figures(sim)
    yield Check("ex5.sim.transfer", title, 2, r["ok"], expected="completed and verified",
                observed="completed and verified" if r["ok"] else r["error"] or "corrupt",
                hint="every unit check passed, so look for an EV that never comes back or a "
                     "retired EV still chosen")
    rtt, dead = r["rtt"], r["dead"]
    bound = RETIRE_BOUND_RTTS + r["interval"] / rtt  # retired, then one probe interval
    waits = {ev: None if t is None else (t - r["t_fail"]) / rtt
             for ev, t in r["first_probe"].items()}
    late = [ev for ev, w in waits.items() if w is None or w > bound]
    slowest = max((w for w in waits.values() if w is not None), default=None)
    yield Check(
        "ex5.sim.retire", SIM_TITLES["ex5.sim.retire"], 2,
        bool(dead) and not late and r["data_after_rtts"] <= RETIRE_BOUND_RTTS,
        expected=f"each of the {len(dead)} EVs seen on the route probed within {bound:.0f} base "
                 f"RTTs of the failure ({RETIRE_BOUND_RTTS} to retire it, one probe interval "
                 f"to its first probe); before the heal, the last data packet on the route "
                 f"within {RETIRE_BOUND_RTTS} base RTTs of the failure",
        observed=f"{len(dead) - len(late)}/{len(dead)} probed in time (slowest "
                 f"{'never' if slowest is None else f'{slowest:.1f} RTTs'}); last data on the "
                 f"route {r['data_after_rtts']:.1f} RTTs after the failure",
        hint="a loss must move GOOD and SKIP EVs to ASSUMED_BAD at once (table check "
             "ex5.table.loss): an EV left GOOD keeps being sprayed on the dead route")
    hurt = r["hurt"]
    yield Check(
        "ex5.sim.healthy", SIM_TITLES["ex5.sim.healthy"], 2, not hurt,
        expected="no EV outside the dead route probed (retired) before the link heals",
        observed=f"{len(hurt)} EVs on healthy routes probed: "
                 + ", ".join(f"{ev:#x}" for ev in hurt[:6]) if hurt else "none",
        hint="only the EV that lost a packet (or every EV of a path found dark) retires: "
             "congestion signals must not retire anything")
    yield _sim_reinstate_check(r)


def _sim_reinstate_check(r: dict[str, Any]) -> Check:
    """Back by probes, not too soon: after the heal each EV of the route is probed at least k
    times, probing ends by the latest time the rule allows (an ASSUMED_BAD EV is probed until
    reinstated), and no data goes on it before the k-th reply could have come; and the route
    carries data again. Not every EV of it does: one reinstated while its plane's active
    pool is full is a backup, as it should be."""
    rtt, dead, k = r["rtt"], r["dead"], int(r["k"])
    earliest = r["t_heal"] + (r["k"] - 1) * r["interval"]
    latest = r["t_heal"] + (r["k"] + 1) * r["interval"] + r["timeout"]
    few = [ev for ev in dead if len(r["healed_probes"][ev]) < k]
    endless = [ev for ev in dead if any(t > latest for t in r["healed_probes"][ev])]
    early = [ev for ev in dead if any(t < earliest - 1e-9 for t in r["healed_data"][ev])]
    back = [ev for ev in dead if r["healed_data"][ev]]
    first = min((min(r["healed_data"][ev]) for ev in dead if r["healed_data"][ev]),
                default=None)
    span = f"{(r['k'] - 1) * r['interval'] / rtt:.0f} and " \
           f"{((r['k'] + 1) * r['interval'] + r['timeout']) / rtt:.0f} base RTTs after the heal"
    problems = [f"{len(x)} {what}" for x, what in (
        (few, f"probed fewer than {k} times after the heal"), (endless, "still probed after "
         "that"), (early, "carried data too soon")) if x]
    if not back:
        problems.append("no data on the route again")
    return Check(
        "ex5.sim.reinstate", SIM_TITLES["ex5.sim.reinstate"], 3, bool(dead) and not problems,
        expected=f"each of the {len(dead)} EVs back between {span} ({k} probe replies, one "
                 f"per probe interval): probed {k} times, then no more; data on the route "
                 f"again",
        observed=("; ".join(problems) if problems else "all back in time")
                 + "; first data after the heal "
                 + ("never" if first is None else f"{(first - r['t_heal']) / rtt:.1f} RTTs "
                                                  f"after it"),
        hint="probe replies must be counted per EV and reset by a timeout; an EV that never "
             "comes back is missing PROBE_SUCCESS_ENOUGH, one that comes back too soon "
             "reinstates before probe_successes_to_reinstate replies")
