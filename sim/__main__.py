"""`python -m sim SCENARIO [--json [FILE]] [--seed N] [--size BYTES] [--line-rate 10G] ...`

Options as every entry point spells them (fabric.options): `--line-rate` is the links' rate
in bits/s (`--rate`, its old spelling, still works with a warning).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from fabric.errors import FabricError
from fabric.options import (
    add_convergence_delay_arg,
    add_deprecated_spelling,
    add_fabric_args,
    add_json_arg,
    add_line_rate_arg,
    add_link_delay_arg,
    add_queue_args,
    add_seed_arg,
    json_to_stdout,
    link_delay_s,
    named_fabric,
    write_json,
)
from host_agent.core import MrcHostError
from host_agent.modes import MODE_HELP
from sim.errors import SimError
from sim.harness import SimSettings
from sim.network import QueueConfig
from sim.scenarios import SCENARIOS, ScenarioError, run_scenario

DEFAULT_SIZE = 32 * 1024 * 1024
REPORT_HOSTS = 16  # the text report lists each host's packets per plane up to this many


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m sim",
                                description="Run an MRC scenario on the simulated fabric.")
    p.add_argument("scenario", choices=sorted(SCENARIOS),
                   help="; ".join(f"{s.name}: {s.summary}" for s in SCENARIOS.values())
                   .replace("%", "%%"))  # argparse formats help with %
    add_json_arg(p)
    add_seed_arg(p)
    p.add_argument("--size", type=int, default=DEFAULT_SIZE, help="bytes moved in total")
    add_deprecated_spelling(p, "--rate", add_line_rate_arg(p, SimSettings.rate_bps))
    defaults = QueueConfig()
    add_deprecated_spelling(p, "--queue", add_queue_args(
        p, depth=defaults.capacity, ecn=defaults.ecn_threshold, trim=defaults.trim_threshold))
    p.add_argument("--chunk", type=int, default=SimSettings.chunk, help="bytes per RDMA WRITE")
    p.add_argument("--contender", default=SimSettings.contender, metavar="MODE",
                   help="the transport every host runs, as the bench names it: " + MODE_HELP)
    add_fabric_args(p, default=None)
    add_link_delay_arg(p, SimSettings.delay_s * 1000)
    add_convergence_delay_arg(p, SimSettings.convergence_delay_s)
    return p


def _report(r: dict[str, Any]) -> str:
    f = r["fabric"]
    lines = [
        f"scenario {r['scenario']}, {r['contender']} (seed {r['seed']}): "
        f"{'OK' if r['ok'] else 'FAILED'}",
        f"  fabric: {f['planes']} planes x {f['t0_per_plane']} T0 x {f['t1_per_plane']} T1, "
        f"{f['hosts']} hosts, {f['link_rate_bps'] / 1e9:g} Gb/s links, {f['delay_s'] * 1e6:g} us",
        f"  {r['bytes']} bytes in {r['duration_s'] * 1e3:.3f} ms simulated: goodput "
        f"{r['goodput_bps'] / 1e9:.2f} Gb/s = {r['goodput_ratio']:.1%} of usable capacity "
        f"({r['capacity_bps'] / 1e9:.2f} Gb/s)",
        f"  timeouts {r['timeouts']}, nacks {r['nacks']}, trims {r['trims']}, "
        f"retired EVs {r['retired_evs']}, reinstated EVs {r['reinstated_evs']}, "
        f"retransmits {r['retransmits']}, ECN marks {r['ecn_marks']}",
    ]
    per_plane = r["data_tx_per_plane"]
    if len(per_plane) <= REPORT_HOSTS:
        lines.append(f"  data packets per plane: {per_plane}")
    else:
        lines.append(f"  data packets per plane: {len(per_plane)} hosts (in the JSON)")
    extra = {k: v for k, v in r.items() if k in (
        "recovery_rtts", "peer_notified_after_rtts", "data_on_failed_plane_after_notification",
        "data_on_failed_path_after_failure", "goodput_ratio_after_failure",
        "congested_share_before", "congested_share_after")}
    if extra:
        lines.append("  " + ", ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}"
                                      for k, v in extra.items()))
    sim = r["sim"]
    lines.append(f"  ({sim['events']} events, {sim['wall_s']:.1f} s wall: network "
                 f"{sim['network_s']:.1f} s, endpoints {sim['setup_s']:.1f} s, run "
                 f"{sim['run_s']:.1f} s; {sim['data_packets_per_s']:,.0f} data packets "
                 "delivered per second)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        queues = QueueConfig(capacity=args.queue_depth, ecn_threshold=args.ecn_threshold,
                             trim_threshold=args.trim_threshold)
        settings = SimSettings(rate_bps=args.line_rate, delay_s=link_delay_s(args), queues=queues,
                               seed=args.seed, chunk=args.chunk, contender=args.contender,
                               convergence_delay_s=args.convergence_delay)
        if args.chunk < 1:
            raise ScenarioError("--chunk must be at least 1 byte")
        if args.convergence_delay < 0:
            raise ScenarioError("--convergence-delay must be at least 0 seconds")
        result = run_scenario(args.scenario, size=args.size, settings=settings,
                              fabric=named_fabric(args))
    except (SimError, FabricError, MrcHostError) as exc:  # each unit's base: refused
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not json_to_stdout(args):
        print(_report(result))
    write_json(args.json, result)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
