"""MrcTopo is the one graph of a fabric's Mininet nodes and links, for `mn --custom` and for
MrcNetwork alike, and building it has no side effect (issue 35: the lock was taken inside
Topo.build, and MrcNetwork built its own copy of the graph)."""

from __future__ import annotations

from emulation import fabricnet
from emulation.mrctopo import MrcTopo, node_mac
from fabric.options import PRESETS
from fabric.topology import Fabric
from safety.runports import PortPlan
from topologies import custom


def test_the_graph_is_the_fabrics() -> None:
    fabric = Fabric(*PRESETS["paths-32"])
    topo = MrcTopo(fabric=fabric, switch_opts={"credentials": "run"})
    assert set(topo.switches()) == {sw.name for sw in fabric.switches}
    assert topo.hosts() == sorted(fabric.host_name(h) for h in range(fabric.hosts))
    for sw in fabric.switches:
        info = topo.nodeInfo(sw.name)
        assert info["device_id"] == sw.device_id and info["credentials"] == "run"
    links = {(i["node1"], i["port1"], i["node2"], i["port2"]): (i["addr1"], i["addr2"])
             for _, _, i in topo.links(withInfo=True)}
    assert len(links) == len(fabric.links)
    for lk in fabric.links:
        assert links[(lk.a, lk.a_port, lk.b, lk.b_port)] == (
            node_mac(fabric, lk.a, lk.a_port), node_mac(fabric, lk.b, lk.b_port))


def test_building_the_graph_takes_no_lock(monkeypatch) -> None:
    taken = []
    monkeypatch.setattr(custom, "_protect", lambda fabric: taken.append(fabric))
    MrcTopo(1, 1, 1, 1)
    assert taken == []


def test_mininet_nodes_come_from_the_graph(monkeypatch, tmp_path) -> None:
    """fabricnet.add_nodes adds exactly the graph's nodes with the graph's options."""
    added: list[tuple[str, str, dict]] = []

    class FakeNet:
        def __init__(self, **_kw: object) -> None:
            pass

        def addSwitch(self, name: str, **kw: object) -> None:  # noqa: N802 (Mininet's name)
            added.append(("switch", name, kw))

        def addHost(self, name: str, **kw: object) -> None:  # noqa: N802
            added.append(("host", name, kw))

    monkeypatch.setattr(fabricnet, "Mininet", FakeNet)
    fabric = Fabric(*PRESETS["default"])
    config = type("C", (), {"fabric": fabric, "soft_processes": 1})()
    net = fabricnet.empty_net()
    fabricnet.add_nodes(net, config, "bmv2", tmp_path, None, PortPlan.defaults(fabric))
    topo = net.fabric_topo
    assert [n for kind, n, _ in added if kind == "switch"] == topo.switches(sort=False)
    assert [n for kind, n, _ in added if kind == "host"] == topo.hosts(sort=False)
    for _kind, name, kw in added:
        assert {k: kw[k] for k in topo.nodeInfo(name)} == topo.nodeInfo(name)
