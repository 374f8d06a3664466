"""Grading a student's P4 program, in stages, inside a grading copy of the project:

1. compile p4src/ with p4c-bm2-ss (the flags of p4src/build.sh), compiler messages mapped to
   the student's files as `p4src/include/ingress.p4:123: error: ...`, and check the P4Info
   is the committed one (the controller and the corpus program the tables by those names);
2. run golden-corpus cases (tests/golden/cases.json) on simple_switch_grpc with the student's
   JSON (topologies/bmv2_corpus.py), grouped into checks by exercise modules that judge
   each case's outcome and turn a difference into a hint;
3. (in the exercise modules) the live transfer, grader.live.transfer_check.

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
import ipaddress
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from grader.live import transfer_check
from grader.report import Check, not_run

COMPILER = "p4c-bm2-ss"
FLAGS = ("--arch", "v1model", "--std", "p4-16")
MAIN = "p4src/mrc.p4"
COMMITTED_P4INFO = "p4src/mrc.p4info.txtpb"
BMV2_TOOLS = ("simple_switch_grpc", "simple_switch_CLI")
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
    cache.mkdir(parents=True, exist_ok=True)
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


def _p4info_names(text: str) -> set[str]:
    """`kind name` for every table, action, counter, register and field in a P4Info text."""
    from google.protobuf import text_format
    from p4.config.v1 import p4info_pb2

    info = text_format.Parse(text, p4info_pb2.P4Info())
    names = {f"table {t.preamble.name}" for t in info.tables}
    names |= {f"match field {t.preamble.name}.{m.name} ({m.bitwidth} bits)"
              for t in info.tables for m in t.match_fields}
    names |= {f"action {a.preamble.name}({', '.join(p.name for p in a.params)})"
              for a in info.actions}
    names |= {f"counter {c.preamble.name}" for c in info.counters}
    names |= {f"direct counter {c.preamble.name}" for c in info.direct_counters}
    names |= {f"register {r.preamble.name}" for r in info.registers}
    names |= {f"action profile {p.preamble.name}" for p in info.action_profiles}
    return names


def compile_stage(ctx: Any, points: tuple[int, int] = (1, 1)) -> tuple[list[Check], bool]:
    """Checks p4.compile and p4.interface; True when the later stages may run."""
    title_c = "your P4 program compiles with p4c-bm2-ss (v1model)"
    title_i = "its P4Info is the committed one (tables, actions, counters unchanged)"
    if shutil.which(COMPILER) is None:
        why = (f"{COMPILER} is not on PATH, so your P4 program cannot be compiled or run. P4 "
               f"exercises are graded on BMv2 (target soft runs the project's Python switch, "
               f"not your program): install the toolchain with sudo scripts/install-p4lang.sh "
               f"or use the Vagrant VM")
        return [Check("p4.compile", title_c, points[0], False, expected="compiled",
                      observed=f"not run: {why}", hint="install p4c, then grade again"),
                not_run("p4.interface", title_i, points[1], "the program was not compiled")], \
            False
    result = compile_program(ctx.root)
    if not result.ok:
        first = next((line for line in result.messages.splitlines() if "error" in line.lower()),
                     result.messages.splitlines()[0] if result.messages else "")
        return [Check("p4.compile", title_c, points[0], False, expected="no compiler errors",
                      observed=result.messages or "p4c failed without a message",
                      hint=f"fix the first error first: {first.strip()} (the line numbers "
                           f"are those of your file)"),
                not_run("p4.interface", title_i, points[1], "the program does not compile")], \
            False
    how = "cached compile" if result.cached else f"compiled in {result.seconds:.0f} s"
    checks = [Check("p4.compile", title_c, points[0], True, observed=how)]
    mine = _p4info_names(result.p4info.read_text())
    committed = _p4info_names((ctx.root / COMMITTED_P4INFO).read_text())
    if mine == committed:
        checks.append(Check("p4.interface", title_i, points[1], True))
        return checks, True
    gone, new = sorted(committed - mine), sorted(mine - committed)
    removed = [line.strip() for line in result.messages.splitlines()
               if "removing" in line or "unused instance" in line]
    observed = "; ".join(filter(None, [
        f"missing: {', '.join(gone)}" if gone else "",
        f"not in the committed P4Info: {', '.join(new)}" if new else "",
        f"p4c said: {' | '.join(removed)}" if removed else ""]))
    checks.append(Check(
        "p4.interface", title_i, points[1], False, expected="the P4Info of p4src/mrc.p4info.txtpb",
        observed=observed,
        hint="keep the names, keys and parameters of tables, actions and counters as they are "
             "(the controller and the corpus use them); p4c drops a table or counter your "
             "program never applies or counts"))
    return checks, False


# ---- stage 2: golden-corpus cases on BMv2 -----------------------------------------------------

@dataclass
class Outcome:
    """What the student's switch did with one case's frame."""
    case: Any  # p4rt.corpus.Case (possibly with diagnostic entries added)
    outputs: list[tuple[int, bytes]] = field(default_factory=list)
    drop: str | None = None  # the drop reason whose counter rose, if any
    counters: dict[str, dict[int, int]] = field(default_factory=dict)
    error: str = ""  # the harness could not run the case

    @property
    def golden_ok(self) -> bool:
        from topologies import bmv2_corpus

        if self.error:
            return False
        wanted = {name: {i: self.counters.get(name, {}).get(i, 0) for i in idx}
                  for name, idx in self.case.counters.items()}
        return bmv2_corpus.check(self.case, bmv2_corpus.Observed(self.outputs, wanted)) == []

    @property
    def single(self) -> tuple[int, bytes] | None:
        return self.outputs[0] if len(self.outputs) == 1 else None


def bmv2_missing(ctx: Any) -> str:
    """Why the BMv2 stages cannot run here ('' when they can)."""
    if ctx.target != "bmv2":
        return ("target soft runs the project's Python software switch, not your P4 program: "
                "grade P4 exercises with --target bmv2 (or auto where BMv2 is installed)")
    missing = [t for t in BMV2_TOOLS if shutil.which(t) is None]
    if missing:
        return f"{', '.join(missing)} not on PATH: install BMv2 with scripts/install-p4lang.sh"
    if not ctx.is_root:
        return "the BMv2 harness creates veth pairs, which needs root: sudo ./testbed grade"
    return ""


def load_cases(names: Iterable[str]) -> dict[str, Any]:
    from p4rt.corpus import load_cases as load

    wanted = list(names)
    by_name = {c.name: c for c in load()}
    missing = [n for n in wanted if n not in by_name]
    if missing:
        raise KeyError(f"golden corpus has no case {missing}")
    return {n: by_name[n] for n in wanted}


def run_cases(cases: Sequence[Any], ports: int = 4) -> tuple[list[Outcome], str]:
    """Every case on one simple_switch_grpc (ports 1..`ports`) running the copy's compiled
    program.
    Returns (outcomes, error): error is set when the switch could not be started or
    programmed at all (then outcomes is empty)."""
    from p4rt import names as n
    from topologies import bmv2_corpus

    drops = {i: 0 for i in n.DROP_REASONS.values()}
    reason_of = {i: name for name, i in n.DROP_REASONS.items()}
    try:
        harness = bmv2_corpus.Bmv2Harness(ports)
        harness.__enter__()
    except Exception as exc:  # noqa: BLE001 - BMv2 rejecting a student's JSON raises anything
        return [], f"BMv2 did not accept the compiled program: {type(exc).__name__}: {exc}"
    outcomes = []
    try:
        for case in cases:
            counters = {k: dict(v) for k, v in case.counters.items()}
            counters.setdefault(n.DROP_COUNTER, {}).update(
                {i: 0 for i in drops if i not in counters.get(n.DROP_COUNTER, {})})
            try:
                seen = harness.run(replace(case, counters=counters))
            except Exception as exc:  # noqa: BLE001
                outcomes.append(Outcome(case, error=f"{type(exc).__name__}: {exc}"[:500]))
                continue
            rose = [reason_of[i] for i, d in seen.counter_deltas.get(n.DROP_COUNTER, {}).items()
                    if d > 0]
            outcomes.append(Outcome(case, list(seen.outputs), rose[0] if rose else None,
                                    seen.counter_deltas))
    finally:
        harness.close()
    return outcomes, ""


# ---- judging ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Miss:
    """How one case's outcome differs from what the check wants."""
    expected: str
    observed: str
    hint: str


Judge = Callable[[Outcome], "Miss | None"]


def addr(value: int) -> str:
    return str(ipaddress.IPv6Address(value))


def outer_dst(frame: bytes) -> int:
    from wire import layout as L

    return int.from_bytes(frame[L.OUTER_DST:L.OUTER_DST + 16], "big")


def traffic_class(frame: bytes) -> int:
    from wire import layout as L

    return (int.from_bytes(frame[L.OUTER:L.OUTER + 4], "big") >> L.TC_SHIFT) & 0xFF


def u16(frame: bytes, offset: int) -> int | None:
    return int.from_bytes(frame[offset:offset + 2], "big") if len(frame) >= offset + 2 else None


def describe(o: Outcome) -> str:
    """What happened to a case's frame, in a student's words."""
    if o.error:
        return f"the case could not run: {o.error}"
    if not o.outputs:
        return f"dropped ({o.drop})" if o.drop else "vanished (no frame left, no drop counted)"
    parts = [f"left on port {p} ({len(f)} bytes, DA {addr(outer_dst(f))})" for p, f in o.outputs]
    return " and ".join(parts)


def expected_text(case: Any) -> str:
    if case.drop_reason:
        return f"dropped and counted as {case.drop_reason}"
    ports = sorted({o.port for o in case.outputs})
    frame = case.outputs[0].frame
    where = f"port {ports[0]}" if len(ports) == 1 else f"one of ports {ports}"
    return f"leaves on {where} ({len(frame)} bytes, DA {addr(outer_dst(frame))})"


def golden_miss(o: Outcome, hint: str) -> Miss | None:
    """The case's full golden expectation (ports, frame bytes, counters)."""
    if o.golden_ok:
        return None
    observed = describe(o)
    if o.outputs and not o.case.drop_reason and all(
            p in {x.port for x in o.case.outputs} for p, _ in o.outputs):
        diffs = frame_diff(o.case.outputs[0].frame, o.outputs[0][1])
        observed += f"; differs from the expected frame in {diffs}" if diffs else ""
    return Miss(expected_text(o.case), observed, hint)


def frame_diff(want: bytes, got: bytes) -> str:
    """The header fields two frames differ in, named."""
    from wire import layout as L

    fields = [("destination MAC", L.ETH_DST, 6), ("source MAC", L.ETH_SRC, 6),
              ("outer traffic class/flow label", L.OUTER, 4),
              ("outer payload length", L.OUTER_PAYLOAD_LEN, 2),
              ("outer hop limit", L.OUTER_HOP_LIMIT, 1), ("outer DA", L.OUTER_DST, 16),
              ("inner payload length", L.INNER_PAYLOAD_LEN, 2),
              ("UDP length", L.UDP_LENGTH_FIELD, 2)]
    out = [name for name, off, size in fields if want[off:off + size] != got[off:off + size]]
    if len(want) != len(got):
        out.append(f"length ({len(got)} bytes, expected {len(want)})")
    elif not out and want != got:
        out.append("the bytes after the headers")
    return ", ".join(out)


def group_check(check_id: str, title: str, points: int, outcomes: Sequence[Outcome],
                judge: Judge) -> Check:
    """One check over several cases: passes when `judge` finds no miss; otherwise reports the
    first failing case in full and names the others."""
    misses = [(o, m) for o in outcomes if (m := judge(o)) is not None]
    if not misses:
        return Check(check_id, title, points, True,
                     observed=f"{len(outcomes)} corpus case(s) as expected")
    o, m = misses[0]
    head = (f"case {o.case.name} ({o.case.description}; switch {o.case.switch}): frame to "
            f"{addr(outer_dst(o.case.frame)) if len(o.case.frame) >= 54 else '?'} in on port "
            f"{o.case.ingress_port}: {m.observed}")
    if len(misses) > 1:
        head += (f" [{len(misses)} of {len(outcomes)} cases failed: "
                 f"{', '.join(x.case.name for x, _ in misses)}]")
    return Check(check_id, title, points, False, expected=f"{o.case.name}: {m.expected}",
                 observed=head, hint=m.hint)


def corpus_stage(ctx: Any, cases: Sequence[Any],
                 checks: Sequence[tuple[str, str, int, Sequence[str], Judge]],
                 ports: int = 4) -> list[Check]:
    """Run `cases` once, then each (id, title, points, case names, judge) as a group check.
    Not run (each check failed with the reason) when BMv2 or root is missing."""
    reason = bmv2_missing(ctx)
    if reason:
        return [not_run(cid, title, pts, reason) for cid, title, pts, _, _ in checks]
    outcomes, error = run_cases(cases, ports)
    if error:
        first, *rest = checks
        return [Check(first[0], first[1], first[2], False, expected="BMv2 runs your program",
                      observed=error, hint="p4c accepted the program but BMv2 did not: the "
                      "message above says why")] + \
            [not_run(cid, title, pts, "BMv2 did not run the program")
             for cid, title, pts, _, _ in rest]
    by_name = {o.case.name: o for o in outcomes}
    return [group_check(cid, title, pts, [by_name[n] for n in names], judge)
            for cid, title, pts, names, judge in checks]


def passed(checks: Iterable[Check]) -> bool:
    return all(c.passed for c in checks)


LIVE = ("live.transfer", "the live transfer")


def grade_stages(ctx: Any, cases: Sequence[Any],
                 plan: Sequence[tuple[str, str, int, Sequence[str], Judge]], live_points: int,
                 live_hint: str, ports: int = 4) -> Iterator[Check]:
    """A P4 exercise's stages, each gating the next: compile, the corpus checks of `plan` on
    BMv2, the live transfer."""
    checks, ok = compile_stage(ctx)
    yield from checks
    if not ok:
        yield from (not_run(cid, title, pts, "the program did not compile")
                    for cid, title, pts, _, _ in plan)
        yield not_run(*LIVE, live_points, "the program did not compile")
        return
    results = corpus_stage(ctx, cases, plan, ports=ports)
    yield from results
    if not passed(results):
        yield not_run(*LIVE, live_points, "the corpus cases failed")
        return
    yield transfer_check(ctx, LIVE[0], live_points, hint=live_hint)
