"""The trusted half of grading: turns what the sandbox reported into checks and points.

It runs in the grader's own process, from the project the instructor checked out, and never
imports a student's module. The report is untrusted input: it is read with a size limit, and a
report that is missing, not JSON, or not shaped as the exercise's judge expects fails every
check with the reason. Points come from the exercise's `CHECKS`, never from the report, and
a check the judge does not reach fails as "not reported".

An exercise module (rubrics/exN.py) provides:
  CHECKS: tuple[CheckSpec, ...]            every check, in report order
  observe(ctx: inner.Context) -> dict     in the sandbox: raw, JSON-serialisable data
  judge(obs: dict, ctx: JudgeContext) -> Iterable[Check]   here: the verdicts
and may provide
  measure(obs: dict, ctx: JudgeContext) -> dict   here, before judge: what the grader measures
                                                  itself from the report's data (ctx.measured)
"""

from __future__ import annotations

import importlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from grader.catalog import Exercise
from grader.errors import GraderError
from grader.report import Check, CheckSpec, failed

MAX_REPORT_BYTES = 8 << 20  # far above any exercise's observations (the P4 ones: ~200 KB)


class MalformedReport(GraderError, ValueError):
    """The sandbox's report is not what the exercise's observe writes: the message says where."""


@dataclass(frozen=True)
class JudgeContext:
    target: str
    exercise: Exercise
    challenge: str  # the grader's own copy (grader.challenge): never read from the report
    student: str = ""  # the submission's name (a lab's assignment derives from it)
    # What the grader measured itself (the exercise's `measure`), never from the report: a
    # stage it runs cannot be forged by the submission's process.
    measured: dict[str, Any] | None = None
    # The grading copy, for a stage the grader runs itself around the student's code served
    # from the sandbox (rubrics.remote_core), and whether to contain it (not with
    # --trust-submissions); only `measure` gets them.
    copy: Path | None = None
    contained: bool = True


def module(ex: Exercise) -> ModuleType:
    return importlib.import_module(f"rubrics.ex{ex.number}")


def specs(ex: Exercise) -> tuple[CheckSpec, ...]:
    return tuple(module(ex).CHECKS)


def parse_report(data: bytes, challenge: str) -> dict[str, Any]:
    """The sandbox's JSON report (read with a size limit by the caller), refusing what is
    too big, not JSON, not an object, or made for another run's challenge (a replay)."""
    if len(data) > MAX_REPORT_BYTES:
        raise MalformedReport(f"the report is over {MAX_REPORT_BYTES >> 20} MiB")
    try:
        report = json.loads(data)
    except (ValueError, RecursionError) as exc:  # RecursionError: nested past the parser
        raise MalformedReport(f"the report is not JSON ({type(exc).__name__})") from None
    if not isinstance(report, dict) or not ({"observations", "crash"} & set(report)):
        raise MalformedReport("the report holds neither observations nor a crash")
    if report.get("challenge") != challenge:
        raise MalformedReport("the report answers another grading run's challenge: it was "
                              "not written by this run's checks (a replayed report)")
    return report


_MALFORMED = (MalformedReport, KeyError, IndexError, TypeError, ValueError, AttributeError,
              OverflowError, RecursionError)


def measure(ex: Exercise, report: dict[str, Any] | None, target: str, *,
            challenge: str, copy: Path | None = None,
            contained: bool = True) -> dict[str, Any] | None:
    """The exercise's own measurements on the report's data (None when it takes none, or
    when the report holds no observations); a malformed report measures nothing."""
    fn = getattr(module(ex), "measure", None)
    if fn is None or report is None or "observations" not in report:
        return None
    try:
        return fn(report["observations"], JudgeContext(target, ex, challenge, copy=copy,
                                                         contained=contained))
    except _MALFORMED as exc:  # judge() says what is malformed; the log says where it raised
        logging.getLogger("grader").warning("exercise %d's measure: %s: %s", ex.number,
                                            type(exc).__name__, exc)
        return None


def judge(ex: Exercise, report: dict[str, Any] | None, target: str, problem: str = "", *,
          challenge: str, student: str = "",
          measured: dict[str, Any] | None = None) -> tuple[Check, ...]:
    """Every check of `ex`, judged from `report` (None: `problem` says why there is none)
    and from what the grader measured itself (`measure`)."""
    declared = specs(ex)
    if report is None:
        return tuple(failed(s, f"not graded: {problem}") for s in declared)
    if "crash" in report:
        trace = str(report["crash"])[-2000:]
        return tuple(failed(s, f"the checks crashed:\n{trace}",
                            "the traceback shows where your code raised") for s in declared)
    try:
        got = {c.id: c for c in module(ex).judge(report["observations"],
                                                 JudgeContext(target, ex, challenge,
                                                              student, measured))}
    except _MALFORMED as exc:
        why = f"the sandbox's report is malformed ({type(exc).__name__}: {exc})"
        return tuple(failed(s, why) for s in declared)
    unknown = set(got) - {s.id for s in declared}
    if unknown:
        raise RuntimeError(f"exercise {ex.number}'s judge reports undeclared checks {unknown}")
    return tuple(_trusted(s, got.get(s.id)) for s in declared)


def _trusted(spec: CheckSpec, check: Check | None) -> Check:
    if check is None:
        check = failed(spec, "not reported: the sandbox's report did not reach this check")
    return Check(spec.id, check.title or spec.title, spec.points, check.passed, check.expected,
                 check.observed, check.hint, spec.visibility, check.logs)
