"""Keeps the root namespace's own network stack off the switches' ports.

A switch's ports (veth ends such as `p0l0-eth1` and, on a cluster, tunnel ends) live in the
root namespace of their server, where the switch process reads and writes them through
AF_PACKET sockets. The kernel there also takes them for interfaces of its own: IPv6 is
switched off on them (nodes.p4switch silences each port), but IPv4 and ARP stay on, with
rp_filter 0. A host (and whatever runs in it) could then reach the root namespace's IPv4
stack through its NIC: a datagram to any of the machine's addresses, from any source, or a
broadcast reaches root's listeners on 0.0.0.0, and ARP answers name the machine's addresses.

So a run loads one nftables table of its own (`netdev mrc_ports_<tag>`) once its ports
exist: ingress chains on exactly the run's switch ports drop every frame that is not IPv6
before the kernel's stack sees it (and count it). The fabric carries IPv6 only, and the
switch process loses nothing: a packet socket gets each frame before any ingress hook runs.
Per-port sysctls (rp_filter, arp_ignore, forwarding) were not enough: the kernel exempts a
broadcast from 0.0.0.0 (DHCP's) from the reverse-path check, so it still reached root's
listeners. The table's name goes into the run manifest before it is loaded; the run deletes
it with its ports (fabricnet.remove_links, ClusterRun.close, a serverrun session's release),
and a killed run's table goes with the next cleanup.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from safety import shield

TABLE_PREFIX = shield.PORT_GUARD_PREFIX
NAME = re.compile(rf"^{TABLE_PREFIX}[0-9a-f]{{8}}$")
PRIORITY = -500  # before any other ingress chain on the port
CHAIN_DEVICES = 255  # the kernel refuses a chain hooking NFT_NETDEVICE_MAX (256) or more
_IFNAME = re.compile(r"^[A-Za-z0-9_.-]{1,15}$")  # what a fabric names its ports (IFNAMSIZ)


def ruleset(name: str, ports: Iterable[str]) -> str:
    """The nft script of table `name`: every frame but IPv6 that arrives on one of `ports`
    is dropped before the kernel's stack, one chain per CHAIN_DEVICES ports."""
    if not NAME.match(name):
        raise ValueError(f"{name!r} is not a port guard table name ({TABLE_PREFIX} + 8 hex "
                         "digits)")
    names = sorted(set(ports))
    bad = [n for n in names if not _IFNAME.match(n)]
    if not names or bad:
        raise ValueError(f"port guard: interface names wanted, got {bad or 'none'}")
    chains = []
    for i in range(0, len(names), CHAIN_DEVICES):
        devices = ", ".join(f'"{n}"' for n in names[i:i + CHAIN_DEVICES])
        chains.append(f"  chain ports{i // CHAIN_DEVICES} {{ type filter hook ingress devices = "
                      f"{{ {devices} }} priority {PRIORITY}; policy accept;\n"
                      f"    meta protocol != ip6 counter drop\n  }}\n")
    return f"table netdev {name} {{\n{''.join(chains)}}}\n"


def install(ports: Iterable[str], record: Callable[[str], None]) -> str:
    """Load a new port guard over `ports` (which exist); `record` hears its name before it
    is loaded (the run manifest). Returns the name, for `remove`."""
    return shield.load(TABLE_PREFIX, lambda name: ruleset(name, ports), "the switch-port guard",
                       "the switch ports would take IPv4 into the root namespace", record)


def remove(name: str | None) -> bool:
    """Delete the port guard `name` if it exists (only names this module makes)."""
    return name is not None and bool(NAME.match(name)) and shield.remove(name)


def dropped(name: str) -> int:
    """Frames the guard `name` has kept from the kernel's stack so far."""
    return shield.dropped(name) if NAME.match(name) else 0
