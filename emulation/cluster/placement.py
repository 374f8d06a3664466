"""Which server each node of an emulated fabric runs on, when one machine is not enough.

A large fabric (docs/benchmarks.md, "Cost of scale") outgrows one machine's CPUs and memory,
so Mininet Cluster Edition can spread it over several. Every link whose two ends land on
different servers then becomes a tunnel between machines: slower, lossier and a shared
bottleneck. A good placement keeps switch counts balanced (switches cost the CPU) while cutting
as few links as possible. The fabric's shape offers two natural cuts:

* plane cut: whole planes per server. Planes never link to each other, so only host NICs cross.
* rack cut: one T0 of every plane (a "rack") with its hosts per server. Host links stay local;
  T0-T1 links cross wherever a spine sits away from a rack.

This module is pure (no I/O, no Mininet at import time) so the choice can be computed, tested
and shown before anything starts; `cluster_placer` hands the result to Cluster Edition.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from emulation.errors import EmulationError
from fabric.topology import ROLE_T0, ROLE_T1, Fabric, Link

STRATEGIES = ("plane", "rack")


class PlacementError(EmulationError, ValueError):
    """A fabric cannot be placed as asked; the message says why and what would work."""


@dataclass(frozen=True)
class Placement:
    """Every switch and host name of one fabric -> server index 0..servers-1."""

    servers: int
    strategy: str  # "plane" or "rack"
    node_server: dict[str, int]

    def __post_init__(self) -> None:
        if self.servers < 1:
            raise PlacementError(f"a placement needs at least 1 server, got {self.servers}")
        if self.strategy not in STRATEGIES:
            raise PlacementError(f"strategy must be one of {STRATEGIES}, got {self.strategy!r}")
        bad = sorted(n for n, s in self.node_server.items() if not 0 <= s < self.servers)
        if bad:
            raise PlacementError(f"nodes {bad} are placed outside servers 0..{self.servers - 1}")

    def server_of(self, name: str) -> int:
        """The server of one node; a name this placement does not know is an error, not 0,
        because silently running it on the first server would hide a placement for the
        wrong fabric."""
        try:
            return self.node_server[name]
        except KeyError:
            raise PlacementError(f"node {name!r} is not in this {self.strategy} placement "
                                 f"(was it computed for another fabric?)") from None

    def crossing_links(self, fabric: Fabric) -> list[Link]:
        """Links whose two ends run on different servers: each becomes an inter-server tunnel."""
        return [lk for lk in fabric.links if self.server_of(lk.a) != self.server_of(lk.b)]

    def switches_per_server(self, fabric: Fabric) -> list[int]:
        counts = [0] * self.servers
        for sw in fabric.switches:
            counts[self.server_of(sw.name)] += 1
        return counts

    def hosts_per_server(self, fabric: Fabric) -> list[int]:
        counts = [0] * self.servers
        for h in range(fabric.hosts):
            counts[self.server_of(fabric.host_name(h))] += 1
        return counts

    def summary(self, fabric: Fabric) -> dict[str, Any]:
        """JSON-able digest for reports and logs."""
        return {
            "strategy": self.strategy,
            "servers": self.servers,
            "switches_per_server": self.switches_per_server(fabric),
            "hosts_per_server": self.hosts_per_server(fabric),
            "crossing_links": len(self.crossing_links(fabric)),
            "total_links": len(fabric.links),
        }


def _check_servers(servers: int) -> None:
    if servers < 1:
        raise PlacementError(f"servers must be at least 1, got {servers}")


def _blocks(items: int, servers: int) -> list[int]:
    """Server of each of `items` things dealt in contiguous blocks whose sizes differ by at most
    one, the larger blocks first (so server 0 takes the remainder, as SwitchBinPlacer does)."""
    quotient, remainder = divmod(items, servers)
    out: list[int] = []
    for s in range(servers):
        out += [s] * (quotient + (1 if s < remainder else 0))
    return out


def plane_cut(fabric: Fabric, servers: int) -> Placement:
    """Whole planes per server, in contiguous blocks (planes are all the same size, so block
    sizes differing by one plane is the best switch balance a plane cut can reach).

    No switch link crosses: planes are disjoint. Each host has one NIC per plane, so a host on
    server s keeps exactly the NICs of the planes on s local, whichever host it is. Hosts are
    therefore interchangeable here and are also dealt in contiguous balanced blocks, larger
    blocks first: those land on the servers that also got the extra plane, so the hosts that
    must share the remainder sit where most of their NICs stay local. Putting every host on the
    largest server would cut fewer links but pile all host agents onto one machine.
    """
    _check_servers(servers)
    if servers > fabric.planes:
        raise PlacementError(
            f"plane cut needs at least one whole plane per server: {fabric.planes} planes "
            f"cannot fill {servers} servers (use at most {fabric.planes} servers)")
    plane_server = _blocks(fabric.planes, servers)
    node_server = {sw.name: plane_server[sw.plane] for sw in fabric.switches}
    for h, s in enumerate(_blocks(fabric.hosts, servers)):
        node_server[fabric.host_name(h)] = s
    return Placement(servers, "plane", node_server)


def rack_cut(fabric: Fabric, servers: int) -> Placement:
    """Racks (T0 index r of every plane plus the hosts behind those T0s) in contiguous balanced
    blocks, then spines spread to balance switch counts.

    Every host link stays local: a host's NICs all reach T0 number host // hosts_per_t0, which
    is in its rack. Spine (p, j) links once to each T0 of plane p, and every rack has one T0 in
    every plane, so the spine's crossing links are t0_per_plane minus the racks on its server,
    whatever its plane or index. Spines are water-filled: each goes to the server with the
    fewest switches so far, ties going to the server with more racks (fewer crossings), then
    the lower index. That evens the switch counts out as far as the rack blocks allow and, at
    that balance, puts the remainder spines where they cut the fewest links. They are taken
    index-major (s0 of every plane, then s1, ...) so a server tends to hold the same spine of
    several planes rather than one plane's whole spine layer.
    """
    _check_servers(servers)
    racks = fabric.t0_per_plane
    if servers > racks:
        raise PlacementError(
            f"rack cut needs at least one rack (a T0 index across all planes) per server: "
            f"{racks} racks cannot fill {servers} servers (use at most {racks} servers)")
    rack_server = _blocks(racks, servers)
    racks_on = [rack_server.count(s) for s in range(servers)]
    node_server: dict[str, int] = {}
    load = [0] * servers
    for sw in fabric.switches:
        if sw.role == ROLE_T0:
            node_server[sw.name] = rack_server[sw.index]
            load[rack_server[sw.index]] += 1
    spines = sorted((sw for sw in fabric.switches if sw.role == ROLE_T1),
                    key=lambda sw: (sw.index, sw.plane))
    for sw in spines:
        s = min(range(servers), key=lambda k: (load[k], -racks_on[k], k))
        node_server[sw.name] = s
        load[s] += 1
    for h in range(fabric.hosts):
        node_server[fabric.host_name(h)] = rack_server[h // fabric.hosts_per_t0]
    return Placement(servers, "rack", node_server)


def place(fabric: Fabric, servers: int) -> Placement:
    """The feasible cut with fewer crossing links. A tie goes to the plane cut: each plane's
    switching then lives whole on one server, so a slow or lost server takes out planes, which
    multipath hosts ride over on their other NICs, rather than cutting racks of hosts off."""
    _check_servers(servers)
    if servers == 1:
        names = [sw.name for sw in fabric.switches]
        names += [fabric.host_name(h) for h in range(fabric.hosts)]
        return Placement(1, "plane", dict.fromkeys(names, 0))
    cuts: list[Placement] = []
    reasons: list[str] = []
    for cut in (plane_cut, rack_cut):
        try:
            cuts.append(cut(fabric, servers))
        except PlacementError as e:
            reasons.append(str(e))
    if not cuts:
        raise PlacementError(f"cannot spread {fabric} over {servers} servers: "
                             + "; ".join(reasons))
    return min(cuts, key=lambda p: len(p.crossing_links(fabric)))  # min keeps the first: plane


def cluster_placer(placement: Placement, server_names: list[str]) -> type:
    """A `Placer` subclass for `MininetCluster(placement=...)` that follows `placement`.

    MininetCluster builds the placer itself, as `placement(servers=..., nodes=..., hosts=...,
    switches=..., links=...)`, then asks `place(node)` for each topology node; so the
    placement and the index -> server name map are bound into a class here. Cluster Edition
    is imported only now so that this module, and the planning above, work without Mininet.
    """
    from mininet.examples.cluster import Placer  # lazy: Mininet is optional

    names = list(server_names)
    if len(names) != placement.servers:
        raise PlacementError(f"placement uses {placement.servers} servers but "
                             f"{len(names)} server names were given: {names}")
    if len(set(names)) != len(names):
        raise PlacementError(f"server names must be distinct, got {names}")

    class FabricPlacer(Placer):
        """Places each node on the server the precomputed placement chose."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            # MininetCluster looks each answer up in its own server list: catch a name it
            # does not know now rather than as a KeyError halfway through node creation.
            unknown = [n for n in names if self.servers and n not in self.servers]
            if unknown:
                raise PlacementError(f"servers {unknown} are not among the cluster's "
                                     f"servers {list(self.servers)}")

        def place(self, node: str) -> str:
            return names[placement.server_of(node)]

    FabricPlacer.__name__ = FabricPlacer.__qualname__ = f"FabricPlacer_{placement.strategy}"
    return FabricPlacer
