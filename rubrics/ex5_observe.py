"""Exercise 5's scenarios: the scripted ones that drive the student's EV state machine and
probe rule in the sandbox, reported as raw data (rubrics.ex5 judges them), and the
simulator run, which the grader runs itself around the student's endpoints (simulate).

Everything here runs inside the grading copy and imports the student's modules late, inside
the functions, so that the trusted judge can import this module for its scenario constants
(the probe sequences, the simulated fabric) without touching the student's code. Nothing here
compares against the expected machine: what a scenario saw is recorded as it was, and an
exception from the student's code is recorded as its text (grader.report.raised).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from grader.challenge import rng
from grader.report import raised

B = "ASSUMED_BAD"
STATES = ("GOOD", "SKIP", "ASSUMED_BAD", "DENIED")
REINSTATE_KS = (3, 1, 5)  # probe_successes_to_reinstate values a run uses without a challenge
TIMEOUT_RUN = (True, True, False, True, True, True)  # probe answered? k = 3

SIM_FABRIC = {"planes": 4, "t0_per_plane": 2, "t1_per_plane": 2, "hosts_per_t0": 2}
SIM_BYTES = 8 * 1024 * 1024  # the transfer outlives the reinstatement: data comes back
FAIL_AT = 0.3  # of the ideal transfer time
HEAL_AFTER_RTTS = 30
SIM_TIMEOUT_IDEALS = 50  # the transfer is given this many ideal transfer times


def dead_routes() -> set[str]:
    """The routes through spine 0 of plane 0 from the sender: the link the simulation fails
    is on every one of them (the fabric model is the project's, not the student's)."""
    from fabric.topology import Fabric

    fabric = Fabric(**SIM_FABRIC)
    return {str(p.address) for p in fabric.paths(0, fabric.hosts - 1, 0) if p.spine == 0}


def guarded(body: Callable[[], Any]) -> dict[str, Any]:
    """{"data": body()}, or {"error": text} when the student's code raised: each unit check
    reports its own crash, as it did when the checks ran in one process."""
    try:
        return {"data": body()}
    except Exception as exc:  # the student's code may raise anything
        return {"error": raised(exc)}


def _plain(value: object) -> Any:
    """`value` as JSON keeps it: its text when it is not a plain JSON scalar."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


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


# ----- stage 1 -------------------------------------------------------------------------------

def table_row(trigger: str) -> dict[str, str | None]:
    """The student's TRANSITIONS for `trigger`: state name -> next state's name (None:
    absent, i.e. illegal)."""
    from host_agent.core import EvState, EvTrigger
    from host_agent.core.evstate import TRANSITIONS  # the student's table

    row: dict[str, str | None] = {}
    for state in STATES:
        new = TRANSITIONS.get((EvState[state], EvTrigger(trigger)))
        row[state] = None if new is None else _plain(new.name)
    return row


def illegal_outcomes(pairs: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """What EvSet._apply did with each pair, the EV put into the state by hand: the
    exception it raised ("LocalProtocolError" for that class or a subclass), and the
    state it left when it raised nothing."""
    from host_agent.core import EvState, EvTrigger, LocalProtocolError

    out = []
    for state, trigger in pairs:
        evs, entry = _evs()
        entry.state = EvState[state]
        seen: dict[str, Any] = {"state": state, "trigger": trigger, "raised": None}
        try:
            evs._apply(entry, EvTrigger(trigger), 10.0)
        except LocalProtocolError:
            seen["raised"] = "LocalProtocolError"
        except Exception as exc:  # applied, then tripped over the hand-made state
            seen["raised"] = type(exc).__name__
        else:
            seen["after"] = _plain(entry.state.name)
        out.append(seen)
    return out


def _retire(evs: Any, entry: Any, now: float) -> dict[str, Any]:
    """Retire `entry` by a loss: {"refused": text} if EvSet raised LocalProtocolError, else
    {"state": what on_loss left}. Any other exception is the scenario's crash."""
    from host_agent.core import LocalProtocolError
    try:
        evs.on_loss(entry.ev, now)
    except LocalProtocolError as exc:
        return {"refused": str(exc)}
    return {"state": _plain(entry.state.name)}


def _probe(evs: Any, entry: Any, now: float, answered: bool) -> None:
    evs.on_probe_sent(entry.ev, now)
    if answered:
        evs.on_probe_reply(entry.ev, now + 0.1)
    else:
        evs.on_probe_timeout(entry.ev, now + 0.6)


def reinstate_ks(challenge: str) -> tuple[int, ...]:
    """The probe_successes_to_reinstate values one grading run tries: 1 and two drawn from
    2..7 by its challenge, in a drawn order (a replayed report holds other runs)."""
    r = rng(challenge, "ex5")
    ks = [1, *r.sample(range(2, 8), 2)]
    r.shuffle(ks)
    return tuple(ks)


def reinstate_runs(ks: tuple[int, ...] = REINSTATE_KS) -> dict[str, dict[str, Any]]:
    """Per k (as text): the retirement, then the EV's state after each of up to k answered
    probes, stopping once it is no longer ASSUMED_BAD (nothing left to probe)."""
    runs = {}
    for k in ks:
        evs, entry = _evs(k)
        run: dict[str, Any] = {"retire": _retire(evs, entry, 0.0), "states": []}
        runs[str(k)] = run
        if run["retire"].get("state") != B:
            continue
        for i in range(1, k + 1):
            _probe(evs, entry, float(i), True)
            run["states"].append(_plain(entry.state.name))
            if entry.state.name != B:
                break
    return runs


def timeout_run() -> dict[str, Any]:
    """TIMEOUT_RUN with k = 3: the state and probe_successes after each probe result,
    stopping once the EV is no longer ASSUMED_BAD."""
    evs, entry = _evs(3)
    run: dict[str, Any] = {"retire": _retire(evs, entry, 0.0), "after": []}
    if run["retire"].get("state") != B:
        return run
    for i, answered in enumerate(TIMEOUT_RUN, start=1):
        if entry.state.name != B:
            break
        _probe(evs, entry, float(i), answered)
        run["after"].append([_plain(entry.state.name), _plain(entry.probe_successes)])
    return run


def stray_run() -> dict[str, Any]:
    """Replies nobody asked for: on a retired EV with no probe outstanding, on a GOOD EV,
    then the answer to a real probe. Answers are recorded as their repr."""
    evs, entry = _evs(1)
    run: dict[str, Any] = {"retire": _retire(evs, entry, 0.0)}
    if run["retire"].get("state") != B:
        return run
    answer = evs.on_probe_reply(entry.ev, 0.5)  # nothing outstanding
    run["unasked"] = {"answer": repr(answer), "state": _plain(entry.state.name)}
    other = evs.entries()[1]
    try:
        answer = evs.on_probe_reply(other.ev, 0.5)  # a GOOD EV: never probed
        run["good"] = {"answer": repr(answer), "state": _plain(other.state.name)}
    except Exception as exc:
        run["good"] = {"raised": raised(exc)}
    run["state_then"] = _plain(entry.state.name)
    if entry.state.name != B:
        return run
    evs.on_probe_sent(entry.ev, 1.0)
    run["answered"] = repr(evs.on_probe_reply(entry.ev, 1.1))
    return run


# ----- stage 2: the simulator ----------------------------------------------------------------

def simulate(endpoints: Any = None) -> dict[str, Any]:
    """Spine link 0 of plane 0 on the sender's T0 dies mid-transfer and heals
    HEAL_AFTER_RTTS base RTTs later; the loop runs until every retired EV could have been
    reinstated. Run by the grader (rubrics.ex5.measure) with `endpoints` served from
    the sandbox (None: this process's own, for tests), so every figure is what the sender's
    NIC put on the simulated fabric, never an endpoint's word: per EV, its route and when it
    carried data and probes. An EV's state shows there: a retired EV carries probes and no
    data, a reinstated one data again. The probe rule (k, interval, timeout) is the grader's
    own EndpointConfig at the sender's RTT, not the submission's."""
    import wire
    from fabric.topology import Fabric
    from sim.harness import Harness, SimSettings

    fabric = Fabric(**SIM_FABRIC)
    h = Harness(fabric, SimSettings())
    h.endpoints = endpoints
    src, dst = 0, fabric.hosts - 1
    h.add_transfer(src, dst, SIM_BYTES)
    rtt = h.base_rtt = h.path_rtt(src, dst)
    h.capacity_log.clear()
    h.note_capacity()
    ideal = SIM_BYTES * 8 / h.capacity_log[-1][1]
    link = h.net.link(fabric.t0(0, fabric.nic(src, 0).t0).name, fabric.t1(0, 0).name)
    cfg = h.fabric_config(src).ev
    t_fail = FAIL_AT * ideal
    t_heal = t_fail + HEAL_AFTER_RTTS * rtt
    t_end = t_heal + (cfg.probe_successes_to_reinstate + 1) * cfg.probe_interval \
        + cfg.probe_timeout + 5 * rtt
    evs: dict[int, dict[str, Any]] = {}
    sender = h.adapters[src]
    honest_send = sender._send_frame

    def send(plane: int, frame: bytes) -> None:
        envelope, payload = wire.decode_frame(frame)
        pkt = wire.decode_packet(payload)
        kind = "data" if isinstance(pkt, wire.DataPacket) else \
            "probes" if isinstance(pkt, wire.ProbePacket) else None
        if kind is not None:
            row = evs.setdefault(envelope.ev, {"route": str(envelope.outer_dst), "data": [],
                                               "probes": []})
            row[kind].append(h.loop.now)
        honest_send(plane, frame)
    sender._send_frame = send
    h.at(t_fail, lambda: h.net.set_link_up(link, False))
    h.at(t_heal, lambda: h.net.set_link_up(link, True))
    h.start()
    finished = h.run(SIM_TIMEOUT_IDEALS * ideal + 0.05)
    if h.loop.now < t_end:
        h.loop.run(until=t_end)
    return {"rtt": rtt, "t_fail": t_fail, "t_heal": t_heal,
            "k": cfg.probe_successes_to_reinstate, "interval": cfg.probe_interval,
            "timeout": cfg.probe_timeout, "finished": finished, "verified": h.verified(),
            "now": h.loop.now, "evs": evs}
