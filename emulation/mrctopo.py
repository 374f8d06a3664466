"""The fabric as a Mininet Topo: a pure graph, read by `mn --custom` (topologies/custom.py)
and by MrcNetwork (emulation/fabricnet.py), so both build the same nodes, ports and MACs.

Building it has no side effect: the fabric lock, the run's keys and the shield are taken by
whoever starts the fabric (MrcNetwork.start; for mn, the `topos` factory in custom.py).
"""

from __future__ import annotations

from typing import Any

from mininet.topo import Topo

from fabric.topology import Fabric
from safety.runports import PortPlan


def node_mac(fabric: Fabric, node: str, port: int) -> str:
    """The MAC of a node's port: a switch has one MAC, a host one per NIC (plane)."""
    if node in fabric.by_name:
        return fabric.by_name[node].mac
    return fabric.nic(int(node[1:]), port).mac


class MrcTopo(Topo):
    """Every switch carries its device_id (P4Runtime device and port numbers) and its
    loopback ports (the run's safety.runports.PortPlan; the fabric's defaults without
    one) as node options, plus `switch_opts` (run-wide options such as the run's
    credentials); every link its ports and MACs."""

    def build(self, planes: int = 4, t0: int = 2, t1: int = 2, hosts_per_t0: int = 2, *,
              fabric: Fabric | None = None, switch_opts: dict[str, Any] | None = None,
              ports: PortPlan | None = None) -> None:
        fabric = fabric if fabric is not None else Fabric(planes, t0, t1, hosts_per_t0)
        self.fabric = fabric
        ports = ports if ports is not None else PortPlan.defaults(fabric)
        for sw in fabric.switches:
            self.addSwitch(sw.name, device_id=sw.device_id, **ports.node_options(sw.name),
                           **(switch_opts or {}))
        for h in range(fabric.hosts):
            self.addHost(fabric.host_name(h), ip=None)
        for lk in fabric.links:
            self.addLink(lk.a, lk.b, port1=lk.a_port, port2=lk.b_port,
                         addr1=node_mac(fabric, lk.a, lk.a_port),
                         addr2=node_mac(fabric, lk.b, lk.b_port))
