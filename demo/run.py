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
from typing import Any

from demo.failure import fail_and_recover
from demo.flow import build_report, finish, prepare
from demo.goodput import ProgressSampler, goodput_around_failure
from demo.retirements import await_reinstated, classify_retirements, no_bypass_note
from emulation import livecost
from emulation.cpupressure import EMULATION_BOUND_SHARE, CpuPressure
from emulation.fidelity import EMULATION_BOUND, Monitor
from emulation.network import MrcNetwork
from views.runview import RunRecorder

GOODPUT_AFTER_FAILURE_MIN = 0.8  # check: that goodput / clean goodput


def run_demo(net: MrcNetwork, *, fail_at: float = 1.0, down_for: float = 2.0,
             seconds: float = 6.0, single_path: bool = False, log=print,
             record: bool = False) -> dict[str, Any]:
    """The demo (module docstring); `record`: report["recording"] holds what the run report
    replays (views.runview), sampled from before the transfer until the EVs are back."""
    src, dst = 0, net.fabric.hosts - 1  # first and last host: different T0s when t0 > 1
    flow = prepare(net, src, dst, single_path, seconds)
    log(f"unloaded RTT h{src} -> h{dst}: {flow.rtt * 1e3:.1f} ms; sending {flow.nbytes} bytes")
    pressure = CpuPressure().start()
    monitor = Monitor(net)
    monitor.start()
    recorder = (RunRecorder(net, [(src, dst)], name=f"h{src} -> h{dst}",
                            capacity_bps=flow.capacity_bps).start() if record else None)
    spent = livecost.read(net)
    handle = net.start_transfer(src, dst, flow.nbytes, single_path=single_path)
    sampler = ProgressSampler(net.agent(dst)).start()
    started = time.monotonic()
    failure, routes, fail_begin = fail_and_recover(
        net, handle, src, dst, started=started, rtt=flow.rtt, fail_at=fail_at,
        down_for=down_for, single_path=single_path, log=log)
    result = handle.wait()
    cpu_pressure, fidelity, samples = pressure.share(), monitor.stop(), sampler.stop()
    live_cost = livecost.cost(spent, livecost.read(net))
    finish(net, flow)
    if failure:  # let probes reinstate the retired EVs before counting them
        failure["reinstated_after_up"] = await_reinstated(net, flow)
    recording = recorder.stop() if recorder is not None else None
    report = build_report(net, flow, result, failure)
    if recording is not None:
        report["recording"] = recording
    report.update(cpu_pressure=cpu_pressure, fidelity=fidelity, live_cost=live_cost,
                  emulation_bound=emulation_bound(fidelity, cpu_pressure))
    t0 = result.get("start", started)
    report["goodput_timeline"] = [(round(t - t0, 3), b) for t, b in samples]
    if failure and fail_begin is not None and not single_path:
        retired = classify_retirements(net.agent(src).call("events", since=flow.seq0)["events"],
                                       flow.qpn, flow.evs, routes, fail_begin)
        if retired["first_healthy_s"] is not None:
            retired["first_healthy_s"] -= started
        failure["retired"] = retired
        failure["goodput"] = goodput_around_failure(samples, t0, fail_begin)
        if failure["bypass_s"] is None:
            failure["bypass_note"] = no_bypass_note(retired)
        report["checks"] = demo_checks(failure, report["emulation_bound"])
    return report


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


