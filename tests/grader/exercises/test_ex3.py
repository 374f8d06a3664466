"""Exercise 3 (static tables in the controller), beyond what test_exercises.py holds every
exercise to: the live stage is the grader's own run of the reported tables, so a report's claim
about it is never read, and the fabric it runs holds the reported tables, not the ones the
grader's controller would derive; the reachability walk names the switch that drops."""

from __future__ import annotations

import pytest

from grader import catalog
from tests.e2e.support import skip_reason

EX = catalog.load(3)


def test_reachability_walk_names_the_switch_that_drops(monkeypatch):
    """The walk stage itself (no fixture reaches it: each fails a table check first)."""
    import dataclasses

    from controller import tables
    from p4rt import names as N
    from rubrics import ex3, ex3_observe

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


def _reference_observations(token: str) -> dict:
    from rubrics import ex3, ex3_observe

    return {"tables": ex3_observe.observe_tables(ex3.shapes(token))}


def test_a_live_result_in_the_report_is_not_read(no_live):
    """A report that passes every earlier stage and claims the live transfer too: only the
    grader's own measurement decides, and here it was skipped."""
    from grader import challenge, judging

    token = challenge.new()
    obs = {**_reference_observations(token),
           "live": {"ok": True, "verified": True, "error": "", "started": True}}
    measured = judging.measure(EX, {"observations": obs}, "soft", challenge=token)
    assert measured is not None and "skipped" in measured["live"]
    for grader_saw in (measured, None):
        checks = {c.id: c for c in judging.judge(EX, {"observations": obs}, "soft",
                                                 challenge=token, measured=grader_saw)}
        assert checks["reach.all-paths"].passed
        assert not checks["live.transfer"].passed, checks["live.transfer"]


def test_failing_tables_are_not_run_live(no_live):
    from grader import challenge, judging

    token = challenge.new()
    obs = _reference_observations(token)
    obs["tables"]["fabrics"][0]["p0l0"] = []  # the live fabric's first T0 holds nothing
    assert judging.measure(EX, {"observations": obs}, "soft", challenge=token) == {}


def test_live_tables_are_the_reported_ones_as_the_controller_writes_them():
    from controller.tables import fabric_tables
    from fabric.topology import Fabric
    from grader import challenge
    from rubrics import ex3
    from rubrics.live import LIVE_FABRIC

    token = challenge.new()
    got = ex3.live_tables(_reference_observations(token)["tables"], ex3.shapes(token))
    assert got == fabric_tables(Fabric(**LIVE_FABRIC))  # the reference's, round-tripped
    obs = _reference_observations(token)
    obs["tables"]["fabrics"][0]["p0s0"].append(
        {"kind": "register", "register": "queue_depth_register", "index": 1, "value": 9})
    with pytest.raises(ValueError, match="entries, members and groups only"):
        ex3.live_tables(obs["tables"], ex3.shapes(token))


@pytest.mark.slow
@pytest.mark.root
def test_the_live_stage_installs_the_reported_tables(monkeypatch):
    """The grader's controller derives no usid_fwd entry here, so a transfer can only
    complete if the fabric holds the reported tables."""
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    import dataclasses

    from controller import install
    from grader import challenge
    from p4rt import names as N
    from rubrics import ex3, live

    token = challenge.new()
    reported = ex3.live_tables(_reference_observations(token)["tables"], ex3.shapes(token))
    real = install.fabric_tables

    def no_usid_fwd(*args, **kwargs):
        return {name: dataclasses.replace(t, entries=tuple(
            e for e in t.entries if e.table != N.USID_FWD_TABLE))
            for name, t in real(*args, **kwargs).items()}

    monkeypatch.setattr(install, "fabric_tables", no_usid_fwd)
    monkeypatch.delenv(live.SKIP_ENV, raising=False)
    assert live.measure_transfer("soft", reported) == {
        "ok": True, "verified": True, "error": "", "started": True}
