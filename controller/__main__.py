"""`python -m controller`: program a running fabric, export host paths, open a switch shell.

    python -m controller install --planes 4 --t0 2 --t1 2 --hosts-per-t0 2 --target soft
    python -m controller paths --planes 4 --json > paths.json     # or: --json paths.json
    python -m controller tables --switch p0l0
    python -m controller shell p0l0 --planes 4
    python -m controller serve --convergence-delay 3.0   # install, then read link events

`serve` keeps the controller primary and runs the conventional-network baseline: stdin lines
`down A B`, `up A B` (a cable between nodes A and B), `reinstall SWITCH`, `verify`, `quit`.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import venv_entry

if __name__ == "__main__":  # before grpc is imported: re-run with .venv if it is missing
    venv_entry.ensure(("grpc", "p4runtime_sh"), "python -m controller", module="controller")

from controller import convergence, install, shell  # noqa: E402
from controller.errors import ControllerError  # noqa: E402
from controller.tables import PortThresholds, fabric_tables  # noqa: E402
from fabric import hostpaths  # noqa: E402
from fabric.errors import FabricError  # noqa: E402
from fabric.options import (  # noqa: E402
    add_convergence_delay_arg,
    add_deprecated_spelling,
    add_fabric_args,
    add_json_arg,
    add_queue_args,
    add_target_arg,
    fabric_from_args,
    json_to_stdout,
    resolve_target,
    write_json,
)
from fabric.topology import TopologyError  # noqa: E402
from p4rt.errors import P4rtError  # noqa: E402
from p4rt.tls import ClientTls, load_addresses  # noqa: E402


def fabric_args(p: argparse.ArgumentParser) -> None:
    add_fabric_args(p)
    add_queue_args(p, ecn=PortThresholds.ecn, trim=PortThresholds.trim)


def tls_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tls-dir", type=Path, default=None,
                   help="the run's P4Runtime keys and its switches' addresses (a testbed "
                        "fabric's: /run/mrc-testbed, as root); without it, plaintext, for "
                        "switches started without TLS")


def install_args(p: argparse.ArgumentParser) -> None:
    tls_arg(p)
    add_target_arg(p, default="soft")  # the switches running: auto is the fabric's own rule
    p.add_argument("--timeout", type=float, default=install.DEFAULT_TIMEOUT,
                   help="deadline of every P4Runtime call, seconds (default %(default)s)")
    p.add_argument("--switch", action="append", default=None,
                   help="only these switches (repeatable; default: all)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m controller", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("install", help="program every switch and verify by reading back")
    fabric_args(p)
    install_args(p)
    p = sub.add_parser("serve", help="install, then converge baseline routes on link events")
    fabric_args(p)
    install_args(p)
    add_deprecated_spelling(p, "--delay",
                            add_convergence_delay_arg(p, convergence.DEFAULT_DELAY))
    p = sub.add_parser("paths", help="host path sets (PathInfo data) for the host agents")
    fabric_args(p)
    p.add_argument("--src", type=int, default=None, help="only paths leaving this host")
    add_json_arg(p)
    p = sub.add_parser("tables", help="print the computed entries of switches")
    fabric_args(p)
    p.add_argument("--switch", action="append", default=None,
                   help="only these switches (repeatable; default: all)")
    p = sub.add_parser("shell", help="p4runtime-sh on one switch (backup client)")
    p.add_argument("name", help="switch name, e.g. p0l0")
    fabric_args(p)
    tls_arg(p)
    return parser


def report(results: list[install.SwitchResult], seconds: float) -> int:
    for r in results:
        state = "ok" if r.ok else "FAILED"
        print(f"  {r.name:10s} {state:6s} {r.entities:5d} entities  {r.seconds * 1000:8.1f} ms")
    failed = [r for r in results if not r.ok]
    total = sum(r.entities for r in results)
    print(f"{len(results) - len(failed)}/{len(results)} switches programmed, {total} entities, "
          f"{seconds:.3f} s")
    for r in failed:
        print(f"error: {r.error}", file=sys.stderr)
    return 1 if failed else 0


def serve(ctl: install.Controller, delay: float) -> int:
    conv = convergence.Convergence(ctl.fabric, ctl, delay=delay, thresholds=ctl.thresholds)
    print(f"serving: convergence delay {delay} s; commands: down A B | up A B | "
          "reinstall SWITCH | verify | quit", flush=True)
    try:
        for line in sys.stdin:
            words = line.split()
            try:
                if words[:1] in (["down"], ["up"]) and len(words) == 3:
                    (conv.link_down if words[0] == "down" else conv.link_up)(words[1], words[2])
                    print(f"ok {line.strip()}", flush=True)
                elif words[:1] == ["reinstall"] and len(words) == 2:
                    r = ctl.install(words[1])
                    print(f"{'ok' if r.ok else 'error'} reinstall {r.name} {r.error}".rstrip(),
                          flush=True)
                elif words == ["verify"]:
                    errors = [e for e in map(ctl.verify, ctl.current) if e]
                    print("ok verify" if not errors else "error " + "; ".join(errors), flush=True)
                elif words == ["quit"]:
                    break
                elif words:
                    print(f"error unknown command {line.strip()!r}", flush=True)
            except (TopologyError, install.InstallError) as err:
                print(f"error {err}", flush=True)
    finally:
        if isinstance(conv.scheduler, convergence.ThreadScheduler):
            conv.scheduler.cancel()
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        fabric = fabric_from_args(args)
        thresholds = PortThresholds(ecn=args.ecn_threshold, trim=args.trim_threshold)
        if args.command == "paths":
            data = hostpaths.export(fabric, args.src)
            write_json(args.json, data)
            if not json_to_stdout(args):
                for p in data["paths"]:
                    spine = "-" if p["spine"] is None else p["spine"]
                    print(f"h{p['src_host']} -> h{p['dst_host']} plane {p['plane']} "
                          f"spine {spine}: {p['route']}")
            return 0
        if args.command == "tables":
            tables = fabric_tables(fabric, thresholds=thresholds)
            for name in args.switch or list(tables):
                if name not in tables:
                    raise TopologyError(f"no switch {name!r} in {fabric}")
                print(f"{name}:")
                for entity in tables[name].entities():
                    print(f"  {entity}")
            return 0
        # a run records where its switches listen next to its keys (safety.runports)
        addresses = load_addresses(args.tls_dir) if args.tls_dir else {}
        if args.command == "shell":
            return shell.run(fabric, args.name, addresses.get(args.name), tls_dir=args.tls_dir)
        start = time.monotonic()
        client = ClientTls.load(args.tls_dir) if args.tls_dir else None
        ctl = install.Controller(fabric, resolve_target(args.target), args.timeout, thresholds,
                                 addresses=addresses, tls=client)
        try:
            results = ctl.install_all(args.switch)
            code = report(results, time.monotonic() - start)
            if args.command == "serve" and code == 0:
                code = serve(ctl, args.convergence_delay)
            return code
        finally:
            ctl.close()
    except (FabricError, ControllerError, P4rtError) as err:  # each unit's base: refused
        print(f"controller: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
