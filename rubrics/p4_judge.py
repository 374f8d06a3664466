"""The trusted half of grading a P4 program: the verdicts on what rubrics.p4 observed.

rubrics.p4 compiles the student's program and runs the golden-corpus cases on BMv2 inside the
sandbox; what it reports is untrusted. This module turns that report into checks in the
grader's own process: it rebuilds each case's Outcome from the raw frames and counters (the
cases themselves come from the trusted golden corpus through the exercise's `cases()`),
compares the student's P4Info names with the committed P4Info read from the trusted project,
and decides every stage's gating itself. Sizes taken from a report are capped, and a value of
the wrong type raises TypeError/ValueError, which grader.judging reports as a malformed report.

Observations (rubrics.p4.observe_stages writes them):
  {"compile": {"available": bool, "ok": bool, "messages": str, "seconds": float,
               "cached": bool, "p4info_names": [str, ...]},
   "bmv2": {"missing_tools": [str, ...], "is_root": bool},
   "corpus": {"error": str, "cases": {name: {"outputs": [[port, hex], ...],
                                             "counters": {counter: {"index": delta}},
                                             "error": str}}}   absent when not run
   "live": rubrics.live.observe_transfer's report                  absent when not run}
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from grader import catalog
from grader.report import Check, CheckSpec, not_run
from rubrics.live import judge_transfer

COMPILER = "p4c-bm2-ss"
COMMITTED_P4INFO = "p4src/mrc.p4info.txtpb"
BMV2_TOOLS = ("simple_switch_grpc", "simple_switch_CLI")
MAX_OUTPUTS = 8  # frames accepted per case: every case expects at most one
MAX_FRAME = 16 << 10  # bytes per frame: the corpus's frames are under 1.2 KiB
MAX_NAMES = 4096  # P4Info names: the committed program has about a hundred
MAX_TEXT = 20_000  # characters of compiler messages or error text kept from a report

COMPILE = CheckSpec("p4.compile", "your P4 program compiles with p4c-bm2-ss (v1model)", 1)
INTERFACE = CheckSpec("p4.interface", "its P4Info is the committed one (tables, actions, "
                      "counters unchanged)", 1)
LIVE = CheckSpec("live.transfer", "the live transfer", 0)  # points: the exercise's


# ---- report values ----------------------------------------------------------------------------

def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"expected true or false, got {type(value).__name__}")
    return value


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected an integer, got {type(value).__name__}")
    return value


def _text(value: Any, cap: int = MAX_TEXT) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {type(value).__name__}")
    return value[:cap]


def _list(value: Any, cap: int, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise TypeError(f"expected a list of {what}, got {type(value).__name__}")
    if len(value) > cap:
        raise ValueError(f"{len(value)} {what}, more than the {cap} any program produces")
    return value


# ---- stage 1: compile -------------------------------------------------------------------------

def p4info_names(text: str) -> set[str]:
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


@functools.cache
def committed_names() -> frozenset[str]:
    """The committed P4Info's names, read from the project this process runs from (in the
    grader's process the trusted checkout, never the grading copy)."""
    return frozenset(p4info_names((catalog.ROOT / COMMITTED_P4INFO).read_text()))


def _no_compiler() -> list[Check]:
    why = (f"{COMPILER} is not on PATH, so your P4 program cannot be compiled or run. P4 "
           f"exercises are graded on BMv2 (target soft runs the project's Python switch, "
           f"not your program): install the toolchain with sudo scripts/install-p4lang.sh "
           f"or use the Vagrant VM")
    return [Check(COMPILE.id, COMPILE.title, COMPILE.points, False, expected="compiled",
                  observed=f"not run: {why}", hint="install p4c, then grade again"),
            not_run(*INTERFACE[:3], "the program was not compiled")]


def judge_compile(obs: Any) -> tuple[list[Check], bool]:
    """Checks p4.compile and p4.interface from the compile stage's report; True when the
    later stages may run."""
    if not _bool(obs["available"]):
        return _no_compiler(), False
    messages = _text(obs["messages"])
    if not _bool(obs["ok"]):
        first = next((line for line in messages.splitlines() if "error" in line.lower()),
                     messages.splitlines()[0] if messages else "")
        return [Check(COMPILE.id, COMPILE.title, COMPILE.points, False,
                      expected="no compiler errors",
                      observed=messages or "p4c failed without a message",
                      hint=f"fix the first error first: {first.strip()} (the line numbers "
                           f"are those of your file)"),
                not_run(*INTERFACE[:3], "the program does not compile")], False
    seconds = obs["seconds"]
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise TypeError("seconds is not a number")
    how = "cached compile" if _bool(obs["cached"]) else f"compiled in {seconds:.0f} s"
    checks = [Check(COMPILE.id, COMPILE.title, COMPILE.points, True, observed=how)]
    mine = {_text(n, 500) for n in _list(obs["p4info_names"], MAX_NAMES, "P4Info names")}
    committed = committed_names()
    if mine == committed:
        return [*checks, Check(*INTERFACE[:3], True)], True
    gone, new = sorted(committed - mine), sorted(mine - committed)
    removed = [line.strip() for line in messages.splitlines()
               if "removing" in line or "unused instance" in line]
    observed = "; ".join(filter(None, [
        f"missing: {', '.join(gone)}" if gone else "",
        f"not in the committed P4Info: {', '.join(new)}" if new else "",
        f"p4c said: {' | '.join(removed)}" if removed else ""]))
    checks.append(Check(
        *INTERFACE[:3], False, expected=f"the P4Info of {COMMITTED_P4INFO}", observed=observed,
        hint="keep the names, keys and parameters of tables, actions and counters as they are "
             "(the controller and the corpus use them); p4c drops a table or counter your "
             "program never applies or counts"))
    return checks, False


# ---- stage 2: golden-corpus cases on BMv2 -----------------------------------------------------

def unavailable(target: str, env: Any) -> str:
    """Why the BMv2 stages cannot run ('' when they can): `target` is the grader's own, `env`
    the sandbox's {"missing_tools", "is_root"}."""
    if target != "bmv2":
        return ("target soft runs the project's Python software switch, not your P4 program: "
                "grade P4 exercises with --target bmv2 (or auto where BMv2 is installed)")
    reported = {_text(t, 100) for t in _list(env["missing_tools"], 16, "tools")}
    missing = [t for t in BMV2_TOOLS if t in reported]
    if missing:
        return f"{', '.join(missing)} not on PATH: install BMv2 with scripts/install-p4lang.sh"
    if not _bool(env["is_root"]):
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
        from rigs import bmv2_corpus

        if self.error:
            return False
        wanted = {name: {i: self.counters.get(name, {}).get(i, 0) for i in idx}
                  for name, idx in self.case.counters.items()}
        return bmv2_corpus.check(self.case, bmv2_corpus.Observed(self.outputs, wanted)) == []

    @property
    def single(self) -> tuple[int, bytes] | None:
        return self.outputs[0] if len(self.outputs) == 1 else None


def outcome(case: Any, raw: Any) -> Outcome:
    """`case`'s Outcome rebuilt from its report: frames decoded and capped, the counters the
    case names (absent ones read as 0), the drop reason from the drop counter's deltas."""
    from p4rt import names as n

    outputs = []
    for item in _list(raw["outputs"], MAX_OUTPUTS, "frames"):
        port, frame = _list(item, 2, "port and frame")
        if not isinstance(frame, str) or len(frame) > 2 * MAX_FRAME:
            raise ValueError(f"a frame that is not hex of at most {MAX_FRAME} bytes")
        outputs.append((_int(port), bytes.fromhex(frame)))
    reported = raw["counters"]
    if not isinstance(reported, dict):
        raise TypeError("counters is not an object")

    def delta(name: str, index: int) -> int:
        return _int(reported.get(name, {}).get(str(index), 0))

    counters = {name: {i: delta(name, i) for i in idx} for name, idx in case.counters.items()}
    drop = next((r for r, i in n.DROP_REASONS.items() if delta(n.DROP_COUNTER, i) > 0), None)
    return Outcome(case, outputs, drop, counters, _text(raw["error"], 500))


# ---- judging ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Miss:
    """How one case's outcome differs from what the check wants."""
    expected: str
    observed: str
    hint: str


Judge = Callable[[Outcome], "Miss | None"]
Stage = tuple[str, str, int, Sequence[str], Judge]  # (check id, title, points, cases, judge)


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


def judge_corpus(obs: Any, cases: Sequence[Any], plan: Sequence[Stage]) -> list[Check]:
    """Each (id, title, points, case names, judge) of `plan` as a group check over the
    outcomes rebuilt from the corpus stage's report."""
    error = _text(obs["error"], 2000)
    if error:
        (cid, title, pts, _, _), *rest = plan
        return [Check(cid, title, pts, False, expected="BMv2 runs your program",
                      observed=error, hint="p4c accepted the program but BMv2 did not: the "
                      "message above says why")] + \
            [not_run(cid, title, pts, "BMv2 did not run the program")
             for cid, title, pts, _, _ in rest]
    reported = obs["cases"]
    if not isinstance(reported, dict):
        raise TypeError("cases is not an object")
    by_name = {c.name: outcome(c, reported[c.name]) for c in cases}
    return [group_check(cid, title, pts, [by_name[n] for n in names], judge)
            for cid, title, pts, names, judge in plan]


def passed(checks: Iterable[Check]) -> bool:
    return all(c.passed for c in checks)


def stage_specs(plan: Sequence[Stage], live_points: int) -> tuple[CheckSpec, ...]:
    """A P4 exercise's CHECKS: compile, interface, the corpus checks of `plan`, live."""
    return (COMPILE, INTERFACE, *(CheckSpec(cid, title, pts) for cid, title, pts, _, _ in plan),
            LIVE._replace(points=live_points))


def judge_stages(obs: Any, target: str, cases: Sequence[Any], plan: Sequence[Stage],
                 live_points: int, live_hint: str) -> Iterator[Check]:
    """A P4 exercise's stages, each gating the next: compile, the corpus checks of `plan` on
    BMv2, the live transfer."""
    checks, ok = judge_compile(obs["compile"])
    yield from checks
    if not ok:
        yield from (not_run(cid, title, pts, "the program did not compile")
                    for cid, title, pts, _, _ in plan)
        yield not_run(LIVE.id, LIVE.title, live_points, "the program did not compile")
        return
    reason = unavailable(target, obs["bmv2"])
    results = ([not_run(cid, title, pts, reason) for cid, title, pts, _, _ in plan] if reason
               else judge_corpus(obs["corpus"], cases, plan))
    yield from results
    if not passed(results):
        yield not_run(LIVE.id, LIVE.title, live_points, "the corpus cases failed")
        return
    yield judge_transfer(obs.get("live"), target, LIVE.id, live_points, hint=live_hint)
