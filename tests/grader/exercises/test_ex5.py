"""Exercise 5 (path retirement and probing), beyond what test_exercises.py holds every exercise
to: its fixtures, the simulator's figures of the reference, and records that lie."""

from __future__ import annotations

import pytest

from grader import catalog

EX = catalog.load(5)


def test_the_required_fixtures_exist():
    names = {w.name for w in EX.wrong_solutions()}
    assert {"reinstate-after-one-probe", "ecn-retires-ev", "trim-ignored"} <= names


def test_simulator_figures_of_the_reference():
    """The simulator stage on the project's own code, as the fabric saw it: the bounds leave
    room on both sides."""
    from rubrics import ex5, ex5_observe
    r = ex5.sim_figures(ex5_observe.simulate())
    assert r["ok"] and len(r["dead"]) > 0 and not r["hurt"]
    assert all(t is not None for t in r["first_probe"].values())
    waits = [(t - r["t_fail"]) / r["rtt"] for t in r["first_probe"].values()]
    assert max(waits) < (ex5.RETIRE_BOUND_RTTS + r["interval"] / r["rtt"]) * 0.75, waits
    assert r["data_after_rtts"] < ex5.RETIRE_BOUND_RTTS / 2
    earliest = r["t_heal"] + (r["k"] - 1) * r["interval"]
    latest = r["t_heal"] + (r["k"] + 1) * r["interval"] + r["timeout"]
    for ev in r["dead"]:
        assert len(r["healed_probes"][ev]) >= r["k"] and max(r["healed_probes"][ev]) < latest
        assert all(t >= earliest for t in r["healed_data"][ev])
    assert sum(bool(r["healed_data"][ev]) for ev in r["dead"]) >= len(r["dead"]) // 2
    assert all(c.passed for c in ex5._sim_checks({"data": ex5_observe.simulate()}))


def _reference_record() -> dict:
    from rubrics import ex5_observe
    return ex5_observe.simulate()


@pytest.mark.parametrize("lie", ["probes-never-stop", "data-before-k-replies", "healthy-probed",
                                 "never-back"])
def test_the_simulator_checks_read_states_off_the_wire(lie):
    """Each way an EV's state machine can go wrong shows in what the sender's NIC sent, and
    fails its check (the record is the reference's, changed as that bug would change it)."""
    from rubrics import ex5
    sim = _reference_record()
    r = ex5.sim_figures(sim)
    dead = sorted(r["dead"])
    row = sim["evs"][dead[0]]
    if lie == "probes-never-stop":
        row["probes"].append(sim["now"])
        fails = "ex5.sim.reinstate"
    elif lie == "data-before-k-replies":
        row["data"].append(sim["t_heal"] + r["interval"])
        fails = "ex5.sim.reinstate"
    elif lie == "healthy-probed":
        healthy = next(ev for ev in sim["evs"] if ev not in r["dead"])
        sim["evs"][healthy]["probes"].append((sim["t_fail"] + sim["t_heal"]) / 2)
        fails = "ex5.sim.healthy"
    else:
        for ev in dead:
            sim["evs"][ev]["data"] = [t for t in sim["evs"][ev]["data"] if t < sim["t_heal"]]
        fails = "ex5.sim.reinstate"
    failed = [c.id for c in ex5._sim_checks({"data": sim}) if not c.passed]
    assert failed == [fails], failed
