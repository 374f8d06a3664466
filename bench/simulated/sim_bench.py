"""The bench's scenarios run in the simulator and written as the bench writes them: the same
results.json schema, summary.md and plots (bench.results, bench.plots), so one experiment run
small on Mininet (`python -m bench`) and large here is read the same way.

    .venv/bin/python -m bench.simulated.sim_bench SCENARIO[,...]|all [--fabric NAME ...]
        [--contenders LIST] [--size BYTES] [--seed N] [--out DIR] [--json [FILE]]

Each bench scenario maps onto `python -m sim` scenarios (SIM_RUNS): a failure is run clean
and failed, as the bench runs it. Contenders are the bench's that the simulator has (mrc,
roce, roce:K, single_port; kernel TCP and MPTCP are not simulated and are reported as
skipped). Rates: the simulator's links are bits/s; the `network` block also gives the rate
as full data frames per second, the unit of the bench's ports. Goodput over capacity is in
payload bytes on both. Timelines come from the receivers' write completions (one point per
--chunk), too coarse for a stall in RTTs, which is left out.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from bench import metrics, results
from bench.context import target
from bench.experiments import paper
from fabric.options import add_fabric_args, add_json_arg, add_seed_arg, named_fabric
from safety.privdir import UnsafePathError
from sim.harness import SimSettings
from sim.scenarios import run_scenario
from wire.layout import DEFAULT_MTU, FULL_DATA_FRAME_LEN

# bench scenario -> (simulator scenario of the clean run or None, of the measured run)
SIM_RUNS: dict[str, tuple[str | None, str]] = {
    "permutation": (None, "permutation"), "incast": (None, "incast"), "loss": (None, "loss"),
    "link-failure": ("clean", "link-failure"), "plane-failure": ("clean", "plane-failure"),
    "flap": ("clean", "flap"), "switch-reboot": ("clean", "switch-reboot"),
    "allreduce": (None, "allreduce"), "victim": ("victim-alone", "victim")}
MODULE = "bench.simulated.sim_bench"  # the command a results file says made it
CONTENDERS = ("mrc", "roce", "roce:8", "roce:16", "single_port")
NOT_SIMULATED = {"tcp": "kernel TCP is not simulated", "mptcp": "MPTCP is not simulated"}
DEFAULT_SIZE = 8 * 1024 * 1024
Result = dict[str, Any]


def payload_share(r: Result) -> float | None:
    """A simulator run's goodput over its capacity counted in payload bytes, as the bench
    counts it (the simulator's capacity is line rate, headers included)."""
    if not r.get("ok") or not r.get("capacity_bps"):
        return None
    return r["goodput_bps"] / payload_capacity_bps(r)


def data_packets_sent(r: Result) -> int:
    """Data packets every host of a simulator run put on its NICs, resends included."""
    return sum(map(sum, r["data_tx_per_plane"].values()))


def payload_capacity_bps(r: Result) -> float:
    return r["capacity_bps"] * DEFAULT_MTU / FULL_DATA_FRAME_LEN


def flows_of(r: Result) -> list[Result]:
    """The bench's per-flow records from a simulator run (every transfer starts at 0)."""
    out = []
    for t in r["transfers"]:
        done = t["done_at_s"]
        out.append({"src": t["sender"], "dst": t["receiver"], "bytes": t["bytes"],
                    "ok": r["ok"] and done is not None, "start": 0.0,
                    "completion_s": done, "duration_s": done or r["duration_s"],
                    "delivered": t["bytes"] if done is not None else 0,
                    "goodput_bps": t["bytes"] * 8 / done if done else 0.0,
                    "timeline": [[0.0, 0], *t.get("progress", [])]})
    return out


def contender_run(r: Result) -> Result:
    """One bench run (flows and summary) from one simulator run."""
    flows = flows_of(r)
    done = [f["completion_s"] for f in flows if f["completion_s"] is not None]
    cap = payload_capacity_bps(r) if r.get("capacity_bps") else None
    summary: Result = {"flows": len(flows), "completed": len(done), "ok": r["ok"],
                       "bytes": r["bytes"], "payload_bytes_per_packet": DEFAULT_MTU,
                       "retransmits": r["retransmits"], "timeouts": r["timeouts"],
                       "trims": r["trims"], "capacity_bps": cap,
                       "tx_data_packets": data_packets_sent(r)}
    if done:
        summary["completion_s"] = metrics.distribution(done)
        summary["completion_p50_s"] = metrics.percentile(done, 50)
        summary["completion_p100_s"] = max(done) if len(done) == len(flows) else None
    if len(done) == len(flows) and done and cap:
        summary["aggregate_goodput_bps"] = r["bytes"] * 8 / max(done)
        summary["aggregate_over_capacity"] = summary["aggregate_goodput_bps"] / cap
    return {"flows": flows, "summary": summary, "simulator": _costs(r)}


def _costs(r: Result) -> Result:
    keep = ("events", "wall_s", "run_s", "data_packets_per_s", "events_per_data_packet")
    return {k: r["sim"][k] for k in keep}


def failure_contender(clean: Result, failed: Result) -> Result:
    """The bench's failure record: clean and failed runs and the figures both compare."""
    c, f = contender_run(clean), contender_run(failed)
    mrc = failed["contender"] == "mrc"
    at = next((failed[k] for k in ("failure_at_s", "reboot_at_s", "flap_from_s")
               if failed.get(k) is not None), None)
    out: Result = {"clean": c, "failed": f, "failure_at_s": at}
    ct = c["summary"].get("completion_p100_s")
    ft = f["summary"].get("completion_p100_s")
    out.update(completed=ft is not None, completion_clean_s=ct, completion_failed_s=ft,
               completion_ratio=metrics.ratio(ft, ct),
               goodput_over_clean=metrics.ratio(f["flows"][0]["goodput_bps"],
                                                c["flows"][0]["goodput_bps"]),
               retire_rtts=failed.get("recovery_rtts") if mrc else None)
    # per source route: a baseline QP has one plain IPv6 route, none of MRC's (the bench
    # reports these for MRC only too)
    keys = ("failed_route_retirements", "healthy_route_retirements") if mrc else ()
    for key in (*keys, "peer_notified_after_rtts", "flaps"):
        if key in failed:
            out[key] = failed[key]
    return out


def victim_contender(alone: Result, mixed: Result) -> Result:
    """The bench's victim record: the victim's flow alone and beside the incast. The worst
    tenth of the run is left out: the simulator's timelines have a point per write."""
    c, m = contender_run(alone), contender_run(mixed)
    return {"clean": c, "failed": m,
            "victim_over_clean": metrics.ratio(m["flows"][0]["goodput_bps"],
                                               c["flows"][0]["goodput_bps"])}


def allreduce_contender(r: Result) -> Result:
    times = r.get("step_times_s") or []
    return {"ok": r["ok"], "step_times_s": times,
            "step_time_s": metrics.distribution(times) if times else None,
            "simulator": _costs(r)}


def run_contender(scenario: str, size: int, settings: SimSettings, fabric: Any
                  ) -> tuple[Result, Result]:
    """The contender's bench record, and the simulator's result of its measured run."""
    clean_name, name = SIM_RUNS[scenario]
    measured = run_scenario(name, size=size, settings=settings, fabric=fabric)
    if clean_name is not None:
        clean = run_scenario(clean_name, size=size, settings=settings, fabric=fabric)
        if scenario == "victim":
            return victim_contender(clean, measured), measured
        return failure_contender(clean, measured), measured
    if scenario == "allreduce":
        return allreduce_contender(measured), measured
    run = contender_run(measured)
    if scenario == "permutation":  # the bench pools salts (fresh hashes); here one seed
        return {"salts": [run], "summary": run["summary"]}, measured
    return run, measured


def _per_contender(contenders: Result, keys: tuple[str, ...]) -> Result:
    return {n: {k: (c.get(k) if k in c else c.get("summary", {}).get(k)) for k in keys}
            for n, c in contenders.items() if "skipped" not in c}


def _summary_of(c: Result, key: str) -> float | None:
    return c.get("summary", {}).get(key)


def figures_and_targets(scenario: str, cs: Result) -> tuple[Result, list[Result]]:
    """The bench's figures and targets for a scenario, from its contender records."""
    mrc, roce = cs.get("mrc", {}), cs.get("roce", {})
    if scenario in ("permutation", "incast"):
        figs = _per_contender(cs, ("completion_p50_s", "completion_p100_s",
                                   "aggregate_over_capacity"))
        p100 = metrics.ratio(_summary_of(roce, "completion_p100_s"),
                             _summary_of(mrc, "completion_p100_s"))
        figs["p100_roce_over_mrc"] = p100
        agg = _summary_of(mrc, "aggregate_over_capacity")
        return figs, [target("P100: roce (1 QP per plane) / MRC", ">= 1.5", p100,
                             lambda v: v >= 1.5),
                      target("MRC aggregate / capacity", ">= 0.9", agg, lambda v: v >= 0.9)]
    if scenario == "loss":
        figs = {n: {"goodput_over_capacity": _summary_of(c, "aggregate_over_capacity")}
                for n, c in cs.items() if "skipped" not in c}
        gain = metrics.ratio(_summary_of(mrc, "aggregate_over_capacity"),
                             _summary_of(roce, "aggregate_over_capacity"))
        figs["mrc_over_roce"] = gain
        return figs, [target("1% loss: MRC goodput / roce goodput", ">= 3", gain,
                             lambda v: v >= 3)]
    if scenario == "victim":
        figs = _per_contender(cs, ("victim_over_clean",))
        return figs, [target("MRC victim goodput with incast / alone", ">= 0.9",
                             mrc.get("victim_over_clean"), lambda v: v >= 0.9)]
    if scenario == "allreduce":
        figs = {n: {"step_max_s": (c["step_time_s"] or {}).get("max")}
                for n, c in cs.items() if "skipped" not in c}
        return figs, []
    figs = _per_contender(cs, ("completed", "completion_ratio", "goodput_over_clean",
                               "retire_rtts", "healthy_route_retirements",
                               "failed_route_retirements"))
    return figs, [
        target("MRC completion failed / clean", "<= 1.05", mrc.get("completion_ratio"),
               lambda v: v <= 1.05),
        target("MRC EVs retired on healthy routes", "0", mrc.get("healthy_route_retirements"),
               lambda v: v == 0)]


def run_bench_scenario(scenario: str, contenders: list[str], size: int, seed: int,
                       fabric: Any, log=print) -> Result:
    """One scenario, every contender, in the bench's scenario record."""
    began = time.monotonic()
    base = SimSettings(seed=seed)
    cs: Result = {}
    raw: Result | None = None
    for name in contenders:
        if name in NOT_SIMULATED:
            cs[name] = {"skipped": NOT_SIMULATED[name]}
            continue
        cs[name], measured = run_contender(scenario, size, replace(base, contender=name),
                                           fabric)
        raw = raw or measured
        log(f"{scenario} {name}: ok={measured['ok']}, {measured['sim']['wall_s']:.1f} s wall")
    figures, targets = figures_and_targets(scenario, cs)
    ran = [c for c in cs.values() if "skipped" not in c]
    ok = bool(ran) and all(_ok(c) for c in ran)
    sc: Result = {"ok": ok, "error": None if ok else "a flow failed",
                  "wall_s": time.monotonic() - began, "contenders": cs, "figures": figures,
                  "targets": targets}
    if raw is not None:
        sc.update(fabric={k: raw["fabric"][k] for k in
                          ("planes", "t0_per_plane", "t1_per_plane", "hosts_per_t0", "hosts")},
                  network=network_block(raw, base.convergence_delay_s),
                  capacity_pps=payload_capacity_bps(raw) / (DEFAULT_MTU * 8))
    return sc


def _ok(c: Result) -> bool:
    if "failed" in c:
        return bool(c["clean"]["summary"]["ok"] and c["failed"]["summary"]["ok"])
    if "ok" in c:
        return bool(c["ok"])
    return bool(c["summary"]["ok"])


def network_block(r: Result, convergence_delay_s: float) -> Result:
    """The simulated network's parameters, named as the bench names the emulated ones."""
    fab = r["fabric"]
    return {"target": "sim", "link_rate_bps": fab["link_rate_bps"],
            "port_rate_pps": round(fab["link_rate_bps"] / (FULL_DATA_FRAME_LEN * 8)),
            "queue_depth": fab["queue"]["capacity"], "ecn_threshold": fab["queue"]["ecn_threshold"],
            "trim_threshold": fab["queue"]["trim_threshold"], "link_delay_s": fab["delay_s"],
            "base_rtt_s": r["base_rtt_s"], "convergence_delay_s": convergence_delay_s}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.simulated.sim_bench",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("scenario", help="'all', or comma-separated: " + ", ".join(SIM_RUNS))
    p.add_argument("--contenders", default="mrc,roce,roce:16,single_port",
                   help="comma-separated subset of " + ",".join((*CONTENDERS, *NOT_SIMULATED)))
    p.add_argument("--size", type=int, default=DEFAULT_SIZE,
                   help="bytes: a failure's flow, the permutation's and incast's total, "
                        "the all-reduce's buffer (default %(default)s)")
    add_seed_arg(p)
    p.add_argument("--out", type=Path, default=None,
                   help="output directory (default results/sim-<UTC timestamp>)")
    add_fabric_args(p, default=None)
    add_json_arg(p)
    return p


def main(argv: list[str] | None = None) -> int:
    p = build_parser()
    args = p.parse_args(argv)
    names = list(SIM_RUNS) if args.scenario == "all" else args.scenario.split(",")
    unknown = set(names) - set(SIM_RUNS)
    if unknown:
        p.error(f"not simulated: {', '.join(sorted(unknown))}; choose from {', '.join(SIM_RUNS)}")
    contenders = [c for c in args.contenders.split(",") if c]
    bad = set(contenders) - set(CONTENDERS) - set(NOT_SIMULATED)
    if not contenders or bad:
        p.error(f"--contenders {args.contenders!r}: choose from "
                + ",".join((*CONTENDERS, *NOT_SIMULATED)))
    if args.size < 1:
        p.error("--size must be at least 1 byte")
    fabric = named_fabric(args)
    started = datetime.now(timezone.utc)
    out = args.out or Path("results") / started.strftime("sim-%Y%m%dT%H%M%SZ")
    try:  # refused before the run, not after it
        results.prepare_out_dir(out)
    except UnsafePathError as exc:
        p.error(str(exc))
    run: Result = {"schema": results.SCHEMA,
                   "command": ["python", "-m", MODULE, *(argv or sys.argv[1:])],
                   "started": started.isoformat(timespec="seconds"), "quick": False,
                   "target": "sim", "contenders": contenders,
                   "environment": results.environment(), "sizes": {"size": args.size},
                   "seed": args.seed, "paper": paper.PAPER, "scenarios": {}}
    for name in names:
        run["scenarios"][name] = run_bench_scenario(name, contenders, args.size, args.seed,
                                                    fabric, log=lambda m: print(m, file=sys.stderr))
    return results.publish(run, out, args.json)


if __name__ == "__main__":
    sys.exit(main())
