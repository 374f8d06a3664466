"""What the run view's sampling costs the emulation: CPU with the view on and off, with the
fidelity monitor on and off, side by side on one fabric.

    sudo .venv/bin/python -m bench.costs.view_cost [--fabric hosts-16] [--target soft]
        [--rate PPS] [--seconds 15] [--rounds 3] [--json [FILE]]

One fabric is started; then the same MRC permutation (host i -> i + hosts/2, each flow sized
to last about `--seconds` at capacity) runs `--rounds` times in each of four settings, in
rotation so that drifts of the machine fall on all four alike: view (a RunRecorder, as
`--web`/`--report` run it) off or on, fidelity monitor off or on. Per run: both CPUs' busy
share while the flows ran (/proc/stat, everyone's processes), the recorder thread's own CPU,
goodput over capacity, and the monitor's verdict when it ran. The summary gives medians and
the view's overhead: busy(on) / busy(off) - 1, with the monitor off and with it on. The
issue's budget is 5 %. Not a test: the figures depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any

from bench import metrics
from bench.contenders.mrc_flows import FlowSpec
from bench.context import metrics_payload
from bench.runner import flow_summary, open_network, run_contender
from emulation import fidelity
from emulation.fidelity import Monitor
from emulation.netconfig import DEFAULT_PORT_RATE_PPS, NetworkConfig
from fabric.options import (
    add_fabric_args,
    add_json_arg,
    add_rate_arg,
    add_target_arg,
    fabric_from_args,
    write_json,
)
from safety.runstate import terminate_as_interrupt
from views.runview import RunRecorder

SETTINGS = [(view, monitor) for monitor in (False, True) for view in (False, True)]
BUDGET = 0.05  # the issue: the sampling costs the emulation at most 5 % more CPU


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.costs.view_cost", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_fabric_args(p, default="hosts-16")
    add_target_arg(p, default="soft")
    add_rate_arg(p, "per switch port (default %(default)s)", DEFAULT_PORT_RATE_PPS)
    p.add_argument("--seconds", type=float, default=15.0, help="each run's length at capacity")
    p.add_argument("--rounds", type=int, default=3, help="runs per setting (default 3)")
    add_json_arg(p)
    return p


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = build_parser()
    args = p.parse_args(argv)
    if args.rounds < 1 or args.seconds <= 0:
        p.error("--rounds >= 1 and --seconds > 0")
    return args


def one_run(net: Any, specs: list[FlowSpec], cap_pps: float, view: bool, monitor: bool,
            timeout: float) -> dict[str, Any]:
    """The permutation once in one setting; what it cost and delivered."""
    recorder = RunRecorder(net, [(s.src, s.dst) for s in specs]) if view else None
    mon = Monitor(net) if monitor else None
    cpu = fidelity.cpu_times()
    began = time.monotonic()
    if mon is not None:
        mon.start()
    if recorder is not None:
        recorder.start()
    try:
        flows = run_contender(net, "mrc", specs, timeout)
    finally:
        samples = len(recorder.stop()["samples"]) if recorder is not None else 0
        verdict = mon.stop() if mon is not None else None
    wall = time.monotonic() - began
    busy = fidelity.cpu_busy(cpu, fidelity.cpu_times())
    goodput = flow_summary(flows).get("aggregate_goodput_bps")
    return {"view": view, "monitor": monitor, "cpu_busy": busy, "wall_s": wall,
            "ok": all(f.get("ok") for f in flows),
            "goodput_over_capacity": goodput / (cap_pps * metrics_payload() * 8)
            if goodput else None,
            "sampler_cpu_s": recorder.cpu_s if recorder else None,
            "sampler_share": recorder.cpu_s / wall if recorder else None, "samples": samples,
            "errors": sorted({str(f.get("error")) for f in flows if not f.get("ok")}),
            "verdict": verdict.get("verdict") if verdict else None,
            "machine_busy": verdict.get("machine_busy") if verdict else None}


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    def median(view: bool, monitor: bool, key: str) -> float | None:
        vals = [r[key] for r in runs if r["view"] == view and r["monitor"] == monitor
                and r[key] is not None]
        return statistics.median(vals) if vals else None
    out: dict[str, Any] = {"budget": BUDGET}
    for monitor in (False, True):
        off, on = median(False, monitor, "cpu_busy"), median(True, monitor, "cpu_busy")
        key = "monitor_on" if monitor else "monitor_off"
        out[key] = {"busy_view_off": off, "busy_view_on": on,
                    "overhead": on / off - 1 if on and off else None,
                    "sampler_share_of_a_cpu": median(True, monitor, "sampler_share"),
                    "verdicts": sorted({str(r["verdict"]) for r in runs
                                        if r["monitor"] == monitor})}
    walls = [r["wall_s"] for r in runs if r["view"]]
    cpu = [r["sampler_cpu_s"] for r in runs if r["view"]]
    out["sampler_cpu_share"] = sum(cpu) / sum(walls) if walls else None  # of one CPU
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    terminate_as_interrupt()
    fabric = fabric_from_args(args)
    shift = fabric.hosts // 2
    config = NetworkConfig(fabric=fabric, target=args.target, port_rate_pps=args.rate,
                           keep_ipv6=True)
    runs: list[dict[str, Any]] = []
    with open_network(config, print) as net:
        per_flow = metrics.capacity_pps(fabric, args.rate, [0], [shift])
        nbytes = int(args.seconds * per_flow * metrics_payload())
        specs = [FlowSpec(i, (i + shift) % fabric.hosts, nbytes) for i in range(fabric.hosts)]
        cap = per_flow * len(specs)  # as the bench's permutation: every host sends and receives
        run_contender(net, "mrc", specs[:1], 10 * args.seconds + 30)  # warm-up: QPs, caches
        for rnd in range(args.rounds):
            for view, monitor in SETTINGS:
                r = one_run(net, specs, cap, view, monitor, 20 * args.seconds + 60)
                runs.append(r)
                print(f"round {rnd + 1}: view {'on ' if view else 'off'}, monitor "
                      f"{'on ' if monitor else 'off'}: busy {r['cpu_busy']:.3f}, "
                      f"goodput/cap {r['goodput_over_capacity'] or 0:.3f}, "
                      f"verdict {r['verdict']}, ok {r['ok']} {r['errors'][:2]}",
                      file=sys.stderr, flush=True)
    result = {"fabric": str(fabric), "target": args.target, "rate_pps": args.rate,
              "seconds": args.seconds, "rounds": args.rounds, "runs": runs,
              "summary": summarise(runs)}
    print(json.dumps(result["summary"], indent=2))
    write_json(args.json, result)
    return 0 if all(r["ok"] for r in runs) else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("interrupted: the fabric was stopped", file=sys.stderr)
        sys.exit(130)
