"""Only the cluster's own servers reach a run's VXLAN tunnels.

A VXLAN device decapsulates every UDP datagram to the VXLAN port that carries its VNI,
whoever sent it: the kernel does not compare the sender with the tunnel's `remote` (that is
only where the device sends). Anyone who reaches a server's underlay and knows or guesses a
VNI could put frames into the fabric. So every server that holds tunnel ends of a run loads
one nftables table of the run's own (`inet mrc_vxgate_<tag>`) before the tunnels are made:
in the input hook, at raw priority (before any other filter), a datagram to the VXLAN port
that carries one of the run's VNIs on that server is accepted from the underlay address of
one of the cluster's servers and dropped (and counted) from anyone else, over IPv4 or IPv6.

The rules name only the run's own VNIs: the run guards its tunnels and leaves the server's
other VXLAN users (another run, a container overlay) alone. The VNIs themselves are drawn
one by one from `secrets` (emulation.cluster.vxlan.VniAllocator), so none tells another. The table's
name goes into the server's run manifest before it is loaded: the first server's with the
run's other tables, another server's through its serverrun session, so a killed run's table
goes with the next cleanup there; the run deletes it when it ends (ClusterRun.close, the
serverrun session's release).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Iterable

from emulation.cluster.vxlan import MAX_VNI, VXLAN_PORT
from safety import shield

TABLE_PREFIX = shield.VXLAN_GUARD_PREFIX
NAME = re.compile(rf"^{TABLE_PREFIX}[0-9a-f]{{8}}$")
PRIORITY = -300  # nft's "raw": the first of the input hook's chains
VNI_BITS = 96  # the VNI's offset from the UDP header: 8 bytes of UDP, 4 of VXLAN flags


def ruleset(name: str, servers: Iterable[str], vnis: Iterable[int]) -> str:
    """The nft script of table `name`: datagrams to the VXLAN port with one of `vnis` are
    accepted from the underlay addresses `servers` (IPv4, as the cluster's) and dropped from
    anyone else."""
    if not NAME.match(name):
        raise ValueError(f"{name!r} is not a VXLAN guard table name ({TABLE_PREFIX} + 8 hex "
                         "digits)")
    addresses = sorted({ipaddress.IPv4Address(a) for a in servers})  # ValueError if not one
    wanted = sorted(set(vnis))
    if not addresses or not wanted:
        raise ValueError(f"a VXLAN guard needs servers and VNIs, got {addresses} and {wanted}")
    if not all(1 <= v <= MAX_VNI for v in wanted):
        raise ValueError(f"VNIs must be 1..{MAX_VNI}, got {wanted}")
    ours = f"udp dport {VXLAN_PORT} @th,{VNI_BITS},24 {{ {', '.join(map(str, wanted))} }}"
    sources = ", ".join(str(a) for a in addresses)
    return (f"table inet {name} {{\n"
            f"  chain input {{ type filter hook input priority {PRIORITY}; policy accept;\n"
            f"    {ours} ip saddr {{ {sources} }} accept\n"
            f"    {ours} counter drop\n"
            f"  }}\n}}\n")


def install(servers: Iterable[str], vnis: Iterable[int],
            record: Callable[[str], None]) -> str:
    """Load a new VXLAN guard on this machine; `record` hears its name before it is loaded
    (the run manifest). Returns the name, for `remove`."""
    return shield.load(TABLE_PREFIX, lambda name: ruleset(name, servers, vnis),
                       "the VXLAN guard",
                       "anyone on the underlay could put frames into the run's tunnels", record)


def remove(name: str) -> bool:
    """Delete the VXLAN guard `name` if it exists (only names this module makes)."""
    return bool(NAME.match(name)) and shield.remove(name)


def dropped(name: str) -> int:
    """Datagrams the guard `name` has dropped so far: from outside the cluster."""
    return shield.dropped(name) if NAME.match(name) else 0
