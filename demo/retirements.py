"""EVs retired and reinstated around the failure: the sender's EV layout and events read
from its agent, each retirement classified by route and cause (demo.run's docstring), and
the wait for probes to reinstate what the failure retired."""

from __future__ import annotations

import threading
import time
from typing import Any

from demo.flow import Flow, delta
from emulation.network import MrcNetwork

REINSTATE_MIN_S = 5.0  # how long the report waits for probes to reinstate retired EVs ...
REINSTATE_RTTS = 50  # ... or this many base RTTs, if longer


def classify_retirements(events: list[dict], qpn: int, evs: dict[int, dict],
                         failed_routes: set[str], fail_begin: float | None) -> dict[str, Any]:
    """EVs retired (moved into ASSUMED_BAD) per route and cause (module docstring), and how
    many of the failed routes' EVs were ASSUMED_BAD when the failure began. Counts are of
    retirements; an EV retired, reinstated by probes and retired again while the link is
    down counts twice, so `failed_route_evs_retired` also gives the distinct EVs (at most
    failed_route_evs: never "3 retired of its 2")."""
    state = {ev: info["state"] for ev, info in evs.items()}
    retired_after: set[int] = set()
    on_failed = [ev for ev, info in evs.items() if info["route"] in failed_routes]
    bad_at_failure: int | None = None
    out: dict[str, Any] = {"healthy_routes": 0, "failed_route_after_failure": 0,
                           "failed_route_before_failure": 0, "healthy_by_route": {},
                           "reasons": {}, "first_healthy_s": None}
    for e in sorted(events, key=lambda e: e["seq"]):
        if e.get("type") != "EvStateChanged" or e.get("qpn") != qpn or e["ev"] not in evs:
            continue
        if fail_begin is not None and bad_at_failure is None and e["time"] >= fail_begin:
            bad_at_failure = sum(state[ev] == "ASSUMED_BAD" for ev in on_failed)
        old, new = state[e["ev"]], e["new"]
        state[e["ev"]] = new
        if new != "ASSUMED_BAD" or old == "ASSUMED_BAD":
            continue
        route = evs[e["ev"]]["route"]
        if route not in failed_routes:
            key = "healthy_routes"
            out["healthy_by_route"][route] = out["healthy_by_route"].get(route, 0) + 1
            if out["first_healthy_s"] is None:
                out["first_healthy_s"] = e["time"]
        elif fail_begin is not None and e["time"] >= fail_begin:
            key = "failed_route_after_failure"
            retired_after.add(e["ev"])
        else:
            key = "failed_route_before_failure"
        out[key] += 1
        reasons = out["reasons"].setdefault(key, {})
        reasons[e["reason"]] = reasons.get(e["reason"], 0) + 1
    if fail_begin is not None and bad_at_failure is None:
        bad_at_failure = sum(state[ev] == "ASSUMED_BAD" for ev in on_failed)
    out["failed_route_evs"] = len(on_failed)
    out["failed_route_evs_retired"] = len(retired_after)
    out["failed_route_evs_bad_at_failure"] = bad_at_failure
    return out


def no_bypass_note(retired: dict[str, Any]) -> str:
    bad, total = retired["failed_route_evs_bad_at_failure"], retired["failed_route_evs"]
    if bad:
        return (f"nothing to bypass: no data went onto the failed route after the failure "
                f"began; {bad} of its {total} EVs were already retired before it "
                f"({retired['reasons'].get('failed_route_before_failure', {})})")
    return "nothing to bypass: no data went onto the failed route after the failure began"


def await_reinstated(net: MrcNetwork, flow: Flow) -> bool:
    """Probes run in the background; wait until reinstated catches up with retired, then
    read the sender's counters again (flow.after). Probes pace with the RTT, so the wait
    does too: REINSTATE_RTTS base RTTs, REINSTATE_MIN_S at least (at 40 packets/s, BMv2 on
    paths-128, 5 s was not enough: 0.38 s base RTT)."""
    timeout = max(REINSTATE_MIN_S, REINSTATE_RTTS * net.config.effective_base_rtt)
    end = time.monotonic() + timeout
    before = flow.before[flow.src]["endpoint"]
    while True:
        stats = net.stats(flow.src)
        ep = stats["endpoint"]
        if delta(ep, before, "ev_reinstated") >= delta(ep, before, "ev_retired"):
            flow.after[flow.src] = stats
            return True
        if time.monotonic() > end:
            flow.after[flow.src] = stats
            return False
        threading.Event().wait(0.1)
