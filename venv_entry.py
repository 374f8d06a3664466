"""Entry points users run by path re-exec themselves with the project virtualenv.

`sudo python topologies/two_tier.py` runs whatever python comes first (Debian's, pyenv's),
which lacks grpc; the project's `.venv` has it. Standard library only, and called before
any heavy import: when a needed module is missing and `.venv` exists, exec it with the same
arguments (one line says so); when `.venv` is missing, name the one command that creates it.
MRC_VENV_PYTHON overrides the interpreter (tests); MRC_VENV_REEXEC guards against loops.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent
GUARD = "MRC_VENV_REEXEC"


def venv_python() -> Path:
    return Path(os.environ.get("MRC_VENV_PYTHON", REPO / ".venv" / "bin" / "python"))


def missing(modules: tuple[str, ...]) -> list[str]:
    return [m for m in modules if importlib.util.find_spec(m) is None]


def ensure(modules: tuple[str, ...], what: str, module: str | None = None) -> None:
    """Return if `modules` import here; else re-exec `what` (a script path, or `python -m
    module` when module is given) with the venv's python, or exit 2 saying how to make it."""
    gone = missing(modules)
    if not gone:
        return
    python = venv_python()
    if os.environ.get(GUARD) == "1" or not python.exists():
        reason = (f"{python} does not provide {', '.join(gone)} either"
                  if python.exists() else f"the project virtualenv {python} does not exist")
        sys.exit(f"{what}: {', '.join(gone)} is not importable with {sys.executable}, and "
                 f"{reason}.\nCreate it with: sudo {REPO}/testbed setup")
    argv = [str(python), "-m", module] if module else [str(python), str(Path(what).resolve())]
    print(f"{what}: {sys.executable} lacks {', '.join(gone)}; re-running with {python}",
          file=sys.stderr)
    env = {**os.environ, GUARD: "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO),
                                                       os.environ.get("PYTHONPATH")]))}
    os.execve(str(python), argv + sys.argv[1:], env)
