"""Host agents' path sets, derived from the fabric model so addresses have one source of truth.

Every record holds what the host I/O layer needs to build the envelope of docs/wire-format.md
§1 for one source route: the outer DA (uSID carrier, a path's `route`), both NIC addresses
(outer/inner source and inner destination), the source NIC MAC and the next-hop MAC (the T0).
The EV is not part of a path: the host's EV set picks EV values and maps each one to a path;
its bit layout (UDP source port / flow label) is defined once in docs/wire-format.md §1.3.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass

from fabric.topology import Fabric, TopologyError

FORMAT_VERSION = 1


@dataclass(frozen=True)
class HostPath:
    """One source route from a host NIC to a peer NIC on one plane (via one spine, or none)."""

    src_host: int
    dst_host: int
    plane: int
    spine: int | None  # None: both hosts under the same T0
    route: ipaddress.IPv6Address  # uSID carrier = outer DA
    src_ifname: str
    src_addr: ipaddress.IPv6Address
    dst_addr: ipaddress.IPv6Address
    src_mac: str
    next_hop_mac: str  # the source T0's MAC: the frame's destination MAC

    def to_json(self) -> dict:
        out = asdict(self)
        for key in ("route", "src_addr", "dst_addr"):
            out[key] = str(out[key])
        return out

    @classmethod
    def from_json(cls, data: dict) -> HostPath:
        try:
            return cls(
                src_host=int(data["src_host"]), dst_host=int(data["dst_host"]),
                plane=int(data["plane"]),
                spine=None if data["spine"] is None else int(data["spine"]),
                route=ipaddress.IPv6Address(data["route"]), src_ifname=str(data["src_ifname"]),
                src_addr=ipaddress.IPv6Address(data["src_addr"]),
                dst_addr=ipaddress.IPv6Address(data["dst_addr"]),
                src_mac=str(data["src_mac"]), next_hop_mac=str(data["next_hop_mac"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"malformed path record {data!r}: {exc}") from exc


def host_paths(fabric: Fabric, src_host: int, dst_host: int) -> list[HostPath]:
    """Every path src -> dst: all planes, all spines (or the shared T0), plane-major order."""
    if src_host == dst_host:
        raise TopologyError(f"host {src_host} has no path to itself: pick two different hosts")
    out = []
    for path in fabric.all_paths(src_host, dst_host):
        t0 = fabric.t0(path.plane, path.src.t0)
        out.append(HostPath(src_host, dst_host, path.plane, path.spine, path.address,
                            path.src.ifname, path.src.address, path.dst.address,
                            path.src.mac, t0.mac))
    return out


def all_host_paths(fabric: Fabric, src_host: int | None = None) -> Iterator[HostPath]:
    """Paths for every ordered host pair (or only those leaving `src_host`)."""
    sources = range(fabric.hosts) if src_host is None else [src_host]
    for s in sources:
        for d in range(fabric.hosts):
            if s != d:
                yield from host_paths(fabric, s, d)


def export(fabric: Fabric, src_host: int | None = None) -> dict:
    """JSON-ready path set; `fabric` is included so a reader can check it matches its own."""
    return {
        "version": FORMAT_VERSION,
        "fabric": {"planes": fabric.planes, "t0_per_plane": fabric.t0_per_plane,
                   "t1_per_plane": fabric.t1_per_plane, "hosts_per_t0": fabric.hosts_per_t0},
        "paths": [p.to_json() for p in all_host_paths(fabric, src_host)],
    }


def load(text: str) -> tuple[Fabric, list[HostPath]]:
    """Parse `export` output back; rejects other format versions instead of guessing."""
    data = json.loads(text)
    if data.get("version") != FORMAT_VERSION:
        raise ValueError(f"path set version {data.get('version')!r} is not {FORMAT_VERSION}: "
                         "re-export it with this controller")
    fabric = Fabric(**data["fabric"])
    return fabric, [HostPath.from_json(p) for p in data["paths"]]
