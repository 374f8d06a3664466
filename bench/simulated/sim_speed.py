"""How fast the simulator runs, and what each switch and host costs it.

    .venv/bin/python -m bench.simulated.sim_speed [--fabric NAME | sizes] [--scenario permutation]
                                        [--size BYTES] [--repeat N] [--json [FILE]]

Runs one scenario of `python -m sim` (default: the permutation on the default fabric) and
reports data packets delivered per second of wall time, in all and while running (after
the network, endpoints and transfers are set up: the simulator's speed figure),
events per data packet, the wall time of building the fabric (every switch's tables) and of
the run, and memory: Python allocations while building the network, per switch, and while
making the endpoints and their QPs, per host (tracemalloc, in a separate build so that
tracing does not slow the timed run), and the process's peak RSS. With --split, one more
run times the hosts (the endpoint core and its adapter, the code the emulated agents run)
apart from the rest (the network, the switches' pipeline, the event loop): the data packets
per second the simulator would reach if the network cost nothing. Same seed, same result:
the report carries a digest of the result without its wall-clock figures, equal in every
repeat. Not a test: figures depend on the machine.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import resource
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from fabric.options import (
    add_fabric_args,
    add_json_arg,
    add_seed_arg,
    json_to_stdout,
    named_fabric,
    write_json,
)
from sim.harness import Harness, SimSettings
from sim.host import HostAdapter
from sim.scenarios import SCENARIOS, run_scenario

DEFAULT_SIZE = 8 * 1024 * 1024


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.simulated.sim_speed",
                                description=__doc__.split("\n\n")[0])
    add_fabric_args(p, default=None)
    p.add_argument("--scenario", choices=sorted(SCENARIOS), default="permutation",
                   help="the simulator's scenario to time (python -m sim; default %(default)s)")
    p.add_argument("--size", type=int, default=DEFAULT_SIZE, help="bytes moved in total")
    p.add_argument("--repeat", type=int, default=1, help="timed runs (default 1)")
    add_seed_arg(p)
    p.add_argument("--split", action="store_true",
                   help="one more run, timing the hosts apart from the network")
    add_json_arg(p)
    return p


def setup_memory(fabric: Any, settings: SimSettings) -> dict[str, float]:
    """Bytes Python allocated building the network (per switch) and the endpoints with one
    QP each way per host (per host), and how long each build took."""
    tracemalloc.start()
    try:
        t0 = time.perf_counter()
        h = Harness(fabric, settings)
        t1 = time.perf_counter()
        net_bytes = tracemalloc.get_traced_memory()[0]
        hosts = fabric.hosts
        for src in range(hosts):
            h.adapter(src)
        t2 = time.perf_counter()
        host_bytes = tracemalloc.get_traced_memory()[0] - net_bytes
    finally:
        tracemalloc.stop()
    return {"network_build_s": t1 - t0, "endpoints_build_s": t2 - t1,
            "bytes_per_switch": net_bytes / len(fabric.switches),
            "bytes_per_host": host_bytes / hosts}


# The adapter's entry points from the simulator: every call into the endpoint passes one.
_HOST_ENTRIES = ("on_frame", "_on_wake", "on_nic_state")


@contextmanager
def timed_hosts() -> Iterator[list[float]]:
    """While open, every call from the simulator into a host adds its wall time to the one
    element of the list it yields (about 0.2 µs of timing per call)."""
    spent = [0.0]
    originals = {name: getattr(HostAdapter, name) for name in _HOST_ENTRIES}

    def timed(original: Callable[..., Any]) -> Callable[..., Any]:
        def call(self: HostAdapter, *args: Any) -> Any:
            began = time.perf_counter()
            try:
                return original(self, *args)
            finally:
                spent[0] += time.perf_counter() - began
        return call
    for name, original in originals.items():
        setattr(HostAdapter, name, timed(original))
    try:
        yield spent
    finally:
        for name, original in originals.items():
            setattr(HostAdapter, name, original)


def host_split(scenario: str, size: int, settings: SimSettings, fabric: Any) -> dict[str, float]:
    """Per data packet: wall time in the hosts and in the rest of the run, and the ceiling
    a network that cost nothing would leave (data packets per second of host time)."""
    with timed_hosts() as spent:
        r = run_scenario(scenario, size=size, settings=settings, fabric=fabric)
    n, run_s, hosts_s = r["sim"]["data_packets"], r["sim"]["run_s"], spent[0]
    return {"run_s": run_s, "hosts_s": hosts_s, "hosts_share": hosts_s / run_s,
            "hosts_us_per_data_packet": 1e6 * hosts_s / n,
            "network_us_per_data_packet": 1e6 * (run_s - hosts_s) / n,
            "free_network_data_packets_per_s": n / hosts_s}


def digest(result: dict[str, Any]) -> str:
    """The result without its wall-clock figures, hashed: equal runs have equal digests."""
    stable = {k: v for k, v in result.items() if k != "sim"}
    stable["events"] = result["sim"]["events"]
    return hashlib.sha256(json.dumps(stable, sort_keys=True, default=str).encode()).hexdigest()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.repeat < 1 or args.size < 1:
        print("error: --repeat and --size must be at least 1", file=sys.stderr)
        return 2
    fabric = named_fabric(args) or SCENARIOS[args.scenario].fabric
    settings = SimSettings(seed=args.seed)
    log = (lambda *a: print(*a, file=sys.stderr)) if json_to_stdout(args) else print
    memory = setup_memory(fabric, settings)
    runs = []
    for i in range(args.repeat):
        r = run_scenario(args.scenario, size=args.size, settings=settings, fabric=fabric)
        sim = r["sim"]
        running = sim["data_packets"] / sim["run_s"] if sim["run_s"] > 0 else 0.0
        runs.append({"ok": r["ok"], "digest": digest(r), **sim,
                     "run_data_packets_per_s": running})
        log(f"run {i + 1}: {sim['data_packets']:,} data packets in {sim['wall_s']:.2f} s = "
            f"{sim['data_packets_per_s']:,.0f}/s (running: {sim['run_s']:.2f} s = "
            f"{running:,.0f}/s), {sim['events_per_data_packet']:.2f} events each, ok={r['ok']}")
    report = {
        "scenario": args.scenario, "size": args.size, "seed": args.seed,
        "fabric": {"planes": fabric.planes, "t0_per_plane": fabric.t0_per_plane,
                   "t1_per_plane": fabric.t1_per_plane, "hosts_per_t0": fabric.hosts_per_t0,
                   "switches": len(fabric.switches), "hosts": fabric.hosts},
        "runs": runs,
        "data_packets_per_s": statistics.median(r["data_packets_per_s"] for r in runs),
        "run_data_packets_per_s": statistics.median(r["run_data_packets_per_s"] for r in runs),
        "deterministic": len({r["digest"] for r in runs}) == 1,
        "setup": memory,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
    if args.split:
        split = report["split"] = host_split(args.scenario, args.size, settings, fabric)
        log(f"split run: hosts {split['hosts_share']:.0%} of the run, "
            f"{split['hosts_us_per_data_packet']:.1f} µs per data packet (the rest "
            f"{split['network_us_per_data_packet']:.1f} µs); with a network that cost nothing: "
            f"{split['free_network_data_packets_per_s']:,.0f} data packets/s")
    log(f"{fabric.planes}x{fabric.t0_per_plane}x{fabric.t1_per_plane}x{fabric.hosts_per_t0} "
        f"({len(fabric.switches)} switches, {fabric.hosts} hosts): median "
        f"{report['data_packets_per_s']:,.0f} data packets/s (running: "
        f"{report['run_data_packets_per_s']:,.0f}/s); network built in "
        f"{memory['network_build_s']:.2f} s, {memory['bytes_per_switch'] / 1024:.0f} KiB per "
        f"switch; endpoints {memory['bytes_per_host'] / 1024:.0f} KiB per host; peak RSS "
        f"{report['peak_rss_mb']:.0f} MiB; same result every run: {report['deterministic']}")
    write_json(args.json, report)
    return 0 if all(r["ok"] for r in runs) and report["deterministic"] else 1


if __name__ == "__main__":
    sys.exit(main())
