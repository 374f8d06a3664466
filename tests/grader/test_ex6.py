"""Exercise 6 (plane failure): the grader fails the skeleton with useful
messages and gives the reference solution every point before the live stage, which is skipped here
(grader.live.SKIP_ENV); test_solution_live runs it as root. The wrong-solution fixtures are
held to their named checks in test_python_fixtures.py."""

from __future__ import annotations

import pytest

from grader import catalog, workspace
from tests.e2e.support import skip_reason
from tests.grader.support import assert_useful

EX = catalog.load(6)


def test_skeleton_fails_first_on_the_local_reaction(no_live):
    g = workspace.grade(EX, workspace.skeleton(EX), "skeleton", "soft")
    assert not g.error and not g.full_marks
    first = next(c for c in g.checks if not c.passed)
    assert first.id == "ex6.local" and "NotImplementedError" in first.observed
    assert "TODO exercise 6" in first.observed
    assert_useful(g)
    assert all(c.observed.startswith("not run") for c in g.checks
               if c.id.startswith("ex6.sim.") or c.id == "live.transfer")


def test_solution_passes_every_stage_but_live(no_live):
    g = workspace.grade(EX, workspace.solution(EX), "solution", "soft")
    assert not g.error
    assert [c.id for c in g.checks if not c.passed] == ["live.transfer"], g.checks
    assert "skipped" in g.checks[-1].observed


def test_the_required_fixtures_exist():
    names = {w.name for w in EX.wrong_solutions()}
    assert {"notify-on-dead-plane", "never-resume", "ignore-notification"} <= names


def test_simulator_figures_of_the_reference():
    """The simulator stage on the project's own code: the bounds leave room."""
    from grader.exercises import ex6
    r = ex6.simulate()
    m = r["marks"]
    assert r["ok"] and "down_at" in m and "up_at" in m
    assert (m["down_at"] - r["t_fail"]) / r["rtt"] < ex6.NOTIFY_BOUND_RTTS / 2
    assert m["at_heal"] == m["quiet_from"] and r["final"] > m["at_heal"]


@pytest.mark.slow
@pytest.mark.root
def test_solution_live():
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    g = workspace.grade(EX, workspace.solution(EX), "solution", "soft")
    assert g.full_marks, g.checks
