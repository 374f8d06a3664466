"""The demo's report as text (demo.run builds the report; two_tier.py prints this)."""

from __future__ import annotations

from typing import Any

from demo.run import GOODPUT_AFTER_FAILURE_MIN
from emulation import livecost
from emulation.cpupressure import EMULATION_BOUND_SHARE


def format_report(r: dict[str, Any]) -> str:
    """The report (demo.run.build_report and run_demo) as the lines two_tier.py prints."""
    lines = _transfer_lines(r)
    if r["failure"]:
        lines += _failure_lines(r, r["failure"])
    lines += _machine_lines(r)
    checks = r.get("checks")
    if checks:
        lines.append(_checks_line(checks))
    return "\n".join(lines)


def _transfer_lines(r: dict[str, Any]) -> list[str]:
    """The fabric, the transfer and where its packets went: what every run has to say."""
    f, t, c = r["fabric"], r["transfer"], r["counters"]
    rate = f"{f['port_rate_pps']} pps/port" if f["port_rate_pps"] else "unlimited ports"
    lines = [f"MRC demo on {f['planes']} planes x {f['t0']} T0 x {f['t1']} T1, {f['hosts']} hosts,"
             f" {f['target']} switches, {rate}, queue {f['queue_depth']} packets, "
             f"mode {r['mode']}",
             *_rate_lines(r.get("rate_choice")),
             f"bring-up: {r['bring_up_s'].get('total_s', 0):.1f} s",
             f"transfer h{t['src']} -> h{t['dst']}: {t['bytes']} bytes, "
             + ("verified byte for byte" if t["verified"] else f"FAILED: {t['error']}")]
    if t["duration_s"]:
        line = f"  {t['duration_s']:.2f} s, goodput {t['goodput_bps'] / 1e6:.2f} Mbit/s"
        if t["capacity_bps"]:
            line += (f" of {t['capacity_bps'] / 1e6:.2f} Mbit/s capacity "
                     f"({t['goodput_of_capacity']:.0%})")
        lines.append(line)
    lines.append(f"  unloaded RTT {r['rtt_s'] * 1e3:.1f} ms (agents' base RTT setting "
                 f"{r['base_rtt_config_s'] * 1e3:.1f} ms)")
    rtt = r.get("rtt_ms") or {}
    if rtt.get("samples"):
        lines.append(f"  sender RTT samples {rtt['samples']}: P50 {rtt['p50']:.0f}, P99 "
                     f"{rtt['p99']:.0f}, P99.9 {rtt['p99.9']:.0f}, max {rtt['max']:.0f} ms")
    failed = set(r["failure"].get("routes", [])) if r["failure"] else set()
    pauses = {k: v for k, v in (r.get("max_delivery_pause_ms") or {}).items() if k not in failed}
    if pauses:
        worst = max(pauses, key=pauses.__getitem__)
        lines.append(f"  longest pause between deliveries on a busy healthy path: "
                     f"{pauses[worst]:.0f} ms "
                     f"({worst}; rule B's silence allowance is "
                     f"{r['reorder_window_s'] * 1e3:.1f} ms)")
    lines.append("  " + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in c.items()))
    lines.append("per-plane packets sent: " + ", ".join(
        f"plane {p}: {n}" for p, n in sorted(r["per_plane_tx_packets"].items(),
                                             key=lambda kv: int(kv[0]))))
    lines.append("per-path data packets:")
    lines += [f"  plane {p['plane']} {p['route']:<36} {p['data_packets']}" for p in r["per_path"]]
    return lines


def _failure_lines(r: dict[str, Any], fl: dict[str, Any]) -> list[str]:
    """The link failure `fl` (report["failure"]): how the sender (or routing) got around it."""
    lines = [f"failure: {fl['link'][0]} - {fl['link'][1]} down at +{fl['down_at_s']:.2f} s,"
             f" up at +{fl['up_at_s']:.2f} s; {fl['routes_through_link']} routes crossed "
             "it"]
    if r["mode"] == "single-path":
        lines.append("  single path: the sender cannot bypass; baseline routing repaired "
                     f"the route {fl['routing_repairs_while_down']} time(s) while it was down"
                     f" (after the {r['convergence_delay_s']:.1f} s convergence delay)")
    elif fl["bypass_s"] is None:
        lines.append(f"  time to bypass: not measured, {fl.get('bypass_note', '')}")
    else:
        lines.append(f"  time to bypass: {fl['bypass_s'] * 1e3:.1f} ms = "
                     f"{fl['bypass_base_rtts']:.1f} base RTTs "
                     f"({fl['bypass_unloaded_rtts']:.0f} unloaded RTTs), from the start of "
                     f"the link-down call ({fl['link_down_call_s'] * 1e3:.0f} ms long)")
    ret = fl.get("retired")
    if ret is not None:
        lines.append(_retired_line(ret))
    gp = fl.get("goodput")
    if gp is not None and gp["clean_bps"] and gp["after_failure_bps"] is not None:
        lines.append(f"  goodput in the {gp['window_s']:.0f} s after the failure: "
                     f"{gp['after_failure_bps'] / 1e6:.2f} Mbit/s = "
                     f"{gp['after_failure_of_clean']:.0%} of the "
                     f"{gp['clean_bps'] / 1e6:.2f} Mbit/s before it")
    lines.append("  retired EVs all reinstated by probes after recovery: "
                 f"{'yes' if fl.get('reinstated_after_up') else 'no'}")
    return lines


def _retired_line(ret: dict[str, Any]) -> str:
    """EVs retired per route (demo.classify_retirements): the failed route's against the rest."""
    again = ret["failed_route_after_failure"] - ret.get(
        "failed_route_evs_retired", ret["failed_route_after_failure"])
    return (f"  EVs retired: {ret.get('failed_route_evs_retired', '?')} of the "
            f"failed route's {ret['failed_route_evs']}"
            + (f" ({again} of them again after probes reinstated them)"
               if again > 0 else "") + ", "
            f"{ret['healthy_routes']} on healthy routes"
            + (f" {ret['healthy_by_route']}" if ret["healthy_by_route"] else "")
            + f", {ret['failed_route_before_failure']} on the failed route before "
            "the failure")


def _machine_lines(r: dict[str, Any]) -> list[str]:
    """What the switches and this machine's CPUs did: whether the figures measure MRC at all."""
    consumed = r.get("switch_frames_consumed", {})
    lines = [f"frames switches took in but did not send: {sum(consumed.values())} "
             "(P4 drops, queue tail drops, the failed link, losses inside a switch)"
             + (": " + ", ".join(f"{k} {v}" for k, v in sorted(consumed.items()))
                if consumed else "")]
    cpu = r["agent_cpu_per_1000_packets_s"]
    lines.append("agent CPU per 1000 packets: " + ", ".join(f"{h} {v * 1e3:.1f} ms"
                                                          for h, v in cpu.items()))
    if r.get("live_cost"):
        lines.append(livecost.summary_line(r["live_cost"]))
    share = r.get("cpu_pressure")
    if share is not None:
        lines.append(f"CPU pressure: some task waited for a CPU {share:.0%} of the transfer "
                     + ("(EMULATION-BOUND: the CPUs, not the links, set the delays; try a "
                        "lower --rate)" if share >= EMULATION_BOUND_SHARE else "(faithful)"))
    fid = r.get("fidelity")
    if fid and fid.get("verdict"):
        lines.append(f"fidelity monitor: {fid['verdict']} ({fid['why']})")
    if r.get("emulation_bound"):
        lines.append("EMULATION-BOUND: the figures above measure this machine's CPUs, not MRC; "
                     "they are not a protocol result (run with a lower --rate, or --rate auto)")
    return lines


def _checks_line(checks: dict[str, Any]) -> str:
    """The demo's pass/fail criteria (demo.demo_checks), marked when not judged."""
    ratio = checks["goodput_after_failure_of_clean"]
    return (("checks (NOT JUDGED, emulation-bound): " if not checks.get("judged", True)
             else "checks: ") + "healthy-route EV retirements "
            f"{checks['healthy_route_retirements']} "
            f"({'ok' if checks['no_healthy_route_retirements'] else 'FAIL: want 0'}); "
            "goodput after the failure "
            + (f"{ratio:.0%} of clean" if ratio is not None else "not measured")
            + f" ({'ok' if checks['goodput_after_failure_ok'] else 'FAIL'}: want >= "
            f"{checks.get('goodput_after_failure_min', GOODPUT_AFTER_FAILURE_MIN):.0%})")


def _rate_lines(choice: dict[str, Any] | None) -> list[str]:
    if not choice:
        return []
    return [f"port rate {choice['rate_pps']} packets/s, chosen by calibration "
            f"({choice['calibration_s']:.1f} s): {choice['why']}"]
