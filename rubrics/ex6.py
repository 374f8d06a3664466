"""Exercise 6, plane failure: the student writes how an endpoint reacts to its own NIC port
going down or up (Endpoint.set_plane_up), how it tells its peers (Endpoint._send_port_status:
a PORT_STATUS EP_REQ to QP 0x2 carrying the mask of live ports, repeated until answered), and
how a peer reacts to the mask it receives (Endpoint._apply_peer_mask).

Stages: (1) unit checks on three sans-IO endpoints A, B and C with four planes, packets handed
over by the grader (A is connected to B and to C): A's own sending, the notification each
peer gets, the peer's sending after it, the repeat of an unanswered notification, and the
plane's return; (2) the simulator: the receiver's NIC port on plane 0 dies mid-transfer and
comes back; (3) the live Mininet transfer.

`observe` runs the unit scenarios and the live transfer in the sandbox
(rubrics.ex6_observe) and reports what the student's code did; `measure` runs the
simulator here, around the student's endpoints served from the sandbox (rubrics.remote_core),
and reads its figures off the simulated fabric; `judge` decides every check from those data
alone, so it never imports the student's endpoint and believes no verdict from the sandbox.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

from grader.report import Check, CheckSpec, failed, not_run
from rubrics.ex6_observe import (
    DEAD,
    NOW,
    PLANES,
    QUIET_AFTER_RTTS,
    RETRY_S,
    dead_plane,
    units,
)
from rubrics.ex6_observe import simulate as simulate
from rubrics.live import judge_transfer, measure_served_transfer
from rubrics.remote_core import served_run

MASK_ALL = (1 << PLANES) - 1
NOTIFY_BOUND_RTTS = 5  # the reference: about 0.4 base RTTs

SIM_IDS = (("ex6.sim.transfer", 2), ("ex6.sim.notified", 1), ("ex6.sim.quiet", 2),
           ("ex6.sim.resume", 2))
SIM_TITLE = "simulator: the receiver's port on plane 0 fails and returns mid-transfer"
LIVE_TITLE = "a write crosses a Mininet fabric with your port-status handling"
LIVE_HINT = ("the unit and simulator checks pass, so look at the agents' logs: did the agents "
             "start with your modules?")

CHECKS = (
    CheckSpec("ex6.local", "a local port down stops our own use of its plane; up resumes it", 2),
    CheckSpec("ex6.notify", "each peer is told, on every surviving plane, which ports are up",
              3),
    CheckSpec("ex6.peer-down", "the peer stops sending on the plane it was told is down", 3),
    CheckSpec("ex6.retry", "an unanswered notification is repeated, an answered one is not", 2),
    CheckSpec("ex6.peer-up", "when the port comes back, the peer uses the plane again", 3),
    CheckSpec("ex6.sim.transfer",
              "the simulated transfer completes across the plane failure and arrives intact", 2),
    CheckSpec("ex6.sim.notified",
              f"the sender hears of the failure within {NOTIFY_BOUND_RTTS} base RTTs", 1),
    CheckSpec("ex6.sim.quiet", "no data goes to the dead plane once the notification is in", 2),
    CheckSpec("ex6.sim.resume", "the plane carries data again once the port is back", 2),
    CheckSpec("live.transfer", LIVE_TITLE, 3),
)
SPEC = {s.id: s for s in CHECKS}


@dataclass(frozen=True)
class Lost:
    """The plane A loses in the unit checks (drawn per grading run: dead_plane)."""
    plane: int = DEAD

    @property
    def alive(self) -> list[int]:
        return [p for p in range(PLANES) if p != self.plane]

    @property
    def mask_down(self) -> int:
        return sum(1 << p for p in self.alive)


def _planes(mask: int) -> str:
    return "{" + ", ".join(str(p) for p in range(PLANES) if mask >> p & 1) + "}"


# ----- the untrusted data's shapes: anything else is a malformed report ----------------------

def _int(v: Any, what: str) -> int:
    if not isinstance(v, int):
        raise ValueError(f"{what} is not an integer")
    return v


def _ints(v: Any, what: str) -> list[int]:
    if not isinstance(v, list):
        raise ValueError(f"{what} is not a list")
    return [_int(x, what) for x in v]


def _records(v: Any, what: str) -> list[tuple[str, int, int]]:
    """[peer, plane, mask] rows of PORT_STATUS packets, checked."""
    if not isinstance(v, list):
        raise ValueError(f"{what} is not a list")
    out = []
    for row in v:
        if not isinstance(row, list) or len(row) != 3 or not isinstance(row[0], str):
            raise ValueError(f"{what} holds {str(row)[:60]}, not [peer, plane, mask]")
        out.append((row[0], _int(row[1], what), _int(row[2], what)))
    return out


def _has_event(events: Any, kind: str, **fields: Any) -> bool:
    if not isinstance(events, list):
        raise ValueError("the events are not a list")
    return any(e.get("type") == kind and all(e.get(k) == v for k, v in fields.items())
               for e in events)


def _num(v: Any, what: str) -> float:
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
        raise ValueError(f"{what} is not a finite number")
    return float(v)


# ----- stage 1: the unit checks ---------------------------------------------------------------

def _unit(check_id: str, obs: Any, hint: str, expected: str,
          problems: Callable[[dict[str, Any]], list[str]]) -> Check:
    """The check `check_id` from its scenario's data: what raised, else what went wrong."""
    spec = SPEC[check_id]
    if not isinstance(obs, dict):
        raise TypeError(f"{check_id}'s observations are not an object")
    found = [str(obs["raised"])] if "raised" in obs else problems(obs)
    return Check(check_id, spec.title, spec.points, not found, expected=expected,
                 observed="; ".join(found) or "as expected", hint=hint)


def _local(d: Lost, o: dict[str, Any]) -> list[str]:
    dead = d.plane
    problems = []
    if not _has_event(o["events"], "PlaneStateChanged", plane=dead, up=False):
        problems.append(f"no PlaneStateChanged({dead}, up=False) event")
    used = _ints(o["down_planes"], "down_planes")
    if dead in used or not used:
        problems.append(f"with plane {dead} down, A's data went on planes {sorted(set(used))}")
    used = _ints(o["up_planes"], "up_planes")
    if dead not in used:
        problems.append(f"with plane {dead} up again, A's data went on planes "
                        f"{sorted(set(used))} only")
    return problems


def _notify(d: Lost, o: dict[str, Any]) -> list[str]:
    sent = _records(o["ep_req"], "ep_req")
    problems = []
    for peer in "BC":
        mine = [(plane, mask) for p, plane, mask in sent if p == peer]
        planes = sorted(plane for plane, _ in mine)
        if planes != d.alive:
            problems.append(f"to {peer}: EP_REQ on planes {planes}")
        bad = {_planes(mask) for _, mask in mine if mask != d.mask_down}
        if bad:
            problems.append(f"to {peer}: port mask {', '.join(sorted(bad))}")
    return problems


def _peer_down(d: Lost, o: dict[str, Any]) -> list[str]:
    dead = d.plane
    problems = []
    up = _ints(o["peer_up"], "peer_up")
    if set(up) != set(d.alive):
        problems.append(f"B believes A's ports {sorted(up)} are up")
    if not _has_event(o["events"], "PeerPlaneChanged", plane=dead, up=False):
        problems.append(f"B emitted no PeerPlaneChanged('A', {dead}, up=False)")
    if not _records(o["ep_rsp"], "ep_rsp"):
        problems.append("B sent no EP_RSP")
    used = _ints(o["data_planes"], "data_planes")
    if dead in used or not used:
        problems.append(f"B's data to A went on planes {sorted(set(used))}")
    return problems


def _retry(o: dict[str, Any]) -> list[str]:
    problems = []
    timer = o["timer"]
    if timer is None or isinstance(timer, str) or _num(timer, "timer") > NOW + 1.5 * RETRY_S:
        shown = timer if isinstance(timer, str) else repr(timer)
        problems.append(f"A's timer is {shown}, not about port_status_retry ({RETRY_S:g} s) "
                        f"from now")
    to = sorted({peer for peer, _, _ in _records(o["ep_req"], "ep_req")})
    if to != ["C"]:
        problems.append(f"after port_status_retry A repeated its EP_REQ to {to or 'nobody'}")
    return problems


def _peer_up(d: Lost, o: dict[str, Any]) -> list[str]:
    dead = d.plane
    problems = []
    masks = {_planes(mask) for peer, _, mask in _records(o["ep_req"], "ep_req") if peer == "B"}
    if masks != {_planes(MASK_ALL)}:
        problems.append(f"A's EP_REQ to B carried {sorted(masks) or 'nothing'}")
    up = _ints(o["peer_up"], "peer_up")
    if set(up) != set(range(PLANES)):
        problems.append(f"B believes A's ports {sorted(up)} are up")
    used = _ints(o["data_planes"], "data_planes")
    if dead not in used:
        problems.append(f"B's data to A went on planes {sorted(set(used))} only")
    return problems


def unit_checks(obs: Any, dead: int = DEAD) -> list[Check]:
    """The five unit checks from observe's "units" (ex6_observe.units(dead))."""
    d = Lost(dead)
    alive = d.alive
    return [
        _unit("ex6.local", obs["local"],
              "set_plane_up records the new state, emits PlaneStateChanged and tells every "
              "connection conn.set_plane_usable(plane, usable): usable only if our port is "
              "up *and* the peer's is (plane in self._peer_up[conn.peer]); then "
              "conn.drain_ev_changes()",
              f"down: a PlaneStateChanged event and no data on plane {dead}; up: data on "
              f"plane {dead} again", partial(_local, d)),
        _unit("ex6.notify", obs["notify"],
              "bump self._announce_seq (mod SEQ_MOD), build the mask of our live ports and "
              "send a PortStatusPacket (opcode OP_EP_REQ, dest QP QPN_ENDPOINT, seq in the "
              "BTH PSN and in the extension) to every peer, on each plane whose port is up "
              "(conn.entry_on_plane(p) names an EV there, conn.control_tx builds the "
              "packet): a notification sent on the dead plane itself never arrives",
              f"to B and to C: one EP_REQ on each of planes {alive}, none on plane {dead}, "
              f"port mask {_planes(d.mask_down)}", partial(_notify, d)),
        _unit("ex6.peer-down", obs["peer_down"],
              "_apply_peer_mask stores the planes the mask says are up in "
              "self._peer_up[peer] and, for each plane whose state changed, emits "
              "PeerPlaneChanged and calls conn.set_plane_usable(plane, our port up and "
              "theirs up) then conn.drain_ev_changes() on every connection to that peer",
              f"B: peer_planes_up('A') == {alive}, a PeerPlaneChanged event, an EP_RSP, "
              f"and no data on plane {dead}", partial(_peer_down, d)),
        _unit("ex6.retry", obs["retry"],
              "after sending an EP_REQ, remember it until answered: "
              "self._pending_announce[peer] = (seq, mask, now + self.config.port_status_retry)"
              " (handle_timer repeats it, an EP_RSP with that seq clears it)",
              "A repeats its EP_REQ to C (whose copy was lost) after port_status_retry, and "
              "not to B (which answered)", _retry),
        _unit("ex6.peer-up", obs["peer_up"],
              "set_plane_up(plane, True) announces the new mask like a down does, and "
              "_apply_peer_mask must handle planes coming back (in the new mask, not in the "
              "old one) as well as planes going away: a plane never marked usable again "
              "costs 1/planes of the capacity for good",
              f"A announces {_planes(MASK_ALL)}; B then believes every port is up and sends "
              f"data on plane {dead} again", partial(_peer_up, d)),
    ]


# ----- stage 2: the simulator -----------------------------------------------------------------

def measure(obs: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """Here, once the units pass: the simulation on the grader's own simulator, then (if it
    passes) the live transfer on the grader's own fabric and agents, the student's endpoints
    served from the sandbox (rubrics.remote_core) in both."""
    if not _passed(unit_checks(obs["units"], dead_plane(ctx.challenge)), 5):
        return {}
    measured: dict[str, Any] = {"sim": served_run(ctx, simulate)}
    if _passed(sim_checks(measured["sim"]), len(SIM_IDS)):
        measured["live"] = measure_served_transfer(ctx)
    return measured


def _marks(sim: dict[str, Any]) -> dict[str, float | int]:
    """The sender's marks (times in s, plane-0 data counts), each a checked number."""
    marks = sim["marks"]
    if not isinstance(marks, dict):
        raise ValueError("the simulator's marks are not an object")
    times = {k: _num(marks[k], k) for k in ("down_at", "up_at") if k in marks}
    return times | {k: _int(marks[k], k) for k in ("quiet_from", "at_heal") if k in marks}


def sim_checks(sim: Any) -> list[Check]:
    """The simulator checks from measure's data; only the transfer one if it raised."""
    spec = SPEC["ex6.sim.transfer"]
    if sim is None:
        return [failed(spec, "not measured: the grader did not run the simulator")]
    if not isinstance(sim, dict):
        raise TypeError("the simulator's observations are not an object")
    if "raised" in sim:
        return [Check(spec.id, spec.title, spec.points, False, expected="completed and verified",
                      observed=str(sim["raised"]),
                      hint="the traceback's last line shows where the simulation raised")]
    ok = sim["finished"] is True and sim["verified"] is True
    error = "" if sim["finished"] is True else \
        f"not finished after {_num(sim['end'], 'end') * 1e3:.2f} ms"
    rtt, t_fail = _num(sim["rtt"], "rtt"), _num(sim["t_fail"], "t_fail")
    if rtt <= 0:
        raise ValueError("the simulator's base RTT is not positive")
    m, final = _marks(sim), _int(sim["final"], "final")
    down, up = m.get("down_at"), m.get("up_at")
    after = None if "quiet_from" not in m or "at_heal" not in m else \
        m["at_heal"] - m["quiet_from"]
    resumed = final - m.get("at_heal", final)
    return [
        Check(spec.id, spec.title, spec.points, ok, expected="completed and verified",
              observed="completed and verified" if ok else error or "corrupt",
              hint="every unit check passed: look for a plane that never comes back or "
                   "data still sent where nobody listens"),
        Check("ex6.sim.notified", SPEC["ex6.sim.notified"].title, 1,
              down is not None and (down - t_fail) / rtt <= NOTIFY_BOUND_RTTS,
              expected=f"PeerPlaneChanged(plane 0, up=False) at the sender within "
                       f"{NOTIFY_BOUND_RTTS} base RTTs of the failure",
              observed="never" if down is None else f"{(down - t_fail) / rtt:.1f} base RTTs",
              hint="the receiver's set_plane_up must announce at once, on its surviving "
                   "planes"),
        Check("ex6.sim.quiet", SPEC["ex6.sim.quiet"].title, 2, after == 0,
              expected=f"0 data packets on plane 0 from {QUIET_AFTER_RTTS} base RTT after the "
                       f"notification until the heal",
              observed="no notification arrived" if after is None else
              f"{after} data packets",
              hint="on the notification, the sender's connections must stop choosing that "
                   "plane's EVs (conn.set_plane_usable(plane, False))"),
        Check("ex6.sim.resume", SPEC["ex6.sim.resume"].title, 2,
              up is not None and resumed > 0,
              expected="PeerPlaneChanged(plane 0, up=True) at the sender and data on plane 0 "
                       "after the heal",
              observed=f"{'no' if up is None else 'an'} up notification; {resumed} data "
                       f"packets on plane 0 after the heal",
              hint="set_plane_up(plane, True) must announce the full mask, and the peer must "
                   "mark the plane usable again"),
    ]


# ----- the two halves -------------------------------------------------------------------------

def _passed(checks: list[Check], count: int) -> bool:
    return len(checks) == count and all(c.passed for c in checks)


def observe(ctx: Any) -> dict[str, Any]:
    """In the sandbox: the unit scenarios. The simulation and the live transfer are not run
    here: `measure` runs them in the grader's process around the student's endpoints."""
    return {"units": units(dead_plane(ctx.challenge))}


def judge(obs: dict[str, Any], ctx: Any) -> Iterator[Check]:
    """Every check from observe's data; a stage runs only when the one before passed."""
    units_ = unit_checks(obs["units"], dead_plane(ctx.challenge))
    yield from units_
    if not _passed(units_, 5):
        for check_id, points in SIM_IDS:
            yield not_run(check_id, SIM_TITLE, points, "fix the unit checks above first")
        yield not_run("live.transfer", LIVE_TITLE, 3, "fix the unit checks above first")
        return
    sims = sim_checks((ctx.measured or {}).get("sim"))
    yield from sims
    done = {c.id for c in sims}
    for check_id, points in SIM_IDS:
        if check_id not in done:
            yield not_run(check_id, SIM_TITLE, points, "the simulation did not run to the end")
    if not _passed(sims, len(SIM_IDS)):
        yield not_run("live.transfer", LIVE_TITLE, 3, "fix the simulator checks above first")
        return
    yield judge_transfer((ctx.measured or {}).get("live"), ctx.target, "live.transfer", 3,
                         hint=LIVE_HINT)
