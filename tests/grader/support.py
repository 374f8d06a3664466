"""Assertions the exercises' grader tests share."""

from __future__ import annotations

from grader.report import Grade


def assert_useful(grade: Grade) -> None:
    """Every check that ran and failed tells the student what was expected, what was
    observed and what to look at."""
    for c in grade.checks:
        if not c.passed and not c.observed.startswith("not run"):
            assert c.expected and c.observed and c.hint, c
