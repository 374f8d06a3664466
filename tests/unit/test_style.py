"""The tree stays ruff clean: CI runs this with the rest of the suite."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_ruff_clean() -> None:
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed in this environment")
    result = subprocess.run([ruff, "check", str(ROOT)], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


def test_no_kill_by_name() -> None:
    """House rule: processes are stopped by PID, never by name."""
    bad = ("kill" + "all", "pk" + "ill", "mn " + "-c", "mn " + "--clean")
    hits = []
    for path in ROOT.rglob("*"):
        if ".venv" in path.parts or ".git" in path.parts or not path.is_file():
            continue
        if path.suffix not in {".py", ".sh", ""} or path.stat().st_size > 1_000_000:
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        hits += [f"{path}: {word}" for word in bad if word in text]
    assert hits == []
