"""Spreading a fabric over servers (emulation/cluster/placement.py): every node placed once,
crossing links counted independently, the cheaper cut chosen, refusals that name the limit,
and the Mininet Cluster Edition adapter."""

from __future__ import annotations

import contextlib
import json

import pytest

from emulation.cluster.placement import (
    Placement,
    PlacementError,
    cluster_placer,
    place,
    plane_cut,
    rack_cut,
)
from fabric.topology import ROLE_T0, ROLE_T1, Fabric

DEFAULT = Fabric(4, 2, 2, 2)
PATHS_128 = Fabric(8, 2, 16, 2)
HOSTS_16 = Fabric(8, 8, 8, 2)
RACK_WINS = Fabric(4, 2, 1, 4)  # many hosts, one spine: cutting racks beats cutting planes

CASES = [(DEFAULT, 1), (DEFAULT, 2), (DEFAULT, 3), (DEFAULT, 4), (PATHS_128, 3),
         (HOSTS_16, 3), (RACK_WINS, 2)]


def node_names(fabric: Fabric) -> list[str]:
    return [s.name for s in fabric.switches] + [fabric.host_name(h) for h in range(fabric.hosts)]


def count_crossings(fabric: Fabric, where: dict[str, int]) -> int:
    n = 0
    for link in fabric.links:
        if where[link.a] != where[link.b]:
            n += 1
    return n


def feasible_cuts(fabric: Fabric, servers: int) -> list[Placement]:
    out = []
    for cut in (plane_cut, rack_cut):
        with contextlib.suppress(PlacementError):
            out.append(cut(fabric, servers))
    return out


def check_complete(fabric: Fabric, p: Placement, servers: int) -> None:
    names = node_names(fabric)
    assert sorted(p.node_server) == sorted(names)
    assert len(p.node_server) == len(names) == len(set(names))
    assert set(p.node_server.values()) <= set(range(servers))
    assert sum(p.switches_per_server(fabric)) == len(fabric.switches)
    assert sum(p.hosts_per_server(fabric)) == fabric.hosts
    crossing = p.crossing_links(fabric)
    assert len(crossing) == count_crossings(fabric, p.node_server)
    assert all(p.node_server[lk.a] != p.node_server[lk.b] for lk in crossing)


@pytest.mark.parametrize("fabric,servers", CASES)
def test_every_node_is_placed_once_and_crossings_match(fabric: Fabric, servers: int) -> None:
    cuts = feasible_cuts(fabric, servers)
    assert cuts, "every case here has at least one feasible cut"
    for p in [*cuts, place(fabric, servers)]:
        assert p.servers == servers
        check_complete(fabric, p, servers)


@pytest.mark.parametrize("fabric,servers", CASES)
def test_place_picks_the_cut_with_fewer_crossings(fabric: Fabric, servers: int) -> None:
    chosen = place(fabric, servers)
    costs = {p.strategy: count_crossings(fabric, p.node_server)
             for p in feasible_cuts(fabric, servers)}
    assert count_crossings(fabric, chosen.node_server) == min(costs.values())
    best = min(costs.values())
    expected = "plane" if costs.get("plane") == best else "rack"
    assert chosen.strategy == expected
    if servers > 1:
        assert chosen.node_server == {"plane": plane_cut, "rack": rack_cut}[expected](
            fabric, servers).node_server


def test_known_costs() -> None:
    # DEFAULT on 3: planes 2/1/1, hosts 2/1/1; hosts 0-1 cross on 2 planes, 2 and 3 on 3 each.
    assert len(plane_cut(DEFAULT, 3).crossing_links(DEFAULT)) == 2 * 2 + 3 + 3
    assert place(DEFAULT, 3).strategy == "plane"
    # PATHS_128 on 3: planes 3/3/2, hosts 2/1/1: 5 + 5 + 5 + 6 NIC links cross.
    assert len(plane_cut(PATHS_128, 3).crossing_links(PATHS_128)) == 21
    # RACK_WINS on 2: plane cut crosses 8 hosts x 2 planes; rack cut 4 spines x 1 T0 each.
    assert len(plane_cut(RACK_WINS, 2).crossing_links(RACK_WINS)) == 16
    assert len(rack_cut(RACK_WINS, 2).crossing_links(RACK_WINS)) == 4
    assert place(RACK_WINS, 2).strategy == "rack"
    # DEFAULT on 2: both cuts cross 8 links; the tie goes to the plane cut.
    assert len(rack_cut(DEFAULT, 2).crossing_links(DEFAULT)) == 8
    assert len(plane_cut(DEFAULT, 2).crossing_links(DEFAULT)) == 8
    assert place(DEFAULT, 2).strategy == "plane"


@pytest.mark.parametrize("fabric,servers", CASES)
def test_switch_and_host_counts_are_balanced(fabric: Fabric, servers: int) -> None:
    for p in feasible_cuts(fabric, servers):
        switches, hosts = p.switches_per_server(fabric), p.hosts_per_server(fabric)
        if p.strategy == "plane":
            assert max(switches) - min(switches) <= fabric.t0_per_plane + fabric.t1_per_plane
            assert max(hosts) - min(hosts) <= 1
        else:
            assert max(switches) - min(switches) <= fabric.planes
            assert max(hosts) - min(hosts) <= fabric.hosts_per_t0


def test_plane_cut_keeps_planes_whole_and_rack_cut_keeps_racks_whole() -> None:
    p = plane_cut(HOSTS_16, 3)
    for sw in HOSTS_16.switches:
        assert p.node_server[sw.name] == p.node_server[f"p{sw.plane}l0"]
    # only host NIC links cross in a plane cut
    hosts = {HOSTS_16.host_name(h) for h in range(HOSTS_16.hosts)}
    assert all({lk.a, lk.b} & hosts for lk in p.crossing_links(HOSTS_16))
    r = rack_cut(HOSTS_16, 3)
    for sw in HOSTS_16.switches:
        if sw.role == ROLE_T0:
            assert r.node_server[sw.name] == r.node_server[f"p0l{sw.index}"]
    for h in range(HOSTS_16.hosts):
        t0 = HOSTS_16.nic(h, 0).t0
        assert r.node_server[HOSTS_16.host_name(h)] == r.node_server[f"p0l{t0}"]
    # only T0-T1 links cross in a rack cut
    for lk in r.crossing_links(HOSTS_16):
        roles = {HOSTS_16.by_name[lk.a].role, HOSTS_16.by_name[lk.b].role}
        assert roles == {ROLE_T0, ROLE_T1}


def test_one_server_holds_everything() -> None:
    p = place(DEFAULT, 1)
    assert p.strategy == "plane" and set(p.node_server.values()) == {0}
    assert p.crossing_links(DEFAULT) == []
    s = p.summary(DEFAULT)
    assert s == {"strategy": "plane", "servers": 1, "switches_per_server": [16],
                 "hosts_per_server": [4], "crossing_links": 0, "total_links": 32}
    json.dumps(s)


def test_summary_is_json_and_consistent() -> None:
    p = place(HOSTS_16, 3)
    s = json.loads(json.dumps(p.summary(HOSTS_16)))
    assert s["strategy"] == p.strategy
    assert s["crossing_links"] == count_crossings(HOSTS_16, p.node_server)
    assert s["total_links"] == len(HOSTS_16.links)
    assert sum(s["switches_per_server"]) == len(HOSTS_16.switches)
    assert sum(s["hosts_per_server"]) == HOSTS_16.hosts


def test_refusals_name_the_limit() -> None:
    with pytest.raises(PlacementError, match=r"at most 4 servers"):
        plane_cut(DEFAULT, 5)
    with pytest.raises(PlacementError, match=r"at most 2 servers"):
        rack_cut(DEFAULT, 3)
    with pytest.raises(PlacementError) as e:
        place(DEFAULT, 5)
    assert "plane cut" in str(e.value) and "rack cut" in str(e.value)
    assert "at most 4" in str(e.value) and "at most 2" in str(e.value)
    for bad in (0, -1):
        for fn in (place, plane_cut, rack_cut):
            with pytest.raises(PlacementError, match="at least 1"):
                fn(DEFAULT, bad)
    assert issubclass(PlacementError, ValueError)


def test_placement_validates_itself() -> None:
    with pytest.raises(PlacementError, match="strategy"):
        Placement(2, "random", {})
    with pytest.raises(PlacementError, match="outside"):
        Placement(2, "plane", {"h0": 2})
    p = Placement(1, "plane", {"h0": 0})
    with pytest.raises(PlacementError, match="p0l0"):
        p.crossing_links(DEFAULT)


def test_cluster_edition_adapter() -> None:
    cluster = pytest.importorskip("mininet.examples.cluster")
    p = place(DEFAULT, 3)
    names = ["localhost", "server1", "server2"]
    placer_cls = cluster_placer(p, names)
    assert issubclass(placer_cls, cluster.Placer)
    nodes = node_names(DEFAULT)
    # as MininetCluster.placeNodes builds it
    placer = placer_cls(servers=names, nodes=nodes,
                        hosts=[DEFAULT.host_name(h) for h in range(DEFAULT.hosts)],
                        switches=[s.name for s in DEFAULT.switches],
                        links=[(lk.a, lk.b) for lk in DEFAULT.links])
    for node in ("h0", "h3", "p0l0", "p2s1", "p3l1"):
        assert placer.place(node) == names[p.node_server[node]]
    assert {placer.place(n) for n in nodes} == set(names)
    with pytest.raises(PlacementError, match="c0"):
        placer.place("c0")
    with pytest.raises(PlacementError, match="server2"):
        placer_cls(servers=["localhost", "server1"], nodes=nodes)
    with pytest.raises(PlacementError, match="3 servers"):
        cluster_placer(p, names[:2])
    with pytest.raises(PlacementError, match="distinct"):
        cluster_placer(p, ["a", "a", "b"])
