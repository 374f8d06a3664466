"""Every wrong-solution fixture of the Python exercises fails first on the check its
expect.json names, and every failed check it gets says what was expected, what was observed
and what to look at (the live stage is skipped: a fixture must fail before it)."""

from __future__ import annotations

import pytest

from grader import catalog, edition, workspace
from tests.grader.support import assert_useful

FIXTURES = [(ex, wrong) for ex in catalog.load_all() if ex.kind == "python"
            for wrong in ex.wrong_solutions()]


@pytest.mark.parametrize("ex, wrong", FIXTURES, ids=[f"ex{e.number}-{w.name}"
                                                     for e, w in FIXTURES])
def test_wrong_solution_fails_its_check(no_live, ex, wrong):
    expect = workspace.fixture_expectation(wrong)
    g = workspace.grade(ex, workspace.fixture(ex, wrong), wrong.name, "soft")
    assert not g.error
    first = next(c for c in g.checks if not c.passed)
    assert first.id == expect["fails"], (first, g.checks)
    assert_useful(g)  # with nothing of what was expected in the student's view


def test_every_python_exercise_has_fixtures():
    shipped = edition.load()  # a student edition drops its chosen exercises' fixtures
    dropped = set(shipped.exercises) if shipped else set()
    per_exercise = {ex.number for ex, _ in FIXTURES}
    assert per_exercise == {ex.number for ex in catalog.load_all()
                            if ex.kind == "python" and ex.number not in dropped}
    assert all(len([1 for e, _ in FIXTURES if e.number == n]) >= 2 for n in per_exercise)
