"""emulation.cluster.vxlan between two emulated servers: the tunnel carries a full MRC data frame's
worth of IP, refuses more than the tunnel MTU, uses a VNI of its own, and leaves nothing on
either server once its ends are deleted. The tunnel ends here live in each server's own
namespace (as a Mininet switch's ports do: switches run in their server's root namespace).

A run's VNIs are independent random draws, and its VXLAN guard (emulation.cluster.vxguard), loaded
by emulation.cluster.clusternet on every server with tunnel ends, keeps a frame with a tunnel's VNI
out of the tunnel unless it comes from one of the cluster's servers. Before (issue 54) VNIs
were a random base plus a counter and any host on the underlay could inject frames."""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import subprocess
import types
from dataclasses import dataclass
from pathlib import Path

import pytest

from emulation.cluster import vxlan
from emulation.cluster.cablecut import parse_dropped, ruleset
from emulation.cluster.cluster import DEFAULT_UNDERLAY_MTU, ETHERNET_HEADER, VXLAN_OVERHEAD
from emulation.cluster.vxlan import MAX_RUN_VNIS, VniAllocator, VxlanError, make_end, temp_name
from tests.cluster.servers import (
    UNDERLAY_PREFIX,
    UNDERLAY_PREFIXLEN,
    EmulatedServers,
    children,
)
from tests.support import wait_until
from wire.layout import FULL_DATA_FRAME_LEN

pytestmark = pytest.mark.root
SERVERS = 2
REPO = Path(__file__).resolve().parents[2]

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


def test_vnis_of_a_run_are_independent_draws(monkeypatch: pytest.MonkeyPatch) -> None:
    """One VNI tells nothing of the next: not an arithmetic sequence, not one block; a draw
    the run already has is drawn again."""
    alloc = VniAllocator()
    vnis = [alloc.next() for _ in range(64)]
    assert len({b - a for a, b in itertools.pairwise(vnis)}) > 1, vnis
    assert max(vnis) - min(vnis) > MAX_RUN_VNIS, vnis
    draws = iter([41, 41, 41, 6])
    monkeypatch.setattr(vxlan, "secrets", types.SimpleNamespace(randbelow=lambda _n: next(draws)))
    alloc = VniAllocator()
    assert [alloc.next(), alloc.next()] == [42, 7]


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
    """emulation.cluster.cablecut's rule on the receiving server: the cut tunnel delivers nothing
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


# ---- the run's VXLAN guard (emulation.cluster.vxguard) -----------------------------

# The first server's side of a cluster run, reduced to its guards: ClusterRun takes srv1
# (a serverrun session), loads the VXLAN guard (and a port guard) on both servers, says which
# tables each has, waits for a line on stdin, then closes as a run's stop does.
GUARD_DRIVER = """\
import faulthandler, json, shutil, sys, tempfile
faulthandler.dump_traceback_later(90, exit=True)
from pathlib import Path
from fabric.topology import Fabric
from emulation.cluster.cluster import Cluster, Server
from emulation.cluster.clusternet import ClusterRun
from emulation.netconfig import NetworkConfig
cluster = Cluster((Server("srv0", sys.argv[2]), Server("srv1", sys.argv[3])),
                  ssh_config=Path(sys.argv[1]))
workdir = Path(tempfile.mkdtemp())
recorded = []
run = ClusterRun(NetworkConfig(fabric=Fabric(2, 1, 1, 1), cluster=cluster, agents=False),
                 workdir, None, log=lambda *_: None, record_table=recorded.append)
try:
    run.open_servers()
    for server in ("srv0", "srv1"):
        run.load_guard(server, "vxlan_guard", [int(sys.argv[4])])
        run.load_guard(server, "port_guard", [sys.argv[5]])
    print("READY " + json.dumps({"recorded": recorded, "local": run.local_guards}), flush=True)
    sys.stdin.readline()
finally:
    released = run.close()
    shutil.rmtree(workdir, ignore_errors=True)
    print("CLOSED " + json.dumps(released), flush=True)
"""
SEND_VXLAN = """\
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((sys.argv[1], 0))
for _ in range(int(sys.argv[4])):
    s.sendto(bytes.fromhex(sys.argv[3]), (sys.argv[2], 4789))
"""
# what comes out of a tunnel device (AF_PACKET): counts of frames carrying each marker, once
# `want` frames of the last marker came or the time is up
SNIFF = """\
import json, socket, sys, time
ifname, want, markers = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
s.bind((ifname, 3))  # ETH_P_ALL (host order here)
s.settimeout(0.2)
print("ready", flush=True)
seen = dict.fromkeys(markers, 0)
deadline = time.monotonic() + 15
while seen[markers[-1]] < want and time.monotonic() < deadline:
    try:
        frame = s.recv(65535)
    except TimeoutError:
        continue
    for m in markers:
        seen[m] += m.encode() in frame
print(json.dumps(seen), flush=True)
"""
OUTSIDER = f"{UNDERLAY_PREFIX}250"  # on the underlay, not a server of the cluster


def nft_tables(servers: EmulatedServers, i: int) -> str:
    return servers.run(i, ["nft", "list", "tables"], capture_output=True, text=True).stdout


def guard_dropped(servers: EmulatedServers, i: int, table: str) -> int:
    listing = servers.run(i, ["nft", "list", "table", "inet", table], capture_output=True,
                          text=True).stdout
    return sum(int(n) for n in re.findall(r"counter packets (\d+)", listing))


def vxlan_datagram(vni: int, dst_mac: str, marker: str) -> bytes:
    """A VXLAN payload (header and inner frame: an IPv6 datagram towards `dst_mac` that
    carries `marker`)."""
    from scapy.layers.inet import UDP
    from scapy.layers.inet6 import IPv6
    from scapy.layers.l2 import Ether
    from scapy.layers.vxlan import VXLAN
    inner = Ether(src="02:00:00:00:7e:99", dst=dst_mac) / IPv6(src="fd00::99", dst="fd00::2") \
        / UDP(sport=4000, dport=4001) / marker.encode()
    return bytes(VXLAN(vni=vni)) + bytes(inner)  # apart: over Ether, scapy makes it GPE


def send_vxlan(servers: EmulatedServers, i: int | None, src: str, dst: str,
               payload: bytes, count: int) -> None:
    """`count` datagrams from `src` to dst:4789, sent by server i or (None) from the underlay."""
    argv = ["python3", "-c", SEND_VXLAN, src, dst, payload.hex(), str(count)]
    if i is None:
        subprocess.run(["ip", "netns", "exec", servers.underlay, *argv], check=True,
                       capture_output=True, timeout=30)
    else:
        servers.run(i, argv, check=True, capture_output=True)


def stop_driver(driver: subprocess.Popen | None) -> None:
    """End of stdin closes the driver's run; if it hangs, it is killed (nsenter's child by
    its PID, then nsenter), and its ssh sessions die with it."""
    if driver is None or driver.poll() is not None:
        return
    assert driver.stdin is not None
    driver.stdin.close()
    try:
        driver.wait(timeout=30)
    except subprocess.TimeoutExpired:
        for pid in children(driver.pid):
            os.kill(pid, signal.SIGKILL)
        driver.kill()
        driver.wait()


def test_vxlan_guard_rules_name_the_servers_and_the_runs_vnis() -> None:
    from emulation.cluster import vxguard
    text = vxguard.ruleset("mrc_vxgate_01234567", ["10.251.0.2", "10.251.0.1"], [70000, 5, 5])
    assert "type filter hook input priority -300;" in text
    ours = "udp dport 4789 @th,96,24 { 5, 70000 }"
    assert f"{ours} ip saddr {{ 10.251.0.1, 10.251.0.2 }} accept" in text
    assert f"{ours} counter drop" in text and text.count("drop") == 1
    for bad in (("mrc_shield_01234567", ["10.0.0.1"], [5]), ("mrc_vxgate_01234567", [], [5]),
                ("mrc_vxgate_01234567", ["10.0.0.1"], [1 << 24]),
                ("mrc_vxgate_01234567", ["10.0.0.1\"; flush ruleset"], [5])):
        with pytest.raises(ValueError):
            vxguard.ruleset(*bad)


def test_only_the_clusters_servers_reach_a_runs_tunnel(servers: EmulatedServers) -> None:
    """A run's guard on each server; a datagram with the tunnel's VNI from an address on the
    underlay that is not a server never reaches the tunnel's device, the same from the other
    server does; once the run closes, neither server has a table of it left."""
    a, b = ServerNode(servers, 0), ServerNode(servers, 1)
    vni, mac_b = VniAllocator().next(), "02:00:00:00:7e:02"
    bridge_addr = f"{OUTSIDER}/{UNDERLAY_PREFIXLEN}"
    driver = None
    try:
        for i in (0, 1):  # an interface for the port guard to hook
            servers.run(i, ["ip", "link", "add", "mrcx-pa", "type", "veth", "peer", "name",
                            "mrcx-pb"], check=True)
        driver = servers.popen(0, ["env", f"PYTHONPATH={REPO}", str(REPO / ".venv/bin/python"),
                                   "-c", GUARD_DRIVER, str(servers.ssh_config_path),
                                   a.serverIP, b.serverIP, str(vni), "mrcx-pa"],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                               cwd=str(REPO))
        assert driver.stdout is not None and driver.stdin is not None
        ready = driver.stdout.readline()
        assert ready.startswith("READY "), ready
        local = json.loads(ready[len("READY "):])
        assert local["recorded"] == local["local"] and len(local["local"]) == 2
        tables = [nft_tables(servers, i) for i in (0, 1)]
        assert all("table inet mrc_vxgate_" in t and "table netdev mrc_ports_" in t
                   for t in tables), tables
        guard = next(w for w in tables[1].split() if w.startswith("mrc_vxgate_"))
        make_end(a, b, vni, "mrcx-ga", "02:00:00:00:7e:01", DEFAULT_UNDERLAY_MTU)
        make_end(b, a, vni, "mrcx-gb", mac_b, DEFAULT_UNDERLAY_MTU)
        subprocess.run(["ip", "-n", servers.underlay, "addr", "add", bridge_addr, "dev",
                        servers.bridge], check=True)
        sniff = servers.popen(1, ["python3", "-c", SNIFF, "mrcx-gb", "3", "from-outsider",
                                  "from-server"], stdout=subprocess.PIPE, text=True)
        assert sniff.stdout is not None and sniff.stdout.readline().strip() == "ready"
        send_vxlan(servers, None, OUTSIDER, b.serverIP,
                   vxlan_datagram(vni, mac_b, "from-outsider"), 3)
        wait_until(lambda: guard_dropped(servers, 1, guard) >= 3, "the outsider's three dropped")
        send_vxlan(servers, 0, a.serverIP, b.serverIP,
                   vxlan_datagram(vni, mac_b, "from-server"), 3)
        seen = json.loads(sniff.communicate(timeout=30)[0])
        assert seen == {"from-outsider": 0, "from-server": 3}, seen
        driver.stdin.write("close\n")
        driver.stdin.flush()
        closed = driver.stdout.readline()
        assert closed.startswith("CLOSED "), closed
        assert driver.wait(timeout=30) == 0
        assert json.loads(closed[len("CLOSED "):])["srv1"]["released"] is True
        for i in (0, 1):
            assert "mrc_vxgate_" not in nft_tables(servers, i)
            assert "mrc_ports_" not in nft_tables(servers, i)
    finally:
        stop_driver(driver)
        for i in (0, 1):  # what a failed driver left (the servers' own namespaces)
            for table in re.findall(r"table (inet mrc_vxgate_\w+|netdev mrc_ports_\w+)",
                                    nft_tables(servers, i)):
                servers.run(i, ["nft", "delete", "table", *table.split()], capture_output=True)
        subprocess.run(["ip", "-n", servers.underlay, "addr", "del", bridge_addr, "dev",
                        servers.bridge], capture_output=True)
        for i, end in ((0, "mrcx-ga"), (1, "mrcx-gb"), (0, "mrcx-pa"), (1, "mrcx-pa")):
            servers.run(i, ["ip", "link", "del", end], capture_output=True)
    assert "mrcx-" not in links(servers, 0) + links(servers, 1)
