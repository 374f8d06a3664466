"""Benchmarks: MRC against RoCE-like QPs, kernel TCP and MPTCP on the emulated fabric.

    sudo .venv/bin/python -m bench SCENARIO|all [--quick] [--out DIR] [--target auto|bmv2|soft]
        [--rate PPS|auto] [--contenders LIST] [--fabric NAME] [--planes N --t0 N --t1 N ...]
        [--web [PORT]] [--report FILE] [--json [FILE]]

Scenarios: permutation, link-failure, plane-failure, switch-reboot, flap, incast, allreduce,
loss, victim, startup. Each has a fabric of its own; --fabric (fabric.options, as on every
entry point) runs them all on the one named, except victim, whose incast names its hosts.
Writes DIR/results.json (default results/<UTC timestamp>/), DIR/summary.md and PNG plots
(--json: the same results on stdout's last line, or --json FILE: also there);
docs/benchmarks.md explains every figure. --web serves each contender run live on
127.0.0.1 as it runs; --report writes them all into one HTML file (bench.view). Needs root
(Mininet). Only one emulated fabric can run on a machine at a time (interface names are
global); the bench waits for a busy one.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
import traceback
from collections.abc import Iterable
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path

import venv_entry

if __name__ == "__main__":  # before the heavy imports: re-run with .venv if they are missing
    venv_entry.ensure(("grpc", "mininet", "tqdm", "matplotlib"), "python -m bench",
                      module="bench")

from tqdm import tqdm  # noqa: E402

from bench import calibrate, results, scenarios  # noqa: E402
from bench.context import FULL, QUICK, Context  # noqa: E402
from bench.experiments import paper  # noqa: E402
from bench.runner import CONTENDERS  # noqa: E402
from bench.view import BenchView  # noqa: E402
from emulation import fidelity
from emulation.cluster.cluster import (  # noqa: E402
    add_cluster_args,
    cluster_from_args,
)
from emulation.errors import EmulationError  # noqa: E402
from emulation.netconfig import (  # noqa: E402
    DEFAULT_PORT_RATE_PPS,
    DEFAULT_RX_HOLD_MS,
    MAX_RX_HOLD_MS,
)
from fabric.errors import FabricError  # noqa: E402
from fabric.options import (  # noqa: E402
    add_fabric_args,
    add_json_arg,
    add_link_delay_arg,
    add_rate_arg,
    add_target_arg,
    link_delay_s,
    named_fabric,
)
from safety.errors import SafetyError  # noqa: E402
from views.errors import ViewError  # noqa: E402
from views.liveview import add_view_args  # noqa: E402


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("scenario", help="'all', a scenario, or a comma-separated list of them: "
                   + ", ".join(SCENARIOS))
    p.add_argument("--quick", action="store_true", help="small sizes (CI): minutes, not hours")
    p.add_argument("--out", type=Path, help="output directory (default results/<timestamp>)")
    add_target_arg(p)
    p.add_argument("--contenders", default=",".join(CONTENDERS),
                   help=f"comma-separated subset of {','.join(CONTENDERS)}")
    add_rate_arg(p, "per switch port, or 'auto': calibrate on this machine first "
                 "(bench.calibrate), with headroom (default %(default)s)",
                 DEFAULT_PORT_RATE_PPS, words=("auto",))
    p.add_argument("--rx-hold-ms", type=float, default=DEFAULT_RX_HOLD_MS, metavar="MS",
                   help="the MRC and RoCE-like agents' interrupt moderation: after a wake-up "
                   "with frames they read their NICs again only MS later unless a timer is "
                   "due (host_agent.loop; default %(default)g; 0: off)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (logs only)")
    add_fabric_args(p, default=None)
    add_link_delay_arg(p)
    add_cluster_args(p)
    add_view_args(p, "every contender run")
    add_json_arg(p)
    return p


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = build_parser()
    args = p.parse_args(argv)
    try:
        args.fabric_model = named_fabric(args)
        args.cluster_model = cluster_from_args(args)
    except (FabricError, EmulationError) as exc:  # each unit's base: refused
        p.error(str(exc))
    if not 0.0 <= args.rx_hold_ms <= MAX_RX_HOLD_MS:
        p.error(f"--rx-hold-ms {args.rx_hold_ms}: use 0 (off) to {MAX_RX_HOLD_MS:g} ms")
    names = _names(p, "scenario", args.scenario, SCENARIOS,
                   f"give 'all' or names from {', '.join(SCENARIOS)}", every="all")
    args.scenarios = [n for n in SCENARIOS if n in names]  # the bench's order, once each
    args.contenders = tuple(_names(p, "--contenders", args.contenders, CONTENDERS,
                                   f"choose from {','.join(CONTENDERS)}"))
    return args


def _names(p: argparse.ArgumentParser, what: str, text: str, known: Iterable[str], hint: str,
           every: str | None = None) -> list[str]:
    """A comma-separated list of known names (`every` alone: all of them); anything else is
    refused with `hint`."""
    known = list(known)
    names = [n for n in text.split(",") if n]
    if every is not None and names == [every]:
        return known
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        p.error(f"{what}: unknown {unknown}; {hint}")
    return names


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if os.geteuid() != 0:
        print("bench: needs root (Mininet namespaces and veths); run it with sudo",
              file=sys.stderr)
        return 2
    # SIGTERM unwinds like Ctrl-C, so every running fabric is stopped by its context manager
    # (a background job also starts with SIGINT ignored, leaving SIGTERM as the way to stop it)
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))
    started = datetime.now(timezone.utc)
    out = args.out or Path("results") / started.strftime("%Y%m%dT%H%M%SZ")
    try:  # root writes there: a directory (or a link on the way) of another user is refused
        results.prepare_out_dir(out)
        view = None
        if args.web is not None or args.report is not None:
            view = BenchView(title=f"MRC bench: {', '.join(args.scenarios)} ({args.target})",
                             web_port=args.web, report=args.report)
            url = view.start()
            if url is not None:
                print(f"live view: {url}", file=sys.stderr)
    except (SafetyError, ViewError) as exc:  # each unit's base: refused
        print(f"bench: {exc}", file=sys.stderr)
        return 2
    try:
        return _run(args, argv, started, out, view)
    finally:
        if view is not None:
            line = view.finish()
            if line:
                print(line)


def _run(args: argparse.Namespace, argv: list[str] | None, started: datetime, out: Path,
         view: BenchView | None) -> int:
    """Every scenario asked for, in order; the results, summary and plots in `out`."""
    sizes = QUICK if args.quick else FULL
    names = args.scenarios
    total = sum(runs_expected(n, sizes, args.contenders) for n in names)
    calibration = None
    if args.rate == "auto":
        calibration = calibrate.calibrate(args.target, args.fabric_model or sizes.perm_fabric,
                                          print, args.rx_hold_ms)
        args.rate = calibration["rate_pps"]
    run = {"schema": results.SCHEMA, "command": ["python", "-m", "bench", *(argv or sys.argv[1:])],
           "started": started.isoformat(timespec="seconds"), "quick": args.quick,
           "target": args.target, "contenders": list(args.contenders),
           "environment": results.environment(), "sizes": asdict(sizes), "rate_pps": args.rate,
           "rx_hold_ms": args.rx_hold_ms, "fabric_option": args.fabric,
           "calibration": calibration, "paper": paper.PAPER, "scenarios": {}}
    with tqdm(total=total, unit="run", disable=args.no_progress, file=sys.stderr) as bar:
        def tick(what: str) -> None:
            bar.set_postfix_str(what, refresh=False)
            bar.update(1)

        def log(message: str) -> None:
            bar.write(message, file=sys.stderr)

        for name in names:
            bar.set_description(name)
            ctx = Context(sizes, args.target, log, tick, args.contenders, args.rate,
                          args.rx_hold_ms, args.fabric_model, args.cluster_model,
                          link_delay_s(args), view=view, scenario=name)
            began, cpu = time.monotonic(), fidelity.cpu_times()
            try:
                sc = SCENARIOS[name](ctx)
                sc.update(ok=_all_ok(sc), error=None if _all_ok(sc) else "a flow failed")
            except Exception as exc:  # recorded in the results; the other scenarios still run
                log(traceback.format_exc())
                sc = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
            sc["wall_s"] = time.monotonic() - began
            sc["cpu_busy"] = fidelity.cpu_busy(cpu, fidelity.cpu_times())
            run["scenarios"][name] = sc
            results.write(run, out)  # partial results survive a later crash or Ctrl-C
    return results.publish(run, out, args.json)


SCENARIOS = {**scenarios.SCENARIOS, **paper.SCENARIOS}


def runs_expected(name: str, sizes, contenders: tuple[str, ...]) -> int:
    if name in paper.SCENARIOS:
        return paper.runs_expected(name, contenders)
    return scenarios.runs_expected(name, sizes, contenders)


def _all_ok(sc: dict) -> bool:
    """Whether every contender that ran moved its bytes correctly.

    Failure scenarios where a single-plane contender cannot finish (its NIC is gone) count
    as ok: not finishing is the measurement, so its failed run need only have been measured
    (have a summary). Only MRC runs must always complete. Every other run must say ok
    (_run_ok); one that gives no verdict counts as failed, whoever the contender.
    """
    for name, c in sc.get("contenders", {}).items():
        if "skipped" in c:
            continue
        if "failed" in c:
            if not _run_ok(c["clean"]) or "summary" not in c["failed"]:
                return False
            if name.startswith("mrc") and not _run_ok(c["failed"]):
                return False
        elif not _run_ok(c):
            return False
    return True


def _run_ok(run: dict) -> bool:
    """One contender run's verdict: its summary's ok (bench.context.run_one, and the pooled
    permutation salts); the all-reduce has no flow summary and gives its ok at the top. A run
    with neither did not report, and is not ok."""
    if "summary" in run:
        return bool(run["summary"].get("ok", False))
    return bool(run.get("ok", False))


if __name__ == "__main__":
    sys.exit(main())
