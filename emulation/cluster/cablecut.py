"""A cable cut on a link between servers: the link's tunnel packets dropped on the underlay.

A link between two servers is a VXLAN tunnel with its own VNI (emulation.cluster.vxlan). Taking a
tunnel end administratively down is not a cut: nothing couples the two ends' carriers, and
an end that goes down tells the node on it at once. A cut is silent: both ends stay up and
every frame is lost in the "cable". Here that is an nftables rule on each of the two servers
that drops the underlay's VXLAN packets carrying the link's VNI as they arrive (prerouting,
before the kernel hands them to the tunnel), so each direction is lost at its receiver.

Each server holds one table per run (`inet mrc_cut_<tag>`), made at the first cut and
recorded in the server's run manifest, so a killed run's table goes with the next run's
cleanup; the rules are replaced as a whole, atomically, whenever the set of cut links
changes.
"""

from __future__ import annotations

import re
import secrets
import shutil
from collections.abc import Callable, Iterable

from emulation.cluster.vxlan import MAX_VNI, VXLAN_PORT
from safety.shield import CABLE_CUT_PREFIX, ShieldError, nft_run

TABLE_PREFIX = CABLE_CUT_PREFIX  # safety.shield knows its family: the run sweep removes it
NAME = re.compile(rf"^{TABLE_PREFIX}[0-9a-f]{{8}}$")
PRIORITY = -300  # nft's "raw": before connection tracking sees the packet
VNI_BITS = 96  # the VNI's offset from the UDP header: 8 bytes of UDP, 4 of VXLAN flags
_COUNTER = re.compile(r"@th,96,24 (0x[0-9a-f]+|\d+) counter packets (\d+)")


def ruleset(name: str, vnis: Iterable[int]) -> str:
    """The nft script that makes table `name` drop exactly the VNIs `vnis` (it replaces the
    table's rules, or makes the table)."""
    if not NAME.match(name):
        raise ValueError(f"{name!r} is not a cut table name ({TABLE_PREFIX} + 8 hex digits)")
    wanted = sorted(set(vnis))
    if not all(1 <= v <= MAX_VNI for v in wanted):
        raise ValueError(f"VNIs must be 1..{MAX_VNI}, got {wanted}")
    rules = "".join(f"    udp dport {VXLAN_PORT} @th,{VNI_BITS},24 {v} counter drop\n"
                    for v in wanted)
    return (f"table inet {name} {{ }}\nflush table inet {name}\n"
            f"table inet {name} {{\n"
            f"  chain cut {{ type filter hook prerouting priority {PRIORITY}; policy accept;\n"
            f"{rules}  }}\n}}\n")


def remove(name: str) -> bool:
    """Delete the cut table `name` if it exists (only names this module makes)."""
    if not NAME.match(name) or shutil.which("nft") is None:
        return False
    return nft_run(["delete", "table", "inet", name]).returncode == 0


def parse_dropped(listing: str) -> dict[int, int]:
    """Packets dropped per VNI, from `nft list table` of a cut table."""
    return {int(v, 0): int(n) for v, n in _COUNTER.findall(listing)}


class CableCuts:
    """The cut links of one run on one server (this machine or, through serverrun, another).
    `record` hears the table's name before it is made, for the run manifest."""

    def __init__(self, record: Callable[[str], None]) -> None:
        self.record = record
        self.name: str | None = None
        self.vnis: set[int] = set()

    def set(self, vnis: Iterable[int]) -> dict[int, int]:
        """Cut exactly `vnis` on this server; returns the packets each VNI that is no longer
        cut had dropped (the counters go with its rule)."""
        wanted = set(vnis)
        before = self.dropped()
        if self.name is None:
            if not wanted:
                return {}
            if shutil.which("nft") is None:
                raise ShieldError("nft (Debian package nftables) is not installed: a cable "
                                  "cut needs it on every server")
            self.name = f"{TABLE_PREFIX}{secrets.token_hex(4)}"
            self.record(self.name)
        done = nft_run(["-f", "-"], ruleset(self.name, wanted))
        if done.returncode != 0:
            raise ShieldError(f"nft refused the cable cut: {done.stderr.strip()[:300]}")
        self.vnis = wanted
        return {v: n for v, n in before.items() if v not in wanted}

    def dropped(self) -> dict[int, int]:
        """Packets dropped so far, per cut VNI."""
        if self.name is None:
            return {}
        return parse_dropped(nft_run(["list", "table", "inet", self.name]).stdout)

    def close(self) -> None:
        if self.name is not None:
            remove(self.name)
            self.name, self.vnis = None, set()
