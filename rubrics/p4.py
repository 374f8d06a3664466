"""Grading a student's P4 program, the sandbox's half: what it observes, in stages, inside a
grading copy of the project (rubrics.p4_judge turns the report into checks):

1. compile p4src/ with p4c-bm2-ss (the flags of p4src/build.sh), compiler messages mapped to
   the student's files as `p4src/include/ingress.p4:123: error: ...`, and the names in the
   P4Info it wrote (the judge compares them with the committed P4Info: the controller and the
   corpus program the tables by those names);
2. run golden-corpus cases (tests/golden/cases.json) on simple_switch_grpc with the student's
   JSON (rigs/bmv2_corpus.py): the frames that left and the counters' deltas, raw;
3. the live transfer, rubrics.live.observe_transfer.

Each stage runs only when the judge's verdict on the earlier ones (computed here as well, from
the same data) lets the next run, to save time; the judge decides the gating again itself.

Compiles are cached by the SHA-256 of the P4 sources and the compiler's version, under
$MRC_P4C_CACHE or ~/.cache/mrc-testbed/p4c/<sha256>/ (mrc.json, mrc.p4info.txtpb): grading
the reference solution, byte for byte the project's program, compiles once per machine. The
outputs are also laid into the copy's p4src/build/ newer than every source, so the copy's
controller.p4build.ensure_compiled() (BMv2 harness, live fabric) finds them and never
compiles again.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from grader.report import Check
from rubrics.live import observe_transfer
from rubrics.p4_judge import (
    BMV2_TOOLS,
    COMPILER,
    MAX_FRAME,
    MAX_OUTPUTS,
    Stage,
    judge_compile,
    judge_corpus,
    p4info_names,
    passed,
    unavailable,
)
from safety.privdir import check_workdir

FLAGS = ("--arch", "v1model", "--std", "p4-16")
MAIN = "p4src/mrc.p4"
COMPILE_TIMEOUT_S = 300
CACHE_ENV = "MRC_P4C_CACHE"
MAX_ERROR_LINES = 30


# ---- stage 1: compile -------------------------------------------------------------------------

@dataclass(frozen=True)
class Compiled:
    ok: bool
    json: Path | None = None
    p4info: Path | None = None
    messages: str = ""  # p4c's output, paths mapped to the student's files
    seconds: float = 0.0
    cached: bool = False


def sources(root: Path) -> list[Path]:
    p4src = root / "p4src"
    return sorted([*p4src.glob("*.p4"), *p4src.glob("include/*.p4")])


def cache_root() -> Path:
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "mrc-testbed" / "p4c"


def _compiler_version() -> str:
    try:
        out = subprocess.run([COMPILER, "--version"], capture_output=True, text=True,
                             timeout=30)
        return out.stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "?"


def source_key(root: Path) -> str:
    """SHA-256 over the compiler's version and flags and every P4 source (name and bytes)."""
    h = hashlib.sha256()
    h.update(_compiler_version().encode() + b"\0" + " ".join(FLAGS).encode() + b"\0")
    for path in sources(root):
        h.update(str(path.relative_to(root)).encode() + b"\0")
        h.update(path.read_bytes() + b"\0")
    return h.hexdigest()


_LOCATION = re.compile(r"(?P<path>[^\s():]+\.p4)(?:\((?P<paren>\d+)\)|:(?P<colon>\d+)(?::\d+)?)"
                       r":?\s*")


def map_messages(text: str, root: Path) -> str:
    """p4c's `path(line):` locations as `project/relative/path:line:`, so a student sees
    their own file's line numbers (their file is laid over the copy unchanged)."""
    prefixes = [str(root.resolve()) + "/", str(root) + "/"]

    def fix(m: re.Match) -> str:
        path = m["path"]
        for prefix in prefixes:
            if path.startswith(prefix):
                path = path[len(prefix):]
        path = os.path.normpath(path)
        return f"{path}:{m['paren'] or m['colon']}: "

    lines = [_LOCATION.sub(fix, line, count=1) for line in text.splitlines()]
    if len(lines) > MAX_ERROR_LINES:
        lines = lines[:MAX_ERROR_LINES] + [f"... ({len(lines) - MAX_ERROR_LINES} more lines)"]
    return "\n".join(lines)


def compile_program(root: Path) -> Compiled:
    """Compile root/p4src/mrc.p4 (cached by source hash) and lay the outputs into
    root/p4src/build/. Never raises for the student's mistakes: ok=False carries p4c's
    messages."""
    if shutil.which(COMPILER) is None:
        return Compiled(False, messages=f"{COMPILER} is not on PATH")
    start = time.monotonic()
    key = source_key(root)
    cache = cache_root()
    cache.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    check_workdir(cache)  # its programs are run as grades: nobody else may have written them
    entry = cache / key
    cached = True
    with open(cache / f".{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (entry / "mrc.json").exists():
            cached = False
            tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=cache))
            try:
                cmd = [COMPILER, *FLAGS, "-o", str(tmp / "mrc.json"), "--p4runtime-files",
                       str(tmp / "mrc.p4info.txtpb"), MAIN]
                try:
                    proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True,
                                          timeout=COMPILE_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    return Compiled(False, messages=f"{COMPILER} took over "
                                    f"{COMPILE_TIMEOUT_S} s", seconds=time.monotonic() - start)
                if proc.returncode != 0 or not (tmp / "mrc.json").exists():
                    text = (proc.stderr + "\n" + proc.stdout).strip()
                    return Compiled(False, messages=map_messages(text, root),
                                    seconds=time.monotonic() - start)
                (tmp / "messages.txt").write_text((proc.stderr + "\n" + proc.stdout).strip())
                tmp.rename(entry)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    build = root / "p4src" / "build"
    build.mkdir(parents=True, exist_ok=True)
    for name in ("mrc.json", "mrc.p4info.txtpb"):
        shutil.copyfile(entry / name, build / name)  # fresh mtime: newer than every source
    warnings = entry / "messages.txt"
    return Compiled(True, build / "mrc.json", build / "mrc.p4info.txtpb",
                    messages=map_messages(warnings.read_text(), root) if warnings.exists()
                    else "", seconds=time.monotonic() - start, cached=cached)


def observe_compile(root: Path) -> dict[str, Any]:
    """The compile stage's report: whether p4c is here, what it said, the P4Info's names."""
    if shutil.which(COMPILER) is None:
        return {"available": False}
    result = compile_program(root)
    names = sorted(p4info_names(result.p4info.read_text())) if result.ok else []
    return {"available": True, "ok": result.ok, "messages": result.messages,
            "seconds": round(result.seconds, 1), "cached": result.cached,
            "p4info_names": names}


def compile_stage(ctx: Any) -> tuple[list[Check], bool]:
    """Checks p4.compile and p4.interface as the judge will see them; True when the later
    stages may run (the sandbox's own gating)."""
    return judge_compile(observe_compile(ctx.root))


# ---- stage 2: golden-corpus cases on BMv2 -----------------------------------------------------

def bmv2_env(ctx: Any) -> dict[str, Any]:
    """What the judge needs to know about this machine to tell whether BMv2 could run."""
    return {"missing_tools": [t for t in BMV2_TOOLS if shutil.which(t) is None],
            "is_root": bool(ctx.is_root)}


def bmv2_missing(ctx: Any) -> str:
    """Why the BMv2 stages cannot run here ('' when they can)."""
    return unavailable(ctx.target, bmv2_env(ctx))


def _case_report(outputs: Sequence[tuple[int, bytes]],
                 deltas: dict[str, dict[int, int]]) -> dict[str, Any]:
    """One case's raw report: the first MAX_OUTPUTS frames (each cut at MAX_FRAME bytes, far
    above any corpus frame, so a cut one still differs) and every counter delta read."""
    return {"outputs": [[port, frame[:MAX_FRAME].hex()] for port, frame in outputs[:MAX_OUTPUTS]],
            "counters": {name: {str(i): d for i, d in by_index.items()}
                         for name, by_index in deltas.items()},
            "error": ""}


def run_cases(cases: Sequence[Any], ports: int = 4) -> dict[str, Any]:
    """Every case on one simple_switch_grpc (ports 1..`ports`) running the copy's compiled
    program, with every drop reason's counter read as well. Returns the corpus stage's report:
    {"error": why the switch could not be started or programmed at all (then no cases),
    "cases": {name: {"outputs", "counters", "error"}}}."""
    from p4rt import names as n
    from rigs import bmv2_corpus

    try:
        harness = bmv2_corpus.Bmv2Harness(ports)
        harness.__enter__()
    except Exception as exc:  # noqa: BLE001 - BMv2 rejecting a student's JSON raises anything
        return {"error": f"BMv2 did not accept the compiled program: {type(exc).__name__}: "
                         f"{exc}"[:2000], "cases": {}}
    report: dict[str, Any] = {}
    try:
        for case in cases:
            counters = {k: dict(v) for k, v in case.counters.items()}
            drops = counters.setdefault(n.DROP_COUNTER, {})
            drops.update({i: 0 for i in n.DROP_REASONS.values() if i not in drops})
            try:
                seen = harness.run(replace(case, counters=counters))
            except Exception as exc:  # noqa: BLE001
                report[case.name] = {"outputs": [], "counters": {},
                                     "error": f"{type(exc).__name__}: {exc}"[:500]}
                continue
            report[case.name] = _case_report(seen.outputs, seen.counter_deltas)
    finally:
        harness.close()
    return {"error": "", "cases": report}


def observe_stages(ctx: Any, cases: Sequence[Any], plan: Sequence[Stage],
                   ports: int = 4) -> dict[str, Any]:
    """A P4 exercise's observations (rubrics.p4_judge's docstring has their shape), each stage
    run only when the judge's verdict on the earlier ones would let it."""
    obs: dict[str, Any] = {"compile": observe_compile(ctx.root), "bmv2": bmv2_env(ctx)}
    _, ok = judge_compile(obs["compile"])
    if not ok or unavailable(ctx.target, obs["bmv2"]):
        return obs
    obs["corpus"] = run_cases(cases, ports)
    if passed(judge_corpus(obs["corpus"], cases, plan)):
        obs["live"] = observe_transfer(ctx)
    return obs
