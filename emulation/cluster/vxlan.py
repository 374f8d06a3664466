"""Links between servers as VXLAN tunnels, for Mininet Cluster Edition.

Cluster Edition's own remote links are an ssh Ethernet tunnel (a userspace TCP stream per
link, TCP over TCP) and gretap (`RemoteGRELink`, which needs GRE in the kernel and sets MTU
1450 on every link). VXLAN is in every stock kernel (this machine's has no GRE), runs in the
kernel, and gives each link its own 24-bit network identifier (VNI) on the underlay, so one
link can be cut alone: an nftables rule on the underlay drops that VNI (a cable cut without
an administrative down, see the cluster docs). A VXLAN device takes a frame carrying its VNI
from any sender, so each link's VNI is random on its own (VniAllocator) and a cluster run
lets only its servers reach its tunnels (vxguard here, loaded by clusternet).

A tunnel end is made on its server's root namespace, where the underlay address is, under a
temporary name unique to its VNI, then moved into the node's namespace and renamed there, so
a name clash with anything else on the server is impossible. Its MTU is the underlay's less
the tunnel's headers (emulation.cluster.cluster.VXLAN_OVERHEAD); the cluster refuses an underlay on
which a full MRC data frame would not fit.
"""

from __future__ import annotations

import secrets
import shlex
from typing import Any, Protocol

from emulation.cluster.cluster import VXLAN_OVERHEAD
from emulation.errors import EmulationError

VXLAN_PORT = 4789  # IANA's VXLAN port (RFC 7348)
MAX_VNI = (1 << 24) - 1
MAX_RUN_VNIS = 1 << 16  # links between servers one run may have (each its own random VNI)
TEMP_PREFIX = "mrcvx"  # + the VNI in hex, at most 6 digits: 11 characters, under IFNAMSIZ


class VxlanError(EmulationError, RuntimeError):
    """A tunnel end could not be made; the message names the server and the command."""


class TunnelNode(Protocol):
    """What a tunnel end needs of a node (Cluster Edition's RemoteMixin has all of it)."""
    server: str
    serverIP: str  # noqa: N815 (Cluster Edition's name)
    pid: int | None

    def rcmd(self, *cmd: str, **opts: Any) -> str: ...

    def cmd(self, *args: Any, **kwargs: Any) -> str: ...


class VniAllocator:
    """Unique VNIs for one run's links, each drawn from `secrets` on its own: knowing one
    link's VNI tells nothing of another's (a random base plus a counter made every VNI of a
    run guessable from one), and two runs sharing servers rarely collide. The tunnels'
    VNIs are only half of their protection: emulation.cluster.vxguard lets only the cluster's
    servers reach them."""

    def __init__(self) -> None:
        self.vnis: set[int] = set()

    @property
    def used(self) -> int:
        return len(self.vnis)

    def next(self) -> int:
        if self.used >= MAX_RUN_VNIS:
            raise VxlanError(f"more than {MAX_RUN_VNIS} links between servers in one run")
        while True:  # at most MAX_RUN_VNIS of 2^24 taken: a redraw is rare
            vni = 1 + secrets.randbelow(MAX_VNI)
            if vni not in self.vnis:
                self.vnis.add(vni)
                return vni


def temp_name(vni: int) -> str:
    return f"{TEMP_PREFIX}{vni:x}"


def underlay_query(address: str) -> str:
    """The command, on a server's root namespace, that names the interface holding
    `address` (a tunnel's `dev`); its output goes to parse_underlay_device."""
    return f"ip -o -4 addr show to {shlex.quote(address)}/32"


def parse_underlay_device(out: str, server: str, address: str) -> str:
    fields = out.split()
    if len(fields) < 2:
        raise VxlanError(f"server {server}: no interface has address {address} "
                         f"(ip -o -4 addr said {out.strip()!r}); is it the server's underlay "
                         "address?")
    return fields[1]


def underlay_device(node: TunnelNode) -> str:
    """The server's interface that holds its underlay address (the tunnel's `dev`)."""
    return parse_underlay_device(node.rcmd(underlay_query(node.serverIP)), node.server,
                                 node.serverIP)


def end_lines(vni: int, local: str, remote: str, dev: str, mtu: int) -> list[str]:
    """`ip -batch` lines, on a server's root namespace, that make one tunnel end under its
    temporary name (temp_name)."""
    name = temp_name(vni)
    return [f"link add {name} type vxlan id {vni} local {local} remote {remote} "
            f"dstport {VXLAN_PORT} dev {dev} nolearning",
            f"link set {name} mtu {mtu}"]


def end_commands(vni: int, local: str, remote: str, dev: str, mtu: int) -> list[str]:
    """end_lines as shell commands."""
    return [f"ip {line}" for line in end_lines(vni, local, remote, dev, mtu)]


def make_end(node: TunnelNode, peer: TunnelNode, vni: int, intfname: str,
             addr: str | None, underlay_mtu: int) -> None:
    """One end of the tunnel: made on node's server, moved into node, named `intfname`."""
    dev = underlay_device(node)
    name = temp_name(vni)
    for command in end_commands(vni, node.serverIP, peer.serverIP, dev,
                                underlay_mtu - VXLAN_OVERHEAD):
        _run(node, command, root=True)
    if node.pid is None:
        raise VxlanError(f"{node}: no shell PID to move {name} into")
    _run(node, f"ip link set {name} netns {node.pid}", root=True)
    rename = f"ip link set {name} name {shlex.quote(intfname)}"
    _run(node, rename + (f" address {shlex.quote(addr)}" if addr else ""), root=False)
    _run(node, f"ip link set {shlex.quote(intfname)} up", root=False)


def _run(node: TunnelNode, command: str, root: bool) -> None:
    out = node.rcmd(command) if root else node.cmd(command)
    if out.strip():
        where = f"server {node.server}" if root else f"node {node}"
        raise VxlanError(f"{where}: {command}: {out.strip()}")


def vxlan_link_class(allocator: VniAllocator, underlay_mtu: int) -> type:
    """A Cluster Edition link class (MininetCluster(link=...)) whose links between servers
    are VXLAN tunnels with VNIs from `allocator`; links within a server stay veth pairs.
    It loads no VXLAN guard (vxguard here): a run of clusternet does."""
    from mininet.examples.cluster import RemoteLink  # Mininet only where a cluster is built
    from mininet.link import Link

    class VxlanLink(RemoteLink):
        def makeIntfPair(self, intfname1: str, intfname2: str, addr1: str | None = None,  # noqa: N802
                         addr2: str | None = None, node1: Any = None, node2: Any = None,
                         deleteIntfs: bool = True) -> None:  # noqa: N803
            node1 = self.node1 if node1 is None else node1
            node2 = self.node2 if node2 is None else node2
            if getattr(node1, "server", "localhost") == getattr(node2, "server", "localhost"):
                Link.makeIntfPair(intfname1, intfname2, addr1, addr2, node1, node2,
                                  deleteIntfs=deleteIntfs)
                return
            self.vni = allocator.next()
            make_end(node1, node2, self.vni, intfname1, addr1, underlay_mtu)
            make_end(node2, node1, self.vni, intfname2, addr2, underlay_mtu)
            self.tunnel = None  # no process: Link.stop deletes both ends in their nodes

    return VxlanLink
