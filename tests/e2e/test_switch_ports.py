"""A switch's ports carry nothing into the root namespace's IPv4 stack (issue 54): an IPv4
datagram a host sends into its NIC (broadcast, from 0.0.0.0 as DHCP's or from an address)
never reaches a listener on 0.0.0.0 in the root namespace, the run's port guard
(safety.portguard) says it dropped them, and the guard is gone once the fabric stops.
Before, the switch ports took IPv4 with rp_filter 0 and the listener got every one of them."""

from __future__ import annotations

import re
import secrets
import socket
import subprocess
import sys

import pytest

from emulation.network import MrcNetwork, NetworkConfig
from fabric.topology import Fabric
from safety import portguard
from tests.e2e.support import skip_reason
from tests.support import wait_until

FABRIC = Fabric(1, 1, 1, 1)  # one host, one T0, one T1: the smallest fabric
pytestmark = [pytest.mark.slow, pytest.mark.root, pytest.mark.timeout(120),
              pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or "")]
SEND = """\
import socket, sys
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((sys.argv[1], 0))
for frame in sys.argv[2:]:
    s.send(bytes.fromhex(frame))
"""


def ipv4_broadcast(src: str, port: int, marker: bytes) -> bytes:
    """An Ethernet frame with a UDP datagram from `src` to 255.255.255.255:port."""
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether
    return bytes(Ether(src="02:00:00:00:54:01", dst="ff:ff:ff:ff:ff:ff")
                 / IP(src=src, dst="255.255.255.255") / UDP(sport=54054, dport=port) / marker)


def received(listener: socket.socket, marker: bytes) -> list[bytes]:
    """Every datagram carrying `marker` that is waiting on `listener`."""
    out = []
    while True:
        try:
            data = listener.recv(2048)
        except BlockingIOError:
            return out
        if marker in data:
            out.append(data)


def port_guard_tables() -> list[str]:
    listed = subprocess.run(["nft", "list", "tables", "netdev"], capture_output=True,
                            text=True).stdout
    return re.findall(rf"\b{portguard.TABLE_PREFIX}[0-9a-f]{{8}}\b", listed)


def test_a_host_reaches_no_ipv4_listener_of_the_root_namespace() -> None:
    before = port_guard_tables()
    marker = f"mrc-port-probe-{secrets.token_hex(4)}".encode()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as listener, \
            MrcNetwork(NetworkConfig(fabric=FABRIC, target="soft", agents=False),
                       log=lambda *_: None) as net:
        listener.bind(("0.0.0.0", 0))  # a root-namespace service on every address
        listener.setblocking(False)
        net.start()
        tables = [t for t in port_guard_tables() if t not in before]
        assert len(tables) == 1, tables
        host = net.host(0)
        frames = [ipv4_broadcast(src, listener.getsockname()[1], marker).hex()
                  for src in ("0.0.0.0", "10.54.0.1")]
        sent = subprocess.run(["nsenter", "-t", str(host.pid), "-n", sys.executable, "-c",
                               SEND, f"{host.name}-eth0", *frames], capture_output=True,
                              text=True, timeout=30)
        assert sent.returncode == 0, sent.stderr
        wait_until(lambda: portguard.dropped(tables[0]) >= 2, "the guard dropping both")
        assert received(listener, marker) == []
    assert port_guard_tables() == before  # removed with the ports


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v"]))
