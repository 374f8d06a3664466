"""Multi-plane two-tier fabric model: names, ports, addresses and uSID paths.

This module is the one source of truth for addressing (docs/wire-format.md §3).
The controller derives switch tables from it, the host agents their path sets,
the Mininet scripts their wiring and the simulator its graph. It is pure: no
I/O, no Mininet.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from functools import cached_property

from fabric.errors import FabricError

USID_BLOCK = 0xFCBBBBBB  # fcbb:bbbb::/32
BLOCK_BITS = 32
USID_BITS = 16
MAX_USIDS = (128 - BLOCK_BITS) // USID_BITS  # six uSIDs after the block
USID_NET = ipaddress.IPv6Network((USID_BLOCK << (128 - BLOCK_BITS), BLOCK_BITS))

ROLE_T0 = 0x1
ROLE_T1 = 0x2
ROLE_HOST = 0xE
# Hosts take the four roles 0xC-0xF: the role nibble carries the two high bits of a host's
# index (ROLE_HOST ^ (host >> 8)), so hosts 0-255 keep role 0xE and a fabric holds 1,024.
HOST_ROLES = 4

MAX_PLANES = 16  # plane is a 4-bit field of the uSID
MAX_INDEX = 256  # index is an 8-bit field of the uSID
MAX_HOSTS = HOST_ROLES * MAX_INDEX
MAX_IFNAME = 15  # Linux IFNAMSIZ - 1

# Each switch process listens on loopback: P4Runtime at GRPC_BASE_PORT + device_id,
# BMv2 Thrift runtime CLI at THRIFT_BASE_PORT + device_id. Both stay below Linux's ephemeral
# range (ip_local_port_range, 32768-60999 by default): with the usual 50000 + id, a CI run's
# switch p2s1 could not bind 50012 while an outgoing connection happened to hold that port.
GRPC_BASE_PORT = 20000
THRIFT_BASE_PORT = 9090
EPHEMERAL_PORT_START = 32768  # tests check the largest valid fabric stays below it


_NIC_PREFIX = 0xFD00 << 112  # fd00:0::/32, the hosts' NIC addresses (docs/wire-format.md §3.3)


class TopologyError(FabricError, ValueError):
    """Invalid fabric parameters; the message says what to change."""


def usid(plane: int, role: int, index: int) -> int:
    return (plane & 0xF) << 12 | (role & 0xF) << 8 | (index & 0xFF)


def host_role(host: int) -> int:
    """The role nibble of host `host`'s uSID (ROLE_HOST for hosts 0-255, HOST_ROLES)."""
    return ROLE_HOST ^ (host >> 8)


def usid_address(usids: list[int]) -> ipaddress.IPv6Address:
    """Block followed by the given uSIDs, zero filled."""
    return ipaddress.IPv6Address(usid_carrier(usids))


def usid_carrier(usids: list[int]) -> int:
    """usid_address as an integer (what a host's route table keys on)."""
    if len(usids) > MAX_USIDS:
        raise TopologyError(f"{len(usids)} uSIDs do not fit in one F3216 carrier (max {MAX_USIDS})")
    value = _BLOCK_BITS_VALUE
    for u, shift in zip(usids, _USID_SHIFTS, strict=False):
        value |= u << shift
    return value


_BLOCK_BITS_VALUE = USID_BLOCK << (128 - BLOCK_BITS)
_USID_SHIFTS = tuple(128 - BLOCK_BITS - USID_BITS * (i + 1) for i in range(MAX_USIDS))


def usid_prefix(u: int) -> int:
    """The 48-bit value a switch matches: block + uSID (DA[127:80])."""
    return USID_BLOCK << USID_BITS | u


def shift_usid(dst: int) -> int:
    """The F3216 uN shift: keep the block, move the rest left by one uSID."""
    block_mask = ((1 << BLOCK_BITS) - 1) << (128 - BLOCK_BITS)
    return (dst & block_mask) | ((dst << USID_BITS) & ~block_mask & ((1 << 128) - 1))


@dataclass(frozen=True)
class Switch:
    name: str
    plane: int
    role: int  # ROLE_T0 or ROLE_T1
    index: int  # within plane and role
    device_id: int

    @cached_property  # every route through the switch reads it
    def usid(self) -> int:
        return usid(self.plane, self.role, self.index)

    @property
    def mac(self) -> str:
        return f"02:00:00:{self.plane:02x}:{self.role:02x}:{self.index:02x}"

    @property
    def grpc_port(self) -> int:
        return GRPC_BASE_PORT + self.device_id

    @property
    def grpc_address(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def thrift_port(self) -> int:
        return THRIFT_BASE_PORT + self.device_id


@dataclass(frozen=True)
class Nic:
    """A host's port on one plane."""

    host: int  # global host index
    plane: int
    t0: int  # T0 index in the plane
    local: int  # host index on its T0

    @property
    def ifname(self) -> str:
        return f"h{self.host}-eth{self.plane}"

    @property
    def address(self) -> ipaddress.IPv6Address:
        """fd00:0:<plane>:<t0>::<local + 1>, built from its bits (parsing the text cost more
        than anything else in a 256-host fabric's path sets)."""
        return ipaddress.IPv6Address(_NIC_PREFIX | self.plane << 80 | self.t0 << 64
                                     | (self.local + 1))

    @property
    def mac(self) -> str:
        return f"02:00:00:{self.plane:02x}:{host_role(self.host):02x}:{self.host & 0xFF:02x}"

    @property
    def usid(self) -> int:
        return usid(self.plane, host_role(self.host), self.host & 0xFF)


@dataclass(frozen=True)
class Link:
    """A cable: node a port a_port <-> node b port b_port (hosts use their plane as port)."""

    a: str
    a_port: int
    b: str
    b_port: int

    def other(self, node: str) -> tuple[str, int]:
        return (self.b, self.b_port) if node == self.a else (self.a, self.a_port)


@dataclass(frozen=True)
class Path:
    """One source route from a NIC to a peer NIC on the same plane."""

    plane: int
    spine: int | None  # None: both hosts on the same T0
    src: Nic
    dst: Nic
    address: ipaddress.IPv6Address  # the uSID carrier (outer DA)
    hops: tuple[str, ...] = field(default=())  # switch names in order


@dataclass(frozen=True)
class Fabric:
    planes: int = 4
    t0_per_plane: int = 2
    t1_per_plane: int = 2
    hosts_per_t0: int = 2

    def __post_init__(self) -> None:
        checks = [
            (1 <= self.planes <= MAX_PLANES, f"planes must be 1..{MAX_PLANES}, got {self.planes}"),
            (1 <= self.t0_per_plane <= MAX_INDEX,
             f"t0_per_plane must be 1..{MAX_INDEX}, got {self.t0_per_plane}"),
            (1 <= self.t1_per_plane <= MAX_INDEX,
             f"t1_per_plane must be 1..{MAX_INDEX}, got {self.t1_per_plane}"),
            (self.hosts_per_t0 >= 1, f"hosts_per_t0 must be at least 1, got {self.hosts_per_t0}"),
            (self.hosts == 0 or self.hosts <= MAX_HOSTS,
             f"{self.hosts} hosts do not fit the uSID's host roles and 8-bit index: "
             f"t0_per_plane x hosts_per_t0 must be at most {MAX_HOSTS}"),
        ]
        for ok, message in checks:
            if not ok:
                raise TopologyError(message)
        longest = max(len(f"p{self.planes - 1}l{self.t0_per_plane - 1}-eth"
                          f"{self.hosts_per_t0 + self.t1_per_plane}"),
                      len(f"p{self.planes - 1}s{self.t1_per_plane - 1}-eth{self.t0_per_plane}"),
                      len(f"h{self.hosts - 1}-eth{self.planes - 1}"))
        if longest > MAX_IFNAME:
            raise TopologyError(f"interface names would reach {longest} characters "
                                f"(Linux allows {MAX_IFNAME}): use a smaller fabric")

    @property
    def hosts(self) -> int:
        return self.t0_per_plane * self.hosts_per_t0

    @cached_property
    def switches(self) -> tuple[Switch, ...]:
        out: list[Switch] = []
        for p in range(self.planes):
            out += [Switch(f"p{p}l{i}", p, ROLE_T0, i, 0) for i in range(self.t0_per_plane)]
            out += [Switch(f"p{p}s{j}", p, ROLE_T1, j, 0) for j in range(self.t1_per_plane)]
        return tuple(Switch(s.name, s.plane, s.role, s.index, n + 1) for n, s in enumerate(out))

    @cached_property
    def by_name(self) -> dict[str, Switch]:
        return {s.name: s for s in self.switches}

    @cached_property
    def _spines(self) -> tuple[tuple[Switch, ...], ...]:
        """Each plane's T1s in index order (a route per spine: paths() walks them)."""
        return tuple(tuple(self.t1(p, j) for j in range(self.t1_per_plane))
                     for p in range(self.planes))

    def t0(self, plane: int, index: int) -> Switch:
        return self.by_name[f"p{plane}l{index}"]

    def t1(self, plane: int, index: int) -> Switch:
        return self.by_name[f"p{plane}s{index}"]

    def host_name(self, host: int) -> str:
        return f"h{host}"

    def nic(self, host: int, plane: int) -> Nic:
        if not 0 <= host < self.hosts or not 0 <= plane < self.planes:
            raise TopologyError(f"no NIC for host {host} plane {plane} in {self}")
        return Nic(host, plane, host // self.hosts_per_t0, host % self.hosts_per_t0)

    def host_port(self, local: int) -> int:
        """T0 port facing its local host `local`."""
        return local + 1

    def uplink_port(self, spine: int) -> int:
        """T0 port facing spine `spine`."""
        return self.hosts_per_t0 + spine + 1

    def downlink_port(self, t0: int) -> int:
        """T1 port facing T0 `t0` of its plane."""
        return t0 + 1

    @cached_property
    def links(self) -> tuple[Link, ...]:
        out: list[Link] = []
        for p in range(self.planes):
            for h in range(self.hosts):
                nic = self.nic(h, p)
                out.append(Link(self.host_name(h), p, self.t0(p, nic.t0).name,
                                self.host_port(nic.local)))
            for i in range(self.t0_per_plane):
                for j in range(self.t1_per_plane):
                    out.append(Link(self.t0(p, i).name, self.uplink_port(j),
                                    self.t1(p, j).name, self.downlink_port(i)))
        return tuple(out)

    def paths(self, src_host: int, dst_host: int, plane: int) -> list[Path]:
        """Every source route from src to dst on one plane: one per spine, or via a shared T0."""
        src, dst = self.nic(src_host, plane), self.nic(dst_host, plane)
        return [Path(plane, spine, src, dst, ipaddress.IPv6Address(carrier), hops)
                for spine, carrier, hops in self._routes(src, dst, plane)]

    def carriers(self, src_host: int, dst_host: int) -> list[tuple[int, int]]:
        """(plane, uSID carrier as an integer) of every path src -> dst, in all_paths' order:
        a host's routes without building each Path (261,888 a host at 1,024 hosts)."""
        out = []
        for plane in range(self.planes):
            src, dst = self.nic(src_host, plane), self.nic(dst_host, plane)
            out += [(plane, carrier) for _, carrier, _ in self._routes(src, dst, plane)]
        return out

    def _routes(self, src: Nic, dst: Nic, plane: int
                ) -> list[tuple[int | None, int, tuple[str, ...]]]:
        """(spine, carrier, switch hops) of each route src -> dst on `plane`: the one place
        a route's geometry is made."""
        src_t0, dst_t0 = self.t0(plane, src.t0), self.t0(plane, dst.t0)
        if src.t0 == dst.t0:
            return [(None, usid_carrier([src_t0.usid, dst.usid]), (src_t0.name,))]
        first, last, far = src_t0.usid, dst_t0.usid, dst.usid
        return [(j, usid_carrier([first, spine.usid, last, far]),
                 (src_t0.name, spine.name, dst_t0.name))
                for j, spine in enumerate(self._spines[plane])]

    def all_paths(self, src_host: int, dst_host: int) -> list[Path]:
        return [p for plane in range(self.planes) for p in self.paths(src_host, dst_host, plane)]

    def path_nodes(self, path: Path) -> tuple[str, ...]:
        """Every node a packet of `path` visits, in order: its source host, the switches,
        its destination host (the one definition of a route's geometry: the demo's cut
        links, the simulator's RTTs and a cluster's crossing links all walk it)."""
        return (self.host_name(path.src.host), *path.hops, self.host_name(path.dst.host))

    def path_links(self, path: Path) -> list[tuple[str, str]]:
        """The cables `path` crosses, in order, as (nearer node, farther node)."""
        nodes = self.path_nodes(path)
        return list(zip(nodes, nodes[1:], strict=False))

    def crosses(self, path: Path, a: str, b: str) -> bool:
        """Whether `path` uses the cable between nodes a and b, in either direction."""
        return any({x, y} == {a, b} for x, y in self.path_links(path))
