"""topologies.vxlan between two emulated servers: the tunnel carries a full MRC data frame's
worth of IP, refuses more than the tunnel MTU, uses a VNI of its own, and leaves nothing on
either server once its ends are deleted. The tunnel ends here live in each server's own
namespace (as a Mininet switch's ports do: switches run in their server's root namespace)."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass

import pytest

from tests.cluster.servers import EmulatedServers
from topologies.cluster import DEFAULT_UNDERLAY_MTU, ETHERNET_HEADER, VXLAN_OVERHEAD
from topologies.vxlan import VniAllocator, VxlanError, make_end, temp_name
from wire.layout import FULL_DATA_FRAME_LEN

pytestmark = pytest.mark.root
SERVERS = 2

# a UDP datagram of SIZE bytes of IP, DF set, from one tunnel address to the other; prints
# what came back, or the error
UDP_ECHO = """\
import socket, sys
src, dst, size = sys.argv[1], sys.argv[2], int(sys.argv[3])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.IPPROTO_IP, 10, 2)  # IP_MTU_DISCOVER = IP_PMTUDISC_DO: never fragment
s.bind((src, 0))
s.settimeout(5)
try:
    s.sendto(b"m" * (size - 28), (dst, 7777))
    print("sent")
except OSError as err:
    print("refused", err.errno)
"""
UDP_SINK = """\
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((sys.argv[1], 7777))
s.settimeout(10)
print("ready", flush=True)
print(len(s.recv(65535)), flush=True)
"""


@dataclass
class ServerNode:
    """A tunnel end's node: the server's own namespace (PID 1 there), commands via nsenter."""
    servers: EmulatedServers
    index: int

    def __post_init__(self) -> None:
        self.server = f"srv{self.index}"
        self.serverIP = self.servers.servers[self.index].address  # noqa: N815
        self.pid = 1  # as the server's own PID namespace sees its init

    def rcmd(self, command: str) -> str:
        done = self.servers.run(self.index, ["sh", "-c", command], capture_output=True,
                                text=True)
        return done.stdout + done.stderr

    cmd = rcmd

    def __str__(self) -> str:
        return self.server




def links(servers: EmulatedServers, i: int) -> str:
    return servers.run(i, ["ip", "-o", "link"], capture_output=True, text=True).stdout


def test_a_tunnel_carries_a_full_frame_and_refuses_more_than_its_mtu(
        servers: EmulatedServers) -> None:
    a, b = ServerNode(servers, 0), ServerNode(servers, 1)
    vni = VniAllocator().next()
    try:
        make_end(a, b, vni, "mrcx-a", None, DEFAULT_UNDERLAY_MTU)
        make_end(b, a, vni, "mrcx-b", None, DEFAULT_UNDERLAY_MTU)
        assert f"vxlan id {vni} " in a.rcmd("ip -d link show mrcx-a")
        assert temp_name(vni) not in links(servers, 0)  # renamed in place
        for node, ip in ((a, "192.168.77.1/24"), (b, "192.168.77.2/24")):
            assert node.cmd(f"ip addr add {ip} dev mrcx-{'a' if node is a else 'b'}") == ""
        tunnel_mtu = DEFAULT_UNDERLAY_MTU - VXLAN_OVERHEAD
        assert f"mtu {tunnel_mtu} " in a.rcmd("ip link show mrcx-a")
        sink = servers.popen(1, ["python3", "-c", UDP_SINK, "192.168.77.2"],
                             stdout=subprocess.PIPE, text=True)
        try:
            assert sink.stdout is not None and sink.stdout.readline().strip() == "ready"
            frame_ip = FULL_DATA_FRAME_LEN - ETHERNET_HEADER
            sent = servers.run(0, ["python3", "-c", UDP_ECHO, "192.168.77.1", "192.168.77.2",
                                   str(frame_ip)], capture_output=True, text=True)
            assert sent.stdout.strip() == "sent", sent
            out, _ = sink.communicate(timeout=15)
            assert int(out.strip()) == frame_ip - 28
        finally:
            if sink.poll() is None:
                sink.kill()
                sink.wait()
        too_big = servers.run(0, ["python3", "-c", UDP_ECHO, "192.168.77.1", "192.168.77.2",
                                  str(tunnel_mtu + 1)], capture_output=True, text=True)
        assert too_big.stdout.startswith("refused 90"), too_big  # EMSGSIZE
    finally:
        a.cmd("ip link del mrcx-a")
        b.cmd("ip link del mrcx-b")
    assert "mrcx-" not in links(servers, 0) + links(servers, 1)


def test_a_server_without_the_underlay_address_is_named(servers: EmulatedServers) -> None:
    a, b = ServerNode(servers, 0), ServerNode(servers, 1)
    a.serverIP = "10.251.0.99"
    with pytest.raises(VxlanError, match="no interface has address 10.251.0.99"):
        make_end(a, b, VniAllocator().next(), "mrcx-bad", None, DEFAULT_UNDERLAY_MTU)


def test_vnis_of_a_run_are_distinct_and_in_range() -> None:
    alloc = VniAllocator()
    vnis = [alloc.next() for _ in range(1000)]
    assert len(set(vnis)) == 1000 and all(1 <= v < 1 << 24 for v in vnis)
    assert all(len(temp_name(v)) <= 15 for v in (1, (1 << 24) - 1))
