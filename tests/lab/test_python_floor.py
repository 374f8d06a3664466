"""`requires-python = ">=3.10"` is kept honest: the Vagrant VM's Ubuntu 22.04 has Python 3.10
while the project's own machines run 3.11, so nothing here would notice a 3.11-only API
by running. vermin reads every Python file of the checkout for the least version each
construct needs; ruff targets the same version; the pinned requirements resolve for CPython
3.10 on Ubuntu 22.04's glibc."""

from __future__ import annotations

import enum
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from host_agent.core.types import StrEnum
from tests.lab.fresh_root import checkout_files

REPO = Path(__file__).resolve().parents[2]
FLOOR = (3, 10)
# Ubuntu 22.04 ships glibc 2.35: any manylinux wheel up to that runs there.
UBUNTU_2204_PLATFORMS = [f"manylinux_2_{n}_x86_64" for n in (35, 34, 31, 28, 27, 24, 17, 12, 5)]
UBUNTU_2204_PLATFORMS += ["manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64",
                          "linux_x86_64"]


def python_files() -> list[str]:
    return [str(REPO / p) for p in checkout_files() if p.suffix == ".py"]


def vermin(*args: str) -> subprocess.CompletedProcess:
    pytest.importorskip("vermin", reason="vermin is not installed: it is in requirements.txt, "
                        "./testbed setup installs it")
    return subprocess.run([sys.executable, "-c", "import vermin; vermin.main()",
                           "--no-tips", "--violations",
                           "--eval-annotations", f"--target={FLOOR[0]}.{FLOOR[1]}-", *args],
                          capture_output=True, text=True, timeout=300, cwd=REPO)


def test_pyproject_and_ruff_name_the_same_floor() -> None:
    text = (REPO / "pyproject.toml").read_text()
    requires = re.search(r'^requires-python\s*=\s*"([^"]+)"', text, re.M)
    target = re.search(r'^target-version\s*=\s*"([^"]+)"', text, re.M)
    assert requires and requires.group(1) == f">={FLOOR[0]}.{FLOOR[1]}"
    assert target and target.group(1) == f"py{FLOOR[0]}{FLOOR[1]}"


def test_no_python_file_needs_more_than_the_floor() -> None:
    files = python_files()
    assert len(files) > 50 and any(f.endswith("host_agent/core/types.py") for f in files)
    result = vermin(*files)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"Minimum required versions: {FLOOR[0]}.{FLOOR[1]}" in result.stdout or \
        "Minimum required versions: ~" in result.stdout, result.stdout


def test_vermin_sees_3_11_apis(tmp_path: Path) -> None:
    """The same vermin call flags what the project's code once used (enum.StrEnum) and other
    3.11 additions, so a pass above means something."""
    for snippet in ("import enum\nclass A(enum.StrEnum):\n    X = 'x'\n",
                    "import tomllib\n",
                    "try:\n    pass\nexcept* ValueError:\n    pass\n",
                    "from typing import Self\n"):
        probe = tmp_path / "probe.py"
        probe.write_text(snippet)
        result = vermin(str(probe))
        assert result.returncode != 0 and "3.11" in result.stdout, (snippet, result.stdout)


def test_strenum_stand_in_behaves_like_the_stdlib_one() -> None:
    stdlib = getattr(enum, "StrEnum", None)  # 3.11+: on 3.10 there is nothing to compare
    if stdlib is None:
        pytest.skip("this Python has no enum.StrEnum to compare with")
    ours = StrEnum("Ours", {"A": "alpha", "B": "beta"})
    theirs = stdlib("Theirs", {"A": "alpha", "B": "beta"})
    for a, b in zip(ours, theirs, strict=True):
        assert (str(a), f"{a}", f"{a:>8}", format(a), json.dumps(a), a.upper()) == \
            (str(b), f"{b}", f"{b:>8}", format(b), json.dumps(b), b.upper())
        assert a == a.value and hash(a) == hash(a.value) and isinstance(a, str)
    assert ours("alpha") is ours.A


def test_requirements_resolve_for_python_3_10(tmp_path: Path) -> None:
    """pip resolves requirements.txt (with every dependency's Requires-Python) for CPython
    3.10 on Ubuntu 22.04, from wheels only; this asks the package index, nothing is
    installed."""
    report = tmp_path / "report.json"
    argv = [sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--ignore-installed",
            "--report", str(report), "--target", str(tmp_path / "target"),
            "--python-version", f"{FLOOR[0]}.{FLOOR[1]}", "--implementation", "cp",
            "--abi", f"cp{FLOOR[0]}{FLOOR[1]}", "--abi", "abi3", "--abi", "none",
            "--only-binary=:all:", "-r", str(REPO / "requirements.txt")]
    for platform in UBUNTU_2204_PLATFORMS:
        argv += ["--platform", platform]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    names = {item["metadata"]["name"].lower()
             for item in json.loads(report.read_text())["install"]}
    assert {"grpcio", "scapy", "p4runtime-shell", "matplotlib", "vermin"} <= names
