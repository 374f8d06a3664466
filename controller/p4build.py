"""The compiled P4 program: p4src/ built by p4c-bm2-ss on demand.

Everything that pushes the pipeline to BMv2 asks `ensure_compiled()` for the JSON, so a
user never has to remember `p4src/build.sh`: it compiles when the JSON is missing or older
than any source, under a file lock so concurrent callers (tests, switches) compile once.
"""

from __future__ import annotations

import fcntl
import shutil
import subprocess
from pathlib import Path

from controller.errors import ControllerError

REPO = Path(__file__).resolve().parents[1]
P4SRC = REPO / "p4src"
BUILD_SCRIPT = P4SRC / "build.sh"
BUILD_DIR = P4SRC / "build"
COMPILER = "p4c-bm2-ss"
COMPILE_TIMEOUT_S = 300.0


class CompileError(ControllerError, RuntimeError):
    """p4c is missing or rejected the program; the message carries p4c's own output."""


def sources() -> list[Path]:
    """Every file the compiled output depends on."""
    return sorted([*P4SRC.glob("*.p4"), *P4SRC.glob("include/*.p4"), BUILD_SCRIPT])


def outputs(out_dir: Path = BUILD_DIR) -> tuple[Path, Path]:
    """(BMv2 JSON, P4Info text) that build.sh writes into out_dir."""
    return out_dir / "mrc.json", out_dir / "mrc.p4info.txtpb"


def is_stale(out_dir: Path = BUILD_DIR) -> bool:
    json_path, p4info = outputs(out_dir)
    if not (json_path.exists() and p4info.exists()):
        return True
    built = min(json_path.stat().st_mtime, p4info.stat().st_mtime)
    return any(src.stat().st_mtime > built for src in sources())


def compile_program(out_dir: Path = BUILD_DIR) -> tuple[Path, Path]:
    """Run p4src/build.sh into out_dir unconditionally; returns (json, p4info)."""
    if shutil.which(COMPILER) is None:
        raise CompileError(f"{COMPILER} is not on PATH: install the P4 toolchain with "
                           "scripts/install-p4lang.sh (see docs/lab.md, 'BMv2')")
    try:
        result = subprocess.run([str(BUILD_SCRIPT), str(out_dir)], capture_output=True,
                                text=True, timeout=COMPILE_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        raise CompileError(f"p4src/build.sh took over {COMPILE_TIMEOUT_S:.0f} s") from exc
    if result.returncode != 0:
        raise CompileError(f"p4src/build.sh failed ({result.returncode}):\n"
                           f"{result.stderr.strip()}\n{result.stdout.strip()}")
    return outputs(out_dir)


def ensure_compiled(out_dir: Path = BUILD_DIR, log=None) -> tuple[Path, Path]:
    """(json, p4info) in out_dir, compiled first if missing or older than p4src/."""
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if is_stale(out_dir):
            if log is not None:
                log(f"compiling p4src/ with {COMPILER} into {out_dir}")
            compile_program(out_dir)
    return outputs(out_dir)
