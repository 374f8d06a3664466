"""The two_tier.py demo: a transfer across spines while one T0-T1 link fails and recovers.

The failure begins when the demo starts taking the link down (the first switch end is
blackholed within that call; `link_down_call_s` says how long the call took).

Time to bypass = from the failure's beginning until the sender hands the NIC its last data
packet on a route through the failed link (per-route last transmission times from the sender
agent's driver, read just before the link comes back). If the sender put no data on those
routes after the failure began, there was nothing to bypass and no time is given: the report
says so and how many of their EVs were already retired, and why. It is given in base RTTs
(the agents' configured base RTT, which their timers scale with: packet times per
rate-limited hop, a short standing queue, agent overhead) and in measured unloaded RTTs (a
one-packet write sees empty queues and the rate limiter's burst allowance, so it is far below
the RTT under load). A single-path flow has one route and cannot bypass: the report says
whether baseline routing (controller.convergence, hold timer) repaired it while the link was
down.

EVs retired are counted per route from the sender's EV events: on the failed route(s) after
the failure began, on the failed route(s) before it (nothing there could see the failure),
and on healthy routes (routes that do not cross the failed link; a healthy network retires
none: docs/decisions.md, "Loss detection judges a path by its own plane's answers").

Goodput timeline: the receiver's placed payload bytes (`rx_data_bytes`), polled every
SAMPLE_S. Goodput in the second after the failure began is compared with the goodput of the
same transfer before it, from CLEAN_FROM_S after the transfer started (the first window's
ramp excluded) until the failure; report["checks"] holds the demo's pass/fail criteria.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from typing import Any

from emulation.agents import TransferHandle
from emulation.cpupressure import EMULATION_BOUND_SHARE, CpuPressure
from emulation.fidelity import EMULATION_BOUND, Monitor
from emulation.netconfig import flow_capacity_bps
from emulation.network import MrcNetwork
from views.runview import RunRecorder

RTT_SAMPLES = 5
SAMPLE_S = 0.05  # goodput timeline: receiver counters polled this often
CLEAN_FROM_S = 0.4  # the clean goodput reference starts this long after the transfer
AFTER_FAILURE_S = 1.0  # goodput window after the failure begins
GOODPUT_AFTER_FAILURE_MIN = 0.8  # check: that goodput / clean goodput
REINSTATE_MIN_S = 5.0  # how long the report waits for probes to reinstate retired EVs ...
REINSTATE_RTTS = 50  # ... or this many base RTTs, if longer


def measure_rtt(net: MrcNetwork, src: int, dst: int, single_path: bool) -> float:
    """Minimum duration of one-packet writes: one data packet and its SACK."""
    return min(net.transfer(src, dst, 64, single_path=single_path)["duration_s"]
               for _ in range(RTT_SAMPLES))


def routes_through(net: MrcNetwork, src: int, dst: int, a: str, b: str,
                   single_path: bool) -> set[str]:
    """Sender routes (outer DAs) whose source route crosses cable a-b."""
    if single_path:  # LPM-routed: the route is the destination NIC address on plane 0
        return {str(net.fabric.nic(dst, 0).address)}
    out = set()
    for path in net.fabric.all_paths(src, dst):
        if any({x, y} == {a, b} for x, y in net.fabric.path_links(path)):
            out.add(str(path.address))
    return out


def pick_failed_link(net: MrcNetwork, src: int, dst: int, single_path: bool) -> tuple[str, str]:
    """MRC: plane 0, source T0 to spine 0; over a cluster, a link between two servers on the
    flow's paths, a switch link if one crosses, else the destination's NIC on the lowest such
    plane. Single path: the uplink the flow was hashed onto."""
    if net.cluster_run is not None and not single_path:
        crossing = _crossing_link(net, src, dst)
        if crossing is not None:
            return crossing
    t0 = net.fabric.t0(0, net.fabric.nic(src, 0).t0)
    if single_path:
        sent = net.port_sent(t0.name)
        uplinks = {net.fabric.uplink_port(j): j for j in range(net.fabric.t1_per_plane)}
        busiest = max(uplinks, key=lambda port: sent.get(port, 0))
        return t0.name, net.fabric.t1(0, uplinks[busiest]).name
    return t0.name, net.fabric.t1(0, 0).name


def capacity_left(fabric, a: str, b: str, single_path: bool) -> float:
    """The share of the flow's capacity a failed link a-b leaves: a host NIC takes its plane
    (1/planes of an MRC flow), a switch link leaves the hosts' NICs, the bottleneck."""
    nic = a not in fabric.by_name or b not in fabric.by_name
    return 1.0 - 1.0 / fabric.planes if nic and not single_path else 1.0


def _crossing_link(net: MrcNetwork, src: int, dst: int) -> tuple[str, str] | None:
    assert net.cluster_run is not None
    server = net.cluster_run.server_of
    fabric = net.fabric
    found: list[tuple[int, str, str]] = []
    for path in fabric.all_paths(src, dst):
        for a, b in fabric.path_links(path):
            if server(a) != server(b):
                switches = a in fabric.by_name and b in fabric.by_name
                rank = 0 if switches else 1 if b == fabric.host_name(dst) else 2
                found.append((rank, a, b))
    return min(found)[1:] if found else None


def _delta(after: dict, before: dict, key: str) -> int:
    return int(after[key]) - int(before[key])


class ProgressSampler:
    """Polls an agent's `rx_data_bytes` in a thread: (monotonic time, bytes) pairs."""

    def __init__(self, net: MrcNetwork, host: int, period: float = SAMPLE_S) -> None:
        self._agent, self._period = net.agent(host), period
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"progress-h{host}", daemon=True)

    def start(self) -> ProgressSampler:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                got = self._agent.call("counters", wait=5.0)
            except Exception:  # noqa: BLE001 (a missed sample only thins the timeline)
                got = None
            if got is not None:
                self.samples.append((time.monotonic(), int(got["counters"]["rx_data_bytes"])))
            self._stop.wait(self._period)

    def stop(self) -> list[tuple[float, int]]:
        self._stop.set()
        self._thread.join(10.0)
        return self.samples


def bytes_at(samples: list[tuple[float, int]], t: float) -> float | None:
    """Received bytes at time t, interpolated between samples; None outside them."""
    for (t0, b0), (t1, b1) in itertools.pairwise(samples):
        if t0 <= t <= t1:
            return b0 + (b1 - b0) * ((t - t0) / (t1 - t0) if t1 > t0 else 1.0)
    return None


def rate_bps(samples: list[tuple[float, int]], start: float, end: float) -> float | None:
    b0, b1 = bytes_at(samples, start), bytes_at(samples, end)
    if b0 is None or b1 is None or end <= start:
        return None
    return (b1 - b0) * 8 / (end - start)


def goodput_around_failure(samples: list[tuple[float, int]], started: float,
                           fail_begin: float) -> dict[str, Any]:
    """Clean goodput (CLEAN_FROM_S after the start until the failure) and goodput in the
    AFTER_FAILURE_S after the failure began (module docstring)."""
    clean = rate_bps(samples, started + CLEAN_FROM_S, fail_begin)
    end = fail_begin + AFTER_FAILURE_S
    after = rate_bps(samples, fail_begin, end)
    times = [t for t, _ in samples]
    inside = [b - a for a, b in itertools.pairwise(times) if b > started + CLEAN_FROM_S and a < end]
    return {"clean_bps": clean, "after_failure_bps": after,
            "after_failure_of_clean": after / clean if clean and after is not None else None,
            "window_s": AFTER_FAILURE_S,
            "max_sample_gap_s": max(inside, default=None)}


def ev_layout(net: MrcNetwork, src: int, dst: int) -> tuple[int, dict[int, dict]]:
    """src's QPN towards dst and its EVs (route, state) from the agent's per-EV stats."""
    (qpn,) = net.agent(src).call("status")["qps"][str(dst)]  # an MRC agent: one QP per peer
    per_ev = net.stats(src, per_ev=True)["per_ev"][f"{qpn:#x}"]
    return qpn, {int(ev): info for ev, info in per_ev.items()}


def last_event_seq(net: MrcNetwork, host: int) -> int:
    return int(net.agent(host).call("events", since=(1 << 62))["last"])


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


def run_demo(net: MrcNetwork, *, fail_at: float = 1.0, down_for: float = 2.0,
             seconds: float = 6.0, single_path: bool = False, log=print,
             record: bool = False) -> dict[str, Any]:
    """The demo (module docstring); `record`: report["recording"] holds what the run report
    replays (views.runview), sampled from before the transfer until the EVs are back."""
    fabric = net.fabric
    src, dst = 0, fabric.hosts - 1  # first and last host: different T0s when t0 > 1
    rate = net.config.port_rate_pps
    capacity = flow_capacity_bps(fabric, rate, single_path)
    nbytes = int(seconds * capacity / 8) if capacity else 20_000_000
    rtt = measure_rtt(net, src, dst, single_path)
    log(f"unloaded RTT h{src} -> h{dst}: {rtt * 1e3:.1f} ms; sending {nbytes} bytes")
    before = {h: net.stats(h) for h in (src, dst)}
    frames_before = net.switch_frames()
    # measure_rtt left both agents in the transfer's mode, so the QP read here is the one the
    # transfer uses
    qpn, evs = ev_layout(net, src, dst) if not single_path else (0, {})
    seq0 = last_event_seq(net, src)
    pressure = CpuPressure().start()
    monitor = Monitor(net)
    monitor.start()
    recorder = (RunRecorder(net, [(src, dst)], name=f"h{src} -> h{dst}", capacity_bps=capacity)
                .start() if record else None)
    handle = net.start_transfer(src, dst, nbytes, single_path=single_path)
    sampler = ProgressSampler(net, dst).start()
    started = time.monotonic()
    failure, routes, fail_begin = _fail_and_recover(
        net, handle, src, dst, started=started, rtt=rtt, fail_at=fail_at, down_for=down_for,
        single_path=single_path, log=log)
    result = handle.wait()
    cpu_pressure = pressure.share()
    fidelity = monitor.stop()
    samples = sampler.stop()
    after = {h: net.stats(h) for h in (src, dst)}
    frames = net.switch_frames()
    consumed = {name: frames[name]["consumed"] - frames_before[name]["consumed"]
                for name in frames}
    if failure:  # let probes reinstate the retired EVs before counting them
        failure["reinstated_after_up"] = _await_reinstated(net, src, before[src], after[src])
        after[src] = net.stats(src)
    recording = recorder.stop() if recorder is not None else None
    report = build_report(net, src, dst, result, before, after, failure, rtt, capacity,
                          single_path)
    report["switch_frames_consumed"] = {k: v for k, v in consumed.items() if v}
    if recording is not None:
        report["recording"] = recording
    report["bringup_s"] = dict(net.timings)
    if net.cluster_run is not None:
        report["cluster"] = net.cluster_run.summary()
    report["cpu_pressure"] = cpu_pressure
    report["fidelity"] = fidelity
    report["emulation_bound"] = emulation_bound(fidelity, cpu_pressure)
    t0 = result.get("start", started)
    report["goodput_timeline"] = [(round(t - t0, 3), b) for t, b in samples]
    if failure and fail_begin is not None and not single_path:
        events = net.agent(src).call("events", since=seq0)["events"]
        retired = classify_retirements(events, qpn, evs, routes, fail_begin)
        if retired["first_healthy_s"] is not None:
            retired["first_healthy_s"] -= started
        failure["retired"] = retired
        failure["goodput"] = goodput_around_failure(samples, t0, fail_begin)
        if failure["bypass_s"] is None:
            failure["bypass_note"] = _no_bypass_note(retired)
        report["checks"] = demo_checks(failure, report["emulation_bound"])
    return report


def _fail_and_recover(net: MrcNetwork, handle: TransferHandle, src: int, dst: int, *,
                      started: float, rtt: float, fail_at: float, down_for: float,
                      single_path: bool, log: Callable[[str], object],
                      ) -> tuple[dict[str, Any], set[str], float | None]:
    """Fail and restore a link the flow crosses, mid-transfer: the event the demo measures."""
    if single_path:  # keep the link down past the hold timer, so routing repairs the flow
        down_for = max(down_for, net.config.convergence_delay + 1.5)
    if net.fabric.t0_per_plane <= 1 or handle.done():
        return {}, set(), None
    time.sleep(fail_at)
    a, b = pick_failed_link(net, src, dst, single_path)
    routes = routes_through(net, src, dst, a, b, single_path)
    fail_begin = time.monotonic()
    net.link_down(a, b)
    t_down = time.monotonic()
    log(f"+{t_down - started:.2f} s: link {a} - {b} DOWN")
    _sleep_unless_done(handle, down_for)
    per_route = net.stats(src)["per_route"]
    last = max((per_route[r]["last_data_tx"] for r in routes if r in per_route), default=None)
    bypass = None if single_path or last is None or last < fail_begin else last - fail_begin
    repairs = len(net.convergence.history) if net.convergence else 0
    net.link_up(a, b)
    log(f"+{time.monotonic() - started:.2f} s: link {a} - {b} UP")
    failure = {"link": [a, b], "fail_begin_s": fail_begin - started,
               "down_at_s": t_down - started, "link_down_call_s": t_down - fail_begin,
               "up_at_s": time.monotonic() - started, "routes_through_link": len(routes),
               "routes": sorted(routes),
               "last_data_on_failed_route_s": None if last is None else last - started,
               "bypass_s": bypass,
               "bypass_base_rtts": bypass / net.config.effective_base_rtt if bypass
               is not None else None,
               "bypass_unloaded_rtts": bypass / rtt if bypass is not None else None,
               "routing_repairs_while_down": repairs,
               "capacity_left": capacity_left(net.fabric, a, b, single_path)}
    return failure, routes, fail_begin


def emulation_bound(fidelity: dict[str, Any], cpu_pressure: float | None) -> bool:
    """The CPUs, not the emulated links, set the pace: the fidelity monitor says so, or some
    task waited for a CPU most of the transfer (PSI)."""
    return (fidelity.get("verdict") == EMULATION_BOUND
            or (cpu_pressure is not None and cpu_pressure >= EMULATION_BOUND_SHARE))


def _no_bypass_note(retired: dict[str, Any]) -> str:
    bad, total = retired["failed_route_evs_bad_at_failure"], retired["failed_route_evs"]
    if bad:
        return (f"nothing to bypass: no data went onto the failed route after the failure "
                f"began; {bad} of its {total} EVs were already retired before it "
                f"({retired['reasons'].get('failed_route_before_failure', {})})")
    return "nothing to bypass: no data went onto the failed route after the failure began"


def demo_checks(failure: dict[str, Any], bound: bool = False) -> dict[str, Any]:
    """The demo's criteria: no EV retired on a route that does not cross the failed link,
    and goodput in the second after the failure at least GOODPUT_AFTER_FAILURE_MIN of the
    clean goodput the fabric can still carry: a failed host NIC (the link a cluster's demo
    fails when only NIC links cross servers) takes its plane's share of the host's capacity
    with it (`capacity_left`). On an emulation-bound run they are not judged (`judged`
    False): the figures then measure the CPUs, not the protocol."""
    healthy = failure["retired"]["healthy_routes"]
    ratio = failure["goodput"]["after_failure_of_clean"]
    want = GOODPUT_AFTER_FAILURE_MIN * failure.get("capacity_left", 1.0)
    return {"judged": not bound, "healthy_route_retirements": healthy,
            "no_healthy_route_retirements": healthy == 0,
            "goodput_after_failure_of_clean": ratio, "goodput_after_failure_min": want,
            "goodput_after_failure_ok": ratio is not None and ratio >= want}


def _sleep_unless_done(handle, seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end and not handle.done():
        time.sleep(0.02)


def _await_reinstated(net: MrcNetwork, src: int, before: dict, after: dict) -> bool:
    """Probes run in the background; wait until reinstated catches up with retired. Probes
    pace with the RTT, so the wait does too: REINSTATE_RTTS base RTTs, REINSTATE_MIN_S at
    least (at 40 packets/s, BMv2 on paths-128, 5 s was not enough: 0.38 s base RTT)."""
    timeout = max(REINSTATE_MIN_S, REINSTATE_RTTS * net.config.effective_base_rtt)
    end = time.monotonic() + timeout
    while True:
        ep = net.stats(src)["endpoint"]
        if _delta(ep, before["endpoint"], "ev_reinstated") >= _delta(
                ep, before["endpoint"], "ev_retired"):
            return True
        if time.monotonic() > end:
            return False
        threading.Event().wait(0.1)


def build_report(net: MrcNetwork, src: int, dst: int, result: dict, before: dict, after: dict,
                 failure: dict, rtt: float, capacity: float | None,
                 single_path: bool) -> dict[str, Any]:
    s0, s1 = before[src]["endpoint"], after[src]["endpoint"]
    d0, d1 = before[dst]["endpoint"], after[dst]["endpoint"]
    planes = {p: s1["per_plane"][p]["tx_packets"] - s0["per_plane"][p]["tx_packets"]
              for p in s1["per_plane"]}
    paths = []
    r0, r1 = before[src]["per_route"], after[src]["per_route"]
    for route, info in sorted(r1.items(), key=lambda kv: (kv[1]["plane"], kv[0])):
        sent = info["tx_data_packets"] - r0.get(route, {}).get("tx_data_packets", 0)
        if sent:
            paths.append({"route": route, "plane": info["plane"], "data_packets": sent})
    packets = {h: _delta(after[h]["endpoint"], before[h]["endpoint"], "tx_packets")
               + _delta(after[h]["endpoint"], before[h]["endpoint"], "rx_packets")
               for h in (src, dst)}
    cpu = {h: after[h]["cpu_seconds"] - before[h]["cpu_seconds"] for h in (src, dst)}
    return {
        "fabric": {"planes": net.fabric.planes, "t0": net.fabric.t0_per_plane,
                   "t1": net.fabric.t1_per_plane, "hosts": net.fabric.hosts,
                   "target": net.target, "port_rate_pps": net.config.port_rate_pps,
                   "queue_depth": net.config.queue_depth},
        "mode": "single-path" if single_path else "mrc",
        "bring_up_s": net.timings,
        "transfer": {"src": src, "dst": dst, "bytes": result["bytes"], "ok": result["ok"],
                     "verified": result.get("verified", False),
                     "error": result.get("error", ""),
                     "duration_s": result.get("duration_s"),
                     "goodput_bps": result.get("goodput_bps"),
                     "capacity_bps": capacity,
                     "goodput_of_capacity": (result["goodput_bps"] / capacity
                                             if capacity and result.get("goodput_bps") else None)},
        "counters": {"retransmits": _delta(s1, s0, "retransmits"),
                     "timeouts": _delta(s1, s0, "timeouts"),
                     "nacks_received": _delta(s1, s0, "nacks_received"),
                     "trims_received": _delta(d1, d0, "trims_received"),
                     "ecn_marks_received": _delta(d1, d0, "ecn_marks_received"),
                     "ev_retired": _delta(s1, s0, "ev_retired"),
                     "ev_reinstated": _delta(s1, s0, "ev_reinstated"),
                     "probes_sent": _delta(s1, s0, "probes_sent")},
        "per_plane_tx_packets": planes,
        "per_path": paths,
        "failure": failure,
        "rtt_s": rtt,
        "convergence_delay_s": net.config.convergence_delay,
        "base_rtt_config_s": net.config.effective_base_rtt,
        # rule B's silence allowance (before any widening after spurious retransmissions)
        "reorder_window_s": after[src]["reorder_window_s"],
        "rtt_ms": s1.get("rtt_ms"),  # the sender's RTT samples over the whole QP
        "max_delivery_pause_ms": s1.get("max_delivery_pause_ms"),
        "agent_cpu_per_1000_packets_s": {f"h{h}": 1000 * cpu[h] / packets[h]
                                         for h in (src, dst) if packets[h]},
    }
