"""Which link the demo fails, the flow's routes through it, and the capacity it leaves.

MRC: plane 0's source T0 to spine 0; over several servers, a link between two servers on the
flow's paths (a switch link if one crosses, else the destination's NIC), so the cut is a real
cable. Single path: the uplink the flow was hashed onto, found from the T0's port counters.
"""

from __future__ import annotations

from emulation.network import MrcNetwork
from fabric.capacity import flow_share_left
from fabric.topology import Fabric


def routes_through(net: MrcNetwork, src: int, dst: int, a: str, b: str,
                   single_path: bool) -> set[str]:
    """Sender routes (outer DAs) whose source route crosses cable a-b."""
    if single_path:  # LPM-routed: the route is the destination NIC address on plane 0
        return {str(net.fabric.nic(dst, 0).address)}
    out = set()
    for path in net.fabric.all_paths(src, dst):
        if any({x, y} == {a, b} for x, y in net.fabric.path_links(path)):
            out.add(str(path.address))
    return out


def pick_failed_link(net: MrcNetwork, src: int, dst: int, single_path: bool) -> tuple[str, str]:
    """MRC: plane 0, source T0 to spine 0; over a cluster, a link between two servers on the
    flow's paths, a switch link if one crosses, else the destination's NIC on the lowest such
    plane. Single path: the uplink the flow was hashed onto."""
    if not single_path:
        crossing = _crossing_link(net, src, dst)
        if crossing is not None:
            return crossing
    t0 = net.fabric.t0(0, net.fabric.nic(src, 0).t0)
    if single_path:
        sent = net.port_sent(t0.name)
        uplinks = {net.fabric.uplink_port(j): j for j in range(net.fabric.t1_per_plane)}
        busiest = max(uplinks, key=lambda port: sent.get(port, 0))
        return t0.name, net.fabric.t1(0, uplinks[busiest]).name
    return t0.name, net.fabric.t1(0, 0).name


def capacity_left(fabric: Fabric, src: int, dst: int, a: str, b: str,
                  single_path: bool) -> float:
    """The share of the flow's capacity a failed link a-b leaves (fabric.capacity): a host
    NIC takes its plane with it, a switch link leaves the hosts' NICs the bottleneck. A
    single path is judged against the capacity routing restores (one port's), all of it."""
    return 1.0 if single_path else flow_share_left(fabric, src, dst, a, b)


def _crossing_link(net: MrcNetwork, src: int, dst: int) -> tuple[str, str] | None:
    assert net.builder is not None
    server = net.builder.server_of
    fabric = net.fabric
    found: list[tuple[int, str, str]] = []
    for path in fabric.all_paths(src, dst):
        for a, b in fabric.path_links(path):
            if server(a) != server(b):
                switches = a in fabric.by_name and b in fabric.by_name
                rank = 0 if switches else 1 if b == fabric.host_name(dst) else 2
                found.append((rank, a, b))
    return min(found)[1:] if found else None
