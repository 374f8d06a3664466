"""Exercise 5, path retirement and probing: the student writes the EV state machine as data
(host_agent.core.evstate.TRANSITIONS) and the probe-result rule (EvSet.on_probe_reply and
on_probe_timeout: how many consecutive replies reinstate an ASSUMED_BAD EV).

Stages: (1) unit checks: every (state, trigger) cell of the table against the MRC rules
written out below (not read from the project, which is the student's copy here), illegal
pairs raising LocalProtocolError when EvSet applies them, and the probe rule driven through
EvSet's public calls; (2) the simulator: one spine link of plane 0 dies mid-transfer and heals
later; the sender's EVs on that route must retire within a bound, the others keep their
state, and the retired ones come back after the heal, by probes, not sooner than the rule
allows; (3) the live Mininet transfer.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from grader.live import transfer_check
from grader.report import Check, not_run, raised
from grader.report import run_check as _run

G, S, B, D = "GOOD", "SKIP", "ASSUMED_BAD", "DENIED"
STATES = (G, S, B, D)
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


def _evs(k: int = 3) -> tuple[Any, Any]:
    """A small EV set: 2 planes x 2 paths, 8 active EVs, probe rule `k`."""
    import random

    from host_agent.core import EvConfig, PathInfo
    from host_agent.core.evs import EvSet  # the class the student's probe rule is part of

    cfg = EvConfig(evs_per_connection=8, backups_per_plane=2, skip_time=1.0,
                   probe_interval=1.0, probe_timeout=0.5, probe_successes_to_reinstate=k,
                   ev_min_active=2)
    paths = [PathInfo(p, f"route-{p}-{s}") for p in (0, 1) for s in (0, 1)]
    evs = EvSet(paths, cfg, random.Random(1))
    return evs, evs.entries()[0]


# ----- stage 1: the table ---------------------------------------------------------------------

def _cell(table: dict, state: str, trigger: str) -> str | None:
    from host_agent.core import EvState, EvTrigger

    new = table.get((EvState[state], EvTrigger(trigger)))
    return None if new is None else new.name


def _show(new: str | None) -> str:
    return "illegal (absent)" if new is None else new


def _table_check(check_id: str, title: str, triggers: tuple[str, ...], hint: str) -> Check:
    expected = "; ".join(f"{s} --{t}--> {_show(EXPECTED[t][s])}" for t in triggers
                         for s in STATES)

    def body() -> str:
        from host_agent.core.evstate import TRANSITIONS  # the student's table
        wrong = [f"{s} --{t}--> {_show(_cell(TRANSITIONS, s, t))} (expected "
                 f"{_show(EXPECTED[t][s])})" for t in triggers for s in STATES
                 if _cell(TRANSITIONS, s, t) != EXPECTED[t][s]]
        return "; ".join(wrong)
    return _run(check_id, title, 2, hint, expected, body)


def _illegal_check() -> Check:
    """Every pair the machine does not allow raises LocalProtocolError inside EvSet (the EV
    is put into the state by hand, so the check does not depend on other table cells)."""
    pairs = [(s, t) for t, row in EXPECTED.items() for s, new in row.items() if new is None]

    def body() -> str:
        from host_agent.core import EvState, EvTrigger, LocalProtocolError

        accepted = []
        for state, trigger in pairs:
            evs, entry = _evs()
            entry.state = EvState[state]
            try:
                evs._apply(entry, EvTrigger(trigger), 10.0)
            except LocalProtocolError:
                continue
            except Exception as exc:  # applied, then tripped over the hand-made state
                accepted.append(f"{state} --{trigger}--> (accepted, then {type(exc).__name__})")
                continue
            accepted.append(f"{state} --{trigger}--> {entry.state.name}")
        return "accepted: " + "; ".join(accepted) if accepted else ""
    return _run("ex5.illegal", "pairs outside the machine raise LocalProtocolError", 2,
                "a (state, trigger) pair that is not in TRANSITIONS is illegal and EvSet "
                "raises: that is how a bug elsewhere (e.g. probing a GOOD EV, or expiring a "
                "skip that was never set) shows up at once. Remove the entries listed",
                f"LocalProtocolError for each of {len(pairs)} pairs, e.g. GOOD --allow--> and "
                f"GOOD --probe_success_enough-->", body)


# ----- stage 1: the probe rule ----------------------------------------------------------------

def _retire(evs: Any, entry: Any, now: float) -> None:
    from host_agent.core import LocalProtocolError
    try:
        evs.on_loss(entry.ev, now)
    except LocalProtocolError as exc:
        raise AssertionError(f"could not retire an EV to test the rule: on_loss raised "
                             f"\"{exc}\": fix the table checks first") from None
    if entry.state.name != B:
        raise AssertionError(f"on_loss left the EV {entry.state.name}, not ASSUMED_BAD: fix "
                             f"the table checks first")


def _probe(evs: Any, entry: Any, now: float, answered: bool) -> None:
    evs.on_probe_sent(entry.ev, now)
    if answered:
        evs.on_probe_reply(entry.ev, now + 0.1)
    else:
        evs.on_probe_timeout(entry.ev, now + 0.6)


def _reinstate_check() -> Check:
    def body() -> str:
        problems = []
        for k in (3, 1, 5):
            evs, entry = _evs(k)
            _retire(evs, entry, 0.0)
            for i in range(1, k + 1):
                _probe(evs, entry, float(i), True)
                want = G if i == k else B
                if entry.state.name != want:
                    problems.append(f"probe_successes_to_reinstate={k}: {entry.state.name} "
                                    f"after reply {i} (expected {want})")
                    break
        return "; ".join(problems)
    return _run("ex5.reinstate", "an ASSUMED_BAD EV is reinstated after exactly "
                "probe_successes_to_reinstate consecutive probe replies", 3,
                "count the replies in entry.probe_successes and apply "
                "EvTrigger.PROBE_SUCCESS_ENOUGH only when the count reaches "
                "self.config.probe_successes_to_reinstate (read the config, do not hard-code "
                "3): one reply can be luck on a flapping link",
                "with k = 3, 1, 5: ASSUMED_BAD after replies 1..k-1, GOOD after reply k", body)


def _timeout_check() -> Check:
    def body() -> str:
        evs, entry = _evs(3)
        _retire(evs, entry, 0.0)
        seen, got = [], []
        for i, answered in enumerate((True, True, False, True, True, True), start=1):
            if entry.state.name != B:
                break  # reinstated too soon: nothing left to probe
            _probe(evs, entry, float(i), answered)
            got.append(entry.state.name)
            seen.append(f"{'reply' if answered else 'timeout'} -> {entry.state.name} "
                        f"(probe_successes={entry.probe_successes})")
        if got != [B, B, B, B, B, G]:
            return "after each result: " + ", ".join(seen)
        return ""
    return _run("ex5.probe-timeout", "a probe timeout restarts the run of successes", 2,
                "on_probe_timeout must set entry.probe_successes back to 0: the rule counts "
                "*consecutive* replies, so reply, reply, timeout, reply, reply is not enough",
                "reply, reply, timeout, reply, reply: ASSUMED_BAD; one more reply: GOOD", body)


def _stray_check() -> Check:
    def body() -> str:
        problems = []
        evs, entry = _evs(1)
        _retire(evs, entry, 0.0)
        answer = evs.on_probe_reply(entry.ev, 0.5)  # nothing outstanding
        if answer is not False or entry.state.name != B:
            problems.append(f"a reply with no probe outstanding returned {answer!r} and left "
                            f"the EV {entry.state.name}")
        other = evs.entries()[1]
        try:
            answer = evs.on_probe_reply(other.ev, 0.5)  # a GOOD EV: never probed
            if answer is not False or other.state.name != G:
                problems.append(f"a reply on a GOOD EV returned {answer!r} and left it "
                                f"{other.state.name}")
        except Exception as exc:
            problems.append(f"a reply on a GOOD EV raised {raised(exc)}")
        if entry.state.name != B:
            return "; ".join(problems)
        evs.on_probe_sent(entry.ev, 1.0)
        answer = evs.on_probe_reply(entry.ev, 1.1)
        if answer is not True:
            problems.append(f"the reply to an outstanding probe returned {answer!r}, not True")
        return "; ".join(problems)
    return _run("ex5.probe-stray", "only the answer to an outstanding probe counts", 1,
                "start both methods with entry = self._outstanding(ev) and stop (return False "
                "from on_probe_reply) when it is None: a late, duplicated or forged reply must "
                "not count towards reinstatement",
                "False and no state change for a reply without an outstanding probe; True for "
                "the answer to one", body)


# ----- stage 2: the simulator -----------------------------------------------------------------

SIM_FABRIC = {"planes": 4, "t0_per_plane": 2, "t1_per_plane": 2, "hosts_per_t0": 2}
SIM_BYTES = 4 * 1024 * 1024
FAIL_AT = 0.3  # of the ideal transfer time
HEAL_AFTER_RTTS = 30
RETIRE_BOUND_RTTS = 10  # the reference retires them within about 2 base RTTs


def simulate() -> dict[str, Any]:
    """Spine link 0 of plane 0 on the sender's T0 dies mid-transfer and heals
    HEAL_AFTER_RTTS base RTTs later; the loop runs until every retired EV could have been
    reinstated. Returns the figures the checks judge."""
    from fabric.topology import Fabric
    from host_agent.core import EvStateChanged
    from sim.harness import Harness, SimSettings

    fabric = Fabric(**SIM_FABRIC)
    h = Harness(fabric, SimSettings())
    src, dst = 0, fabric.hosts - 1
    t = h.add_transfer(src, dst, SIM_BYTES)
    rtt = h.base_rtt = h.path_rtt(src, dst)
    h.capacity_log.clear()
    h.note_capacity()
    ideal = SIM_BYTES * 8 / h.capacity_log[-1][1]
    t0 = fabric.t0(0, fabric.nic(src, 0).t0).name
    t1 = fabric.t1(0, 0).name
    routes = {p.address for p in fabric.paths(src, dst, 0) if p.spine == 0}
    evs = h.adapters[src].endpoint.connection(t.send_qpn).evs
    cfg = evs.config
    dead = {e.ev for e in evs.entries() if e.path.route in routes}
    t_fail = FAIL_AT * ideal
    t_heal = t_fail + HEAL_AFTER_RTTS * rtt
    t_end = t_heal + (cfg.probe_successes_to_reinstate + 1) * cfg.probe_interval \
        + cfg.probe_timeout + 5 * rtt
    changes: list[tuple[float, int, str, str]] = []
    at_heal: dict[int, str] = {}

    def listen(now: float, adapter: Any, event: Any) -> None:
        if adapter.host == src and isinstance(event, EvStateChanged):
            changes.append((now, event.ev, event.old.name, event.new.name))
    h.listeners.append(listen)
    link = h.net.link(t0, t1)

    sender = h.adapters[src]
    last_before_heal: list[float] = []

    def heal() -> None:
        at_heal.update({e.ev: e.state.name for e in evs.entries()})
        last_before_heal.append(max((sender.last_data_tx_route.get(r, -1.0) for r in routes),
                                    default=-1.0))
        h.net.set_link_up(link, True)
    h.at(t_fail, lambda: h.net.set_link_up(link, False))
    h.at(t_heal, heal)
    h.start()
    finished = h.run(50 * ideal + 0.05)
    if h.loop.now < t_end:
        h.loop.run(until=t_end)
    last = last_before_heal[0] if last_before_heal else -1.0
    retired = {ev: now for now, ev, old, new in changes if ev in dead and new == B
               and old != B and now >= t_fail}
    back = {ev: now for now, ev, old, new in changes if ev in dead and old == B and new == G}
    return {
        "ok": finished and h.verified(), "rtt": rtt, "t_fail": t_fail, "t_heal": t_heal,
        "k": cfg.probe_successes_to_reinstate, "interval": cfg.probe_interval,
        "timeout": cfg.probe_timeout, "dead": dead,
        "data_after_rtts": max(0.0, last - t_fail) / rtt if last > t_fail else 0.0,
        "retired": retired, "back": back, "at_heal": at_heal,
        "final": {e.ev: e.state.name for e in evs.entries()},
        "error": "" if finished else f"not finished after {h.loop.now * 1e3:.2f} ms",
    }


def _sim_checks() -> Iterator[Check]:
    title = "the simulated transfer completes across the link failure and arrives intact"
    try:
        r = simulate()
    except Exception as exc:
        yield Check("ex5.sim.transfer", title, 2, False, expected="completed and verified",
                    observed=raised(exc),
                    hint="the traceback shows where the simulation raised in your code")
        return
    yield Check("ex5.sim.transfer", title, 2, r["ok"], expected="completed and verified",
                observed="completed and verified" if r["ok"] else r["error"] or "corrupt",
                hint="every unit check passed, so look for an EV that never comes back or a "
                     "retired EV still chosen")
    rtt, dead = r["rtt"], r["dead"]
    late = [ev for ev in dead if ev not in r["retired"]
            or (r["retired"][ev] - r["t_fail"]) / rtt > RETIRE_BOUND_RTTS]
    slowest = max(((now - r["t_fail"]) / rtt for now in r["retired"].values()), default=None)
    yield Check(
        "ex5.sim.retire", "the EVs on the dead route retire within "
        f"{RETIRE_BOUND_RTTS} base RTTs and data stops using it", 2,
        not late and r["data_after_rtts"] <= RETIRE_BOUND_RTTS,
        expected=f"all {len(dead)} EVs ASSUMED_BAD within {RETIRE_BOUND_RTTS} base RTTs; "
                 f"before the heal, the last data packet on the route within "
                 f"{RETIRE_BOUND_RTTS} base RTTs of the failure",
        observed=f"{len(dead) - len(late)}/{len(dead)} retired in time (slowest "
                 f"{'never' if slowest is None else f'{slowest:.1f} RTTs'}); last data on the "
                 f"route {r['data_after_rtts']:.1f} RTTs after the failure",
        hint="a loss must move GOOD and SKIP EVs to ASSUMED_BAD at once (table check "
             "ex5.table.loss): an EV left GOOD keeps being sprayed on the dead route")
    hurt = sorted(ev for ev, state in r["at_heal"].items() if ev not in dead and state == B)
    yield Check(
        "ex5.sim.healthy", "EVs on healthy routes keep their state", 2, not hurt,
        expected="no EV outside the dead route ASSUMED_BAD when the link heals",
        observed=f"{len(hurt)} EVs on healthy routes ASSUMED_BAD: "
                 + ", ".join(f"{ev:#x}" for ev in hurt[:6]) if hurt else "none",
        hint="only the EV that lost a packet (or every EV of a path found dark) retires: "
             "congestion signals must not retire anything")
    earliest = r["t_heal"] + (r["k"] - 1) * r["interval"]
    latest = r["t_heal"] + (r["k"] + 1) * r["interval"] + r["timeout"]
    missing = [ev for ev in dead if r["final"][ev] != G]
    early = [ev for ev, now in r["back"].items() if now < earliest - 1e-9]
    first = min(r["back"].values(), default=None)
    span = f"{(r['k'] - 1) * r['interval'] / rtt:.0f} and " \
           f"{((r['k'] + 1) * r['interval'] + r['timeout']) / rtt:.0f} base RTTs after the heal"
    yield Check(
        "ex5.sim.reinstate", "the healed route's EVs come back by probes, not too soon", 3,
        not missing and not early and all(now <= latest for now in r["back"].values()),
        expected=f"all {len(dead)} EVs GOOD again, each between {span} "
                 f"({r['k']} probe replies, one per probe interval)",
        observed=f"{len(dead) - len(missing)}/{len(dead)} GOOD at the end; first back "
                 + ("never" if first is None else
                    f"{(first - r['t_heal']) / rtt:.1f} RTTs after the heal")
                 + (f"; {len(early)} came back too soon" if early else ""),
        hint="probe replies must be counted per EV and reset by a timeout; an EV that never "
             "comes back is missing PROBE_SUCCESS_ENOUGH, one that comes back too soon "
             "reinstates before probe_successes_to_reinstate replies")


SIM_IDS = (("ex5.sim.transfer", 2), ("ex5.sim.retire", 2), ("ex5.sim.healthy", 2),
           ("ex5.sim.reinstate", 3))
LIVE_TITLE = "a write crosses a Mininet fabric with your EV state machine"


def grade(ctx: Any) -> Iterator[Check]:
    units = [_table_check(*spec) for spec in TABLE_CHECKS]
    units += [_illegal_check(), _reinstate_check(), _timeout_check(), _stray_check()]
    yield from units
    if not all(c.passed for c in units):
        for check_id, points in SIM_IDS:
            yield not_run(check_id, "simulator: a spine link fails and heals mid-transfer",
                          points, "fix the unit checks above first")
        yield not_run("live.transfer", LIVE_TITLE, 3, "fix the unit checks above first")
        return
    sims = list(_sim_checks())
    yield from sims
    done = {c.id for c in sims}
    for check_id, points in SIM_IDS:
        if check_id not in done:
            yield not_run(check_id, "simulator: a spine link fails and heals mid-transfer",
                          points, "the simulation did not run to the end")
    if not all(c.passed for c in sims) or len(sims) < len(SIM_IDS):
        yield not_run("live.transfer", LIVE_TITLE, 3, "fix the simulator checks above first")
        return
    yield transfer_check(ctx, "live.transfer", 3,
                         hint="the unit and simulator checks pass, so look at the agents' "
                              "logs: did the agents start with your modules?")
