"""Veth pairs made and removed in batches: one `ip -batch` per fabric instead of commands per link.

Mininet makes a link with `ip link add` through a node's shell, then configures each end with
three to four more shell commands (MAC down/up, up), and deletes each end with one more: at
144 switches, 288 links took 5-8 s up and 8.4 s down. Here every pair is created, given its
MACs and brought up by one `ip -batch` (Linux cannot bring a peer up at creation, so the peers
follow in the same batch, or in one command per host namespace), and removed by another, while
Mininet still owns the Link and Intf objects a topology uses (PrebuiltLink, PrebuiltIntf).
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from mininet.link import Intf, Link
from mininet.node import Node

from emulation.errors import EmulationError

IP_TIMEOUT_S = 60.0
# Deleting a veth waits for the kernel's RCU grace periods, outside the lock that serializes
# netlink requests, so batches in parallel overlap those waits: 288 pairs took 4.7 s in one
# batch, 1.5 s in 8 and 0.83 s in 16 (32: no better) on this 2-CPU machine.
DELETE_BATCHES = 16


class VethError(EmulationError, RuntimeError):
    """`ip` refused a batch; the message has its complaint."""


@dataclass(frozen=True)
class VethPair:
    """Two interface names and MACs; `netns` is the PID whose namespace holds the second end
    (None: the root namespace, like the first end)."""
    name1: str
    mac1: str
    name2: str
    mac2: str
    netns: int | None = None


class PrebuiltIntf(Intf):
    """An end of a VethPair: already named, addressed and up; deleted with its batch."""

    def config(self, **params) -> dict:
        return {}

    def delete(self) -> None:
        self.node.delIntf(self)
        self.link = None


class PrebuiltLink(Link):
    """A Mininet link over a pair create_pairs made (pass intf=PrebuiltIntf with it)."""

    @classmethod
    def makeIntfPair(cls, *args, **kwargs) -> None:  # noqa: N802 (Mininet's name)
        return None


def ip_batch(lines: Iterable[str], force: bool = False) -> None:
    """`ip -batch` on this machine (`force`: go on past a failing line)."""
    text = "".join(f"{line}\n" for line in lines)
    if not text:
        return
    done = subprocess.run(["ip", *(["-force"] if force else []), "-batch", "-"], input=text,
                          capture_output=True, text=True, timeout=IP_TIMEOUT_S, check=False)
    if done.returncode:
        raise VethError(f"ip -batch: {done.stderr.strip() or done.returncode}")


def create_pairs(pairs: list[VethPair], up_in: dict[int, Node],
                 batch: Callable[[Iterable[str]], None] = ip_batch) -> None:
    """Create every pair; bring up the root-namespace ends in the same batch and the others
    with one command in each namespace's node (`up_in`: netns PID -> Mininet node). `batch`
    runs `ip -batch` lines: here by default, on another server for a cluster's."""
    batch(f"link add name {p.name1} address {p.mac1} type veth peer name {p.name2} "
           f"address {p.mac2}" + (f" netns {p.netns}" if p.netns is not None else "")
           for p in pairs)
    batch([*(f"link set dev {p.name1} up" for p in pairs),
            *(f"link set dev {p.name2} up" for p in pairs if p.netns is None)])
    for pid, node in up_in.items():
        names = [p.name2 for p in pairs if p.netns == pid]
        if names:
            out = node.cmd("; ".join(f"ip link set dev {n} up" for n in names))
            if out.strip():
                raise VethError(f"{node.name}: bringing up {', '.join(names)}: {out.strip()}")


def delete_pairs(pairs: list[VethPair]) -> None:
    """Remove the pairs (deleting one end removes both); ends already gone are skipped, and
    any root-namespace end still there afterwards is an error naming it."""
    shares = [pairs[i::DELETE_BATCHES] for i in range(min(DELETE_BATCHES, len(pairs)))]
    procs = [subprocess.Popen(["ip", "-force", "-batch", "-"], stdin=subprocess.PIPE,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True)
             for _ in shares]
    try:
        for proc, share in zip(procs, shares, strict=True):  # all batches given, then waited
            assert proc.stdin is not None
            proc.stdin.write("".join(f"link del dev {p.name1}\n" for p in share))
            proc.stdin.close()
        for proc in procs:
            proc.wait(timeout=IP_TIMEOUT_S)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    left = [n for p in pairs for n in (p.name1, p.name2) if p.netns is None or n == p.name1
            if Path(f"/sys/class/net/{n}").exists()]
    if left:
        raise VethError(f"could not remove {len(left)} interfaces, e.g. {left[0]}")
