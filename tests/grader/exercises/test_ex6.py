"""Exercise 6 (plane failure), beyond what test_exercises.py holds every exercise to: its
fixtures, the simulator's figures of the reference, and the plane drawn from the run's
challenge."""

from __future__ import annotations

import pytest

from grader import catalog, challenge, judging, workspace
from rubrics import ex6
from rubrics.ex6_observe import PLANES, dead_plane

EX = catalog.load(6)


def test_the_required_fixtures_exist():
    names = {w.name for w in EX.wrong_solutions()}
    assert {"notify-on-dead-plane", "never-resume", "ignore-notification"} <= names


def test_simulator_figures_of_the_reference():
    """The simulator stage on the project's own code: the bounds leave room."""
    from rubrics import ex6
    r = ex6.simulate()
    m = r["marks"]
    assert r["finished"] and r["verified"] and "down_at" in m and "up_at" in m
    assert (m["down_at"] - r["t_fail"]) / r["rtt"] < ex6.NOTIFY_BOUND_RTTS / 2
    assert m["at_heal"] == m["quiet_from"] and r["final"] > m["at_heal"]


def _judged(obs: dict, plane: int = 1) -> dict:
    """The judge's verdicts under a challenge that takes `plane` from A (units() loses 1);
    obs["sim"], if any, is what the grader's own simulator measured."""
    report = {k: v for k, v in obs.items() if k != "sim"}
    judged = judging.judge(EX, {"observations": report}, "soft",
                           challenge=_challenge_losing(plane),
                           measured={"sim": obs["sim"]} if "sim" in obs else None)
    return {c.id: c for c in judged}


def test_the_judge_decides_from_raw_data_only():
    """The sandbox's data of the reference passes; each lie a forger would have to tell
    fails its check; a report of the wrong shape fails every check, never crashes."""
    from rubrics import ex6
    units = ex6.units()
    for scenario in units.values():
        assert "raised" not in scenario, scenario
    assert all(c.passed for c in ex6.unit_checks(units))
    obs = {"units": units, "sim": {"raised": "RuntimeError: boom"}}
    got = _judged(obs)
    assert all(got[i].passed for i in ("ex6.local", "ex6.notify", "ex6.peer-down",
                                       "ex6.retry", "ex6.peer-up"))
    assert got["ex6.sim.transfer"].observed == "RuntimeError: boom"
    assert got["ex6.sim.quiet"].observed.startswith("not run: the simulation did not run")
    assert got["live.transfer"].observed.startswith("not run: fix the simulator checks")
    bad = {**units, "notify": {"ep_req": [r[:2] + [0b1111] for r in units["notify"]["ep_req"]]}}
    assert "port mask {0, 1, 2, 3}" in _judged({"units": bad})["ex6.notify"].observed
    bad = {**units, "retry": {**units["retry"], "ep_req": []}}
    assert not _judged({"units": bad})["ex6.retry"].passed
    replayed = _judged(obs, plane=2)  # records of a run that lost plane 1, judged for plane 2
    assert not replayed["ex6.notify"].passed and not replayed["ex6.local"].passed
    assert replayed["ex6.sim.transfer"].observed.startswith("not run"), replayed
    for junk in ({}, {"units": []}, {"units": {**units, "local": {"events": 3}}},
                 {"units": {**units, "retry": {"timer": [], "ep_req": []}}},
                 {"units": units, "sim": {**_REF_SIM, "rtt": 0}}):
        checks = _judged(junk)
        assert not any(c.passed for c in checks.values()), junk
        assert all("malformed" in c.observed for c in checks.values()), junk


_REF_SIM = {"finished": True, "verified": True, "end": 0.01, "rtt": 1e-5, "t_fail": 1e-3,
            "t_heal": 2e-3, "final": 90,
            "marks": {"down_at": 1.001e-3, "quiet_from": 40, "at_heal": 40, "up_at": 2.1e-3}}


def test_simulator_figures_are_judged():
    from rubrics import ex6
    assert all(c.passed for c in ex6.sim_checks(_REF_SIM))
    late = {**_REF_SIM, "marks": {**_REF_SIM["marks"], "down_at": 1e-3 + 6e-5}}
    assert [c.id for c in ex6.sim_checks(late) if not c.passed] == ["ex6.sim.notified"]
    leak = {**_REF_SIM, "marks": {**_REF_SIM["marks"], "quiet_from": 30}}
    assert [c.id for c in ex6.sim_checks(leak) if not c.passed] == ["ex6.sim.quiet"]
    stuck = {**_REF_SIM, "finished": False}
    assert ex6.sim_checks(stuck)[0].observed == "not finished after 10.00 ms"


def _challenge_losing(plane: int) -> str:
    """A challenge whose run takes `plane` from A (ex6_observe.dead_plane), found by drawing."""
    while True:
        c = challenge.new()
        if dead_plane(c) == plane:
            return c


@pytest.mark.parametrize("plane", range(PLANES))
def test_every_plane_the_challenge_may_draw_grades_alike(plane, no_live, monkeypatch):
    """Each grading run draws the plane A loses (issue 54: another run's records name another
    plane). Whichever it draws, the reference passes every unit check, in this process, and
    each wrong-solution fixture, graded in the sandbox, fails first on its own check."""
    assert all(c.passed for c in ex6.unit_checks(ex6.units(plane), plane))
    drawn = _challenge_losing(plane)
    monkeypatch.setattr(challenge, "new", lambda: drawn)
    for wrong in EX.wrong_solutions():
        g = workspace.grade(EX, workspace.fixture(EX, wrong), wrong.name, "soft")
        first = next(c for c in g.checks if not c.passed)
        assert first.id == workspace.fixture_expectation(wrong)["fails"], (plane, first)
