"""The CLI reference (docs/cli.md) is written from the parsers and cannot drift; every option
of every command says what it does; one meaning has one spelling across entry points."""

from __future__ import annotations

import argparse
import collections
import subprocess
from pathlib import Path

import pytest

from docgen import cli_reference as ref

pytest.importorskip("mininet")  # two_tier.py's and the Mininet CLI's parsers import it

ROOT = Path(__file__).resolve().parents[2]
# spellings one meaning had before it got one name everywhere: they may live on only as
# hidden deprecated spellings (fabric.options.add_deprecated_spelling)
RETIRED = {"--queue": "--queue-depth", "--delay": "--convergence-delay",
           "--rate-bps": "--line-rate"}


def every_parser() -> list[tuple[str, argparse.ArgumentParser]]:
    return [found for name, _, parser in ref.commands() for found in ref.walk(name, parser)]


def test_the_committed_reference_is_what_the_parsers_say() -> None:
    assert ref.REFERENCE.read_text() == ref.render(), \
        f"docs/cli.md is stale: run {ref.CHECK_COMMAND}"


def test_check_mode_fails_on_a_stale_reference(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    stale = tmp_path / "cli.md"
    stale.write_text(ref.render().replace("--queue-depth", "--queue", 1))
    monkeypatch.setattr(ref, "REFERENCE", stale)
    assert ref.main(["--check"]) == 1
    assert ref.main([]) == 0 and ref.main(["--check"]) == 0


def test_every_option_and_argument_has_help() -> None:
    bare = [f"{name}: {a.option_strings or a.dest}" for name, parser in every_parser()
            for a in ref.visible_actions(parser) if not (a.help or "").strip()]
    assert not bare, f"say what these do (help=...): {bare}"


def test_one_meaning_one_spelling() -> None:
    spellings: dict[str, set[tuple[str, ...]]] = collections.defaultdict(set)
    for name, parser in every_parser():
        for a in ref.visible_actions(parser):
            if a.option_strings:
                spellings[a.dest].add(tuple(a.option_strings))
                retired = set(a.option_strings) & set(RETIRED)
                assert not retired, f"{name}: {retired} is spelled {RETIRED}"
    split = {dest: s for dest, s in spellings.items() if len(s) > 1}
    assert not split, f"one option, several spellings across entry points: {split}"


def test_testbed_help_and_version_work_for_anyone_before_setup(tmp_path: Path) -> None:
    """./testbed --help and --version exit 0 without root and without .venv: run from a
    copy of the script beside a pyproject, where no .venv exists."""
    (tmp_path / "testbed").write_bytes((ROOT / "testbed").read_bytes())
    (tmp_path / "pyproject.toml").write_text('[project]\nversion = "9.8.7"\n')
    run = [("--help", "usage: ./testbed COMMAND"), ("--version", "mrc-testbed 9.8.7"),
           ("demo --help", "sudo ./testbed setup first"),
           ("grade --help", "sudo ./testbed setup first")]
    for args, want in run:
        out = subprocess.run(["bash", str(tmp_path / "testbed"), *args.split()],
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 0 and want in out.stdout, (args, out.stdout, out.stderr)
    out = subprocess.run(["bash", str(tmp_path / "testbed"), "no-such-command"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and "unknown command" in out.stderr
