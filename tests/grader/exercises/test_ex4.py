"""Exercise 4 (spraying and SACK in the agent), beyond what test_exercises.py holds every
exercise to: the simulator stage sees a plane left out."""

from __future__ import annotations

from grader import catalog

EX = catalog.load(4)


def test_simulator_stage_sees_a_plane_left_out(monkeypatch):
    """The simulator stage itself (every fixture fails a unit check first): an agent that
    sprays on plane 0 only still completes, but sim.every-plane fails."""
    from host_agent.core.evs import EvSet
    from rubrics import ex4

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
