"""Exercise 5 (path retirement and probing): the grader fails the skeleton with useful
messages and gives the reference solution every point before the live stage, which is skipped here
(grader.live.SKIP_ENV); test_solution_live runs it as root. The wrong-solution fixtures are
held to their named checks in test_python_fixtures.py."""

from __future__ import annotations

import pytest

from grader import catalog, workspace
from tests.e2e.support import skip_reason
from tests.grader.support import assert_useful

EX = catalog.load(5)


def test_skeleton_fails_first_on_the_table(no_live):
    g = workspace.grade(EX, workspace.skeleton(EX), "skeleton", "soft")
    assert not g.error and not g.full_marks
    first = next(c for c in g.checks if not c.passed)
    assert first.id == "ex5.table.ecn" and "illegal (absent)" in first.observed
    assert g.failed("ex5.reinstate")
    assert_useful(g)
    assert all(c.observed.startswith("not run") for c in g.checks
               if c.id.startswith("ex5.sim.") or c.id == "live.transfer")


def test_solution_passes_every_stage_but_live(no_live):
    g = workspace.grade(EX, workspace.solution(EX), "solution", "soft")
    assert not g.error
    assert [c.id for c in g.checks if not c.passed] == ["live.transfer"], g.checks
    assert "skipped" in g.checks[-1].observed


def test_the_required_fixtures_exist():
    names = {w.name for w in EX.wrong_solutions()}
    assert {"reinstate-after-one-probe", "ecn-retires-ev", "trim-ignored"} <= names


def test_simulator_figures_of_the_reference():
    """The simulator stage on the project's own code: the bounds leave room on both sides."""
    from grader.exercises import ex5, ex5_observe
    r = ex5.sim_figures(ex5_observe.simulate())
    assert r["ok"] and len(r["dead"]) > 0
    assert set(r["retired"]) == r["dead"] and set(r["back"]) == r["dead"]
    assert r["data_after_rtts"] < ex5.RETIRE_BOUND_RTTS / 2
    earliest = r["t_heal"] + (r["k"] - 1) * r["interval"]
    assert min(r["back"].values()) >= earliest


@pytest.mark.slow
@pytest.mark.root
def test_solution_live():
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    g = workspace.grade(EX, workspace.solution(EX), "solution", "soft")
    assert g.full_marks, g.checks
