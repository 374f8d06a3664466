"""One way to name a fabric on every command line: `--fabric NAME` or the four sizes.

    --fabric paths-128                 a preset (PRESETS)
    --fabric paths-128 --t1 8          a preset with one size changed
    --planes 4 --t0 2 --t1 8           sizes; the ones not given come from the default preset

Entry points call `add_fabric_args(parser)` and `fabric_from_args(args)` instead of declaring
their own sizes and defaults. A fabric the addressing cannot hold (planes, switch indices,
interface names: fabric.topology.Fabric's checks) is refused by `fabric_from_args` with
Fabric's reason.

Paths per host pair on different T0s are planes x T1 (one route per spine per plane): the
presets are named for that figure, or for the number of hosts.

    --link-delay 2.5                   every link's propagation delay, each way, milliseconds

The delay is part of the fabric: the emulation's software switches hold each frame that long
on every link, the simulator's links take it, and the agents' base RTT counts it.
"""

from __future__ import annotations

import argparse

from fabric.topology import Fabric, TopologyError

# name -> (planes, T0 per plane, T1 per plane, hosts per T0)
PRESETS: dict[str, tuple[int, int, int, int]] = {
    "default": (4, 2, 2, 2),     # 16 switches, 4 hosts, 8 paths per host pair
    "paths-32": (4, 2, 8, 2),    # 40 switches, 32 paths
    "paths-128": (8, 2, 16, 2),  # 144 switches, 128 paths
    "paths-256": (8, 2, 32, 2),  # 272 switches, the paper's 256 paths
    "hosts-16": (8, 8, 8, 2),    # 128 switches, 16 hosts, 64 paths
}
MAX_LINK_DELAY_MS = 1000.0  # a fabric link of a second would be a satellite hop
SIZES = (("planes", "planes"), ("t0", "T0 (leaf) switches per plane"),
         ("t1", "T1 (spine) switches per plane"), ("hosts_per_t0", "hosts per T0 switch"))


def add_fabric_args(p: argparse.ArgumentParser, default: str | None = "default") -> None:
    """--fabric NAME and --planes/--t0/--t1/--hosts-per-t0 (each overriding the preset's).
    default=None: an entry point whose commands have fabrics of their own (bench, sim) uses
    them unless a fabric is named (named_fabric)."""
    names = ", ".join(f"{n} {'x'.join(map(str, s))}" for n, s in PRESETS.items())
    p.add_argument("--fabric", default=default, choices=sorted(PRESETS), metavar="NAME",
                   help=f"a named fabric, planes x T0 x T1 x hosts per T0 ({names}); "
                        + ("default %(default)s" if default else "default: each scenario's own"))
    for dest, what in SIZES:
        p.add_argument(f"--{dest.replace('_', '-')}", dest=dest, type=int, default=None,
                       help=f"{what} (default: the --fabric preset's)")


def add_link_delay_arg(p: argparse.ArgumentParser, default_ms: float = 0.0) -> None:
    """--link-delay MS, on the entry points that build a fabric (two_tier.py, bench, sim)."""
    p.add_argument("--link-delay", type=_delay_ms, default=default_ms, metavar="MS",
                   help="propagation delay of every link, each way, in milliseconds "
                        "(default %(default)g)")


def _delay_ms(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give milliseconds, e.g. 2.5") from None
    if not 0.0 <= value <= MAX_LINK_DELAY_MS:
        raise argparse.ArgumentTypeError(f"{value:g} ms: the link delay must be 0 to "
                                         f"{MAX_LINK_DELAY_MS:g} ms")
    return value


def link_delay_s(args: argparse.Namespace) -> float:
    """--link-delay in seconds."""
    return float(args.link_delay) / 1000.0


def named_fabric(args: argparse.Namespace) -> Fabric | None:
    """fabric_from_args, or None when neither a preset nor a size was given (on a parser
    whose --fabric default is None)."""
    if args.fabric is None and all(getattr(args, dest) is None for dest, _ in SIZES):
        return None
    return fabric_from_args(args)


def fabric_from_args(args: argparse.Namespace) -> Fabric:
    """The fabric the options name; TopologyError (with Fabric's reason) if it cannot be."""
    given = [getattr(args, dest) for dest, _ in SIZES]
    preset = PRESETS[args.fabric or "default"]
    sizes = [g if g is not None else p for g, p in zip(given, preset, strict=True)]
    try:
        return Fabric(*sizes)
    except TopologyError as exc:
        raise TopologyError(f"fabric {'x'.join(map(str, sizes))} "
                            f"(--fabric {args.fabric or 'default'} and the sizes given): "
                            f"{exc}") from None
