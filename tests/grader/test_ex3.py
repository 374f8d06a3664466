"""Exercise 3 (static tables in the controller): the grader fails the skeleton with useful
messages and gives the reference solution every point before the live stage, which is skipped here
(grader.live.SKIP_ENV); test_solution_live runs it as root. The wrong-solution fixtures are
held to their named checks in test_python_fixtures.py."""

from __future__ import annotations

import pytest

from grader import catalog, workspace
from tests.e2e.support import skip_reason
from tests.grader.support import assert_useful
from tests.support import require_bmv2

EX = catalog.load(3)


def test_skeleton_fails_first_on_the_tables(no_live):
    g = workspace.grade(EX, workspace.skeleton(EX), "skeleton", "soft")
    assert not g.error and not g.full_marks
    first = next(c for c in g.checks if not c.passed)
    assert first.id == "tables.host" and "NotImplementedError" in first.observed
    assert_useful(g)
    assert all(c.observed.startswith("not run") for c in g.checks
               if c.id in ("reach.all-paths", "live.transfer"))


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


def test_reachability_walk_names_the_switch_that_drops(monkeypatch):
    """The walk stage itself (no fixture reaches it: each fails a table check first)."""
    import dataclasses

    from controller import tables
    from grader.exercises import ex3, ex3_observe
    from p4rt import names as N

    real = tables.switch_tables

    def one_entry_short(fabric, switch, *args, **kwargs):
        t = real(fabric, switch, *args, **kwargs)
        if switch.name != "p1l0":
            return t
        spine = fabric.t1(1, 1).usid
        keep = tuple(e for e in t.entries if not (
            e.table == N.USID_FWD_TABLE and dict(e.match)[N.USID_PREFIX].value & 0xFFFF == spine))
        return dataclasses.replace(t, entries=keep)

    monkeypatch.setattr(tables, "switch_tables", one_entry_short)
    check = ex3.reach_check(ex3_observe.observe_tables(ex3.FABRICS))
    assert not check.passed
    assert "dropped at p1l0 (UNKNOWN_USID)" in check.observed
    assert "plane 1 spine 1" in check.observed
    assert check.expected and check.hint
