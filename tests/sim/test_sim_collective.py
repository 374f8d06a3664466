"""Failures that repeat (flap, reboot) and the ring all-reduce in the simulator."""

from __future__ import annotations

from typing import Any

import pytest

from sim import collective
from sim.harness import Harness, SimSettings
from sim.scenario_kit import DEFAULT_FABRIC
from sim.scenarios import ScenarioError, run_scenario

SIZE = 2 * 1024 * 1024
_cache: dict[str, dict[str, Any]] = {}


def result(name: str, size: int = SIZE) -> dict[str, Any]:
    if name not in _cache:
        _cache[name] = run_scenario(name, size=size, settings=SimSettings())
    return _cache[name]


def test_flap_retires_only_what_crosses_the_flapping_link() -> None:
    r = result("flap", 16 * SIZE)  # long enough for several flaps
    assert r["ok"] and r["flaps"] >= 3
    assert r["failed_route_retirements"] > 0
    assert r["healthy_route_retirements"] == 0


def test_switch_reboot_is_routed_around_and_comes_back() -> None:
    r = result("switch-reboot")
    assert r["ok"] and r["failed_route_retirements"] > 0
    assert r["healthy_route_retirements"] == 0
    assert r["recovery_rtts"] < 2.0  # the dead spine's routes left within two RTTs


def test_allreduce_steps_take_the_same_time_on_a_healthy_fabric() -> None:
    r = result("allreduce")
    hosts = r["fabric"]["hosts"]
    assert r["ok"] and r["phase_mismatches"] == 0
    assert r["phases_per_step"] == 2 * (hosts - 1) and len(r["step_times_s"]) == r["steps"]
    assert min(r["step_times_s"]) >= r["ideal_step_s"]
    assert max(r["step_times_s"]) <= 1.01 * min(r["step_times_s"])


def test_a_spine_reboot_costs_its_step_little() -> None:
    """Measured (seed 1, SIZE): step 1, in which the spine reboots, takes 1.021x step 0."""
    r = result("allreduce-reboot")
    over = r["step_time_over_first"]
    assert r["ok"] and r["reboot_at_s"] is not None
    assert 1.0 < over[collective.REBOOT_STEP] < 1.1


def test_flaps_across_the_fabric_hit_the_all_reduce() -> None:
    r = result("allreduce-flap")
    assert r["ok"] and r["flaps"] >= 1 and r["retired_evs"] > 0
    assert r["step_time_s"]["max"] < 1.5 * result("allreduce")["step_time_s"]["max"]


def test_ring_needs_three_hosts_and_refuses_fewer() -> None:
    small = DEFAULT_FABRIC.__class__(planes=1, t0_per_plane=2, t1_per_plane=1, hosts_per_t0=1)
    with pytest.raises(ScenarioError, match="at least 3 hosts"):
        run_scenario("allreduce", size=SIZE, fabric=small)
    with pytest.raises(ValueError, match="at least 3 hosts"):
        collective.RingAllreduce(Harness(small, SimSettings()), SIZE)


def test_repost_refuses_data_of_another_size() -> None:
    h = Harness(DEFAULT_FABRIC, SimSettings())
    t = h.add_transfer(0, 3, 1000)
    with pytest.raises(ValueError, match="1000-byte buffer"):
        h.repost(t, bytes(999))
