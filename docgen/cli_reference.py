"""docs/cli.md, the command-line reference, written from the parsers themselves.

Why generated: a hand-kept list of options drifts the day someone adds one. Each entry point's
`build_parser()` (or `_parser()`) is the one definition of its options; this module walks the
parser (and its subcommands) and writes every option with its help text, the `./testbed`
commands from the script's own `--help`, and the Mininet CLI's `mrc_*` commands from their
docstrings. `python -m docgen --check` (and tests/unit/test_docgen_cli.py) fails when the
committed page differs from what the code says.

    python -m docgen.cli_reference            rewrite docs/cli.md
    python -m docgen.cli_reference --check    exit 1 if docs/cli.md is stale
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "docs" / "cli.md"
TESTBED = ROOT / "testbed"
CHECK_COMMAND = "python -m docgen.cli_reference"

# Entry points held to the shared options (tests/unit/test_cli_conventions.py):
# name -> (module, its parser's builder, the fewest arguments it parses).
ENTRY_POINTS: dict[str, tuple[str, str, list[str]]] = {
    "topologies/two_tier.py": ("topologies.two_tier", "build_parser", []),
    "python -m sim": ("sim.__main__", "_parser", ["clean"]),
    "python -m bench": ("bench.__main__", "build_parser", ["all"]),
    "python -m bench.costs.scale": ("bench.costs.scale", "build_parser", ["curve"]),
    "python -m bench.costs.view_cost": ("bench.costs.view_cost", "build_parser", []),
    "python -m bench.costs.agent_speed": ("bench.costs.agent_speed", "build_parser", []),
    "python -m bench.costs.soak": ("bench.costs.soak", "build_parser", []),
    "python -m bench.costs.switch_speed": ("bench.costs.switch_speed", "build_parser", []),
    "python -m bench.costs.forwarding": ("bench.costs.forwarding", "build_parser", []),
    "python -m bench.costs.live_cost": ("bench.costs.live_cost", "build_parser", []),
    "python -m bench.simulated.sim_speed": ("bench.simulated.sim_speed", "build_parser", []),
    "python -m bench.simulated.sim_scale": ("bench.simulated.sim_scale", "build_parser", []),
    "python -m bench.simulated.agreement": ("bench.simulated.agreement", "build_parser", []),
    "python -m bench.simulated.sim_bench": ("bench.simulated.sim_bench", "build_parser", ["all"]),
    "python -m controller": ("controller.__main__", "build_parser", ["paths"]),
    "python -m grader": ("grader.__main__", "build_parser", ["grade", "1"]),
}
# Commands users type that share none of those options: in the reference all the same.
TOOLS: dict[str, tuple[str, str]] = {
    "python -m host_agent.cli": ("host_agent.cli", "build_parser"),
    "python -m softswitch.cli": ("softswitch.cli", "build_parser"),
    "python -m wire.dissector": ("wire.dissector", "build_parser"),
}
HEADER = """# Command-line reference

Every command and option of the testbed, written from the code by `{check}`
(do not edit by hand: a test fails when this page and the parsers disagree). Options shared
by several entry points are spelled and explained once (`fabric/options.py`; the rules:
docs/architecture.md, "Command-line conventions"). Commands that change the machine run as
root (`sudo`); every `--help` works for any user.
"""


def parser_of(module: str, builder: str) -> argparse.ArgumentParser:
    return getattr(importlib.import_module(module), builder)()


def commands() -> list[tuple[str, str, argparse.ArgumentParser]]:
    """(name, module, parser) of every command the reference lists: the entry points, then
    the tools."""
    found = [(name, module, parser_of(module, builder))
             for name, (module, builder, _) in ENTRY_POINTS.items()]
    return found + [(name, module, parser_of(module, builder))
                    for name, (module, builder) in TOOLS.items()]


def walk(name: str, parser: argparse.ArgumentParser
         ) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """A parser and each of its subcommands' (and theirs), named as typed."""
    yield name, parser
    for sub, (child, _) in subcommands(parser).items():
        yield from walk(f"{name} {sub}", child)


def _expand(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    """An action's help with its %(default)s and the like filled in, on one line."""
    if not action.help:
        return ""
    text = parser._get_formatter()._expand_help(action)
    return " ".join(text.split())


def _option_cell(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{action.metavar or action.dest}`"
    if action.nargs == 0:
        return ", ".join(f"`{o}`" for o in action.option_strings)
    meta = action.metavar or (("{" + ",".join(map(str, action.choices)) + "}")
                              if action.choices else action.dest.upper())
    meta = " ".join(meta) if isinstance(meta, tuple) else meta
    if action.nargs == "?":
        meta = f"[{meta}]"
    return ", ".join(f"`{o} {meta}`" for o in action.option_strings)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def visible_actions(parser: argparse.ArgumentParser) -> Iterator[argparse.Action]:
    """The actions --help shows, but its own -h (every parser has it)."""
    for action in parser._actions:
        if action.help == argparse.SUPPRESS or isinstance(action, argparse._HelpAction):
            continue
        if isinstance(action, argparse._SubParsersAction):
            continue
        yield action


def subcommands(parser: argparse.ArgumentParser
                ) -> dict[str, tuple[argparse.ArgumentParser, str]]:
    """name -> (its parser, the help its parent gives it)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            said = {a.dest: a.help or "" for a in action._choices_actions}
            return {name: (sub, said.get(name, "")) for name, sub in action.choices.items()}
    return {}


def _description(parser: argparse.ArgumentParser) -> str:
    """The first paragraph of a parser's description (its module docstring, often)."""
    text = (parser.description or "").strip().split("\n\n")[0]
    return " ".join(text.split())


def render_parser(name: str, parser: argparse.ArgumentParser, level: int = 2,
                  summary: str = "") -> list[str]:
    lines = [f"{'#' * level} `{name}`", ""]
    about = _description(parser) or " ".join(summary.split())
    if about:
        lines += [about, ""]
    rows = [f"| {_cell(_option_cell(a))} | {_cell(_expand(parser, a))} |"
            for a in visible_actions(parser)]
    if rows:
        lines += ["| option | what it does |", "|---|---|", *rows, ""]
    for sub, (child, said) in subcommands(parser).items():
        lines += render_parser(f"{name} {sub}", child, min(level + 1, 4), said)
    return lines


def testbed_help() -> str:
    """`./testbed --help`, as any user sees it (the script's own text, one definition)."""
    out = subprocess.run(["bash", str(TESTBED), "--help"], capture_output=True,
                         text=True, check=True, timeout=30)
    return out.stdout.rstrip()


def mininet_commands() -> list[tuple[str, str]]:
    """(usage, what it does) of each `mrc_*` command in the Mininet CLI, from its docstring."""
    cli = importlib.import_module("topologies.cli_commands")
    found = []
    for name, fn in inspect.getmembers(cli.MrcCLI, inspect.isfunction):
        if name.startswith("do_mrc_") and fn.__doc__:
            usage, _, what = fn.__doc__.strip().partition(": ")
            found.append((usage, " ".join(what.split())))
    return found


def render() -> str:
    lines = [HEADER.format(check=CHECK_COMMAND), "## `./testbed`", "", "```text",
             testbed_help(), "```", ""]
    for name, (module, builder, _) in ENTRY_POINTS.items():
        lines += render_parser(name, parser_of(module, builder))
    lines += ["## The Mininet CLI (`two_tier.py` without `--no-cli`)", "",
              "| command | what it does |", "|---|---|"]
    lines += [f"| `{_cell(u)}` | {_cell(w)} |" for u, w in mininet_commands()]
    lines.append("")
    for name, (module, builder) in TOOLS.items():
        lines += render_parser(name, parser_of(module, builder))
    text = "\n".join(lines)
    return re.sub(r"\n{3,}", "\n\n", text).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog=CHECK_COMMAND, description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--check", action="store_true",
                   help="write nothing; exit 1 if docs/cli.md differs from the parsers")
    args = p.parse_args(argv)
    text = render()
    if args.check:
        if REFERENCE.read_text() != text:
            print(f"{REFERENCE.name} is stale: run {CHECK_COMMAND}", file=sys.stderr)
            return 1
        return 0
    REFERENCE.write_text(text)
    print(f"wrote {REFERENCE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
