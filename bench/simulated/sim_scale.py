"""The paper's scale figures from the simulator: one set of runs, one JSON file, a summary
and plots, so an experiment run small in Mininet (python -m bench) is read the same way large.

    .venv/bin/python -m bench.simulated.sim_scale [--quick] [--json FILE] [--plot DIR] [--seed N]

Runs, each a `python -m sim` scenario (sim.scenarios.run_scenario) on a named fabric:
- bypass: link-failure on every fabric of BYPASS_FABRICS (4 to 1,024 hosts): how many base
  RTTs the sender kept putting data on the failed link (paper: a few, whatever the scale);
- permutation: every contender of PERMUTATION_CONTENDERS on each fabric of
  PERMUTATION_FABRICS, PERMUTATION_BYTES_PER_HOST each: P100 (the last flow's completion)
  of each contender over MRC's, and MRC's share of the usable capacity;
- all-reduce: ALLREDUCE_FABRIC, clean, under fabric-wide flaps and with a spine reboot: the
  step-time slowdown against the clean run (paper: no measurable impact);
- allreduce-2d: the same with the hierarchical all-reduce (rings within T0s, then across)
  on ALLREDUCE_2D_FABRIC, 1,024 hosts: a ring there has 2,046 phases a step.
--parts runs some of these; --quick runs them on the default fabrics with small sizes (the
test does that).
Results keep what the summary needs (per-host arrays dropped) and the simulator's costs.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path
from typing import Any

from bench import metrics, results
from fabric.options import PRESETS, add_json_arg, add_seed_arg, json_to_stdout, write_json
from fabric.topology import Fabric
from safety.privdir import UnsafePathError
from sim.harness import SimSettings
from sim.scenarios import SCENARIOS, run_scenario

BYPASS_FABRICS = ("default", "hosts-16", "hosts-256", "hosts-1024")
BYPASS_BYTES = 32 * 1024 * 1024
PERMUTATION_FABRICS = ("hosts-16", "hosts-256", "hosts-1024")
PERMUTATION_CONTENDERS = ("mrc", "roce", "roce:16", "single_port")
PERMUTATION_BYTES_PER_HOST = 256 * 1024
ALLREDUCE_FABRIC = "hosts-16"
ALLREDUCE_BYTES = 4 * 1024 * 1024
ALLREDUCE_2D_FABRIC = "hosts-1024"
ALLREDUCE_2D_BYTES = 64 * 1024  # 4 KiB a host within its T0, 64 bytes across: 246 packets a step
PARTS = ("bypass", "permutation", "allreduce", "allreduce-2d")
QUICK = {"bypass": ("default",), "permutation": ("default",), "allreduce": "default",
         "bypass_bytes": 2 * 1024 * 1024, "per_host": 256 * 1024, "allreduce_bytes": 1 << 20,
         "allreduce-2d": "default", "allreduce_2d_bytes": 64 * 1024}
_DROPPED = ("tx_packets_per_plane", "data_tx_per_plane", "transfers")


def fabric_of(name: str) -> Fabric | None:
    """None: the scenario's own fabric (the default preset)."""
    return None if name == "default" else Fabric(*PRESETS[name])


def run(scenario: str, fabric: str, size: int, seed: int, contender: str = "mrc",
        log=print) -> dict[str, Any]:
    began = time.perf_counter()
    r = run_scenario(scenario, size=size, fabric=fabric_of(fabric),
                     settings=SimSettings(seed=seed, contender=contender))
    done = [t["done_at_s"] for t in r["transfers"] if t["done_at_s"] is not None]
    r["flows"] = len(r["transfers"])
    r["p100_s"] = max(done) if len(done) == len(r["transfers"]) else None  # runs start at 0
    r["fabric_name"] = fabric
    for key in _DROPPED:
        r.pop(key, None)
    gc.collect()
    log(f"{scenario} {fabric} {r['contender']}: ok={r['ok']} goodput {r['goodput_ratio']:.3f} "
        f"of capacity, {time.perf_counter() - began:.0f} s wall")
    return r


def summarise(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """The figures the paper reports, from the runs."""
    bypass = [{"fabric": r["fabric_name"], "hosts": r["fabric"]["hosts"],
               "recovery_rtts": r.get("recovery_rtts"), "ok": r["ok"]}
              for r in runs.get("bypass", [])]
    perm: dict[str, dict[str, Any]] = {}
    for r in runs.get("permutation", []):
        perm.setdefault(r["fabric_name"], {})[r["contender"]] = r
    permutation = {}
    for fabric, by in perm.items():
        mrc = by.get("mrc", {})
        permutation[fabric] = {
            "hosts": mrc.get("fabric", {}).get("hosts"),
            "mrc_share_of_capacity": mrc.get("goodput_ratio"),
            "p100_over_mrc": {c: metrics.ratio(r.get("p100_s"), mrc.get("p100_s"))
                              for c, r in by.items() if c != "mrc"},
            "share_of_capacity": {c: r["goodput_ratio"] for c, r in by.items()},
            "ok": all(r["ok"] for r in by.values())}
    allreduce = {}
    for part in ("allreduce", "allreduce-2d"):
        steps = {r["scenario"]: r for r in runs.get(part, [])}
        clean = steps.get(part, {}).get("step_time_s") or {}
        allreduce.update({name: {
            "fabric": r["fabric_name"], "hosts": r["fabric"]["hosts"],
            "step_time_s": r.get("step_time_s"),
            "mean_over_clean": metrics.ratio((r.get("step_time_s") or {}).get("mean"),
                                             clean.get("mean")),
            "flaps": r.get("flaps"), "ok": r["ok"],
            "step_time_over_first": r.get("step_time_over_first")} for name, r in steps.items()})
    return {"bypass": bypass, "permutation": permutation, "allreduce": allreduce}


def run_all(quick: bool, seed: int, log=print, parts: tuple[str, ...] = PARTS
            ) -> dict[str, Any]:
    bypass = QUICK["bypass"] if quick else BYPASS_FABRICS
    perm = QUICK["permutation"] if quick else PERMUTATION_FABRICS
    bypass_bytes = QUICK["bypass_bytes"] if quick else BYPASS_BYTES
    per_host = QUICK["per_host"] if quick else PERMUTATION_BYTES_PER_HOST
    collectives = {  # part: (fabric, buffer bytes)
        "allreduce": (QUICK["allreduce"], QUICK["allreduce_bytes"]) if quick
        else (ALLREDUCE_FABRIC, ALLREDUCE_BYTES),
        "allreduce-2d": (QUICK["allreduce-2d"], QUICK["allreduce_2d_bytes"]) if quick
        else (ALLREDUCE_2D_FABRIC, ALLREDUCE_2D_BYTES)}
    runs: dict[str, list[dict[str, Any]]] = {part: [] for part in parts}
    for name in bypass if "bypass" in parts else ():
        runs["bypass"].append(run("link-failure", name, bypass_bytes, seed, log=log))
    for name in perm if "permutation" in parts else ():
        hosts = (fabric_of(name) or SCENARIOS["permutation"].fabric).hosts
        for contender in PERMUTATION_CONTENDERS:
            runs["permutation"].append(run("permutation", name, per_host * hosts, seed,
                                           contender, log=log))
    for part, (fabric, size) in collectives.items():
        for suffix in ("", "-flap", "-reboot") if part in parts else ():
            runs[part].append(run(part + suffix, fabric, size, seed, log=log))
    return {"quick": quick, "seed": seed, "runs": runs, "summary": summarise(runs)}


def summary_text(s: dict[str, Any]) -> str:
    lines = ["bypass (link-failure): base RTTs until the sender left the failed link"]
    lines += [f"  {b['fabric']:>10} ({b['hosts']:>4} hosts): {b['recovery_rtts']:.2f} RTTs"
              for b in s["bypass"]]
    lines.append("permutation: P100 over MRC's, and share of the usable capacity")
    for fabric, p in s["permutation"].items():
        others = ", ".join(f"{c} {v:.2f}x" for c, v in p["p100_over_mrc"].items()
                           if v is not None)
        shares = ", ".join(f"{c} {v:.1%}" for c, v in p["share_of_capacity"].items())
        lines.append(f"  {fabric} ({p['hosts']} hosts): P100 {others}; capacity {shares}")
    lines.append("all-reduce: mean step time over the clean run's")
    for name, a in s["allreduce"].items():
        extra = f", {a['flaps']} flaps" if a.get("flaps") is not None else ""
        lines.append(f"  {name} ({a['hosts']} hosts): {a['mean_over_clean']:.3f}{extra}")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.simulated.sim_scale",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="the default fabric, small sizes")
    add_seed_arg(p)
    p.add_argument("--parts", default=",".join(PARTS),
                   help="comma-separated: " + ", ".join(PARTS) + " (default: all)")
    p.add_argument("--plot", type=Path, default=None, metavar="DIR",
                   help="write the bypass and P100 plots into DIR")
    add_json_arg(p)
    return p


def main(argv: list[str] | None = None) -> int:
    p = build_parser()
    args = p.parse_args(argv)
    parts = tuple(x for x in args.parts.split(",") if x)
    if not parts or set(parts) - set(PARTS):
        p.error(f"--parts {args.parts!r}: choose from {', '.join(PARTS)}")
    try:  # the plots go into a directory of ours, refused before the run if it is not
        if args.plot is not None:
            results.prepare_out_dir(args.plot)
    except UnsafePathError as exc:
        p.error(str(exc))
    log = (lambda *a: print(*a, file=sys.stderr)) if json_to_stdout(args) else print
    report = run_all(args.quick, args.seed, log=log, parts=parts)
    log(summary_text(report["summary"]))
    if args.plot is not None:
        from bench.simulated.sim_scale_plots import plot_summary
        for path in plot_summary(report["summary"], args.plot):
            log(f"wrote {path}")
    write_json(args.json, report)
    return 0 if all(r["ok"] for rs in report["runs"].values() for r in rs) else 1


if __name__ == "__main__":
    sys.exit(main())
