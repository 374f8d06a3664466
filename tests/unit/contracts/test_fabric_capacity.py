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


def _reference_max_flow(cap: dict[str, dict[str, float]], source: str, sink: str) -> float:
    """Edmonds-Karp by the book, to hold fabric.capacity's Dinic to."""
    from collections import deque
    flow = 0.0
    while True:
        parent = {source: source}
        todo = deque([source])
        while todo and sink not in parent:
            u = todo.popleft()
            for v, c in cap[u].items():
                if c > 1e-9 and v not in parent:
                    parent[v] = u
                    todo.append(v)
        if sink not in parent:
            return flow
        path, v = [], sink
        while v != source:
            path.append((parent[v], v))
            v = parent[v]
        push = min(cap[u][v] for u, v in path)
        for u, v in path:
            cap[u][v] -= push
            cap[v][u] += push
        flow += push


@pytest.mark.parametrize("seed", range(30))
def test_dinic_agrees_with_edmonds_karp_on_random_graphs(seed: int) -> None:
    import random

    from fabric import capacity
    rng = random.Random(seed)
    names = [capacity._SOURCE, capacity._SINK, *(f"n{i}" for i in range(rng.randrange(2, 12)))]
    cap: dict[str, dict[str, float]] = {n: {} for n in names}
    for _ in range(rng.randrange(3, 40)):
        a, b = rng.sample(names, 2)
        cap[a][b] = cap[a].get(b, 0.0) + rng.choice([1.0, 2.5, 7.0, 0.5])
        cap[b].setdefault(a, 0.0)
    want = _reference_max_flow({a: dict(o) for a, o in cap.items()}, capacity._SOURCE,
                               capacity._SINK)
    assert capacity._augment(cap) == pytest.approx(want)


def test_a_1024_host_permutation_is_every_nic_of_every_sender() -> None:
    fabric = Fabric(8, 64, 32, 16)  # hosts-1024: 8,192 NIC-wide paths (34 s by Edmonds-Karp)
    half = fabric.hosts // 2
    assert max_flow(fabric, range(fabric.hosts), range(fabric.hosts), 10e9) == (
        fabric.hosts * fabric.planes * 10e9)
    assert max_flow(fabric, range(half), range(half, fabric.hosts), 1.0) == half * 8
