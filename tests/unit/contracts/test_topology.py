"""The fabric model against docs/wire-format.md §3 (names, ports, uSIDs, addresses, paths)."""

from __future__ import annotations

import ipaddress
import itertools

import pytest

from fabric.topology import (
    EPHEMERAL_PORT_START,
    GRPC_BASE_PORT,
    MAX_INDEX,
    MAX_PLANES,
    ROLE_HOST,
    ROLE_T0,
    ROLE_T1,
    Fabric,
    TopologyError,
    shift_usid,
    usid,
    usid_address,
    usid_prefix,
)

SIZES = [(1, 1, 1, 1), (2, 3, 1, 2), (4, 2, 2, 2), (8, 2, 4, 3), (3, 4, 3, 1)]


def test_usid_layout_and_carrier_examples() -> None:
    assert usid(2, ROLE_T0, 1) == 0x2101
    assert usid(0, ROLE_T1, 3) == 0x0203
    assert usid(15, ROLE_HOST, 255) == 0xFEFF
    assert str(usid_address([0x0100, 0x0201, 0x0101, 0x0E03])) == "fcbb:bbbb:100:201:101:e03::"
    assert usid_prefix(0x0201) == 0xFCBBBBBB0201


def test_shift_keeps_block_and_zero_fills() -> None:
    addr = int(usid_address([0x0100, 0x0201, 0x0101, 0x0E03, 0x1111, 0x2222]))
    shifted = shift_usid(addr)
    assert shifted == int(usid_address([0x0201, 0x0101, 0x0E03, 0x1111, 0x2222]))
    for _ in range(5):
        shifted = shift_usid(shifted)
    assert shifted == int(usid_address([]))


def test_carrier_rejects_seven_usids() -> None:
    with pytest.raises(TopologyError, match="max 6"):
        usid_address([0x0100] * 7)


@pytest.mark.parametrize("kwargs, hint", [
    ({"planes": 0}, "planes must be"),
    ({"planes": 17}, "planes must be"),
    ({"t0_per_plane": 0}, "t0_per_plane"),
    ({"t1_per_plane": 0}, "t1_per_plane"),
    ({"hosts_per_t0": 0}, "hosts_per_t0"),
    ({"t0_per_plane": 100, "hosts_per_t0": 11}, "host roles and 8-bit index"),
])
def test_invalid_fabrics_say_what_to_fix(kwargs: dict, hint: str) -> None:
    with pytest.raises(TopologyError, match=hint):
        Fabric(**kwargs)


@pytest.mark.parametrize("size", SIZES)
def test_names_device_ids_and_grpc_ports_unique(size: tuple[int, int, int, int]) -> None:
    fabric = Fabric(*size)
    names = [s.name for s in fabric.switches]
    assert len(names) == len(set(names)) == fabric.planes * (fabric.t0_per_plane
                                                             + fabric.t1_per_plane)
    ids = [s.device_id for s in fabric.switches]
    assert sorted(ids) == list(range(1, len(ids) + 1))
    assert {s.grpc_address for s in fabric.switches} == {
        f"127.0.0.1:{GRPC_BASE_PORT + i}" for i in ids}
    usids = [s.usid for s in fabric.switches]
    usids += [fabric.nic(h, p).usid for h in range(fabric.hosts) for p in range(fabric.planes)]
    assert len(usids) == len(set(usids))
    assert 0 not in usids


def test_names_addresses_and_macs_follow_spec() -> None:
    fabric = Fabric(planes=4, t0_per_plane=2, t1_per_plane=2, hosts_per_t0=2)
    leaf = fabric.t0(3, 1)
    spine = fabric.t1(2, 0)
    assert (leaf.name, leaf.role, leaf.usid, leaf.mac) == ("p3l1", ROLE_T0, 0x3101,
                                                           "02:00:00:03:01:01")
    assert (spine.name, spine.role, spine.usid, spine.mac) == ("p2s0", ROLE_T1, 0x2200,
                                                               "02:00:00:02:02:00")
    nic = fabric.nic(3, 2)  # host 3 = second host of T0 1
    assert (nic.t0, nic.local, nic.ifname) == (1, 1, "h3-eth2")
    assert nic.address == ipaddress.IPv6Address("fd00:0:2:1::2")
    assert nic.mac == "02:00:00:02:0e:03"
    assert nic.usid == 0x2E03
    with pytest.raises(TopologyError):
        fabric.nic(4, 0)
    with pytest.raises(TopologyError):
        fabric.nic(0, 4)


@pytest.mark.parametrize("size", SIZES)
def test_links_follow_port_numbering(size: tuple[int, int, int, int]) -> None:
    fabric = Fabric(*size)
    ports: dict[str, set[int]] = {}
    for link in fabric.links:
        for node, port in ((link.a, link.a_port), (link.b, link.b_port)):
            assert port not in ports.setdefault(node, set()), f"{node} port {port} used twice"
            ports[node].add(port)
    for s in fabric.switches:
        if s.role == ROLE_T0:
            want = fabric.hosts_per_t0 + fabric.t1_per_plane
        else:
            want = fabric.t0_per_plane
        assert ports[s.name] == set(range(1, want + 1))
    for h in range(fabric.hosts):
        assert ports[fabric.host_name(h)] == set(range(fabric.planes))
    for p, i, j in itertools.product(range(fabric.planes), range(fabric.t0_per_plane),
                                     range(fabric.t1_per_plane)):
        leaf, spine = fabric.t0(p, i).name, fabric.t1(p, j).name
        matches = [lk for lk in fabric.links if {lk.a, lk.b} == {leaf, spine}]
        assert len(matches) == 1
        assert matches[0].other(leaf) == (spine, fabric.downlink_port(i))
        assert matches[0].other(spine) == (leaf, fabric.uplink_port(j))


@pytest.mark.parametrize("size", SIZES)
def test_paths_cover_every_plane_and_spine(size: tuple[int, int, int, int]) -> None:
    fabric = Fabric(*size)
    for src, dst in itertools.permutations(range(fabric.hosts), 2):
        paths = fabric.all_paths(src, dst)
        same_t0 = src // fabric.hosts_per_t0 == dst // fabric.hosts_per_t0
        per_plane = 1 if same_t0 else fabric.t1_per_plane
        assert len(paths) == fabric.planes * per_plane
        assert len({p.address for p in paths}) == len(paths)
        for path in paths:
            assert path.src == fabric.nic(src, path.plane)
            assert path.dst == fabric.nic(dst, path.plane)
            hop_usids = [fabric.by_name[h].usid for h in path.hops] + [path.dst.usid]
            assert path.address == usid_address(hop_usids)
            assert all(fabric.by_name[h].plane == path.plane for h in path.hops)


def test_switch_ports_of_the_largest_fabric_stay_below_the_ephemeral_range() -> None:
    largest = Fabric(planes=MAX_PLANES, t0_per_plane=MAX_INDEX, t1_per_plane=MAX_INDEX,
                     hosts_per_t0=1)
    ports = {int(sw.grpc_address.rsplit(":", 1)[1]) for sw in largest.switches}
    ports |= {sw.thrift_port for sw in largest.switches}
    assert max(ports) < EPHEMERAL_PORT_START and len(ports) == 2 * len(largest.switches)


def test_a_fabric_of_1024_hosts_gives_every_nic_its_own_address_usid_and_mac() -> None:
    """Hosts take the roles 0xC-0xF (the two high bits of their index); hosts 0-255 keep
    role 0xE, so every smaller fabric's addresses are what they were."""
    fabric = Fabric(planes=2, t0_per_plane=64, t1_per_plane=2, hosts_per_t0=16)
    nics = [fabric.nic(h, p) for h in range(fabric.hosts) for p in range(fabric.planes)]
    assert fabric.hosts == 1024
    for attr in ("usid", "mac", "address"):
        assert len({getattr(n, attr) for n in nics}) == len(nics), attr
    roles = {n.host >> 8: n.usid >> 8 & 0xF for n in nics}
    assert roles == {0: 0xE, 1: 0xF, 2: 0xC, 3: 0xD}
    assert fabric.nic(5, 1).mac == "02:00:00:01:0e:05" and fabric.nic(5, 1).usid == 0x1E05
    assert fabric.nic(1023, 1).mac == "02:00:00:01:0d:ff"
    switch_usids = {sw.usid for sw in fabric.switches}
    assert switch_usids.isdisjoint(n.usid for n in nics)


def test_a_paths_geometry_is_its_hosts_and_switches_in_order() -> None:
    fabric = Fabric(planes=2, t0_per_plane=2, t1_per_plane=2, hosts_per_t0=1)
    across, local = fabric.paths(0, 1, 1)[1], Fabric(1, 1, 1, 2).paths(0, 1, 0)[0]
    assert fabric.path_nodes(across) == ("h0", "p1l0", "p1s1", "p1l1", "h1")
    assert fabric.path_links(across) == [("h0", "p1l0"), ("p1l0", "p1s1"), ("p1s1", "p1l1"),
                                         ("p1l1", "h1")]
    assert Fabric(1, 1, 1, 2).path_nodes(local) == ("h0", "p0l0", "h1")  # one T0: no spine
    assert fabric.crosses(across, "p1l0", "p1s1") and fabric.crosses(across, "p1s1", "p1l0")
    assert fabric.crosses(across, "p1l1", "h1")
    assert not fabric.crosses(across, "p1l0", "p1s0")  # the other spine's cable
    assert not fabric.crosses(across, "p1l0", "p1l1")  # both on the path, not one cable


@pytest.mark.parametrize("fabric", [Fabric(), Fabric(planes=2, t0_per_plane=3, t1_per_plane=4,
                                                     hosts_per_t0=2)], ids=str)
def test_carriers_are_the_paths_addresses_in_order(fabric: Fabric) -> None:
    for src, dst in ((0, 1), (0, fabric.hosts - 1), (fabric.hosts - 1, 2)):
        assert fabric.carriers(src, dst) == [(p.plane, int(p.address))
                                             for p in fabric.all_paths(src, dst)]
        assert all(p.address == usid_address(
            [fabric.t0(p.plane, p.src.t0).usid,
             *([fabric.t1(p.plane, p.spine).usid] if p.spine is not None else []),
             *([fabric.t0(p.plane, p.dst.t0).usid] if p.spine is not None else []),
             p.dst.usid]) for p in fabric.all_paths(src, dst))
