"""One convention for the options entry points share (docs/architecture.md, "Command-line
conventions"): every parser takes --json [FILE], --target, the rates and --convergence-delay
from fabric.options, `auto` resolves by one rule everywhere, and old spellings still work
with a warning that names the new one."""

from __future__ import annotations

import argparse
import ast
import importlib
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from docgen import cli_reference
from fabric import options
from fabric.options import (
    CONVERGENCE_DELAY_HELP,
    JSON_HELP,
    JSON_STDOUT,
    PACKET_RATE_UNIT,
    TARGET_HELP,
    TARGETS,
    add_deprecated_spelling,
    bit_rate,
    resolve_target,
    write_json,
)

ROOT = Path(__file__).resolve().parents[2]

# entry point -> (module, its parser's builder, the fewest arguments it parses): one list,
# the CLI reference's (docs/cli.md)
ENTRY_POINTS = cli_reference.ENTRY_POINTS
# Parsers with none of the shared options, or internal processes the entry points above start.
NOT_USER_ENTRY_POINTS = {
    "bench/contenders/kernel_flows.py":
        "server/client inside Mininet hosts; always one JSON line each",
    "bench/inject.py": "frame injector run by bench.costs.soak in a host",
    "emulation/cluster/serverrun.py": "the ssh session on another server of a cluster run",
    "docgen/__main__.py": "rewrites the generated documents: no shared option",
    "docgen/cli_reference.py": "rewrites docs/cli.md: no shared option",
    "docgen/picture.py": "rewrites docs/fabric.svg: no shared option",
    "grader/inner.py": "the sandboxed half of the grader, given a concrete target",
    "softswitch/__main__.py": "the switch process: no shared option",
    "softswitch/cli.py": "the switch's runtime CLI: no shared option",
    "wire/dissector.py": "writes the Wireshark dissector: no shared option",
    "host_agent/agent.py": "the agent process, started by topologies: no shared option",
    "host_agent/cli.py": "the agent's control CLI: --json prints the raw control response "
                         "(a flag before a subcommand, not results); not converted yet",
}
# What each entry point must have (beyond what it may have).
EXPECTED = {
    "python -m sim": {"--json", "--line-rate", "--convergence-delay"},
    "python -m bench": {"--json", "--target", "--rate"},
    "python -m bench.costs.scale": {"--json", "--target", "--rate"},
    "python -m bench.costs.view_cost": {"--json", "--target", "--rate"},
    "python -m bench.costs.agent_speed": {"--json", "--target", "--rate"},
    "python -m bench.costs.soak": {"--json", "--target"},
    "python -m bench.costs.switch_speed": {"--json", "--rate"},
    "python -m bench.costs.forwarding": {"--json", "--target"},
    "python -m bench.costs.live_cost": {"--json", "--rate", "--fabric"},
    "python -m bench.simulated.sim_speed": {"--json", "--fabric"},
    "python -m bench.simulated.sim_scale": {"--json"},
    "python -m bench.simulated.agreement": {"--json", "--target"},
    "python -m bench.simulated.sim_bench": {"--json", "--fabric"},
    "topologies/two_tier.py": {"--json", "--target", "--rate", "--convergence-delay"},
    "python -m controller": {"--json", "--target", "--convergence-delay"},
    "python -m grader": {"--json", "--target"},
}
DEPRECATED = {("python -m sim", "--rate"): "--line-rate",
              ("python -m sim", "--queue"): "--queue-depth",
              ("python -m controller", "--delay"): "--convergence-delay"}


def parser_of(name: str) -> argparse.ArgumentParser:
    module, builder, _ = ENTRY_POINTS[name]
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.split(".")[0] == "mininet":
            pytest.skip(f"{module} imports Mininet, not installed here")
        raise
    return getattr(mod, builder)()


def actions(parser: argparse.ArgumentParser, where: str = "") -> Iterator[tuple[str, Any]]:
    """(subcommand path, action) for every action of a parser and its subparsers."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from actions(sub, f"{where} {name}".strip())
        else:
            yield where, action


def by_option(parser: argparse.ArgumentParser) -> dict[str, list[Any]]:
    found: dict[str, list[Any]] = {}
    for _, action in actions(parser):
        for opt in action.option_strings:
            found.setdefault(opt, []).append(action)
    return found


def subparser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    return next(a for a in parser._actions
                if isinstance(a, argparse._SubParsersAction)).choices[name]


def fake_path(monkeypatch: pytest.MonkeyPatch, *on_path: str) -> None:
    """Only these programs are on PATH (for everyone: shutil is one module)."""
    monkeypatch.setattr(options.shutil, "which",
                        lambda name, *a, **k: f"/usr/bin/{name}" if name in on_path else None)


PATHS = [(), ("simple_switch_grpc",), ("p4c-bm2-ss",), ("simple_switch_grpc", "p4c-bm2-ss")]


# ---- every entry point is known, and uses the shared definitions ------------------------------

def _parser_modules() -> set[str]:
    """Production modules that construct an ArgumentParser."""
    found = set()
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT)
        if {".venv", "build", ".git", "tests"} & set(rel.parts):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and (
                    getattr(node.func, "attr", None) == "ArgumentParser"
                    or getattr(node.func, "id", None) == "ArgumentParser"):
                found.add(str(rel))
    return found


def _module_file(module: str) -> str:
    return module.replace(".", "/") + ".py"


def test_every_parser_is_an_entry_point_held_to_the_convention_or_named_as_none() -> None:
    known = {_module_file(m) for m, _, _ in ENTRY_POINTS.values()} | set(NOT_USER_ENTRY_POINTS)
    unknown = _parser_modules() - known
    assert not unknown, f"new command lines: add them to ENTRY_POINTS (or say why not): {unknown}"


@pytest.mark.parametrize("name", ENTRY_POINTS)
def test_entry_point_has_the_shared_options_from_the_shared_definitions(name: str) -> None:
    found = by_option(parser_of(name))
    assert EXPECTED[name] <= set(found), f"{name} lacks {EXPECTED[name] - set(found)}"
    for action in found.get("--json", []):
        assert (action.help, action.nargs, action.const, action.default, action.metavar) == \
            (JSON_HELP, "?", JSON_STDOUT, None, "FILE"), name
    for action in found.get("--target", []):
        assert action.help.startswith(TARGET_HELP), name
        assert set(TARGETS) <= set(action.choices), name
    for action in found.get("--rate", []):
        if action.help == argparse.SUPPRESS:
            continue  # an old spelling (below)
        assert action.help.startswith(PACKET_RATE_UNIT + " "), name
        assert action.type.__qualname__ == "packet_rate.<locals>.parse", name
    for action in found.get("--line-rate", []):
        assert action.help.startswith("bits/s ") and action.type is bit_rate, name
    for action in found.get("--convergence-delay", []):
        assert action.help.startswith(CONVERGENCE_DELAY_HELP), name


@pytest.mark.parametrize("name", ENTRY_POINTS)
def test_every_rate_says_its_unit_first(name: str) -> None:
    for where, action in actions(parser_of(name)):
        rates = [o for o in action.option_strings if "rate" in o]
        if not rates or action.help == argparse.SUPPRESS:
            continue
        words = (action.help or "").split()
        assert re.search(r"-(pps|bps|ms)$", rates[0]) or (
            words and words[0].rstrip(":") in (PACKET_RATE_UNIT, "bits/s")), \
            f"{name} {where} {rates[0]}: help starts {words[:1]}"


@pytest.mark.parametrize("name", ENTRY_POINTS)
def test_old_spellings_are_hidden_and_only_where_known(name: str) -> None:
    parser = parser_of(name)
    for where, action in actions(parser):
        if action.help == argparse.SUPPRESS and action.option_strings and \
                type(action).__name__ == "_DeprecatedSpelling":
            (old,) = action.option_strings
            assert DEPRECATED.get((name, old)) == action.new, (name, where, old)
    visible = {o for _, a in actions(parser) if a.help != argparse.SUPPRESS
               for o in a.option_strings}
    assert "--delay" not in visible  # the convergence delay has one spelling


# ---- new spellings, and the old ones mapping to the same value with a warning ----------------

@pytest.mark.parametrize("text, bps", [("100G", 100e9), ("400M", 400e6), ("2.5e9", 2.5e9),
                                       ("10k", 1e4), ("1T", 1e12), ("25000000000", 25e9)])
def test_sim_line_rate_takes_bits_with_a_suffix(text: str, bps: float) -> None:
    assert parser_of("python -m sim").parse_args(["clean", "--line-rate", text]).line_rate == bps


@pytest.mark.parametrize("text", ["fast", "0", "-1", "10m", "10 Gb", "1.2.3G", ""])
def test_sim_line_rate_refuses_what_is_not_bits_per_second(text: str, capsys) -> None:
    with pytest.raises(SystemExit):
        parser_of("python -m sim").parse_args(["clean", "--line-rate", text])
    assert "bits/s" in capsys.readouterr().err


def test_sim_old_rate_is_the_line_rate_with_a_warning(capsys) -> None:
    from sim.harness import SimSettings

    parser = parser_of("python -m sim")
    assert parser.parse_args(["clean"]).line_rate == SimSettings.rate_bps
    assert capsys.readouterr().err == ""
    old = parser.parse_args(["clean", "--rate", "4e10"])
    err = capsys.readouterr().err
    assert old.line_rate == parser.parse_args(["clean", "--line-rate", "40G"]).line_rate == 4e10
    assert "--rate is deprecated" in err and "--line-rate" in err
    assert not hasattr(old, "rate")
    assert " --rate " not in parser.format_help() and "--line-rate RATE" in parser.format_help()


def test_sim_old_and_new_rate_run_the_same_simulation(capsys) -> None:
    from sim.__main__ import main

    runs = []
    for argv in (["--rate", "40e9"], ["--line-rate", "40G"]):
        assert main(["clean", "--size", "100000", *argv, "--json"]) == 0
        runs.append(json.loads(capsys.readouterr().out))
        runs[-1].pop("sim")  # its wall-clock time
    assert runs[0] == runs[1] and runs[0]["fabric"]["link_rate_bps"] == 40e9


def test_convergence_delay_and_its_old_spelling(capsys) -> None:
    from controller.convergence import DEFAULT_DELAY

    serve = subparser(parser_of("python -m controller"), "serve")
    assert serve.parse_args([]).convergence_delay == DEFAULT_DELAY
    assert serve.parse_args(["--convergence-delay", "1.5"]).convergence_delay == 1.5
    assert capsys.readouterr().err == ""
    assert serve.parse_args(["--delay", "1.5"]).convergence_delay == 1.5
    err = capsys.readouterr().err
    assert "--delay is deprecated" in err and "--convergence-delay" in err
    two_tier = parser_of("topologies/two_tier.py")
    assert two_tier.parse_args([]).convergence_delay == 3.0
    assert two_tier.parse_args(["--convergence-delay", "0.5"]).convergence_delay == 0.5


def test_a_deprecated_spelling_keeps_its_new_options_default_and_type(capsys) -> None:
    p = argparse.ArgumentParser(prog="x")
    new = p.add_argument("--new", type=int, default=7)
    add_deprecated_spelling(p, "--old", new)
    assert p.parse_args([]).new == 7 and p.parse_args(["--old", "3"]).new == 3
    assert capsys.readouterr().err.strip() == "x: --old is deprecated: use --new (same value)"
    assert p.parse_args(["--old", "3", "--new", "4"]).new == 4  # the last one given wins
    with pytest.raises(SystemExit):
        p.parse_args(["--old", "three"])


@pytest.mark.parametrize("name, argv, rate", [
    ("python -m bench", ["all"], 500), ("python -m bench", ["all", "--rate", "auto"], "auto"),
    ("python -m bench", ["all", "--rate", "300"], 300),
    ("topologies/two_tier.py", [], "auto"), ("topologies/two_tier.py", ["--rate", "0"], 0),
    ("topologies/two_tier.py", ["--rate", "target"], "target"),
    ("python -m bench.costs.scale", ["demo", "--rate", "70"], 70),
    ("python -m bench.costs.agent_speed", [], None),
    ("python -m bench.costs.agent_speed", ["--rate", "9"], 9),
    ("python -m bench.costs.switch_speed", ["--rate", "2500.5"], 2500.5),
    ("python -m bench.costs.live_cost", [], 500), ("python -m bench.costs.live_cost",
                                                    ["--rate", "900"], 900)])
def test_packet_rates_keep_their_values(name: str, argv: list[str], rate: object) -> None:
    assert parser_of(name).parse_args(argv).rate == rate


@pytest.mark.parametrize("name, argv", [
    ("python -m bench", ["all", "--rate", "0"]), ("python -m bench", ["all", "--rate", "x"]),
    ("python -m bench", ["all", "--rate", "target"]),
    ("topologies/two_tier.py", ["--rate", "-1"]),
    ("python -m bench.costs.agent_speed", ["--rate", "0"]),
    ("python -m bench.costs.view_cost", ["--rate", "auto"])])
def test_packet_rates_refuse_what_the_entry_point_cannot_run(name: str, argv: list[str],
                                                             capsys) -> None:
    with pytest.raises(SystemExit):
        parser_of(name).parse_args(argv)
    assert "packets/s" in capsys.readouterr().err


# ---- --json: bare to stdout, or a file -------------------------------------------------------

@pytest.mark.parametrize("name", ENTRY_POINTS)
def test_json_bare_or_with_a_file(name: str) -> None:
    parser = parser_of(name)
    argv = ENTRY_POINTS[name][2]
    assert parser.parse_args(argv).json is None
    assert parser.parse_args([*argv, "--json"]).json == JSON_STDOUT
    assert parser.parse_args([*argv, "--json", "out.json"]).json == "out.json"


def test_write_json_prints_one_line_or_writes_the_file(tmp_path: Path, capsys) -> None:
    data = {"a": [1, 2], "b": {"c": "d"}}
    write_json(None, data)
    assert capsys.readouterr().out == ""
    write_json(JSON_STDOUT, data)
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and json.loads(out) == data
    write_json(str(tmp_path / "r.json"), data)
    assert capsys.readouterr().out == "" and json.loads((tmp_path / "r.json").read_text()) == data


def test_sim_json_bare_is_stdout_and_a_file_keeps_the_text(tmp_path: Path, capsys) -> None:
    from sim.__main__ import main

    assert main(["clean", "--size", "100000", "--json"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1
    path = tmp_path / "sim.json"
    assert main(["clean", "--size", "100000", "--json", str(path)]) == 0
    text = capsys.readouterr().out
    assert text.startswith("scenario clean, mrc (seed 1): OK")
    written, printed = json.loads(path.read_text()), json.loads(out)
    assert written.pop("sim").keys() == printed.pop("sim").keys()  # wall-clock time differs
    assert written == printed


def test_controller_paths_json_bare_or_file(tmp_path: Path, capsys) -> None:
    from controller.__main__ import main

    assert main(["paths", "--json"]) == 0
    out = capsys.readouterr().out
    data = json.loads(out)
    assert out.count("\n") == 1 and data["paths"]
    path = tmp_path / "paths.json"
    assert main(["paths", "--json", str(path)]) == 0
    assert "h0 -> h" in capsys.readouterr().out
    assert json.loads(path.read_text()) == data


@pytest.fixture()
def graded(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """grader.__main__ with grading replaced: the targets it was asked for."""
    import grader.__main__ as grader_main
    from grader.report import Grade

    seen: list[str] = []

    def grade(ex: Any, _files: Any, name: str, target: str, trust: bool,
              student: str = "", timeout_s: float | None = None) -> Grade:
        seen.append(target)
        return Grade(ex.number, name, target, ())
    monkeypatch.setattr(grader_main.workspace, "grade", grade)
    return seen


def test_grader_json_bare_is_the_last_line_or_a_file(graded: list[str], tmp_path: Path,
                                                     capsys) -> None:
    from grader.__main__ import main

    main(["grade", "1", "--solution", "--target", "soft", "--json"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("exercise 1: solution") and json.loads(lines[-1])["exercise"] == 1
    path = tmp_path / "grade.json"
    main(["grade", "1", "--solution", "--target", "soft", "--json", str(path)])
    assert "{" not in capsys.readouterr().out
    assert json.loads(path.read_text()) == json.loads(lines[-1])


# ---- --target auto: one rule, everywhere ------------------------------------------------------

@pytest.mark.parametrize("on_path", PATHS)
def test_auto_is_bmv2_only_where_both_bmv2_tools_are(monkeypatch, on_path) -> None:
    fake_path(monkeypatch, *on_path)
    want = "bmv2" if len(on_path) == 2 else "soft"
    assert resolve_target("auto") == want
    assert (resolve_target("soft"), resolve_target("bmv2")) == ("soft", "bmv2")


def test_an_unknown_target_is_refused() -> None:
    with pytest.raises(ValueError, match="choose one of auto, bmv2, soft"):
        resolve_target("tofino")


@pytest.mark.parametrize("on_path", PATHS)
def test_every_entry_point_resolves_auto_by_the_one_rule(monkeypatch, on_path, graded,
                                                         capsys) -> None:
    fake_path(monkeypatch, *on_path)
    want = resolve_target("auto")
    # the grader
    from grader.__main__ import main as grader_main

    grader_main(["grade", "1", "--solution", "--target", "auto"])
    assert graded == [want]
    # the controller
    import controller.__main__ as controller_main

    installed: list[str] = []

    class FakeController:
        def __init__(self, _fabric: Any, target: str, *_a: Any, **_k: Any) -> None:
            installed.append(target)

        def install_all(self, _names: Any) -> list:
            return []

        def close(self) -> None:
            return None
    monkeypatch.setattr(controller_main.install, "Controller", FakeController)
    assert controller_main.main(["install", "--target", "auto"]) == 0
    assert installed == [want]
    # what the emulation's entry points (bench, two_tier.py, bench.*) hand `auto` to
    pytest.importorskip("mininet.net", reason="nodes.targets imports Mininet")
    from emulation.netconfig import BMV2_PORT_RATE_PPS, DEFAULT_PORT_RATE_PPS, default_rate_for
    from nodes import targets

    assert targets.resolve("auto") == want
    assert default_rate_for("auto") == (BMV2_PORT_RATE_PPS if want == "bmv2"
                                        else DEFAULT_PORT_RATE_PPS)
    capsys.readouterr()


@pytest.mark.parametrize("name", ENTRY_POINTS)
def test_no_entry_point_has_a_rule_of_its_own(name: str) -> None:
    """No `_target` helper and no PATH lookup in an entry point: resolve_target decides."""
    tree = ast.parse((ROOT / _module_file(ENTRY_POINTS[name][0])).read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            assert node.name not in ("_target", "resolve_target"), (name, node.name)
        if isinstance(node, ast.Call):
            called = getattr(node.func, "attr", getattr(node.func, "id", None))
            assert called != "which", f"{name}: shutil.which at line {node.lineno}"


def test_targets_default_where_they_did(monkeypatch) -> None:
    defaults = {"python -m bench": "auto", "topologies/two_tier.py": "auto",
                "python -m bench.costs.agent_speed": "auto", "python -m bench.costs.soak": "auto",
                "python -m bench.costs.view_cost": "soft", "python -m bench.costs.scale": "soft",
                "python -m bench.costs.forwarding": "both", "python -m grader": "auto"}
    for name, default in defaults.items():
        argv = ENTRY_POINTS[name][2]
        assert parser_of(name).parse_args(argv).target == default, name
    install = subparser(parser_of("python -m controller"), "install")
    assert install.parse_args([]).target == "soft"
    assert install.parse_args(["--target", "auto"]).target == "auto"


def test_the_convention_is_written_down() -> None:
    page = (ROOT / "docs" / "architecture.md").read_text()
    section = page.split("## Command-line conventions", 1)[1].split("\n## ", 1)[0]
    for word in ("--json [FILE]", "--target {auto,bmv2,soft}", "resolve_target", "--line-rate",
                 "--convergence-delay", "add_deprecated_spelling"):
        assert word in section, word
