"""What every Python exercise's grading must do, one test over exercises 3 to 6: the skeleton
fails first on the check the exercise starts with, with useful messages, and the later stages
say they were not run; the reference solution gets every point before the live stage (skipped
here: rubrics.live.SKIP_ENV), and every point with it, as root, on each target its live stage
runs. What is particular to one exercise stays in its own test_exN.py; the wrong-solution
fixtures are held to their named checks in test_python_fixtures.py."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from grader import catalog, workspace
from tests.e2e.support import skip_reason
from tests.grader.support import assert_useful
from tests.support import require_bmv2


@dataclass(frozen=True)
class Skeleton:
    """How an exercise's untouched skeleton must fail."""
    first: str  # the first check that fails
    says: tuple[str, ...]  # words in that check's output
    not_run: tuple[str, ...]  # checks (id prefixes) after it that must say "not run"
    also_fails: dict[str, str] = field(default_factory=dict)  # another check -> words in it


SKELETONS = {
    3: Skeleton("tables.host", ("NotImplementedError",), ("reach.all-paths", "live.transfer")),
    4: Skeleton("spray.spread", ("NotImplementedError",), ("sim.", "live."),
                {"sack.bitmap": "NotImplementedError"}),
    5: Skeleton("ex5.table.ecn", ("illegal (absent)",), ("ex5.sim.", "live.transfer"),
                {"ex5.reinstate": ""}),
    6: Skeleton("ex6.local", ("NotImplementedError", "TODO exercise 6"),
                ("ex6.sim.", "live.transfer")),
}
# each case marked with its exercise, which a student edition skips while it holds its stubs
NUMBERS = [pytest.param(n, marks=pytest.mark.exercise(n)) for n in sorted(SKELETONS)]
LIVE = [pytest.param(n, target, marks=[pytest.mark.exercise(n)] + (
            [pytest.mark.bmv2] if target == "bmv2" else []))
        for n, target in ((3, "soft"), (3, "bmv2"), (4, "soft"), (4, "bmv2"), (5, "soft"),
                          (6, "soft"))]


@pytest.mark.parametrize("number", NUMBERS)
def test_the_skeleton_fails_first_where_the_exercise_starts(number: int, no_live) -> None:
    ex, want = catalog.load(number), SKELETONS[number]
    g = workspace.grade(ex, workspace.skeleton(ex), "skeleton", "soft")
    assert not g.error and not g.full_marks
    first = next(c for c in g.checks if not c.passed)
    assert first.id == want.first and all(w in first.observed for w in want.says), first
    for check, words in want.also_fails.items():
        assert g.failed(check) and words in next(c for c in g.checks if c.id == check).observed
    assert_useful(g)
    later = [c for c in g.checks if c.id.startswith(want.not_run)]
    assert later and all(c.observed.startswith("not run") for c in later), later


@pytest.mark.parametrize("number", NUMBERS)
def test_the_solution_passes_every_stage_but_live(number: int, no_live) -> None:
    ex = catalog.load(number)
    g = workspace.grade(ex, workspace.solution(ex), "solution", "soft")
    assert not g.error
    assert [c.id for c in g.checks if not c.passed] == ["live.transfer"], g.checks
    assert "skipped" in g.checks[-1].observed


@pytest.mark.slow
@pytest.mark.root
@pytest.mark.parametrize(("number", "target"), LIVE)
def test_the_solution_gets_full_marks_live(number: int, target: str) -> None:
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    if target == "bmv2":
        require_bmv2()
    ex = catalog.load(number)
    g = workspace.grade(ex, workspace.solution(ex), "solution", target)
    assert g.full_marks, g.checks
