"""The tree stays ruff clean: CI runs this with the rest of the suite."""

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_ruff_clean() -> None:
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    assert ruff is not None, "ruff is pinned in requirements.txt: ./testbed setup installs it"
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


PACKAGES = ("bench", "controller", "demo", "docgen", "emulation", "emulation/cluster", "fabric",
            "grader", "host_agent", "host_agent/core", "nodes", "p4rt", "rigs", "rubrics", "safety",
            "sandbox", "served_core", "sim", "softswitch", "topologies", "views", "wire")


def test_every_package_says_what_it_owns() -> None:
    """A package's __init__ opens with a docstring: the one line the next engineer reads."""
    import ast

    for name in PACKAGES:
        tree = ast.parse((ROOT / name / "__init__.py").read_text())
        doc = ast.get_docstring(tree)
        assert doc and len(doc.split(".")[0]) >= 20, f"{name}/__init__.py: no purpose line"
    found = {str(p.parent.relative_to(ROOT)) for p in ROOT.glob("*/__init__.py")
             if p.parent.name not in ("tests", "exercises")}
    assert found <= set(PACKAGES) | {"tests"}, found - set(PACKAGES)
