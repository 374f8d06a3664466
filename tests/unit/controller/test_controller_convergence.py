"""Baseline convergence with a manual clock: nothing before the delay, exact groups after it."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from controller.convergence import Convergence
from controller.install import InstallError
from controller.tables import SwitchTables, diff, fabric_tables
from fabric.topology import Fabric, TopologyError


class ManualClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.pending: list[tuple[float, int, Callable[[], None]]] = []

    def call_later(self, delay: float, fn: Callable[[], None]) -> None:
        self.pending.append((self.now + delay, len(self.pending), fn))

    def advance(self, seconds: float) -> None:
        self.now += seconds
        due = sorted(p for p in self.pending if p[0] <= self.now)
        self.pending = [p for p in self.pending if p[0] > self.now]
        for _, _, fn in due:
            fn()


class FakeWriter:
    """Holds each switch's tables like a Controller; optionally fails for one switch."""

    def __init__(self, fabric: Fabric, broken: str = "") -> None:
        self.current = fabric_tables(fabric)
        self.writes: list[tuple[str, int]] = []
        self.broken = broken

    def apply(self, name: str, new: SwitchTables) -> list:
        updates = diff(self.current[name], new)
        self.current[name] = new
        if name == self.broken:
            raise InstallError(f"{name}: Write UNAVAILABLE: gone")
        if updates:
            self.writes.append((name, len(updates)))
        return updates


def groups(writer: FakeWriter, name: str) -> dict[int, tuple[int, ...]]:
    return {g.group_id: g.member_ids for g in writer.current[name].groups}


@pytest.fixture
def setup() -> tuple[Fabric, ManualClock, FakeWriter, Convergence]:
    fabric = Fabric(planes=2, t0_per_plane=2, t1_per_plane=2, hosts_per_t0=1)
    clock, writer = ManualClock(), FakeWriter(fabric)
    return fabric, clock, writer, Convergence(fabric, writer, delay=3.0, scheduler=clock)


def test_dead_member_removed_after_delay_not_before(setup) -> None:
    fabric, clock, writer, conv = setup
    up_link = fabric.uplink_port(0)  # p1l0 port to p1s0
    assert groups(writer, "p1l0") == {2: (up_link, fabric.uplink_port(1))}
    conv.link_down("p1l0", "p1s0")
    clock.advance(2.9)
    assert writer.writes == []
    clock.advance(0.2)
    assert groups(writer, "p1l0") == {2: (fabric.uplink_port(1),)}
    assert groups(writer, "p1l1") == {1: (fabric.uplink_port(1),)}  # s0 lost its way to l0
    assert {name for name, count in writer.writes if count} == {"p1l0", "p1l1", "p1s0"}
    assert all(not name.startswith("p0") for name, _ in writer.writes)
    conv.link_up("p1s0", "p1l0")
    clock.advance(2.9)
    assert groups(writer, "p1l0") == {2: (fabric.uplink_port(1),)}
    clock.advance(0.2)
    assert writer.current == fabric_tables(fabric)
    assert [a.up for a in conv.history] == [False, True]


def test_flap_within_hold_time_changes_nothing(setup) -> None:
    _, clock, writer, conv = setup
    conv.link_down("p0l0", "p0s1")
    clock.advance(1.0)
    conv.link_up("p0l0", "p0s1")
    clock.advance(10.0)
    assert writer.writes == []
    assert conv.history == []


def test_last_spine_gone_withdraws_route(setup) -> None:
    fabric, clock, writer, conv = setup
    conv.link_down("p0l0", "p0s0")
    conv.link_down("p0l0", "p0s1")
    clock.advance(3.0)
    assert groups(writer, "p0l0") == {}
    assert groups(writer, "p0l1") == {}
    conv.link_up("p0l0", "p0s1")
    clock.advance(3.0)
    assert groups(writer, "p0l0") == {2: (fabric.uplink_port(1),)}


def test_write_failure_is_reported_and_others_still_converge() -> None:
    fabric = Fabric(planes=1, t0_per_plane=2, t1_per_plane=2, hosts_per_t0=1)
    clock, writer = ManualClock(), FakeWriter(fabric, broken="p0l1")
    conv = Convergence(fabric, writer, delay=0.5, scheduler=clock)
    conv.link_down("p0l0", "p0s0")
    clock.advance(1.0)
    assert conv.history[0].errors == ("p0l1: Write UNAVAILABLE: gone",)
    assert groups(writer, "p0l0") == {2: (fabric.uplink_port(1),)}


def test_bad_input_rejected(setup) -> None:
    fabric, clock, writer, conv = setup
    with pytest.raises(TopologyError, match="not a link"):
        conv.link_down("p0l0", "p1s0")
    with pytest.raises(TopologyError, match="delay"):
        Convergence(fabric, writer, delay=-1, scheduler=clock)
