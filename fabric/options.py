"""The options entry points share, each defined once here (docs/architecture.md,
"Command-line conventions"): the fabric, the link delay, --json [FILE], --target, the rates
and --convergence-delay, and the old spellings that still work with a warning.

One way to name a fabric on every command line: `--fabric NAME` or the four sizes.

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

    --json | --json FILE               results as JSON: bare to stdout (last line), or to FILE
                                       (never through a link, nor into a file of another
                                       user's: fabric.outfile)
    --target auto|bmv2|soft            auto: resolve_target, the one rule
    --rate PPS                         packets/s (help starts with the unit)
    --line-rate 10G                    bits/s, the simulator's links
    --convergence-delay S              the baseline's routing hold timer, seconds
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
from collections.abc import Callable
from typing import Any

from fabric.outfile import existing_output_problem, open_output_file, refusal
from fabric.topology import Fabric, TopologyError

# name -> (planes, T0 per plane, T1 per plane, hosts per T0)
PRESETS: dict[str, tuple[int, int, int, int]] = {
    "default": (4, 2, 2, 2),     # 16 switches, 4 hosts, 8 paths per host pair
    "paths-32": (4, 2, 8, 2),    # 40 switches, 32 paths
    "paths-128": (8, 2, 16, 2),  # 144 switches, 128 paths
    "paths-256": (8, 2, 32, 2),  # 272 switches, the paper's 256 paths
    "hosts-16": (8, 8, 8, 2),    # 128 switches, 16 hosts, 64 paths
    # the simulator's sizes (too big to emulate here: emulation.capacity refuses them)
    "hosts-256": (8, 16, 16, 16),   # 256 switches, 256 hosts, 128 paths
    "hosts-1024": (8, 64, 32, 16),  # 768 switches, 1,024 hosts, 256 paths
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


# ---- the options every entry point shares (docs/architecture.md, "Command-line conventions") --

JSON_STDOUT = "-"  # --json given bare: the JSON goes to stdout
JSON_HELP = ("the results as JSON: bare --json prints one JSON object on the last line of "
             "stdout, --json FILE writes it to FILE instead")
TARGETS = ("auto", "bmv2", "soft")
BMV2_TOOLS = ("simple_switch_grpc", "p4c-bm2-ss")  # what BMv2 runs the program from p4src/ with
TARGET_HELP = ("switch implementation: bmv2, soft, or auto (bmv2 where simple_switch_grpc and "
               "p4c-bm2-ss are both on PATH, else soft)")
PACKET_RATE_UNIT = "packets/s"  # the first word of every --rate's help
BIT_RATE_UNIT = "bits/s"  # the first word of --line-rate's help
BIT_RATE_SUFFIXES = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
CONVERGENCE_DELAY_HELP = ("seconds the baseline's routing holds a link-down report before its "
                          "routes avoid the link")


def add_json_arg(p: argparse.ArgumentParser) -> argparse.Action:
    """--json [FILE]: bare, JSON to stdout (args.json == JSON_STDOUT); with FILE, to FILE;
    absent, None. Emit it with write_json(args.json, data). A bare --json takes the next
    word as its FILE unless that is an option: give it after the positional arguments."""
    return p.add_argument("--json", nargs="?", const=JSON_STDOUT, default=None, metavar="FILE",
                          type=json_dest, help=JSON_HELP)


def json_dest(text: str) -> str:
    """--json's value, unchanged; a FILE that write_json would refuse (fabric.outfile: a link,
    a FIFO, another user's file, ...) is refused here already, so a planted file stops the
    command before its run rather than losing the run's results at the end."""
    return text if text == JSON_STDOUT else output_path(text)


def output_path(text: str) -> str:
    """An output FILE option's value (--json FILE, --csv FILE), refused at parsing when
    open_output_file would refuse what is there now."""
    problem = existing_output_problem(text)
    if problem is not None:
        raise argparse.ArgumentTypeError(str(refusal(text, problem)))
    return text


def json_to_stdout(args: argparse.Namespace) -> bool:
    """Whether --json was given bare: stdout then carries the JSON, so logs go to stderr."""
    return getattr(args, "json", None) == JSON_STDOUT


def write_json(dest: str | None, data: Any, *, default: Callable[[Any], Any] | None = None,
               ) -> None:
    """--json's value: JSON_STDOUT prints `data` as one line on stdout, a path gets it written
    there (indented), None does nothing. The path is opened by fabric.outfile.open_output_file
    (we may be root, the path in /tmp): a link, a FIFO, a file of another user or with other
    names raises its UnsafeOutputError and is left untouched."""
    if dest is None:
        return
    if dest == JSON_STDOUT:
        print(json.dumps(data, default=default), flush=True)
    else:
        text = json.dumps(data, indent=1, default=default) + "\n"
        with open_output_file(dest) as out:
            out.write(text.encode())


def bmv2_installed() -> bool:
    """Whether everything BMv2 runs the program with is on PATH (BMV2_TOOLS)."""
    return all(shutil.which(tool) is not None for tool in BMV2_TOOLS)


def resolve_target(choice: str) -> str:
    """The one rule for --target on every entry point: `auto` is `bmv2` where BMv2 is
    installed (bmv2_installed), else `soft`; `bmv2` and `soft` are kept (whoever starts the
    switch says what is missing). ValueError for any other name."""
    if choice not in TARGETS:
        raise ValueError(f"switch target {choice!r} unknown: choose one of {', '.join(TARGETS)}")
    if choice != "auto":
        return choice
    return "bmv2" if bmv2_installed() else "soft"


def add_target_arg(p: argparse.ArgumentParser, default: str = "auto",
                   more: dict[str, str] | None = None) -> argparse.Action:
    """--target {auto,bmv2,soft}, resolved by resolve_target; `more` adds choices of this
    entry point's own (name -> what it does) to the choices and the help."""
    more = more or {}
    extra = "".join(f"; {name}: {what}" for name, what in more.items())
    return p.add_argument("--target", choices=(*TARGETS, *more), default=default,
                          help=f"{TARGET_HELP}{extra}; default %(default)s")


def packet_rate(words: tuple[str, ...] = (), minimum: float = 1,
                kind: type[int] | type[float] = int) -> Callable[[str], int | float | str]:
    """The parser of a --rate in packets/s: a number of `kind` >= minimum, or one of `words`."""
    def parse(text: str) -> int | float | str:
        if text in words:
            return text
        alternatives = "".join(f" or {w!r}" for w in words)
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r}: give {PACKET_RATE_UNIT} (a number >= {minimum:g}){alternatives}"
            ) from None
        if value < minimum:
            raise argparse.ArgumentTypeError(
                f"{text}: give a positive rate in {PACKET_RATE_UNIT} (at least {minimum:g})"
                f"{alternatives}" if minimum > 0 else
                f"{text}: {PACKET_RATE_UNIT} cannot be negative{alternatives}")
        return value
    return parse


def add_rate_arg(p: argparse.ArgumentParser, what: str, default: int | float | str | None, *,
                 words: tuple[str, ...] = (), minimum: float = 1,
                 kind: type[int] | type[float] = int) -> argparse.Action:
    """--rate in packets/s (or one of `words`); its help starts with the unit, then `what`."""
    metavar = "|".join(("PPS", *words))
    return p.add_argument("--rate", type=packet_rate(words, minimum, kind), default=default,
                          metavar=metavar, help=f"{PACKET_RATE_UNIT} {what}")


def bit_rate(text: str) -> float:
    """A rate in bits/s: a number with an optional k, M, G or T suffix (100G, 400M, 2.5e9)."""
    match = re.fullmatch(r"\s*([0-9.]+(?:[eE][+-]?[0-9]+)?)\s*([kKMGT]?)\s*", text)
    try:
        value = float(match.group(1)) * BIT_RATE_SUFFIXES[match.group(2)] if match else None
    except ValueError:
        value = None
    if value is None or not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r}: give {BIT_RATE_UNIT} above 0, a number "
                                         "with an optional k, M, G or T suffix (100G, 400M)")
    return value


def format_bit_rate(bps: float) -> str:
    """bit_rate's inverse for the round figures of help texts: 10e9 -> '10G'."""
    for suffix in "TGMk":
        scale = BIT_RATE_SUFFIXES[suffix]
        if bps >= scale and bps % scale == 0:
            return f"{bps / scale:g}{suffix}"
    return f"{bps:g}"


def add_line_rate_arg(p: argparse.ArgumentParser, default_bps: float) -> argparse.Action:
    """--line-rate RATE: every link's rate in bits/s (bit_rate), the simulator's."""
    return p.add_argument("--line-rate", type=bit_rate, default=default_bps, metavar="RATE",
                          help=f"{BIT_RATE_UNIT} of every link: a number with an optional k, M, "
                               f"G or T suffix (100G, 400M, 2.5e9; default "
                               f"{format_bit_rate(default_bps)})")


def add_convergence_delay_arg(p: argparse.ArgumentParser, default_s: float) -> argparse.Action:
    """--convergence-delay SECONDS: the conventional baseline's routing hold timer."""
    return p.add_argument("--convergence-delay", type=float, default=default_s, metavar="S",
                          help=f"{CONVERGENCE_DELAY_HELP} (default %(default)g)")


def add_queue_args(p: argparse.ArgumentParser, *, ecn: int, trim: int,
                   depth: int | None = None) -> argparse.Action | None:
    """--queue-depth (when `depth` is given), --ecn-threshold and --trim-threshold: one
    spelling and one help for an egress queue's size and marks, in packets, wherever a fabric
    is built (the demo, the simulator, the controller). Returns --queue-depth's action."""
    action = None
    if depth is not None:
        action = p.add_argument("--queue-depth", type=int, default=depth, metavar="PACKETS",
                                help="packets an egress queue holds before it drops "
                                     "(default %(default)s)")
    p.add_argument("--ecn-threshold", type=int, default=ecn, metavar="PACKETS",
                   help="packets queued at an egress port before it marks ECN CE "
                        "(default %(default)s)")
    p.add_argument("--trim-threshold", type=int, default=trim, metavar="PACKETS",
                   help="packets queued at an egress port before it trims data packets to "
                        "their headers (default %(default)s)")
    return action


def add_seed_arg(p: argparse.ArgumentParser, default: int = 1) -> argparse.Action:
    """--seed: the one random seed of a run, so that the same seed gives the same result."""
    return p.add_argument("--seed", type=int, default=default,
                          help="random seed: the same seed gives the same run "
                               "(default %(default)s)")


class _DeprecatedSpelling(argparse.Action):
    """An option's old spelling: stores into the new one's dest, saying so on stderr."""

    def __init__(self, option_strings: list[str], dest: str, *, new: str,
                 **kwargs: Any) -> None:
        super().__init__(option_strings, dest, **kwargs)
        self.new = new

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        print(f"{parser.prog}: {option_string} is deprecated: use {self.new} (same value)",
              file=sys.stderr)
        setattr(namespace, self.dest, values)


def add_deprecated_spelling(p: argparse.ArgumentParser, old: str,
                            new: argparse.Action) -> argparse.Action:
    """`old` keeps working as `new` (same type, same dest), warning on stderr with the new
    spelling; it is left out of --help."""
    return p.add_argument(old, dest=new.dest, type=new.type, metavar=new.metavar,
                          default=argparse.SUPPRESS, help=argparse.SUPPRESS,
                          action=_DeprecatedSpelling, new=new.option_strings[0])
