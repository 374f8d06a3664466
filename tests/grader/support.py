"""Assertions the exercises' grader tests share."""

from __future__ import annotations

from grader import feedback
from grader.report import Grade


def assert_useful(grade: Grade) -> None:
    """Every check that ran and failed tells the student what was expected, what was
    observed and what to look at."""
    for c in grade.checks:
        if not c.passed and not c.observed.startswith("not run"):
            assert c.expected and c.observed and c.hint, c
    assert_nothing_leaks(grade)


def assert_nothing_leaks(grade: Grade) -> None:
    """What the student sees (grader.feedback) holds no failed check's expected text: the
    grader derives it from the reference or its own measurement."""
    seen = feedback.student_text(grade) + feedback.student_markdown(grade)
    leaks = [c.id for c in grade.checks if not c.passed and len(c.expected) > 12
             and c.expected in seen]
    assert not leaks, (leaks, seen)
