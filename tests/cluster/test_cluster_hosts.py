"""Mininet hosts on two emulated servers (emulation.cluster.clusternodes), joined by a VXLAN link
(emulation.cluster.vxlan), built from inside server 0 as the cluster's first server does: the remote
host's shell runs on server 1, a datagram crosses the link, and a stop leaves no interface or
shell on either server."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from tests.cluster.servers import EmulatedServers

pytestmark = pytest.mark.root
SERVERS = 2
REPO = Path(__file__).resolve().parents[2]

DRIVER = """\
import faulthandler, json, sys
faulthandler.dump_traceback_later(90, exit=True)  # a hang says where, before the test's limit
from pathlib import Path
from mininet.log import setLogLevel
from mininet.net import Mininet
from emulation.cluster.cluster import Cluster, Server
from emulation.cluster.clusternodes import remote_classes
from emulation.cluster.vxlan import VniAllocator, vxlan_link_class
setLogLevel("warning")
cluster = Cluster((Server("srv0", "10.251.0.1"), Server("srv1", "10.251.0.2")),
                  ssh_config=Path(sys.argv[1]))
host = remote_classes(cluster)["host"]
net = Mininet(topo=None, controller=None, build=False, autoSetMacs=False,
              waitConnected=False, link=vxlan_link_class(VniAllocator(), cluster.underlay_mtu))
h1 = net.addHost("h1", cls=host, server="srv0", ip="10.9.0.1/24")
h2 = net.addHost("h2", cls=host, server="srv1", ip="10.9.0.2/24")
net.addLink(h1, h2)
out = {}
try:
    net.build()
    out["h1_server"] = h1.cmd("hostname").strip()
    out["h2_server"] = h2.cmd("hostname").strip()
    out["h2_link"] = h2.cmd("ip -d -o link show h2-eth0")
    sink = h2.popen([sys.executable, "-c", sys.argv[2], "10.9.0.2"])
    import time; time.sleep(1.0)
    out["send"] = h1.popen([sys.executable, "-c", sys.argv[3]]).communicate(timeout=15)[0]
    out["send"] = out["send"].decode().strip()
    out["received"] = sink.communicate(timeout=15)[0].decode().strip()
finally:
    net.stop()
print("RESULT " + json.dumps(out), flush=True)
"""
SINK = """\
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((sys.argv[1], 7777))
s.settimeout(10)
print(s.recv(100).decode(), flush=True)
"""
SEND = """\
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for _ in range(20):
    s.sendto(b"across servers", ("10.9.0.2", 7777))
print("sent")
"""


def state(servers: EmulatedServers, i: int) -> str:
    links = servers.run(i, ["ip", "-o", "link"], capture_output=True, text=True).stdout
    procs = servers.run(i, ["ps", "-eo", "args"], capture_output=True, text=True).stdout
    return links + procs


def _ignore_hangup() -> None:
    signal.signal(signal.SIGHUP, signal.SIG_IGN)


@pytest.mark.parametrize("hangup", ["default", "ignored"])
def test_hosts_on_two_servers_talk_over_vxlan_and_leave_nothing(
        servers: EmulatedServers, hangup: str) -> None:
    """`ignored`: started as a CI runner starts us, SIGHUP ignored and inherited by our ssh
    clients; Mininet's stop used to wait forever for the remote host's ssh to exit."""
    done = servers.run(0, ["env", f"PYTHONPATH={REPO}", str(REPO / ".venv/bin/python"), "-c",
                           DRIVER, str(servers.ssh_config_path), SINK, SEND],
                       capture_output=True, text=True, timeout=120,
                       preexec_fn=_ignore_hangup if hangup == "ignored" else None)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    assert done.returncode == 0 and lines, (done.stdout[-2000:], done.stderr[-3000:])
    out = json.loads(lines[-1][len("RESULT "):])
    assert (out["h1_server"], out["h2_server"]) == ("srv0", "srv1")
    assert "vxlan id" in out["h2_link"], out["h2_link"]
    assert out["received"] == "across servers", out
    for i in (0, 1):
        left = state(servers, i)
        assert "h1-eth0" not in left and "h2-eth0" not in left and "mrcvx" not in left, left
        assert "mininet:h" not in left, left
