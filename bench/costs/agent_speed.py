"""Host agent CPU per packet: one MRC transfer between two agents, CPU read from /proc.

    sudo .venv/bin/python -m bench.costs.agent_speed [--vs COMMIT] [--bytes N] [--runs R]
        [--chunk BYTES] [--depth D] [--rate PPS] [--target auto|bmv2|soft] [--json [FILE]]

A small fabric (2 planes x 2 T0 x 2 T1, one host per T0, so traffic crosses the spines) runs
without port rate limits by default: no rate limiter paces the agents, only their own speed and
the switch processes', so a wake-up often finds several frames. `--rate PPS` gives every port
and host NIC that rate, as the bench and the demo run (500 packets/s there): then nearly every
frame is a wake-up of its own, and the per-wake-up work (event loop, timers, a pass over the
QPs) weighs more per packet.

Each run moves N bytes from h0 to h1 (after a small unmeasured warm-up) the way the bench's
flows do (bench.contenders.mrc_flows.post_chunks): --chunk-byte writes kept --depth deep on one
control connection, so the agents' per-write command path is measured too (`--chunk 0`: one RDMA
write of N bytes, the transport alone). Around the transfer the bench reads each agent process's
time on a CPU in nanoseconds (the first field of /proc/PID/task/*/schedstat, summed over its
live threads: the agents have no other; /proc/PID/stat's utime+stime hold the same total but in
10 ms clock ticks, too coarse for a transfer that costs a few dozen ticks) and its endpoint
counters; the user/sys split comes from /proc/PID/stat and is informative only. "Packets" are
the MRC frames that agent's endpoint sent plus those it received (tx_packets + rx_packets: data,
SACK, NACK, probes and port status alike): the sender's are mostly data out and SACKs in, the
receiver's the reverse. Reported per agent and for both: CPU ms per 1,000 packets, and per 1,000
data packets of the transfer (sent by h0, resends included). The sender's window includes
building the write's test pattern (random.randbytes, about 3 ms per MB), the same for every
tree.

With --vs COMMIT the bench makes a temporary git worktree of COMMIT (removed afterwards, also
on Ctrl-C or SIGTERM) and alternates the two agents' code on the same running fabric: before
each run both agents are restarted from the tree under test (cwd and PYTHONPATH) and their QPs
exchanged anew. It prints both medians and the ratio old/new, so a before/after comparison is
one run on one machine. The switches and the bench itself always run this tree's code.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.contenders.mrc_flows import CHUNK, DEPTH, FlowSpec, post_chunks, verify_chunks
from bench.errors import BenchmarkError
from emulation.agents import REPO, exchange_qps
from emulation.fidelity import on_cpu_ns
from emulation.netconfig import DEFAULT_RX_HOLD_MS
from emulation.network import MrcNetwork, NetworkConfig
from fabric.options import add_json_arg, add_rate_arg, add_target_arg, write_json
from fabric.topology import Fabric
from safety.runstate import terminate_as_interrupt

FABRIC = Fabric(planes=2, t0_per_plane=2, t1_per_plane=2, hosts_per_t0=1)
SRC, DST = 0, 1
DEFAULT_BYTES = 8_000_000
WARMUP_BYTES = 256 * 1024
SEED_STRIDE = 1_000_000  # a transfer's chunks take seeds seed .. seed + chunks - 1
WRITE_TIMEOUT_S = 300.0
CLK_TCK = os.sysconf("SC_CLK_TCK")
ROLES = ("sender", "receiver", "both")


def cpu_seconds(pid: int) -> tuple[float, float]:
    """(utime, stime) of a process in seconds (fields 14 and 15 of /proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) / CLK_TCK, int(fields[12]) / CLK_TCK


def on_cpu_seconds(pid: int) -> float:
    """A process's time on a CPU, to the nanosecond (emulation.fidelity.on_cpu_ns)."""
    ns = on_cpu_ns(pid)
    if ns is None:
        raise BenchmarkError(f"process {pid} is gone: no CPU time to read")
    return ns / 1e9


def git(*args: str, cwd: Path = REPO) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout.strip()


def describe(tree: Path) -> str:
    """Short commit of a tree, marked -dirty when its tracked files differ from it."""
    commit = git("rev-parse", "--short", "HEAD", cwd=tree)
    dirty = git("status", "--porcelain", "--untracked-files=no", cwd=tree)
    return commit + ("-dirty" if dirty else "")


def use_tree(net: MrcNetwork, tree: Path, rx_hold_ms: float) -> None:
    """Restart both agents from `tree` and exchange their QPs anew (as bench.costs.soak restarts
    one). Only this tree's agents get `rx_hold_ms`: another tree may not know the option."""
    for host in (SRC, DST):
        agent = net.agents[host]
        agent.stop()
        agent.repo = tree
        agent.rx_hold_ms = rx_hold_ms if tree == REPO else 0.0
        agent.start()
        net.record_pids()
    for host in (SRC, DST):
        net.agents[host].wait_ready()
    exchange_qps({host: net.agent(host) for host in (SRC, DST)})


def write(net: MrcNetwork, nbytes: int, seed: int, chunk: int, depth: int) -> dict[str, Any]:
    """Move nbytes h0 -> h1 (chunked, or one write when chunk is 0), verified; returns the
    outcome plus each agent's CPU and counters across it."""
    src, dst = net.agent(SRC), net.agent(DST)
    agents = {"sender": src, "receiver": dst}
    pids = {"sender": net.agent_pid(SRC), "receiver": net.agent_pid(DST)}
    region = dst.call("register", size=nbytes)
    spec = FlowSpec(SRC, DST, nbytes)
    try:
        stats0 = {role: agent.call("stats") for role, agent in agents.items()}
        cpu0 = {role: cpu_seconds(pid) for role, pid in pids.items()}  # type: ignore[arg-type]
        run0 = {role: on_cpu_seconds(pid) for role, pid in pids.items()}  # type: ignore[arg-type]
        began = time.monotonic()
        if chunk:
            errors = post_chunks(src, spec, region, seed, timeout=WRITE_TIMEOUT_S, chunk=chunk,
                                 depth=depth)
        else:
            answer = src.call("write", wait=WRITE_TIMEOUT_S + 30, peer=DST, bytes=nbytes,
                              va=region["va"], rkey=region["rkey"], seed=seed,
                              timeout=WRITE_TIMEOUT_S)
            errors = [] if answer.get("ok") else [str(answer.get("error"))]
        duration = time.monotonic() - began
        run1 = {role: on_cpu_seconds(pid) for role, pid in pids.items()}  # type: ignore[arg-type]
        cpu1 = {role: cpu_seconds(pid) for role, pid in pids.items()}  # type: ignore[arg-type]
        stats1 = {role: agent.call("stats") for role, agent in agents.items()}
        if errors:
            verified = False
        elif chunk:
            verified = verify_chunks(dst, spec, region, seed, chunk) is None
        else:
            verified = bool(dst.call("verify", rkey=region["rkey"], length=nbytes,
                                     seed=seed)["match"])
    finally:
        dst.call("deregister", rkey=region["rkey"])
    sent = stats1["sender"]["endpoint"]
    out: dict[str, Any] = {"verified": verified, "errors": errors[:3], "duration_s": duration,
                           **{k: int(sent[k]) - int(stats0["sender"]["endpoint"][k])
                              for k in ("retransmits", "timeouts")}}
    for role in pids:
        after, before = stats1[role]["endpoint"], stats0[role]["endpoint"]
        d = {k: int(after[k]) - int(before[k])
             for k in ("tx_packets", "rx_packets", "tx_data_packets", "sacks_sent",
                       "sacks_received", "probes_sent")}  # resends: the run's own field
        d["packets"] = d["tx_packets"] + d["rx_packets"]
        if "wakeups" in stats1[role]:  # event-loop wake-ups (agents that report them)
            d["wakeups"] = stats1[role]["wakeups"] - stats0[role]["wakeups"]
        d["user_ms"] = (cpu1[role][0] - cpu0[role][0]) * 1000
        d["sys_ms"] = (cpu1[role][1] - cpu0[role][1]) * 1000
        d["cpu_ms"] = (run1[role] - run0[role]) * 1000
        d["ms_per_1000"] = d["cpu_ms"] / d["packets"] * 1000 if d["packets"] else None
        out[role] = d
    both = out["sender"]["cpu_ms"] + out["receiver"]["cpu_ms"]
    packets = out["sender"]["packets"] + out["receiver"]["packets"]
    out["both"] = {"cpu_ms": both, "packets": packets,
                   "ms_per_1000": both / packets * 1000 if packets else None}
    data = out["sender"]["tx_data_packets"]  # the transfer's data packets, resends included
    for role in ("sender", "receiver", "both"):
        out[role]["ms_per_1000_data"] = out[role]["cpu_ms"] / data * 1000 if data else None
    return out


def summarize(runs: list[dict[str, Any]], key: str) -> dict[str, float | None]:
    """Median of `key` (ms per 1,000 packets or data packets) per role over runs."""
    out: dict[str, float | None] = {}
    for role in ROLES:
        values = [r[role][key] for r in runs if r[role][key] is not None]
        out[role] = statistics.median(values) if values else None
    return out


def run(args: argparse.Namespace, trees: dict[str, Path], log) -> dict[str, Any]:
    labels = {name: describe(tree) for name, tree in trees.items()}
    config = NetworkConfig(fabric=FABRIC, target=args.target, port_rate_pps=args.rate,
                           rx_hold_ms=args.rx_hold_ms)
    runs: list[dict[str, Any]] = []
    with MrcNetwork(config, log=log) as net:
        net.start()
        seed = 1
        for i in range(args.runs):
            order = list(trees) if i % 2 == 0 else list(reversed(trees))
            for name in order:
                if len(trees) > 1:
                    use_tree(net, trees[name], args.rx_hold_ms)
                write(net, WARMUP_BYTES, seed, args.chunk, args.depth)
                result = write(net, args.bytes, seed + SEED_STRIDE, args.chunk, args.depth)
                seed += 2 * SEED_STRIDE
                result.update(tree=name, commit=labels[name], run=i)
                runs.append(result)
                log(f"run {i} {name} ({labels[name]}): sender "
                    f"{result['sender']['ms_per_1000']:.1f}, receiver "
                    f"{result['receiver']['ms_per_1000']:.1f} ms/1000 packets "
                    f"({result['sender']['packets']} / {result['receiver']['packets']} packets, "
                    f"{result['duration_s']:.2f} s, verified {result['verified']})")
    summary = {name: summarize([r for r in runs if r["tree"] == name], "ms_per_1000")
               for name in trees}
    per_data = {name: summarize([r for r in runs if r["tree"] == name], "ms_per_1000_data")
                for name in trees}
    report: dict[str, Any] = {
        "bytes": args.bytes, "chunk": args.chunk, "depth": args.depth,
        "runs_per_tree": args.runs, "target": net.target, "port_rate_pps": args.rate,
        "rx_hold_ms": args.rx_hold_ms,
        "fabric": dataclasses.asdict(FABRIC),
        "packets": "MRC packets the agent's endpoint sent plus those it received",
        "cpu": "time on a CPU of the agent's threads (/proc/PID/task/*/schedstat) across the "
               "write",
        "data_packets": "data packets the sender sent (resends included): the same count for "
                        "both agents",
        "commits": labels, "runs": runs, "median_ms_per_1000": summary,
        "median_ms_per_1000_data": per_data,
    }
    if "old" in trees:
        report["ratio_old_over_new"] = {
            role: (summary["old"][role] / summary["new"][role]
                   if summary["old"][role] and summary["new"][role] else None)
            for role in ROLES}
    return report


def _row(label: str, values: dict[str, float | None], fmt: str = "{:>10.1f}") -> str:
    return f"{label:<24}" + "".join(fmt.format(values[r]) if values[r] is not None
                                    else f"{'-':>10}" for r in ROLES)


def print_report(report: dict[str, Any]) -> None:
    how = (f"as {report['chunk']}-byte writes {report['depth']} deep" if report["chunk"]
           else "as one write")
    paced = (f"ports at {report['port_rate_pps']} packets/s" if report["port_rate_pps"]
             else "unpaced")
    if report["rx_hold_ms"]:
        paced += f", this tree's agents hold {report['rx_hold_ms']:g} ms"
    print(f"\nagent CPU (time on a CPU, from schedstat), median of {report['runs_per_tree']} "
          f"runs of {report['bytes']} bytes h{SRC} -> h{DST} {how}, {report['target']} "
          f"switches, {paced}")
    for key, what in (("median_ms_per_1000", "ms per 1,000 packets (packets = MRC frames sent "
                       "+ received by that agent)"),
                      ("median_ms_per_1000_data", "ms per 1,000 data packets (sent by h0)")):
        print(f"\n{what}:\n{'tree':<24}{'sender':>10}{'receiver':>10}{'both':>10}")
        for name, med in report[key].items():
            print(_row(f"{name} {report['commits'][name]}", med))
    ratio = report.get("ratio_old_over_new")
    if ratio:
        print(_row("ratio old/new", ratio, "{:>9.2f}x"))
    failed = [r for r in report["runs"] if not r["verified"]]
    if failed:
        print(f"WARNING: {len(failed)} runs did not verify")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.costs.agent_speed", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--vs", metavar="COMMIT", help="compare against the agents of COMMIT")
    p.add_argument("--bytes", type=int, default=DEFAULT_BYTES, help="bytes per measured write")
    p.add_argument("--chunk", type=int, default=CHUNK,
                   help="bytes per write, as the bench's flows (0: one write of --bytes)")
    p.add_argument("--depth", type=int, default=DEPTH, help="writes kept outstanding")
    p.add_argument("--runs", type=int, default=3, help="measured transfers per tree")
    add_rate_arg(p, "of every port and host NIC (default: none, unpaced)", None)
    p.add_argument("--rx-hold-ms", type=float, default=DEFAULT_RX_HOLD_MS, metavar="MS",
                   help="this tree's agents hold MS between wake-ups with frames "
                   "(host_agent.loop; default %(default)g, as the testbed's networks; 0: off); "
                   "with --vs the other tree's never do, so `--vs HEAD --rx-hold-ms 5` "
                   "measures the hold alone")
    add_target_arg(p)
    add_json_arg(p)
    return p


def main(argv: list[str] | None = None) -> int:
    p = build_parser()
    args = p.parse_args(argv)
    if args.bytes < 1 or args.runs < 1 or args.depth < 1 or args.chunk < 0:
        p.error("--bytes, --runs and --depth must be positive, --chunk at least 0")
    if os.geteuid() != 0:
        print("bench.costs.agent_speed: needs root (Mininet); run it with sudo", file=sys.stderr)
        return 2
    terminate_as_interrupt()  # the finally below removes the worktree
    log = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    trees = {"new": REPO}
    worktree: Path | None = None
    try:
        if args.vs:
            worktree = Path(tempfile.mkdtemp(prefix="agent-speed-"))
            old = worktree / "tree"
            git("worktree", "add", "--detach", str(old), args.vs)
            trees = {"old": old, "new": REPO}
        report = run(args, trees, log)
    finally:
        if worktree is not None:
            subprocess.run(["git", "worktree", "remove", "--force", str(worktree / "tree")],
                           cwd=REPO, capture_output=True, check=False)
            shutil.rmtree(worktree, ignore_errors=True)
            subprocess.run(["git", "worktree", "prune"], cwd=REPO, capture_output=True,
                           check=False)
    print_report(report)
    write_json(args.json, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
