"""A host's kernel and NIC setup, run in its Mininet shell: NIC pacing, and kernel IPv6 for the
kernel-TCP baselines (keep_ipv6). The agent quietens its NICs itself (host_agent.nic.kernel_setup);
MrcNetwork decides when these run and keeps to the fabric's lifecycle, failures and observation.
"""

from __future__ import annotations

from mininet.node import Host

from emulation.netconfig import NetworkError
from emulation.nicpacing import pacing_cmds
from fabric.topology import USID_NET, Fabric


def pace_nics(node: Host, fabric: Fabric, host: int, port_rate_pps: int,
              leaf: str | None = None) -> None:
    """Every NIC of h`host` sends at the port rate (emulation.nicpacing); `leaf`: its class
    queues' qdisc (the link delay on BMv2)."""
    _run(node, host, [cmd for p in range(fabric.planes)
                      for cmd in pacing_cmds(fabric.nic(host, p).ifname, port_rate_pps, leaf)])


def delay_nics(node: Host, fabric: Fabric, host: int, qdisc: str) -> None:
    """Every NIC of h`host` holds what it sends for the link delay (an unpaced NIC on BMv2)."""
    _run(node, host, [f"tc qdisc replace dev {fabric.nic(host, p).ifname} root {qdisc}"
                      for p in range(fabric.planes)])


def configure_kernel_ipv6(node: Host, fabric: Fabric, host: int) -> None:
    """NIC addresses and a static route/neighbour per plane (switches do not answer ND).

    keep_addr_on_down: the address (and sockets bound to it) survive a NIC going down.
    The uSID block is blackholed: the kernel sees every MRC frame the agent reads (an
    AF_PACKET socket takes a copy), and without a route for its destination it answers each
    with an ICMPv6 "no route" error that queues, untrimmable, in the peer's data queue. In
    a 7->1 incast those errors took 56 of the receiver's 60 packets/s (docs/decisions.md)."""
    _run(node, host, [f"ip -6 route replace blackhole {USID_NET}"])
    for p in range(fabric.planes):
        ifname = fabric.nic(host, p).ifname
        _run(node, host, [f"sysctl -qw net.ipv6.conf.{ifname}.accept_dad=0",
                          f"sysctl -qw net.ipv6.conf.{ifname}.disable_ipv6=0",
                          f"sysctl -qw net.ipv6.conf.{ifname}.keep_addr_on_down=1",
                          *_nic_ipv6_cmds(fabric, host, p)])


def restore_nic_ipv6(node: Host, fabric: Fabric, host: int, plane: int) -> None:
    """The neighbour and route Linux dropped when the NIC's link went down."""
    _run(node, host, _nic_ipv6_cmds(fabric, host, plane))


def _nic_ipv6_cmds(fabric: Fabric, host: int, plane: int) -> list[str]:
    """Address, neighbour and route of one NIC; `replace`, so they can be re-applied."""
    nic = fabric.nic(host, plane)
    t0 = fabric.t0(plane, nic.t0)
    return [f"ip -6 addr replace {nic.address}/128 dev {nic.ifname} nodad",
            f"ip -6 neigh replace fe80::1 lladdr {t0.mac} dev {nic.ifname} nud permanent",
            f"ip -6 route replace fd00:0:{plane:x}::/48 via fe80::1 dev {nic.ifname} onlink"]


def _run(node: Host, host: int, cmds: list[str]) -> None:
    for cmd in cmds:
        out = node.cmd(cmd + " && echo OK").strip()
        if not out.endswith("OK"):
            raise NetworkError(f"h{host}: `{cmd}` failed: {out}")
