"""Table computation: walk every source route and every baseline route through the entries."""

from __future__ import annotations

import itertools
import random

import pytest

from controller.tables import (
    PortThresholds,
    SwitchTables,
    diff,
    fabric_tables,
    link_key,
    mac_int,
    switch_tables,
)
from fabric.topology import ROLE_T0, Fabric, TopologyError, shift_usid
from p4rt import names as n
from p4rt.entities import Exact, Lpm, Update

# (planes, t0 per plane, t1 per plane, hosts per T0): 1..8 planes, 1..4 spines.
SIZES = [(1, 1, 1, 1), (1, 2, 1, 2), (2, 3, 2, 1), (4, 2, 2, 2), (3, 2, 3, 2), (8, 2, 4, 2),
         (8, 3, 1, 1)]


def neighbours(fabric: Fabric, name: str) -> dict[int, tuple[str, int]]:
    """port -> (peer node, peer port), straight from the fabric's cabling."""
    out = {}
    for link in fabric.links:
        if name in (link.a, link.b):
            port = link.a_port if link.a == name else link.b_port
            out[port] = link.other(name)
    return out


def node_mac(fabric: Fabric, node: str, plane: int) -> int:
    if node in fabric.by_name:
        return mac_int(fabric.by_name[node].mac)
    return mac_int(fabric.nic(int(node[1:]), plane).mac)


def node_usid(fabric: Fabric, node: str, plane: int) -> int:
    if node in fabric.by_name:
        return fabric.by_name[node].usid
    return fabric.nic(int(node[1:]), plane).usid


def exact_lookup(tables: SwitchTables, table: str, value: int):
    hits = [e for e in tables.table(table) if next(iter(e.match_dict.values())) == Exact(value)]
    assert len(hits) <= 1
    return hits[0] if hits else None


def walk_usid(fabric: Fabric, tables: dict[str, SwitchTables], address: int,
              first: str, plane: int) -> tuple[str, int, list[str]]:
    """Forward like the P4 program; returns (host reached, its port, switches visited)."""
    node, visited = first, []
    for _ in range(8):
        visited.append(node)
        t = tables[node]
        assert exact_lookup(t, n.MY_USID_TABLE, address >> 80) is not None, \
            f"{node} does not own {address:#x}"
        address = shift_usid(address)
        hit = exact_lookup(t, n.USID_FWD_TABLE, address >> 80)
        assert hit is not None, f"{node} has no usid_fwd entry for {address >> 80:#x}"
        params = hit.action.param_dict
        peer, peer_port = neighbours(fabric, node)[params[n.PARAM_PORT]]
        assert params[n.PARAM_DMAC] == node_mac(fabric, peer, plane)
        if peer not in fabric.by_name:
            return peer, peer_port, visited
        node = peer
    raise AssertionError("uSID walk did not terminate")


@pytest.mark.parametrize("size", SIZES)
def test_every_usid_path_reaches_its_host(size: tuple[int, int, int, int]) -> None:
    fabric = Fabric(*size)
    tables = fabric_tables(fabric)
    for src, dst in itertools.permutations(range(fabric.hosts), 2):
        for path in fabric.all_paths(src, dst):
            host, port, visited = walk_usid(fabric, tables, int(path.address),
                                            path.hops[0], path.plane)
            assert (host, port) == (fabric.host_name(dst), path.plane)
            assert tuple(visited) == path.hops


@pytest.mark.parametrize("size", SIZES)
def test_switches_only_know_neighbours(size: tuple[int, int, int, int]) -> None:
    fabric = Fabric(*size)
    for switch in fabric.switches:
        t = switch_tables(fabric, switch)
        peers = neighbours(fabric, switch.name)
        want = {node_usid(fabric, node, switch.plane) for node, _ in peers.values()}
        got = {next(iter(e.match_dict.values())).value & 0xFFFF
               for e in t.table(n.USID_FWD_TABLE)}
        assert got == want
        assert [e.match_dict[n.USID_PREFIX].value & 0xFFFF
                for e in t.table(n.MY_USID_TABLE)] == [switch.usid]
        configs = {e.match_dict[n.EGRESS_PORT].value: e.action.param_dict
                   for e in t.table(n.PORT_CONFIG_TABLE)}
        assert set(configs) == set(peers)
        for port, params in configs.items():
            host_facing = peers[port][0] not in fabric.by_name
            assert params[n.PARAM_HOST_FACING] == int(host_facing)
            assert params[n.PARAM_ECN_ENABLED] == int(not host_facing)
            assert params[n.PARAM_SMAC] == mac_int(switch.mac)


def route_lookup(tables: SwitchTables, address: int) -> list[int]:
    """LPM, then every next-hop port the entry may use (all group members)."""
    best = None
    for e in tables.table(n.ROUTING_V6_TABLE):
        lpm = e.match_dict[n.DST_ADDR]
        assert isinstance(lpm, Lpm)
        mask = ((1 << lpm.prefix_len) - 1) << (128 - lpm.prefix_len)
        if address & mask == lpm.value and (best is None or lpm.prefix_len
                                            > best.match_dict[n.DST_ADDR].prefix_len):
            best = e
    if best is None:
        return []
    members = {m.member_id: m for m in tables.members}
    ids = [best.member_id] if best.member_id is not None else \
        next(g for g in tables.groups if g.group_id == best.group_id).member_ids
    return [members[i].action.param_dict[n.PARAM_PORT] for i in ids]


def reachable(fabric: Fabric, tables: dict[str, SwitchTables], src: int, dst: int,
              plane: int, dead: frozenset = frozenset()) -> bool:
    """True when every ECMP choice from src's T0 delivers to dst's NIC without a dead link."""
    target = fabric.nic(dst, plane)
    frontier = [fabric.t0(plane, fabric.nic(src, plane).t0).name]
    for _ in range(4):
        following = []
        for node in frontier:
            ports = route_lookup(tables[node], int(target.address))
            if not ports:
                return False
            for port in ports:
                peer, _ = neighbours(fabric, node)[port]
                assert link_key(node, peer) not in dead, f"{node} routes over dead {peer}"
                if peer == fabric.host_name(dst):
                    continue
                if peer not in fabric.by_name:
                    return False
                following.append(peer)
        if not following:
            return True
        frontier = following
    return False


@pytest.mark.parametrize("size", SIZES)
def test_baseline_routes_reach_every_nic(size: tuple[int, int, int, int]) -> None:
    fabric = Fabric(*size)
    tables = fabric_tables(fabric)
    for src, dst in itertools.permutations(range(fabric.hosts), 2):
        for plane in range(fabric.planes):
            assert reachable(fabric, tables, src, dst, plane)


@pytest.mark.parametrize("size", [s for s in SIZES if s[1] > 1])
def test_ecmp_groups_hold_exactly_the_live_next_hops(size: tuple[int, int, int, int]) -> None:
    fabric = Fabric(*size)
    fabric_links = [lk for lk in fabric.links if lk.a in fabric.by_name]
    rng = random.Random(7)
    for _ in range(6):
        count = rng.randint(1, min(3, len(fabric_links)))
        dead = frozenset(link_key(lk.a, lk.b) for lk in rng.sample(fabric_links, count))
        tables = fabric_tables(fabric, dead)
        for switch in fabric.switches:
            if switch.role != ROLE_T0:
                continue
            groups = {g.group_id: set(g.member_ids) for g in tables[switch.name].groups}
            for k in range(fabric.t0_per_plane):
                if k == switch.index:
                    continue
                live = {fabric.uplink_port(j) for j in range(fabric.t1_per_plane)
                        if link_key(switch.name, fabric.t1(switch.plane, j).name) not in dead
                        and link_key(fabric.t1(switch.plane, j).name,
                                     fabric.t0(switch.plane, k).name) not in dead}
                assert groups.get(k + 1, set()) == live
        for src, dst in itertools.permutations(range(fabric.hosts), 2):
            for plane in range(fabric.planes):
                src_t0 = fabric.t0(plane, fabric.nic(src, plane).t0).name
                dst_t0 = fabric.t0(plane, fabric.nic(dst, plane).t0).name
                alive = src_t0 == dst_t0 or any(
                    link_key(src_t0, s.name) not in dead and link_key(s.name, dst_t0) not in dead
                    for s in fabric.switches if s.plane == plane and s.role != ROLE_T0)
                assert reachable(fabric, tables, src, dst, plane, dead) == alive


def test_dead_links_do_not_touch_mrc_tables() -> None:
    fabric = Fabric(planes=2, t0_per_plane=3, t1_per_plane=2, hosts_per_t0=2)
    dead = {link_key("p1l0", "p1s1"), link_key("h0", "p0l0")}
    before, after = fabric_tables(fabric), fabric_tables(fabric, dead)
    for name in before:
        for table in (n.MY_USID_TABLE, n.USID_FWD_TABLE, n.PORT_CONFIG_TABLE):
            assert before[name].table(table) == after[name].table(table)
        assert before[name].members == after[name].members
    assert before["p1l1"] != after["p1l1"]  # its route to p1l0 lost spine 1
    assert before["p0l0"] != after["p0l0"]  # host route to h0 withdrawn


def apply_updates(tables: SwitchTables, updates: list[Update]) -> set:
    state = {e.key: e for e in tables.entities()}
    for u in updates:
        if u.kind == "INSERT":
            assert u.entity.key not in state
        else:
            assert u.entity.key in state
        if u.kind == "DELETE":
            del state[u.entity.key]
        else:
            state[u.entity.key] = u.entity
    return set(state.values())


def test_diff_round_trips_and_orders_references() -> None:
    fabric = Fabric(planes=1, t0_per_plane=3, t1_per_plane=2, hosts_per_t0=1)
    full = fabric_tables(fabric)["p0l0"]
    cut = fabric_tables(fabric, {link_key("p0l0", "p0s0"), link_key("p0l0", "p0s1")})["p0l0"]
    assert diff(full, full) == []
    down = diff(full, cut)
    assert {u.kind for u in down} == {"DELETE"}  # both groups and their routes go
    assert [type(u.entity).__name__ for u in down] == ["TableEntry", "TableEntry", "Group",
                                                       "Group"]
    assert apply_updates(full, down) == set(cut.entities())
    up = diff(cut, full)
    assert [type(u.entity).__name__ for u in up] == ["Group", "Group", "TableEntry",
                                                     "TableEntry"]
    assert apply_updates(cut, up) == set(full.entities())
    half = fabric_tables(fabric, {link_key("p0s0", "p0l2")})["p0l0"]
    assert [(u.kind, u.entity.group_id) for u in diff(full, half)] == [("MODIFY", 3)]


def test_bad_links_and_thresholds_are_rejected() -> None:
    fabric = Fabric(planes=1, t0_per_plane=2, t1_per_plane=1, hosts_per_t0=1)
    with pytest.raises(TopologyError, match="not a link"):
        fabric_tables(fabric, {link_key("p0l0", "p0l1")})
    with pytest.raises(TopologyError, match="must not exceed"):
        PortThresholds(ecn=40, trim=20)
    with pytest.raises(TopologyError, match="threshold must be"):
        PortThresholds(ecn=0)
    t = fabric_tables(fabric, thresholds=PortThresholds(ecn=3, trim=5))["p0s0"]
    params = t.table(n.PORT_CONFIG_TABLE)[0].action.param_dict
    assert (params[n.PARAM_ECN_THRESHOLD], params[n.PARAM_TRIM_THRESHOLD]) == (3, 5)
