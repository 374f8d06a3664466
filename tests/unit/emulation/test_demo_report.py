"""The demo's report (demo/run.py) from recorded figures, without a fabric: EVs retired
per cause, the time to bypass when the failed route's EVs were gone before the failure, the
goodput around the failure and the report's checks (issue 14, part 5)."""

from __future__ import annotations

import pytest

pytest.importorskip("mininet.net", reason="demo.run imports Mininet")

from demo import goodput, retirements
from demo import report as demoreport
from demo import run as demo

QPN = 0x1234
FAILED, HEALTHY = "fcbb:bbbb:100:200:101:e03::", "fcbb:bbbb:1100:1200:1101:1e03::"
EVS = {1: {"route": FAILED, "state": "GOOD"}, 2: {"route": FAILED, "state": "GOOD"},
       3: {"route": HEALTHY, "state": "GOOD"}}


def _change(seq: int, t: float, ev: int, old: str, new: str, reason: str,
            qpn: int = QPN) -> dict:
    return {"seq": seq, "time": t, "type": "EvStateChanged", "qpn": qpn, "ev": ev,
            "old": old, "new": new, "reason": reason}


def test_retirements_are_split_by_route_and_failure_time() -> None:
    events = [
        _change(1, 9.0, 1, "GOOD", "ASSUMED_BAD", "loss"),  # failed route, before the failure
        _change(2, 9.5, 1, "ASSUMED_BAD", "GOOD", "probe_success_enough"),
        _change(3, 10.1, 1, "GOOD", "ASSUMED_BAD", "path_dark"),
        _change(4, 10.1, 2, "GOOD", "ASSUMED_BAD", "path_dark"),
        _change(5, 10.2, 3, "GOOD", "ASSUMED_BAD", "loss"),  # a healthy route
        _change(6, 10.3, 3, "ASSUMED_BAD", "ASSUMED_BAD", "loss"),  # no second retirement
        _change(7, 10.4, 3, "GOOD", "ASSUMED_BAD", "loss", qpn=0x99),  # another QP
        {"seq": 8, "time": 10.5, "type": "WriteCompleted", "qpn": QPN, "wr_id": 1},
    ]
    r = retirements.classify_retirements(events, QPN, EVS, {FAILED}, fail_begin=10.0)
    assert (r["failed_route_before_failure"], r["failed_route_after_failure"],
            r["healthy_routes"]) == (1, 2, 1)
    assert r["healthy_by_route"] == {HEALTHY: 1} and r["first_healthy_s"] == 10.2
    assert r["reasons"]["failed_route_after_failure"] == {"path_dark": 2}
    assert r["failed_route_evs"] == 2 and r["failed_route_evs_bad_at_failure"] == 0
    checks = demo.demo_checks({"retired": r, "goodput": {"after_failure_of_clean": 0.9}})
    assert checks["healthy_route_retirements"] == 1
    assert not checks["no_healthy_route_retirements"] and checks["goodput_after_failure_ok"]


def test_a_route_retired_before_the_failure_has_no_bypass_time() -> None:
    """The issue's first run printed 'time to bypass: 0.0 ms' for a route whose EVs had been
    retired before the link failed: there was nothing to bypass, and the report says why."""
    events = [_change(1, 9.0, 1, "GOOD", "ASSUMED_BAD", "path_dark"),
              _change(2, 9.0, 2, "GOOD", "ASSUMED_BAD", "path_dark")]
    r = retirements.classify_retirements(events, QPN, EVS, {FAILED}, fail_begin=10.0)
    assert r["failed_route_evs_bad_at_failure"] == 2
    note = retirements.no_bypass_note(r)
    assert "2 of its 2 EVs were already retired" in note and "path_dark" in note
    report = _report(bypass_s=None, bypass_note=note, retired=r)
    text = demoreport.format_report(report)
    assert "time to bypass: not measured" in text and "0.0 ms" not in text


def test_goodput_after_the_failure_against_the_clean_goodput_before_it() -> None:
    start, fail = 100.0, 101.0
    # 2 MB/s until the failure, 1 MB/s for the next second, 2 MB/s after
    samples, b = [], 0.0
    for i in range(0, 301):
        t = start + i * 0.01
        samples.append((t, int(b)))
        b += (1e6 if fail <= t < fail + 1.0 else 2e6) * 0.01
    gp = goodput.goodput_around_failure(samples, start, fail)
    assert gp["clean_bps"] == pytest.approx(16e6, rel=0.02)
    assert gp["after_failure_of_clean"] == pytest.approx(0.5, rel=0.03)
    assert gp["max_sample_gap_s"] == pytest.approx(0.01)
    assert goodput.rate_bps(samples, start - 1.0, fail) is None  # before the first sample
    checks = demo.demo_checks({"retired": {"healthy_routes": 0}, "goodput": gp})
    assert checks["no_healthy_route_retirements"] and not checks["goodput_after_failure_ok"]
    text = demoreport.format_report(_report(goodput=gp, checks=checks))
    assert "= 50% of the 16.00 Mbit/s before it" in text
    assert "healthy-route EV retirements 0 (ok)" in text and "(FAIL: want >= 80%)" in text


def _report(**failure: object) -> dict:
    retired = failure.pop("retired", {
        "healthy_routes": 0, "failed_route_after_failure": 20, "failed_route_before_failure": 0,
        "healthy_by_route": {}, "failed_route_evs": 20})
    checks = failure.pop("checks", None)
    fl = {"link": ["p0l0", "p0s0"], "down_at_s": 1.0, "up_at_s": 3.0,
          "routes_through_link": 1, "bypass_s": 0.05, "bypass_base_rtts": 1.5,
          "bypass_unloaded_rtts": 25.0, "link_down_call_s": 0.03,
          "routing_repairs_while_down": 1, "reinstated_after_up": True, "retired": retired}
    fl.update(failure)
    report = {
        "fabric": {"planes": 4, "t0": 2, "t1": 2, "hosts": 4, "target": "soft",
                   "port_rate_pps": 500, "queue_depth": 128},
        "mode": "mrc", "bring_up_s": {"total_s": 5.0},
        "transfer": {"src": 0, "dst": 3, "bytes": 1, "ok": True, "verified": True,
                     "error": "", "duration_s": 6.0, "goodput_bps": 15e6,
                     "capacity_bps": 16e6, "goodput_of_capacity": 0.94},
        "counters": {"ev_retired": 20}, "per_plane_tx_packets": {"0": 1},
        "per_path": [], "failure": fl, "rtt_s": 0.002, "convergence_delay_s": 3.0,
        "base_rtt_config_s": 0.033, "reorder_window_s": 0.0165,
        "agent_cpu_per_1000_packets_s": {}}
    if checks is not None:
        report["checks"] = checks
    return report


def test_report_shows_the_rtt_tail_and_the_longest_pause_on_a_healthy_route() -> None:
    report = _report(routes=[FAILED])
    report["rtt_ms"] = {"samples": 12000, "p50": 64.0, "p99": 131.0, "p99.9": 160.0,
                        "max": 184.0}
    report["max_delivery_pause_ms"] = {FAILED: 3156.6, HEALTHY: 357.7,
                                       "fcbb:bbbb:100:201:101:e03::": 121.0}
    text = demoreport.format_report(report)
    assert "sender RTT samples 12000: P50 64, P99 131, P99.9 160, max 184 ms" in text
    assert f"healthy path: 358 ms ({HEALTHY};" in text and "3157" not in text
    assert "silence allowance is 16.5 ms" in text


@pytest.mark.parametrize("share,verdict", [(0.49, "(faithful)"), (0.83, "EMULATION-BOUND")])
def test_report_says_whether_the_cpus_kept_up(share: float, verdict: str) -> None:
    report = _report()
    report["cpu_pressure"] = share
    text = demoreport.format_report(report)
    line = [x for x in text.splitlines() if x.startswith("CPU pressure")]
    assert line == [line[0]] and f"{share:.0%} of the transfer" in line[0] and verdict in line[0]


def test_an_emulation_bound_run_is_not_reported_as_a_protocol_result() -> None:
    fidelity = {"verdict": "emulation-bound", "why": "CPUs 97% busy while ..."}
    assert demo.emulation_bound(fidelity, None)
    assert demo.emulation_bound({"verdict": "faithful"}, 0.9)  # PSI alone suffices
    assert not demo.emulation_bound({"verdict": "faithful"}, 0.1)
    gp = {"after_failure_of_clean": 0.95}
    checks = demo.demo_checks({"retired": {"healthy_routes": 0}, "goodput": gp}, bound=True)
    report = _report(goodput=None, checks=checks)
    report.update(fidelity=fidelity, emulation_bound=True, rate_choice={
        "rate_pps": 120, "calibration_s": 7.5, "why": "with unlimited ports, ..."})
    text = demoreport.format_report(report)
    assert "checks (NOT JUDGED, emulation-bound)" in text
    assert "not a protocol result" in text and "fidelity monitor: emulation-bound" in text
    assert "port rate 120 packets/s, chosen by calibration (7.5 s)" in text
    faithful = demo.demo_checks({"retired": {"healthy_routes": 0}, "goodput": gp})
    assert faithful["judged"]
    assert "NOT JUDGED" not in demoreport.format_report(_report(goodput=None, checks=faithful))


def test_an_ev_retired_twice_counts_once_against_its_route() -> None:
    """The issue's paths-128 run printed "3 retired of its 2": retirements, not EVs."""
    events = [_change(1, 10.1, 1, "GOOD", "ASSUMED_BAD", "path_dark"),
              _change(2, 10.5, 1, "ASSUMED_BAD", "GOOD", "probe_success_enough"),
              _change(3, 10.9, 1, "GOOD", "ASSUMED_BAD", "loss"),
              _change(4, 11.0, 2, "GOOD", "ASSUMED_BAD", "path_dark")]
    r = retirements.classify_retirements(events, QPN, EVS, {FAILED}, fail_begin=10.0)
    assert (r["failed_route_after_failure"], r["failed_route_evs_retired"],
            r["failed_route_evs"]) == (3, 2, 2)
    text = demoreport.format_report(_report(retired=r))
    assert "EVs retired: 2 of the failed route's 2 (1 of them again after probes" in text
