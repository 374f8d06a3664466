"""Entry points users run by path with a python that lacks the project's packages re-run
themselves with the project virtualenv, or say how to create it (venv_entry)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BARE = "/usr/bin/python3"  # Debian's: no grpc unless the machine added it system-wide


def _lacks_grpc(python: str) -> bool:
    if not Path(python).exists():
        return False
    probe = subprocess.run([python, "-c", "import grpc"], capture_output=True)
    return probe.returncode != 0


pytestmark = pytest.mark.skipif(not _lacks_grpc(BARE), reason=f"{BARE} has grpc (or is absent)")
ENTRIES = [(["topologies/two_tier.py", "--help"], "usage: two_tier.py"),
           (["-m", "controller", "--help"], "usage: python -m controller"),
           (["-m", "bench", "--help"], "usage: python -m bench")]


def run(args: list[str], **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MRC_VENV_REEXEC")}
    return subprocess.run([BARE, *args], cwd=REPO, capture_output=True, text=True, timeout=120,
                          env={**clean, "MRC_VENV_PYTHON": sys.executable, **env})


@pytest.mark.parametrize(("args", "usage"), ENTRIES, ids=["two_tier", "controller", "bench"])
def test_reexecs_with_the_virtualenv(args: list[str], usage: str) -> None:
    result = run(args)
    assert result.returncode == 0, result.stderr
    assert f"re-running with {sys.executable}" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1  # one line, then the real program
    assert usage in result.stdout


def test_missing_virtualenv_names_the_command(tmp_path: Path) -> None:
    result = run(["topologies/two_tier.py", "--help"],
                 MRC_VENV_PYTHON=str(tmp_path / "none" / "python"))
    assert result.returncode != 0
    assert "does not exist" in result.stderr and "testbed setup" in result.stderr


def test_no_loop_when_the_virtualenv_lacks_it_too() -> None:
    result = run(["-m", "controller", "--help"], MRC_VENV_PYTHON=BARE)
    assert result.returncode != 0
    assert "does not provide grpc" in result.stderr
    assert result.stderr.count("re-running") == 1
