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

import time
from collections.abc import Callable
from typing import Any

from demo.failed_link import capacity_left, pick_failed_link, routes_through
from demo.goodput import ProgressSampler, goodput_around_failure
from demo.retirements import (
    await_reinstated,
    classify_retirements,
    delta,
    ev_layout,
    last_event_seq,
    no_bypass_note,
)
from emulation.agents import TransferHandle
from emulation.cpupressure import EMULATION_BOUND_SHARE, CpuPressure
from emulation.fidelity import EMULATION_BOUND, Monitor
from emulation.netconfig import flow_capacity_bps
from emulation.network import MrcNetwork
from views.runview import RunRecorder

RTT_SAMPLES = 5
GOODPUT_AFTER_FAILURE_MIN = 0.8  # check: that goodput / clean goodput


def measure_rtt(net: MrcNetwork, src: int, dst: int, single_path: bool) -> float:
    """Minimum duration of one-packet writes: one data packet and its SACK."""
    return min(net.transfer(src, dst, 64, single_path=single_path)["duration_s"]
               for _ in range(RTT_SAMPLES))


def run_demo(net: MrcNetwork, *, fail_at: float = 1.0, down_for: float = 2.0,
             seconds: float = 6.0, single_path: bool = False, log=print,
             record: bool = False) -> dict[str, Any]:
    """The demo (module docstring); `record`: report["recording"] holds what the run report
    replays (views.runview), sampled from before the transfer until the EVs are back."""
    fabric = net.fabric
    src, dst = 0, fabric.hosts - 1  # first and last host: different T0s when t0 > 1
    rate = net.config.port_rate_pps
    capacity = flow_capacity_bps(fabric, rate, single_path, src, dst)
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
        failure["reinstated_after_up"] = await_reinstated(net, src, before[src], after[src])
        after[src] = net.stats(src)
    recording = recorder.stop() if recorder is not None else None
    report = build_report(net, src, dst, result, before, after, failure, rtt, capacity,
                          single_path)
    report["switch_frames_consumed"] = {k: v for k, v in consumed.items() if v}
    if recording is not None:
        report["recording"] = recording
    report["bringup_s"] = dict(net.timings)
    assert net.builder is not None
    spread = net.builder.summary()  # {} on one machine
    if spread:
        report["cluster"] = spread
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
            failure["bypass_note"] = no_bypass_note(retired)
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
               "capacity_left": capacity_left(net.fabric, src, dst, a, b, single_path)}
    return failure, routes, fail_begin


def emulation_bound(fidelity: dict[str, Any], cpu_pressure: float | None) -> bool:
    """The CPUs, not the emulated links, set the pace: the fidelity monitor says so, or some
    task waited for a CPU most of the transfer (PSI)."""
    return (fidelity.get("verdict") == EMULATION_BOUND
            or (cpu_pressure is not None and cpu_pressure >= EMULATION_BOUND_SHARE))


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
    packets = {h: delta(after[h]["endpoint"], before[h]["endpoint"], "tx_packets")
               + delta(after[h]["endpoint"], before[h]["endpoint"], "rx_packets")
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
        "counters": {"retransmits": delta(s1, s0, "retransmits"),
                     "timeouts": delta(s1, s0, "timeouts"),
                     "nacks_received": delta(s1, s0, "nacks_received"),
                     "trims_received": delta(d1, d0, "trims_received"),
                     "ecn_marks_received": delta(d1, d0, "ecn_marks_received"),
                     "ev_retired": delta(s1, s0, "ev_retired"),
                     "ev_reinstated": delta(s1, s0, "ev_reinstated"),
                     "probes_sent": delta(s1, s0, "probes_sent")},
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
