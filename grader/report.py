"""Check results and the grade report (text for the student, JSON for course tooling)."""

from __future__ import annotations

import traceback
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any, NamedTuple

from grader.livelogs import bounded as bounded_logs

# Who may see a check's result, in Gradescope's words: the student at once, after the due
# date, or never (the instructor's report has every check). A check whose pass or fail alone
# would let a student search for the answer by repeated tries (a lab's numbers) is not
# VISIBLE: grader.feedback never shows it before the due date.
VISIBLE, AFTER_DUE_DATE, HIDDEN = "visible", "after_due_date", "hidden"


class CheckSpec(NamedTuple):
    """A check as the trusted grader declares it, before anything ran: the judge reports
    exactly these, so a submission can neither add checks nor change what one is worth."""
    id: str
    title: str
    points: int
    visibility: str = VISIBLE


@dataclass(frozen=True)
class Check:
    id: str  # stable, e.g. "usid.shift": fixtures and course tooling name checks by it
    title: str
    points: int
    passed: bool
    expected: str = ""
    observed: str = ""
    hint: str = ""  # what to look at when it failed
    visibility: str = VISIBLE  # its CheckSpec's (judging sets it; a judge's own is ignored)
    logs: tuple[tuple[str, str], ...] = ()  # a failed live stage's (file name, tail): livelogs

    @property
    def score(self) -> int:
        return self.points if self.passed else 0

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Check:
        return cls(id=str(data["id"]), title=str(data["title"]), points=int(data["points"]),
                   passed=bool(data["passed"]), expected=str(data.get("expected", "")),
                   observed=str(data.get("observed", "")), hint=str(data.get("hint", "")),
                   visibility=str(data.get("visibility", VISIBLE)),
                   logs=tuple(bounded_logs(dict(data.get("logs") or ())).items()))


def failed(spec: CheckSpec, observed: str, hint: str = "") -> Check:
    """`spec` failed for a reason that is not the student's answer (no report, a crash)."""
    return Check(spec.id, spec.title, spec.points, False, observed=observed, hint=hint,
                 visibility=spec.visibility)


def not_run(id: str, title: str, points: int, reason: str) -> Check:
    """A check a failed earlier stage kept from running: no points, and why."""
    return Check(id, title, points, False, observed=f"not run: {reason}")


def raised(exc: BaseException) -> str:
    """An exception as a student reads it: type, message and the innermost project line."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if "/grader/" not in f.filename]
    where = ""
    if frames:
        f = frames[-1]
        rel = f.filename.split("/project/", 1)[-1]
        where = f" (raised at {rel}:{f.lineno} in {f.name}: {(f.line or '').strip()})"
    return f"{type(exc).__name__}: {exc}{where}"


def run_check(check_id: str, title: str, points: int, hint: str, expected: str,
              body: Callable[[], str]) -> Check:
    """A check whose body returns "" when it holds, else what it observed; any exception from
    the student's code is what it observed."""
    try:
        observed = body()
    except Exception as exc:  # the student's code may raise anything
        observed = raised(exc)
    return Check(check_id, title, points, not observed, expected=expected,
                 observed=observed or "as expected", hint=hint)


@dataclass(frozen=True)
class Grade:
    exercise: int
    submission: str
    target: str
    checks: tuple[Check, ...]
    error: str = ""  # the grader could not grade (e.g. missing files): what to fix

    @property
    def score(self) -> int:
        return sum(c.score for c in self.checks)

    @property
    def total(self) -> int:
        return sum(c.points for c in self.checks)

    @property
    def full_marks(self) -> bool:
        return not self.error and bool(self.checks) and self.score == self.total

    def failed(self, check_id: str) -> bool:
        return any(c.id == check_id and not c.passed for c in self.checks)

    def to_json(self) -> dict[str, Any]:
        return {"exercise": self.exercise, "submission": self.submission, "target": self.target,
                "score": self.score, "total": self.total, "full_marks": self.full_marks,
                "error": self.error, "checks": [asdict(c) for c in self.checks]}


def render(grade: Grade) -> str:
    lines = [f"exercise {grade.exercise}: {grade.submission} (target {grade.target})"]
    if grade.error:
        lines.append(f"  cannot grade: {grade.error}")
    for c in grade.checks:
        mark = "PASS" if c.passed else "FAIL"
        lines.append(f"  [{mark}] {c.id} ({c.score}/{c.points}) {c.title}")
        if not c.passed:
            if c.expected:
                lines.append(f"         expected: {c.expected}")
            if c.observed:
                lines.append(f"         observed: {c.observed}")
            if c.hint:
                lines.append(f"         hint: {c.hint}")
    lines.append(f"  score {grade.score}/{grade.total}"
                 + (" (full marks)" if grade.full_marks else ""))
    return "\n".join(lines)


def summary(grades: Iterable[Grade]) -> dict[str, Any]:
    grades = list(grades)
    return {"submissions": [g.to_json() for g in grades],
            "full_marks": sum(g.full_marks for g in grades), "count": len(grades)}
