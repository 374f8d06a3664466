"""topologies.vxlan between two emulated servers: the tunnel carries a full MRC data frame's
worth of IP, refuses more than the tunnel MTU, uses a VNI of its own, and leaves nothing on
either server once its ends are deleted. The tunnel ends here live in each server's own
namespace (as a Mininet switch's ports do: switches run in their server's root namespace)."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass

import pytest

from tests.cluster.servers import EmulatedServers
from topologies.cablecut import parse_dropped, ruleset
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
s.settimeout(float(sys.argv[2]) if len(sys.argv) > 2 else 10)
print("ready", flush=True)
try:
    print(len(s.recv(65535)), flush=True)
except TimeoutError:
    print("timeout", flush=True)
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


def _deliver(servers: EmulatedServers, src: str, dst: str, wait: float) -> str:
    """One UDP datagram from server 0's `src` to server 1's `dst`: its length, or timeout."""
    sink = servers.popen(1, ["python3", "-c", UDP_SINK, dst, str(wait)],
                         stdout=subprocess.PIPE, text=True)
    try:
        assert sink.stdout is not None and sink.stdout.readline().strip() == "ready"
        for _ in range(3):
            servers.run(0, ["python3", "-c", UDP_ECHO, src, dst, "100"], capture_output=True)
        out, _ = sink.communicate(timeout=wait + 10)
        return out.strip()
    finally:
        if sink.poll() is None:
            sink.kill()
            sink.wait()


def test_a_cable_cut_drops_one_tunnels_packets_only(servers: EmulatedServers) -> None:
    """topologies.cablecut's rule on the receiving server: the cut tunnel delivers nothing
    while its ends stay up, a second tunnel between the same servers is untouched, the
    counter says what was dropped, and mending (the rule gone) delivers again."""
    a, b = ServerNode(servers, 0), ServerNode(servers, 1)
    alloc = VniAllocator()
    cut, kept = alloc.next(), alloc.next()
    table = "mrc_cut_0badcafe"
    try:
        for vni, suffix, net in ((cut, "c", 78), (kept, "k", 79)):
            # fixed MACs and permanent neighbours: a neighbour lookup that failed during the
            # cut must not decide whether the mended link delivers
            mac_a, mac_b = f"02:00:00:00:{net:02x}:01", f"02:00:00:00:{net:02x}:02"
            make_end(a, b, vni, f"mrcx-{suffix}a", mac_a, DEFAULT_UNDERLAY_MTU)
            make_end(b, a, vni, f"mrcx-{suffix}b", mac_b, DEFAULT_UNDERLAY_MTU)
            assert a.cmd(f"ip addr add 192.168.{net}.1/24 dev mrcx-{suffix}a && ip neigh "
                         f"replace 192.168.{net}.2 lladdr {mac_b} dev mrcx-{suffix}a "
                         "nud permanent") == ""
            assert b.cmd(f"ip addr add 192.168.{net}.2/24 dev mrcx-{suffix}b && ip neigh "
                         f"replace 192.168.{net}.1 lladdr {mac_a} dev mrcx-{suffix}b "
                         "nud permanent") == ""
        nft = servers.run(1, ["nft", "-f", "-"], input=ruleset(table, [cut]),
                          capture_output=True, text=True)
        assert nft.returncode == 0, nft.stderr
        assert _deliver(servers, "192.168.78.1", "192.168.78.2", 2) == "timeout"
        assert _deliver(servers, "192.168.79.1", "192.168.79.2", 5) == "72"
        assert "LOWER_UP" in b.cmd("ip -o link show mrcx-cb")  # cut, not down
        listing = servers.run(1, ["nft", "list", "table", "inet", table],
                              capture_output=True, text=True).stdout
        assert parse_dropped(listing).get(cut, 0) >= 3, listing
        assert kept not in parse_dropped(listing)
        nft = servers.run(1, ["nft", "-f", "-"], input=ruleset(table, []),
                          capture_output=True, text=True)
        assert nft.returncode == 0, nft.stderr
        assert _deliver(servers, "192.168.78.1", "192.168.78.2", 5) == "72"
    finally:
        servers.run(1, ["nft", "delete", "table", "inet", table], capture_output=True)
        for suffix in ("c", "k"):
            a.cmd(f"ip link del mrcx-{suffix}a")
            b.cmd(f"ip link del mrcx-{suffix}b")
    assert "mrcx-" not in links(servers, 0) + links(servers, 1)


def test_cut_rules_name_exactly_the_cut_vnis() -> None:
    text = ruleset("mrc_cut_01234567", [70000, 5, 5])
    assert text.count("counter drop") == 2
    assert "udp dport 4789 @th,96,24 5 counter drop" in text
    assert "hook prerouting priority -300" in text
    assert "flush table inet mrc_cut_01234567" in text
    with pytest.raises(ValueError, match="cut table name"):
        ruleset("mrc_shield_01234567", [5])
    with pytest.raises(ValueError, match="VNIs must be"):
        ruleset("mrc_cut_01234567", [1 << 24])
    listing = "udp dport 4789 @th,96,24 0x11170 counter packets 12 bytes 900 drop"
    assert parse_dropped(listing) == {70000: 12}
