"""fabric.capacity, the one definition of what the fabric carries: the demo's, the bench's,
the live view's and the simulator's figures all come from its max-flow."""

from __future__ import annotations

import pytest

from fabric.capacity import flow_share_left, max_flow
from fabric.topology import Fabric

FABRIC = Fabric()  # 4 planes x 2 T0 x 2 T1, 2 hosts per T0


def test_a_flow_across_spines_gets_one_port_per_plane() -> None:
    assert max_flow(FABRIC, [0], [FABRIC.hosts - 1], 500) == 4 * 500
    assert max_flow(FABRIC, [0], [1], 1.0) == 4  # the same T0: its host ports bound it


def test_incast_is_bound_by_the_receivers_nics() -> None:
    assert max_flow(FABRIC, [1, 2, 3], [0], 500) == 4 * 500
    assert max_flow(FABRIC, [0, 1], [2, 3], 500) == 2 * 4 * 500


def test_links_and_switches_that_are_down_carry_nothing() -> None:
    last = FABRIC.hosts - 1
    nic = (FABRIC.host_name(last), FABRIC.t0(0, FABRIC.nic(last, 0).t0).name)
    assert max_flow(FABRIC, [0], [last], 1.0, down_links=[nic]) == 3
    assert max_flow(FABRIC, [0], [last], 1.0, down_links=[nic[::-1]]) == 3  # either order
    # one of a plane's two spines down: the other still carries that plane's port
    assert max_flow(FABRIC, [0], [last], 1.0, down_switches=["p0s0"]) == 4
    assert max_flow(FABRIC, [0], [last], 1.0, down_switches=["p0s0", "p0s1"]) == 3


def test_a_rate_per_direction() -> None:
    slow = FABRIC.host_name(0)
    assert max_flow(FABRIC, [0], [3], lambda a, b: 0.5 if a == slow else 1.0) == 2


@pytest.mark.parametrize("a, b, left", [("h0", "p0l0", 0.75), ("p0l0", "p0s0", 1.0)])
def test_the_share_a_failed_link_leaves(a: str, b: str, left: float) -> None:
    assert flow_share_left(FABRIC, 0, FABRIC.hosts - 1, a, b) == left


def test_a_plane_with_one_spine_loses_its_share_with_its_uplink() -> None:
    thin = Fabric(planes=2, t0_per_plane=2, t1_per_plane=1, hosts_per_t0=1)
    assert flow_share_left(thin, 0, 1, "p0l0", "p0s0") == 0.5
