"""What a packet costs the emulation live, beside what the same code costs alone.

    sudo .venv/bin/python -m bench.costs.live_cost [--fabric NAME] [--rate PPS]
        [--seconds S] [--json [FILE]]

Three measurements, one after the other on this machine, soft switches:

1. the demo (demo.run) on the fabric at the port rate: its live cost (emulation.livecost),
   read from the switch and agent processes themselves: switch CPU per hop and agent CPU per
   1,000 data packets, both ends together;
2. `bench.costs.forwarding --target soft`: one switch process forwarding a blast of frames,
   CPU per packet (one hop);
3. `bench.costs.agent_speed --rate PPS`: two agents moving one transfer over a small fabric
   at the same rate, CPU per 1,000 data packets (sender and receiver together).

The ratios live / alone say what running inside a paced fabric adds per packet: a wake-up,
a receive and a send of its own for nearly every frame. Not a test: the figures depend on the
machine and its load (docs/benchmarks.md records them).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.errors import BenchmarkError
from demo.run import run_demo
from emulation.agents import REPO
from emulation.errors import EmulationError
from emulation.netconfig import DEFAULT_PORT_RATE_PPS
from emulation.network import MrcNetwork, NetworkConfig
from fabric.options import add_fabric_args, add_json_arg, add_rate_arg, fabric_from_args, write_json
from fabric.topology import Fabric


def live(fabric: Fabric, rate: int, seconds: float) -> dict[str, Any]:
    """The demo's live cost at `rate` on soft switches, and whether the run was faithful."""
    config = NetworkConfig(fabric=fabric, target="soft", port_rate_pps=rate)
    with MrcNetwork(config, log=lambda _m: None) as net:
        net.start()
        report = run_demo(net, seconds=seconds, log=lambda _m: None)
    return {"cost": report["live_cost"], "emulation_bound": report["emulation_bound"],
            "goodput_of_capacity": report["transfer"]["goodput_of_capacity"],
            "ok": report["transfer"]["ok"]}


def alone(module: str, args: list[str], workdir: Path) -> dict[str, Any]:
    """Run bench.costs.MODULE with `args` as its own process; its JSON report."""
    out = workdir / f"{module}.json"
    cmd = [sys.executable, "-m", f"bench.costs.{module}", *args, "--json", str(out)]
    done = subprocess.run(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          text=True, check=False)
    if done.returncode != 0:
        raise BenchmarkError(f"{' '.join(cmd[1:])} failed ({done.returncode}): "
                           f"{done.stderr.strip()[-400:]}")
    return json.loads(out.read_text())


def compare(live_run: dict[str, Any], forwarding: dict[str, Any],
            agents: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per figure: live, alone, live / alone."""
    cost = live_run["cost"]
    soft = forwarding["summary"].get("soft", {}).get("cpu_us_per_packet")
    rows = [("switch CPU per hop (us)", cost["switch_cpu_us_per_hop"],
             soft["median"] if soft else None),
            ("agent CPU per 1,000 data packets, both ends (ms)",
             cost["agent_cpu_ms_per_1000_data_packets"],
             agents["median_ms_per_1000_data"]["new"]["both"])]
    return [{"figure": name, "live": a, "alone": b,
             "live_over_alone": round(a / b, 2) if a is not None and b else None}
            for name, a, b in rows]


def format_rows(rows: list[dict[str, Any]]) -> str:
    def cell(v: float | None) -> str:
        return "n/a" if v is None else f"{v:.1f}"

    lines = [f"{'figure':<52}{'live':>8}{'alone':>8}{'ratio':>8}"]
    lines += [f"{r['figure']:<52}{cell(r['live']):>8}{cell(r['alone']):>8}"
              f"{cell(r['live_over_alone']):>8}" for r in rows]
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.costs.live_cost", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_fabric_args(p, default="default")
    add_rate_arg(p, "per port, for the demo and agent_speed (default %(default)s)",
                 DEFAULT_PORT_RATE_PPS)
    p.add_argument("--seconds", type=float, default=6.0,
                   help="the demo's transfer, in seconds at the flow's capacity")
    add_json_arg(p)
    return p


def main(argv: list[str] | None = None) -> int:
    p = build_parser()
    args = p.parse_args(argv)
    if args.seconds <= 0:
        p.error("--seconds must be positive")
    if os.geteuid() != 0:
        print("bench.costs.live_cost: needs root (Mininet); run it with sudo", file=sys.stderr)
        return 2
    fabric = fabric_from_args(args)
    try:
        live_run = live(fabric, args.rate, args.seconds)
        with tempfile.TemporaryDirectory(prefix="live-cost-") as tmp:  # private: mode 0700
            forwarding = alone("forwarding", ["--target", "soft", "--repeat", "3"], Path(tmp))
            agents = alone("agent_speed", ["--target", "soft", "--rate", str(args.rate)],
                           Path(tmp))
    except (BenchmarkError, EmulationError) as exc:
        print(f"bench.costs.live_cost: {exc}", file=sys.stderr)
        return 1
    rows = compare(live_run, forwarding, agents)
    print(f"live: the demo on {fabric} at {args.rate} packets/s per port, soft switches "
          f"({'EMULATION-BOUND' if live_run['emulation_bound'] else 'faithful'}, goodput "
          f"{live_run['goodput_of_capacity'] or 0:.0%} of capacity); alone: "
          "bench.costs.forwarding and bench.costs.agent_speed")
    print(format_rows(rows))
    write_json(args.json, {"fabric": dataclasses.asdict(fabric), "rate_pps": args.rate,
                           "live": live_run, "forwarding": forwarding["summary"],
                           "agent_speed": agents["median_ms_per_1000_data"], "rows": rows})
    return 0 if live_run["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
