"""What the P4 exercises' tests share: grading a file set on BMv2, the report's invariants."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

from grader import catalog, workspace
from grader.report import Grade
from rubrics import p4_judge
from tests.e2e.support import skip_reason
from tests.grader.support import assert_nothing_leaks
from tests.support import require_bmv2, require_root

NOT_RUN = "not run:"


def require_corpus_stage() -> None:
    """The corpus stage: p4c, BMv2 and root (veths)."""
    require_bmv2()
    require_root("the BMv2 harness (veth pairs)")


def require_live_stage() -> None:
    require_corpus_stage()
    reason = skip_reason()
    if reason:
        import pytest

        pytest.skip(reason)


def grade(number: int, files: workspace.FileSet, name: str, target: str = "bmv2",
          timings: dict[str, float] | None = None) -> Grade:
    ex = catalog.load(number)
    start = time.monotonic()
    result = workspace.grade(ex, files, name, target)
    if timings is not None:
        timings[name] = time.monotonic() - start
    print(f"graded exercise {number} {name} in {time.monotonic() - start:.1f} s")
    return result


def assert_useful_failures(grade: Grade) -> None:
    """Every failed check says what was expected, what was seen and what to do, or why it
    did not run."""
    assert not grade.error, grade.error
    for c in grade.checks:
        if c.passed:
            continue
        if c.observed.startswith(NOT_RUN):
            continue
        assert c.expected and c.observed and c.hint, c
    assert_nothing_leaks(grade)


def first_failure(grade: Grade) -> str:
    return next(c.id for c in grade.checks if not c.passed)


def correct_observations(cases: Sequence[Any]) -> dict[str, Any]:
    """The report a correct program's sandbox writes (each case's golden frames and counters,
    a verified transfer), through JSON as the judge reads it: for the judge's tests."""
    report = {
        "compile": {"available": True, "ok": True, "messages": "", "seconds": 0.5,
                    "cached": True, "p4info_names": sorted(p4_judge.committed_names())},
        "bmv2": {"missing_tools": [], "is_root": True},
        "corpus": {"error": "", "cases": {c.name: {
            "outputs": [[o.port, o.frame.hex()] for o in c.outputs[:1 if c.one_of else None]],
            "counters": {name: {str(i): d for i, d in by_index.items()}
                         for name, by_index in c.counters.items()},
            "error": ""} for c in cases}},
        "live": {"ok": True, "verified": True, "error": "", "started": True}}
    return json.loads(json.dumps(report))
