"""What one host needs to know about the fabric: its NICs and, per peer, the routes and addresses.

Built from the path export (fabric.hostpaths) by both the raw-socket agent and the simulator,
so the two address frames identically.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from ipaddress import IPv6Address

from fabric.hostpaths import HostPath, all_host_paths
from fabric.topology import Fabric
from host_agent.core import PathInfo
from host_agent.errors import HostAgentError


class HostConfigError(HostAgentError, ValueError):
    """The path set does not describe this host; the message says what to fix."""


class Carrier(IPv6Address):
    """A route's uSID carrier (the outer DA) that hashes once: routes key the adapter's
    per-packet tables, and IPv6Address computes its hash anew on every lookup."""

    __slots__ = ("_hash",)

    def __init__(self, address: object) -> None:
        # an address given as an address is taken by value: as text it would be parsed again
        super().__init__(int(address) if isinstance(address, IPv6Address) else address)  # type: ignore[arg-type]
        self._hash = super().__hash__()

    def __hash__(self) -> int:
        return self._hash


@dataclass(frozen=True)
class NicConfig:
    """One host NIC: where to send and what to write in the frame."""

    plane: int
    ifname: str
    mac: str
    address: IPv6Address
    next_hop_mac: str  # the T0's MAC: every frame's destination MAC


@dataclass(frozen=True)
class HostConfig:
    """A host's NICs and, per peer, its paths and NIC addresses."""

    host: int
    planes: int
    nics: tuple[NicConfig, ...]  # indexed by plane
    paths: Mapping[int, tuple[PathInfo, ...]]  # peer host -> every route to it
    peer_address: Mapping[tuple[int, int], IPv6Address]  # (peer, plane) -> peer NIC address

    @classmethod
    def from_paths(cls, host: int, planes: int, paths: Iterable[HostPath]) -> HostConfig:
        mine = [p for p in paths if p.src_host == host]
        nics: dict[int, NicConfig] = {}
        routes: dict[int, list[PathInfo]] = {}
        peer_address: dict[tuple[int, int], IPv6Address] = {}
        for p in mine:
            nic = NicConfig(p.plane, p.src_ifname, p.src_mac, p.src_addr, p.next_hop_mac)
            if nics.setdefault(p.plane, nic) != nic:
                raise HostConfigError(f"path set disagrees about host {host}'s NIC on plane "
                                      f"{p.plane}: {nics[p.plane]} vs {nic}; re-export it")
            routes.setdefault(p.dst_host, []).append(PathInfo(plane=p.plane,
                                                               route=Carrier(p.route)))
            peer_address[(p.dst_host, p.plane)] = p.dst_addr
        missing = sorted(set(range(planes)) - set(nics))
        if missing:
            raise HostConfigError(f"the path set has no paths from host {host} on planes "
                                  f"{missing}: check --host and that it covers this host")
        return cls(host, planes, tuple(nics[p] for p in range(planes)),
                   {peer: tuple(r) for peer, r in routes.items()}, peer_address)

    @classmethod
    def from_fabric(cls, fabric: Fabric, host: int) -> HostConfig:
        """The same config as from the path export, with each peer's routes made when first
        asked for (_FabricRoutes): a host of a 1,024-host fabric has 261,888 routes, and a
        simulated host uses those to the one or two peers it talks to."""
        if not 0 <= host < fabric.hosts or fabric.hosts < 2:  # refused as from_paths does
            return cls.from_paths(host, fabric.planes, all_host_paths(fabric, host)
                                  if 0 <= host < fabric.hosts else [])
        nics = []
        for plane in range(fabric.planes):
            nic = fabric.nic(host, plane)
            nics.append(NicConfig(plane, nic.ifname, nic.mac, nic.address,
                                  fabric.t0(plane, nic.t0).mac))
        return cls(host, fabric.planes, tuple(nics), _FabricRoutes(fabric, host),
                   _OtherHosts(fabric, host))

    def peer_of(self) -> dict[IPv6Address, int]:
        return {addr: peer for (peer, _), addr in self.peer_address.items()}

    def peer_of_packed(self) -> Mapping[bytes, int]:
        """Packed NIC address -> its host, for reading a frame's inner source. It may hold
        this host's own addresses too (one table shared by a fabric's hosts): callers
        refuse a frame claiming to come from their own host."""
        if isinstance(self.peer_address, _OtherHosts):
            return self.peer_address.packed
        return {addr.packed: peer for addr, peer in self.peer_of().items()}


def qpn_for(host: int, lane: int = 0) -> int:
    """QPN convention: a host's QP on lane L towards peer P is (L + 1) * 0x100 + P, so the
    peer's is (L + 1) * 0x100 + me."""
    return ((lane + 1) << 8) + host


@functools.lru_cache(maxsize=2)
def _fabric_addresses(fabric: Fabric) -> tuple[dict[tuple[int, int], IPv6Address],
                                              dict[bytes, int]]:
    """Every NIC's address by (host, plane), and its host by packed address: one table per
    fabric, shared by its hosts' configs (per host, it was 8,192 addresses on a 1,024-host
    fabric, 8 million for the fabric)."""
    by_nic = {(h, p): fabric.nic(h, p).address
              for h in range(fabric.hosts) for p in range(fabric.planes)}
    return by_nic, {addr.packed: h for (h, _), addr in by_nic.items()}


class _OtherHosts(Mapping[tuple[int, int], IPv6Address]):
    """(peer, plane) -> the peer's NIC address, for every host but `host`, over the
    fabric's one table."""

    def __init__(self, fabric: Fabric, host: int) -> None:
        self._all, self.packed = _fabric_addresses(fabric)
        self._host, self._planes = host, fabric.planes

    def __getitem__(self, key: tuple[int, int]) -> IPv6Address:
        if key[0] == self._host:
            raise KeyError(key)
        return self._all[key]

    def __contains__(self, key: object) -> bool:
        return key in self._all and key[0] != self._host  # type: ignore[index]

    def __iter__(self) -> Iterator[tuple[int, int]]:
        return (k for k in self._all if k[0] != self._host)

    def __len__(self) -> int:
        return len(self._all) - self._planes


class _FabricRoutes(Mapping[int, tuple[PathInfo, ...]]):
    """peer -> its routes from `host`, as HostConfig.from_paths would hold them, each peer's
    made once, when first asked for."""

    def __init__(self, fabric: Fabric, host: int) -> None:
        self._fabric, self._host = fabric, host
        self._made: dict[int, tuple[PathInfo, ...]] = {}

    def __getitem__(self, peer: int) -> tuple[PathInfo, ...]:
        routes = self._made.get(peer)
        if routes is None:
            if peer not in self:
                raise KeyError(peer)
            routes = self._made[peer] = tuple(
                PathInfo(plane=plane, route=Carrier(carrier))
                for plane, carrier in self._fabric.carriers(self._host, peer))
        return routes

    def __contains__(self, peer: object) -> bool:
        return (type(peer) is int and 0 <= peer < self._fabric.hosts
                and peer != self._host)

    def __iter__(self) -> Iterator[int]:
        return (p for p in range(self._fabric.hosts) if p != self._host)

    def __len__(self) -> int:
        return self._fabric.hosts - 1
