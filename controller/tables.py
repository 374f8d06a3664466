"""Topology -> the static entries of every switch, as plain data (no P4Runtime, no I/O).

MRC forwarding is static: `my_usid_table` holds the switch's own uSID and `usid_fwd_table` only
the uSIDs of its neighbours (and, on a T0, its hosts' port uSIDs), so a source route can only
ever take one hop at a time. The baseline IPv6 routes are the only entries that depend on link
state: convergence mode recomputes them with `dead_links` and writes the difference.

Baseline routing is per destination subnet, not a default route: a T0 reaches a remote T0's
/64 through the spines that still reach *that* T0, which is what a routing protocol would
converge to after a spine-to-T0 link fails (a default route over all spines could not).
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass

from fabric.topology import ROLE_T0, Fabric, Switch, TopologyError, usid_prefix
from p4rt import names as n
from p4rt import program
from p4rt.entities import Entity, Group, Member, TableEntry, Update
from p4rt.program import mac_int

DEFAULT_ECN_THRESHOLD = 16  # packets queued at egress before ECT packets get CE
DEFAULT_TRIM_THRESHOLD = 32  # packets queued before trimmable data is cut to headers
# Both sit below BMv2's default queue depth (64 packets): marking starts first, trimming
# next, and a data packet is trimmed long before the queue would tail-drop it.


@dataclass(frozen=True)
class PortThresholds:
    """Per-port queue thresholds in packets (v1model enq_qdepth units)."""

    ecn: int = DEFAULT_ECN_THRESHOLD
    trim: int = DEFAULT_TRIM_THRESHOLD

    def __post_init__(self) -> None:
        limit = (1 << n.QDEPTH_BITS) - 1
        for name, value in (("ecn", self.ecn), ("trim", self.trim)):
            if not 1 <= value <= limit:
                raise TopologyError(f"{name} threshold must be 1..{limit} packets, got {value}")
        if self.ecn > self.trim:
            raise TopologyError(f"ecn threshold ({self.ecn}) must not exceed the trim threshold "
                                f"({self.trim}): senders need the ECN signal before trimming")


@dataclass(frozen=True)
class SwitchTables:
    switch: Switch
    members: tuple[Member, ...]
    groups: tuple[Group, ...]
    entries: tuple[TableEntry, ...]

    def entities(self) -> tuple[Entity, ...]:
        """Write order: members before the groups that list them, both before the entries."""
        return self.members + self.groups + self.entries

    def table(self, name: str) -> list[TableEntry]:
        return [e for e in self.entries if e.table == name]


LinkKey = frozenset  # frozenset of the two node names of a cable


def link_key(a: str, b: str) -> LinkKey:
    return frozenset((a, b))


def check_links(fabric: Fabric, links: Iterable[LinkKey]) -> frozenset[LinkKey]:
    """Reject names that are not a cable of this fabric, so a typo cannot silently do nothing."""
    out = frozenset(links)
    if not out:
        return out  # nothing to check: building the fabric's whole link set per switch is not free
    known = {link_key(lk.a, lk.b) for lk in fabric.links}
    for key in out:
        if key not in known:
            raise TopologyError(f"{' - '.join(sorted(key))} is not a link of {fabric}: "
                                "name a host-T0 or T0-T1 pair that is cabled")
    return out


@functools.lru_cache(maxsize=4096)  # a fabric's switches ask for the same T0s' subnets
def nic_subnet(fabric: Fabric, plane: int, t0: int) -> ipaddress.IPv6Network:
    """The T0 subnet of docs/wire-format.md §3.3, taken from its first host's NIC address."""
    nic = fabric.nic(t0 * fabric.hosts_per_t0, plane)
    return ipaddress.IPv6Network(f"{nic.address}/64", strict=False)


# Entities that repeat across a fabric's switches are made once and shared (they are
# immutable): a spine's uSID entry and member on every T0 of its plane, a T0's subnet route on
# every switch of its plane. The simulator compiles each distinct entity once per fabric, and
# an entity keeps its hash (p4rt.entities). Bounded by the largest fabric's distinct entities.
_SHARED = 1 << 17
_usid_fwd = functools.lru_cache(maxsize=_SHARED)(program.usid_fwd)
_ecmp_member = functools.lru_cache(maxsize=_SHARED)(program.ecmp_member)
_ecmp_group = functools.lru_cache(maxsize=_SHARED)(program.ecmp_group)


@functools.lru_cache(maxsize=_SHARED)
def _route(net: ipaddress.IPv6Network, *, member: int | None = None,
           group: int | None = None) -> TableEntry:
    return program.route(int(net.network_address), net.prefixlen, member=member, group=group)


def _port_config(switch: Switch, port: int, host_facing: bool,
                 thresholds: PortThresholds) -> TableEntry:
    return program.port_config(port, host_facing=host_facing,
                               ecn_enabled=not host_facing,  # no CE marks towards hosts [paper]
                               trim_threshold=thresholds.trim, ecn_threshold=thresholds.ecn,
                               smac=mac_int(switch.mac))


def switch_tables(fabric: Fabric, switch: Switch, dead_links: Iterable[LinkKey] = (),
                  thresholds: PortThresholds | None = None) -> SwitchTables:
    """All entries of one switch; routes over `dead_links` are left out (baseline only).

    Action profile members are static, one per port, member id = port number; groups are
    per remote T0 (group id = remote T0 index + 1) and list only live next hops.
    """
    dead = check_links(fabric, dead_links)
    thresholds = thresholds or PortThresholds()
    p = switch.plane
    entries = [program.my_usid(usid_prefix(switch.usid))]
    # BEGIN exercise 3 neighbours
    neighbours: list[tuple[int, str, str, int]] = []  # (port, node name, mac, uSID)
    if switch.role == ROLE_T0:
        for g in range(switch.index * fabric.hosts_per_t0,
                       (switch.index + 1) * fabric.hosts_per_t0):
            nic = fabric.nic(g, p)
            neighbours.append((fabric.host_port(nic.local), fabric.host_name(g), nic.mac,
                               nic.usid))
        for j in range(fabric.t1_per_plane):
            spine = fabric.t1(p, j)
            neighbours.append((fabric.uplink_port(j), spine.name, spine.mac, spine.usid))
    else:
        for k in range(fabric.t0_per_plane):
            leaf = fabric.t0(p, k)
            neighbours.append((fabric.downlink_port(k), leaf.name, leaf.mac, leaf.usid))
    # END exercise 3 neighbours
    live = {port for port, name, _, _ in neighbours if link_key(switch.name, name) not in dead}

    entries += [_usid_fwd(usid_prefix(u), port, mac_int(mac)) for port, _, mac, u in neighbours]
    host_ports = ({fabric.host_port(h) for h in range(fabric.hosts_per_t0)}
                  if switch.role == ROLE_T0 else set())
    entries += [_port_config(switch, port, port in host_ports, thresholds)
                for port, _, _, _ in neighbours]
    members = tuple(_ecmp_member(port, port, mac_int(mac)) for port, _, mac, _ in neighbours)

    groups: list[Group] = []
    if switch.role == ROLE_T0:
        for g in range(switch.index * fabric.hosts_per_t0,
                       (switch.index + 1) * fabric.hosts_per_t0):
            nic = fabric.nic(g, p)
            port = fabric.host_port(nic.local)
            if port in live:
                entries.append(_route(ipaddress.IPv6Network(f"{nic.address}/128"), member=port))
        uplinks = [(fabric.uplink_port(j), fabric.t1(p, j).name)
                   for j in range(fabric.t1_per_plane)]
        for k in range(fabric.t0_per_plane):
            if k == switch.index:
                continue
            remote = fabric.t0(p, k).name
            via = tuple(port for port, spine in uplinks if port in live
                        and not (dead and link_key(spine, remote) in dead))
            if via:
                groups.append(_ecmp_group(k + 1, via))
                entries.append(_route(nic_subnet(fabric, p, k), group=k + 1))
    else:
        for k in range(fabric.t0_per_plane):
            if fabric.downlink_port(k) in live:
                entries.append(_route(nic_subnet(fabric, p, k), member=fabric.downlink_port(k)))
    return SwitchTables(switch, members, tuple(groups), tuple(entries))


def fabric_tables(fabric: Fabric, dead_links: Iterable[LinkKey] = (),
                  thresholds: PortThresholds | None = None) -> dict[str, SwitchTables]:
    dead = check_links(fabric, dead_links)
    return {s.name: switch_tables(fabric, s, dead, thresholds) for s in fabric.switches}


def diff(old: SwitchTables, new: SwitchTables) -> list[Update]:
    """Updates turning `old` into `new`, ordered so no reference ever dangles."""
    before = {e.key: e for e in old.entities()}
    after = {e.key: e for e in new.entities()}
    writes = [Update("INSERT" if e.key not in before else "MODIFY", e)
              for e in new.entities() if before.get(e.key) != e]
    deletes = [Update("DELETE", e) for e in reversed(old.entities()) if e.key not in after]
    return writes + deletes
