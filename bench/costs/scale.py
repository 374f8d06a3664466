"""The cost of scale, measured: fabrics from 16 to 272 switches on both targets, and the demo at
the paper's path counts.

    sudo .venv/bin/python -m bench.costs.scale curve [--targets soft,bmv2] [--out DIR] \\
        [--json [FILE]]
    sudo .venv/bin/python -m bench.costs.scale demo --fabric paths-128 [--target soft] [--runs 10]
        [--rate auto|PPS] [--out DIR] [--json [FILE]]

`curve`: for each fabric of CURVE (switches 16..272 at 4 hosts, then 4..16 hosts at 24
switches) and target: bring-up per phase, stop time and whether anything was left, switch
resident memory (each process once), the switch processes' CPU while idle, and the highest
faithful port rate (emulation.calibration's sustained rate for the demo's transfer, with the
rate it would pick). Writes DIR/scale.json, DIR/scale.md (table and per-switch, per-path and
per-host growth: least-squares slopes) and DIR/scale.png.

`demo`: the demo (demo.run) `--runs` times on one fabric at one rate (calibrated once
with --rate auto): per run bring-up, switch RSS, goodput over capacity, healthy-route EV
retirements, retired/reinstated on the failed route, bypass in base RTTs, the fidelity verdict.
Writes DIR/demo-<fabric>-<target>.json and prints a table row per run. Full-size runs are a
recorded benchmark (docs/benchmarks.md, "Cost of scale"), not a CI test.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)

from bench import results  # noqa: E402
from bench.costs.soak import rss_kib  # noqa: E402
from demo.run import run_demo  # noqa: E402
from emulation.calibration import calibrate_transfer  # noqa: E402
from emulation.fidelity import process_cpu_s  # noqa: E402
from emulation.netconfig import AUTO_RATE as AUTO  # noqa: E402
from emulation.network import MrcNetwork, NetworkConfig, existing_interface  # noqa: E402
from fabric.options import (  # noqa: E402
    add_fabric_args,
    add_json_arg,
    add_rate_arg,
    add_target_arg,
    fabric_from_args,
    resolve_target,
    write_json,
)
from fabric.topology import Fabric  # noqa: E402

IDLE_S = 3.0
# switches 16, 40, 80, 144, 208, 272 at 4 hosts; then 4, 8, 16 hosts on 24 switches
CURVE = [(4, 2, 2, 2), (4, 2, 8, 2), (8, 2, 8, 2), (8, 2, 16, 2), (8, 2, 24, 2), (8, 2, 32, 2),
         (4, 4, 2, 1), (4, 4, 2, 2), (4, 4, 2, 4)]


def _rss_mb(pid: int) -> float:
    return (rss_kib(pid) or 0) / 1024


def switch_pids(net: MrcNetwork) -> set[int]:
    """Every switch process once (software switches share processes)."""
    return {pid for sw in net.fabric.switches if (pid := net.switch_pid(sw.name)) is not None}


def idle_cpu(pids: set[int], seconds: float = IDLE_S) -> float:
    """Cores the switch processes used, together, while nothing was sent."""
    before = {p: process_cpu_s(p) or 0.0 for p in pids}
    time.sleep(seconds)
    return sum((process_cpu_s(p) or 0.0) - before[p] for p in pids) / seconds


def shape(f: Fabric) -> dict[str, Any]:
    return {"sizes": [f.planes, f.t0_per_plane, f.t1_per_plane, f.hosts_per_t0],
            "switches": len(f.switches), "hosts": f.hosts,
            "paths": f.planes * f.t1_per_plane, "links": len(f.links)}


def measure_point(fabric: Fabric, target: str, log) -> dict[str, Any]:
    config = NetworkConfig(fabric=fabric, target=target)
    out: dict[str, Any] = {**shape(fabric), "target": target}
    net = MrcNetwork(config, log=log)
    try:
        net.start()
        out["bring_up_s"] = dict(net.timings)
        pids = switch_pids(net)
        out["switch_processes"] = len(pids)
        out["switch_rss_mb"] = sum(_rss_mb(p) for p in pids)
        out["idle_cpu_cores"] = idle_cpu(pids)
    finally:
        began = time.monotonic()
        net.stop()
        out["stop_s"] = time.monotonic() - began
    out["left_behind"] = existing_interface(fabric)
    choice = calibrate_transfer(MrcNetwork, config, 0, fabric.hosts - 1, log)
    out.update(faithful_sustained_pps=choice["sustained_pps"], chosen_rate_pps=choice["rate_pps"],
               calibration_s=choice["calibration_s"])
    return out


def slope(points: list[dict[str, Any]], x: str, y: str) -> float | None:
    """Least-squares growth of y per unit of x (None with fewer than two distinct x)."""
    xs, ys = [p[x] for p in points], [p[y] for p in points]
    if len(set(xs)) < 2:
        return None
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((a - mx) * (b - my) for a, b in zip(xs, ys, strict=True)) / \
        sum((a - mx) ** 2 for a in xs)


def _flatten(p: dict[str, Any]) -> dict[str, Any]:
    return {**p, "bring_up_total_s": p["bring_up_s"]["total_s"]}


def growth(points: list[dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    """Per target: cost per switch (fixed hosts), per path, per host (fixed switches)."""
    out = {}
    for target in sorted({p["target"] for p in points}):
        mine = [_flatten(p) for p in points if p["target"] == target]
        by_switch = [p for p in mine if p["hosts"] == 4]
        by_host = [p for p in mine if p["switches"] == 24]
        out[target] = {
            "bring_up_s_per_switch": slope(by_switch, "switches", "bring_up_total_s"),
            "rss_mb_per_switch": slope(by_switch, "switches", "switch_rss_mb"),
            "bring_up_s_per_path": slope(by_switch, "paths", "bring_up_total_s"),
            "bring_up_s_per_host": slope(by_host, "hosts", "bring_up_total_s"),
            "faithful_pps_per_switch": slope(by_switch, "switches", "faithful_sustained_pps")}
    return out


def _fmt(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.3g}"


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def curve_markdown(points: list[dict[str, Any]], grow: dict[str, Any]) -> str:
    rows = ["| target | fabric | switches | hosts | paths | bring-up s (Mininet / program / "
            "agents) | stop s | switch RSS MB | idle CPU cores | faithful pps (sustained) |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for p in points:
        b = p["bring_up_s"]
        rows.append(f"| {p['target']} | {'x'.join(map(str, p['sizes']))} | {p['switches']} | "
                    f"{p['hosts']} | {p['paths']} | {b['total_s']:.1f} ({b['mininet_s']:.1f} / "
                    f"{b['program_s']:.1f} / {b['agents_s']:.1f}) | {p['stop_s']:.1f} | "
                    f"{p['switch_rss_mb']:.0f} | {p['idle_cpu_cores']:.3f} | "
                    f"{p['chosen_rate_pps']} ({p['faithful_sustained_pps']:.0f}) |")
    rows += ["", "| target | bring-up s per switch | RSS MB per switch | bring-up s per path | "
             "bring-up s per host | sustained pps per switch |", "|---|---|---|---|---|---|"]
    for target, g in grow.items():
        rows.append(f"| {target} | {_fmt(g['bring_up_s_per_switch'])} | "
                    f"{_fmt(g['rss_mb_per_switch'])} | {_fmt(g['bring_up_s_per_path'])} | "
                    f"{_fmt(g['bring_up_s_per_host'])} | {_fmt(g['faithful_pps_per_switch'])} |")
    return "\n".join(rows) + "\n"


def plot_curve(points: list[dict[str, Any]], path: Path) -> Path:
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    for target, marker in (("soft", "o"), ("bmv2", "s")):
        mine = sorted((p for p in points if p["target"] == target and p["hosts"] == 4),
                      key=lambda p: p["switches"])
        if not mine:
            continue
        xs = [p["switches"] for p in mine]
        axes[0].plot(xs, [p["bring_up_s"]["total_s"] for p in mine], marker=marker, label=target)
        axes[1].plot(xs, [p["switch_rss_mb"] / 1024 for p in mine], marker=marker, label=target)
        axes[2].plot(xs, [p["chosen_rate_pps"] for p in mine], marker=marker, label=target)
    for ax, title in zip(axes, ("bring-up (s)", "switch resident memory (GB)",
                                "chosen faithful port rate (pps)"), strict=True):
        ax.set_xlabel("switches (4 hosts)")
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def run_curve(targets: list[str], out: Path, log) -> dict[str, Any]:
    points = []
    for sizes in CURVE:
        for target in targets:
            log(f"scale: {'x'.join(map(str, sizes))} on {target}")
            points.append(measure_point(Fabric(*sizes), target, log))
            results.write(_run("curve", points=points), out)  # partial results survive
    grow = growth(points)
    run = _run("curve", points=points, growth=grow)
    (out / "scale.json").write_text(json.dumps(run, indent=1, default=str) + "\n")
    (out / "scale.md").write_text(curve_markdown(points, grow))
    plot_curve(points, out / "scale.png")
    return run


def demo_row(report: dict[str, Any], rss_mb: float) -> dict[str, Any]:
    failure = report.get("failure") or {}
    retired = failure.get("retired") or {}
    return {"bring_up_s": report["bring_up_s"].get("total_s"), "switch_rss_mb": rss_mb,
            "rate_pps": report["fabric"]["port_rate_pps"], "ok": report["transfer"]["ok"],
            "goodput_of_capacity": report["transfer"].get("goodput_of_capacity"),
            "healthy_route_retirements": retired.get("healthy_routes"),
            "failed_route_retired": retired.get("failed_route_after_failure"),
            "failed_route_evs_retired": retired.get("failed_route_evs_retired"),
            "failed_route_evs": retired.get("failed_route_evs"),
            "reinstated_after_up": failure.get("reinstated_after_up"),
            "bypass_base_rtts": failure.get("bypass_base_rtts"),
            "fidelity": report["fidelity"].get("verdict"),
            "cpu_pressure": report.get("cpu_pressure"),
            "emulation_bound": report["emulation_bound"]}


def run_demos(fabric: Fabric, target: str, runs: int, rate: int | str, out: Path,
              log) -> dict[str, Any]:
    config = NetworkConfig(fabric=fabric, target=target)
    choice = None
    if rate == AUTO:
        choice = calibrate_transfer(MrcNetwork, config, 0, fabric.hosts - 1, log)
        rate = choice["rate_pps"]
    config = dataclasses.replace(config, port_rate_pps=rate)
    rows = []
    name = f"demo-{'x'.join(map(str, shape(fabric)['sizes']))}-{target}"
    for i in range(runs):
        with MrcNetwork(config, log=lambda _m: None) as net:
            net.start()
            rss = sum(_rss_mb(p) for p in switch_pids(net))
            row = demo_row(run_demo(net, log=lambda _m: None), rss)
        rows.append(row)
        log(f"run {i + 1}/{runs}: " + json.dumps(row))
        (out / f"{name}.json").write_text(json.dumps(
            _run("demo", fabric=shape(fabric), target=target, rate_choice=choice, runs=rows),
            indent=1, default=str) + "\n")
    return {"rate_choice": choice, "runs": rows}


def _run(kind: str, **fields: Any) -> dict[str, Any]:
    return {"schema": "mrc-bench-scale/1", "kind": kind, "command": sys.argv,
            "environment": results.environment(), **fields}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.costs.scale", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=("curve", "demo"),
                   help="curve: each cost against the fabric's size; demo: the demo's "
                   "figures over --runs runs of one fabric")
    p.add_argument("--targets", default="soft,bmv2", help="curve: comma-separated targets")
    add_target_arg(p, default="soft")  # the demo's
    p.add_argument("--runs", type=int, default=1, help="demo: how many runs")
    add_rate_arg(p, "per port for the demo, or 'auto' (default %(default)s)", AUTO,
                 words=(AUTO,))
    p.add_argument("--out", type=Path, help="output directory (default results/scale-<time>)")
    add_fabric_args(p, default="paths-128")
    add_json_arg(p)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = args.out or Path("results") / f"scale-{stamp}"
    results.prepare_out_dir(out)
    log = _log
    if args.what == "curve":
        run = run_curve([t for t in args.targets.split(",") if t], out, log)
        print(curve_markdown(run["points"], run["growth"]))
        write_json(args.json, run, default=str)
        return 0 if all(pt["left_behind"] is None for pt in run["points"]) else 1
    done = run_demos(fabric_from_args(args), resolve_target(args.target), args.runs, args.rate,
                     out, log)
    write_json(args.json, done, default=str)
    return 0 if all(r["ok"] for r in done["runs"]) else 1


if __name__ == "__main__":
    sys.exit(main())

