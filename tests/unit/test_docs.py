"""The documents tell the truth about the code: every command in a ```sh block of README.md,
CONTRIBUTING.md, docs/ and exercises/ parses with its own command's parser (or, for
./testbed, answers --help); every repository path and every long option the documents name
in backticks exists; no document names a path outside the repository; the README stays a
front door (about 150 lines, the generated picture); the package list of docs/lab.md is the
one ./testbed installs.

Why parse instead of run: the commands build fabrics, need root and take minutes; parsing
with the entry point's own parser (docgen.cli_reference's one list) is cheap and safe and
still fails on a renamed option, a removed subcommand or a bad value."""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

from docgen import cli_reference as ref

pytest.importorskip("mininet")  # two_tier.py's parser imports it

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted([ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "CHANGELOG.md",
               *ROOT.glob("docs/**/*.md"), *ROOT.glob("exercises/**/*.md"),
               ROOT / "p4src" / "README.md"])
DOCS = [d for d in DOCS if d.exists() and "work" not in d.relative_to(ROOT).parts]
# programs of the machine, not ours: their arguments are not ours to check (paths are)
EXTERNAL = {"vagrant", "git", "tshark", "mn", "chromium", "apt-get", "ssh", "cat", "ls",
            "cd", "export", "wireshark", "$EDITOR", "nano", "less", "ip", "tcpdump", "echo",
            "unzip", "zip", "tar", "cp", "mkdir", "rm", "diff"}
# modules run with `python -m` that are tools, not ours
EXTERNAL_MODULES = {"pytest", "ruff", "pip", "venv", "http.server"}
OUTSIDE = re.compile(r"(?<![\w.])/work/|\.\./shared|shared/seeds|design[- ]brief", re.I)


def sh_blocks(text: str) -> Iterator[str]:
    for block in re.findall(r"^```sh\n(.*?)^```", text, re.M | re.S):
        yield from _commands(block)


def _commands(block: str) -> Iterator[str]:
    joined = block.replace("\\\n", " ")
    for line in joined.splitlines():
        line = re.sub(r"(^|\s)#.*$", "", line).strip()
        if line:
            yield line


def all_commands() -> list[tuple[str, str]]:
    return [(str(doc.relative_to(ROOT)), cmd) for doc in DOCS
            for cmd in sh_blocks(doc.read_text())]


@cache
def parsers_by_module() -> dict[str, argparse.ArgumentParser]:
    return {module: parser for _, module, parser in ref.commands()}


def module_parser(module: str) -> argparse.ArgumentParser | None:
    parsers = parsers_by_module()
    return parsers.get(module) or parsers.get(f"{module}.__main__")


def parses(parser: argparse.ArgumentParser, args: list[str]) -> str | None:
    """None if `args` parse, else why not."""
    try:
        parser.parse_args(args)
    except SystemExit as exc:
        return None if exc.code == 0 else f"exit {exc.code}"
    return None


def check_command(cmd: str) -> str | None:
    """None when the command is sound, else what is wrong with it."""
    lexer = shlex.shlex(cmd, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    part: list[str] = []
    tokens = [*lexer, ";"]
    for i, token in enumerate(tokens):
        if token in (">", ">>", "<", "2>", "&>") or tokens[i - 1] in (">", ">>", "<"):
            continue  # a redirection and its file: the shell's, not the command's
        if token not in ("&&", "||", ";", "|", "&"):
            part.append(token)
            continue
        while part and (part[0] == "sudo" or re.match(r"^\w+=", part[0])):
            part = part[1:]
        problem = _check_words(part) if part else None
        if problem:
            return problem
        part = []
    return None


def _check_words(words: list[str]) -> str | None:
    prog, args = words[0], words[1:]
    if prog in ("./testbed", "testbed"):
        return _check_testbed(args)
    if prog.endswith(("python", "python3")):
        if args[:1] == ["-m"]:
            module, rest = args[1], args[2:]
            if module.split(".")[0] in EXTERNAL_MODULES:
                return None
            parser = module_parser(module)
            if parser is None:
                return f"python -m {module}: not an entry point of docgen.cli_reference"
            return parses(parser, rest)
        if args and args[0].endswith("two_tier.py"):
            return parses(parsers_by_module()["topologies.two_tier"], args[1:])
        return f"{prog} {args[:1]}: which of our commands is this?"
    if prog.startswith("scripts/") or prog.startswith("./scripts/"):
        script = ROOT / prog.removeprefix("./")
        if not script.exists():
            return f"{prog} does not exist"
        text = script.read_text()
        missing = [a for a in args if a.startswith("--") and a.split("=")[0] not in text]
        return f"{prog} takes no {missing}" if missing else None
    if prog == "vagrant" and "-c" in args:  # the command it runs in the VM is ours
        return check_command(args[args.index("-c") + 1])
    if prog in EXTERNAL or prog.startswith("$"):
        return None
    return f"unknown program {prog!r}: ours must parse, others go in EXTERNAL"


def _check_testbed(args: list[str]) -> str | None:
    if not args or args[0] in ("--help", "-h", "--version", "setup"):
        return None
    cmd, rest = args[0], args[1:]
    if cmd == "demo":
        return parses(parsers_by_module()["topologies.two_tier"], rest)
    if cmd == "test":
        return None  # pytest's arguments
    if cmd in ("exercise", "solution", "list", "assignment", "classroom", "grade", "check"):
        return parses(parsers_by_module()["grader.__main__"], [cmd, *rest])
    return f"./testbed has no command {cmd}"


def test_every_documented_command_parses() -> None:
    commands = all_commands()
    assert len(commands) > 40, "the ```sh blocks were not found"
    bad = [(doc, cmd, why) for doc, cmd in commands if (why := check_command(cmd))]
    assert not bad, "\n".join(f"{d}: {c}\n    -> {w}" for d, c, w in bad)


def test_a_broken_command_is_caught() -> None:
    assert check_command("sudo ./testbed demo --no-such-option") is not None
    assert check_command(".venv/bin/python -m sim clean --queue-size 3") is not None
    assert check_command("./testbed frobnicate") is not None
    assert check_command("sudo scripts/provision.sh --no-such-flag") is not None
    assert check_command(".venv/bin/python -m sim permutation --fabric hosts-16") is None


def test_testbed_commands_answer_help_for_anyone() -> None:
    for args in (["--help"], ["--version"], ["demo", "--help"], ["grade", "--help"]):
        out = subprocess.run(["bash", str(ROOT / "testbed"), *args], capture_output=True,
                             text=True, timeout=60)
        assert out.returncode == 0, (args, out.stderr)


# ---- paths and options named in backticks ----------------------------------------------------

def backticked(text: str) -> Iterator[str]:
    text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    for span in re.findall(r"`([^`\n]+)`", text):
        yield from span.split()


def repo_paths(text: str) -> Iterator[str]:
    tops = {p.name for p in ROOT.iterdir() if not p.name.startswith(".")}
    for word in backticked(text):
        word = word.strip(".,;:()'\"").split("#")[0].split(":")[0]
        first = word.split("/")[0]
        if "/" in word and first in tops and not re.search(r"[<>{}$|*?]|\.\.\.|NN|…", word):
            yield word


def test_every_repository_path_in_the_docs_exists() -> None:
    missing = [(str(doc.relative_to(ROOT)), p) for doc in DOCS
               for p in repo_paths(doc.read_text()) if not (ROOT / p).exists()
               and not p.startswith(("exercises/work", "p4src/build"))]
    assert not missing, f"paths the docs name that the repository lacks: {missing}"


def test_no_document_names_a_path_outside_the_repository() -> None:
    found = [(str(doc.relative_to(ROOT)), m.group(0)) for doc in DOCS
             for m in OUTSIDE.finditer(doc.read_text())]
    assert not found, f"cite what is in the repository instead: {found}"


@cache
def known_options() -> set[str]:
    """Every long option our code declares (entry points and the processes they start) or
    our scripts take."""
    found: set[str] = set()
    for path in ROOT.rglob("*.py"):
        if not {".venv", "tests", "build", ".git"} & set(path.relative_to(ROOT).parts):
            found.update(re.findall(r"""add_argument\(\s*["'](--[\w-]+)""", path.read_text()))
            found.update(re.findall(r"""add_deprecated_spelling\(\w+, ["'](--[\w-]+)""",
                                    path.read_text()))
    for script in [ROOT / "testbed", *ROOT.glob("scripts/*.sh"), ROOT / ".ci" / "run"]:
        found.update(re.findall(r"--[a-z][\w-]*", script.read_text()))
    for name, parser in parsers_by_module().items():  # options made by a loop, too
        for _, each in ref.walk(name, parser):
            found.update(o for a in each._actions for o in a.option_strings
                         if o.startswith("--"))
    return found


# options of other programs the docs mention: pytest's, vagrant's, tshark's, p4c's, BMv2's
FOREIGN_OPTIONS = {"--durations", "--collect-only", "--provider", "--ignore-provider",
                   "--priority-queues", "--no-sandbox", "--headless", "--custom", "--topo",
                   "--thrift-port", "--device-id", "--grpc-server-addr", "--p4runtime-files",
                   "--std", "--arch", "--p4v", "--no-install-recommends", "--log-level",
                   "--grpc-server-ssl", "--grpc-server-with-client-auth", "--one-file-system",
                   "--tmpfs"}


def test_every_long_option_in_the_docs_exists() -> None:
    known = known_options() | FOREIGN_OPTIONS
    unknown = sorted({(str(doc.relative_to(ROOT)), word.split("=")[0].rstrip(".,;:)"))
                      for doc in DOCS for word in backticked(doc.read_text())
                      if re.fullmatch(r"--[a-z][\w-]*(=\S*)?[.,;:)]*", word)
                      and word.split("=")[0].rstrip(".,;:)") not in known})
    assert not unknown, f"options the docs name that no command has: {unknown}"


# ---- the front door ---------------------------------------------------------------------------

def test_the_readme_is_a_short_front_door_with_the_generated_picture() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 160
    assert "](docs/fabric.svg)" in text
    assert text.index("```sh") < text.index("## Where next")


def test_the_lab_page_lists_what_setup_installs() -> None:
    script = (ROOT / "testbed").read_text()
    wanted = set()
    for name in ("APT_PACKAGES", "SSH_PACKAGES"):
        wanted |= set(re.search(rf"^{name}=\(([^)]*)\)", script, re.M).group(1).split())
    page = (ROOT / "docs" / "lab.md").read_text()
    listed = page.split("`./testbed setup` installs, where missing, these packages:", 1)[1]
    listed = listed.split("then builds", 1)[0]
    named = set(re.findall(r"[a-z][a-z0-9.+-]+", listed)) - {"and", "its", "ssh", "daemon",
                                                            "neither", "started", "nor",
                                                            "enabled"}
    assert named == wanted, f"docs/lab.md lists {named ^ wanted} differently from ./testbed"


def test_one_version_everywhere_and_the_licence_pyproject_names() -> None:
    version = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(),
                        re.M).group(1)
    assert re.search(rf"^version: {re.escape(version)}$", (ROOT / "CITATION.cff").read_text(),
                     re.M)
    releases = re.findall(r"^## \[(\d[^\]]*)\]", (ROOT / "CHANGELOG.md").read_text(), re.M)
    assert releases and releases[0] == version, "CHANGELOG.md's newest release is not pyproject's"
    assert 'license = { text = "Apache-2.0" }' in (ROOT / "pyproject.toml").read_text()
    assert "Apache License" in (ROOT / "LICENSE").read_text()[:200]


def test_the_glossary_explains_the_words_the_demo_prints() -> None:
    text = (ROOT / "docs" / "concepts.md").read_text()
    for term in ("plane", "EVs", "uSID", "Trimming", "SACK", "Retirement", "Probing",
                 "Bypass", "BDP", "ECN", "EMULATION-BOUND"):
        assert f"**{term}**" in text, f"docs/concepts.md does not explain {term} (in bold)"
