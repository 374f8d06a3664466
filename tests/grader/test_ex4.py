"""Exercise 4 (spraying and SACK in the agent): the grader fails the skeleton with useful
messages and gives the reference solution every point before the live stage, which is skipped here
(grader.live.SKIP_ENV); test_solution_live runs it as root. The wrong-solution fixtures are
held to their named checks in test_python_fixtures.py."""

from __future__ import annotations

import pytest

from grader import catalog, workspace
from tests.e2e.support import skip_reason
from tests.grader.support import assert_useful
from tests.support import require_bmv2

EX = catalog.load(4)


def test_skeleton_fails_first_on_spraying(no_live):
    g = workspace.grade(EX, workspace.skeleton(EX), "skeleton", "soft")
    assert not g.error and not g.full_marks
    first = next(c for c in g.checks if not c.passed)
    assert first.id == "spray.spread" and "NotImplementedError" in first.observed
    assert "NotImplementedError" in next(c for c in g.checks if c.id == "sack.bitmap").observed
    assert_useful(g)
    assert all(c.observed.startswith("not run") for c in g.checks
               if c.id.startswith(("sim.", "live.")))


def test_solution_passes_every_stage_but_live(no_live):
    g = workspace.grade(EX, workspace.solution(EX), "solution", "soft")
    assert not g.error
    assert [c.id for c in g.checks if not c.passed] == ["live.transfer"], g.checks
    assert "skipped" in g.checks[-1].observed


@pytest.mark.slow
@pytest.mark.root
@pytest.mark.parametrize("target", ["soft", pytest.param("bmv2", marks=pytest.mark.bmv2)])
def test_solution_live(target):
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    if target == "bmv2":
        require_bmv2()
    g = workspace.grade(EX, workspace.solution(EX), "solution", target)
    assert g.full_marks, g.checks



def test_simulator_stage_sees_a_plane_left_out(monkeypatch):
    """The simulator stage itself (every fixture fails a unit check first): an agent that
    sprays on plane 0 only still completes, but sim.every-plane fails."""
    from grader.exercises import ex4
    from host_agent.core.evs import EvSet

    real = EvSet.choose

    def plane_zero_only(self, now):
        for _ in range(len(self)):
            entry = real(self, now)
            if entry is None or entry.path.plane == 0:
                return entry
        return entry

    monkeypatch.setattr(EvSet, "choose", plane_zero_only)
    lossy, planes = ex4._judge_sim(ex4.lossy_transfer())
    assert lossy.passed, lossy
    assert not planes.passed and planes.expected and planes.hint
    assert planes.observed.startswith("data packets per plane [")
