"""Multi-plane two-tier MRC fabric in Mininet: build, program, start agents, demo a link failure.

Run as root with the project's virtualenv (it has grpc/protobuf; Debian's Mininet is visible
through system site-packages):

    sudo .venv/bin/python topologies/two_tier.py                 # demo, report, then the CLI
    sudo .venv/bin/python topologies/two_tier.py --no-cli --json      # or --json FILE
    sudo .venv/bin/python topologies/two_tier.py --baseline      # 1 plane, single-path ECMP
    sudo ./testbed demo                                          # same as --no-cli

The demo writes from the first host to the last (across spines) for about six seconds; one
second in, the plane-0 link from the source T0 to spine 0 goes down, two seconds later it comes
back. The report shows per-plane and per-path traffic, EVs retired and reinstated, trims, NACKs,
goodput against the flow's capacity (planes x port rate x 1024-byte payloads), the time to
bypass the failed link (also in RTTs), EVs retired on the failed and on healthy routes, the
goodput in the second after the failure against the clean goodput before it, and the checks
(demo/run.py).

Mininet CLI commands (after the demo, when stdin is a terminal; `mrc_help` lists them):
    mrc_write SRC DST BYTES [single]   mrc_link down|up A B    mrc_reboot SWITCH
    mrc_nic down|up HOST PLANE         mrc_stats [HOST] [json]

Port rate: by default (--rate auto) the fabric first runs the demo's transfer with unlimited
ports and the rate is 40% of what its busiest port sustained (emulation.calibration): the
emulated links, not the CPUs, then set the pace, for this fabric, target and machine. The
report says which rate was picked and why. --rate target takes the fixed 500 packets/s of the
software switch or 250 of BMv2 (docs/decisions.md, "Port rate").
Everything started is stopped by PID on exit, error or Ctrl-C; Mininet removes its
veths and namespaces.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from contextlib import ExitStack
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
VENV_PYTHON = REPO / ".venv" / "bin" / "python"


def _bootstrap() -> None:
    """Make the repository importable; re-run with the project virtualenv when this
    interpreter lacks what the fabric needs (venv_entry)."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    import venv_entry

    venv_entry.ensure(("grpc", "mininet"), sys.argv[0])


def build_parser() -> argparse.ArgumentParser:
    from controller.tables import DEFAULT_ECN_THRESHOLD, DEFAULT_TRIM_THRESHOLD
    from emulation.cluster.cluster import add_cluster_args
    from emulation.netconfig import (
        BMV2_PORT_RATE_PPS,
        DEFAULT_PORT_RATE_PPS,
        DEFAULT_QUEUE_DEPTH,
        DEFAULT_RX_HOLD_MS,
    )
    from fabric.options import (
        add_convergence_delay_arg,
        add_fabric_args,
        add_json_arg,
        add_link_delay_arg,
        add_queue_args,
        add_rate_arg,
        add_target_arg,
    )
    from views.liveview import add_view_args

    p = argparse.ArgumentParser(prog="two_tier.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_fabric_args(p)
    add_link_delay_arg(p)
    add_cluster_args(p)
    add_rate_arg(p, "of every switch port and host NIC; 'auto' (the default) measures what "
                 "this machine emulates faithfully for the fabric and target first "
                 "(emulation.calibration); 'target' takes the target's fixed rate "
                 f"({DEFAULT_PORT_RATE_PPS} software switch, {BMV2_PORT_RATE_PPS} BMv2); "
                 "0 = unlimited, then the CPU is the bottleneck", "auto",
                 words=("auto", "target"), minimum=0)
    add_queue_args(p, depth=DEFAULT_QUEUE_DEPTH, ecn=DEFAULT_ECN_THRESHOLD,
                   trim=DEFAULT_TRIM_THRESHOLD)
    add_target_arg(p)
    p.add_argument("--baseline", action="store_true",
                   help="one plane, single-path agents (RoCE-like, switches route by LPM/ECMP)")
    add_convergence_delay_arg(p, 3.0)
    p.add_argument("--rx-hold-ms", type=float, default=DEFAULT_RX_HOLD_MS,
                   help="agents read their NICs at most once per this many ms while frames "
                   "keep coming, unless a timer is due (interrupt moderation; default "
                   "%(default)g; 0: off)")
    p.add_argument("--no-demo", action="store_true", help="skip the demo transfer")
    p.add_argument("--no-cli", action="store_true", help="exit after the report")
    p.add_argument("--script", metavar="FILE",
                   help="run the CLI commands in FILE, one per line (mrc_link cut p0l1 h3, "
                   "mrc_write 0 3 100000, ...) instead of the interactive CLI; the exit "
                   "status is 1 if any failed")
    add_view_args(p, "the demo")
    add_json_arg(p)
    p.add_argument("--workdir", help="keep switch and agent logs here (default: a temp dir, "
                   "removed on exit)")
    return p


def main(argv: list[str] | None = None) -> int:
    _bootstrap()
    from mininet.log import setLogLevel

    from demo.report import format_report
    from demo.run import run_demo
    from emulation.cluster.cluster import cluster_from_args
    from emulation.errors import EmulationError
    from emulation.network import MrcNetwork, NetworkConfig
    from fabric.errors import FabricError
    from fabric.options import fabric_from_args, json_to_stdout, link_delay_s, write_json
    from fabric.topology import Fabric
    from nodes.errors import NodeError
    from safety.errors import SafetyError
    from safety.runstate import terminate_as_interrupt
    from topologies.cli_commands import MrcCLI
    from views.errors import ViewError
    from views.liveview import start_view
    from views.runreport import check_report_path, write_report

    args = build_parser().parse_args(argv)
    if os.geteuid() != 0:
        print("two_tier.py: run as root (Mininet needs it): "
              f"sudo {VENV_PYTHON} {Path(sys.argv[0]).resolve()}", file=sys.stderr)
        return 2
    setLogLevel("warning")
    log = (lambda *a: print(*a, file=sys.stderr)) if json_to_stdout(args) else print
    try:
        fabric = fabric_from_args(args)
        if args.baseline:  # the conventional network: one plane of the same shape
            fabric = Fabric(1, fabric.t0_per_plane, fabric.t1_per_plane, fabric.hosts_per_t0)
        config = NetworkConfig(fabric=fabric, target=args.target,
                               port_rate_pps=args.rate if isinstance(args.rate, str)
                               else args.rate or None, queue_depth=args.queue_depth,
                               ecn_threshold=args.ecn_threshold,
                               trim_threshold=args.trim_threshold,
                               convergence_delay=args.convergence_delay,
                               single_path=args.baseline, rx_hold_ms=args.rx_hold_ms,
                               cluster=cluster_from_args(args),
                               link_delay_s=link_delay_s(args))
        if args.report:
            check_report_path(Path(args.report))
    except (FabricError, EmulationError, SafetyError, ViewError, ValueError) as exc:
        print(f"two_tier.py: {exc}", file=sys.stderr)
        return 2
    terminate_as_interrupt()  # so the `with` block below cleans up on SIGTERM too
    workdir = Path(args.workdir) if args.workdir else None
    try:
        with MrcNetwork(config, workdir=workdir, log=log) as net, ExitStack() as views:
            net.start()
            if args.web is not None:
                log(f"live view: {start_view(net, views, args.web, args.baseline)}")
            if not args.no_demo:
                report = run_demo(net, single_path=args.baseline, log=log,
                                  record=args.report is not None)
                report["rate_choice"] = net.rate_choice
                log(format_report(report))
                if args.report:
                    size = write_report(Path(args.report), [report.pop("recording")],
                                        title=f"MRC demo on {fabric.planes} planes "
                                              f"({config.target})")
                    log(f"report: {args.report} ({size} bytes); open it in a browser")
            if args.script:
                if MrcCLI(net, script=args.script, views=views).failures:
                    return 1
            elif not args.no_cli and sys.stdin.isatty():
                MrcCLI(net, views=views)
            if not args.no_demo:
                write_json(args.json, report, default=str)
            if not args.no_demo and not report["transfer"]["ok"]:
                return 1
    except KeyboardInterrupt:
        print("interrupted: everything started was stopped", file=sys.stderr)
        return 130
    except (EmulationError, SafetyError, NodeError, FabricError, ViewError, OSError) as exc:
        print(f"two_tier.py: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    try:
        code = main()
    except KeyboardInterrupt:  # during start-up imports, before anything was started
        print("interrupted before the fabric started", file=sys.stderr)
        code = 130
    # Everything is stopped. A Ctrl-C from here on has nothing to stop; left to Python, one
    # that lands while the interpreter shuts down (its handlers reset to the default) would
    # kill it with SIGINT instead of this exit code. An ignored signal is not reset.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.exit(code)
