"""The switches obey only their run's controller, on both targets: from another network
namespace (another host) and as an unprivileged local user, reaching Thrift, P4Runtime or the
software switch's runtime port of a running fabric changes nothing. Root without the run's
keys gets no further (P4Runtime wants the run's client certificate, the runtime port its
token). Before (bcb78cb) BMv2's Thrift port answered on every address and both ports on
loopback answered every local user. A local user listening first on a switch's default
ports does not stop the fabric: the run moves that switch (safety.runports)."""

from __future__ import annotations

import os
import subprocess
import sys

import grpc
import pytest
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

from emulation.network import MrcNetwork, NetworkConfig
from fabric.topology import Fabric
from p4rt import tls
from safety import shield
from softswitch.cli import ControlError, request
from tests.e2e.support import skip_reason
from tests.support import require_bmv2

FABRIC = Fabric(2, 2, 2, 1)
NOBODY = 65534
PROBE = ("import socket, sys\ns = socket.socket(socket.AF_INET6 if ':' in sys.argv[1] "
         "else socket.AF_INET)\ns.settimeout(1.5)\nprint(s.connect_ex((sys.argv[1], "
         "int(sys.argv[2]))))")
pytestmark = [pytest.mark.slow, pytest.mark.root, pytest.mark.timeout(600),
              pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or "")]


def connects(prefix: list[str], address: str, port: int) -> bool:
    """Whether a TCP connection from `prefix` (a namespace, a user) to address:port opens."""
    out = subprocess.run([*prefix, "/usr/bin/python3", "-c", PROBE, address, str(port)],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip() == "0"


@pytest.fixture
def other_host():
    """A network namespace linked to the root namespace by a veth: another host."""
    tag = f"mrcp{os.getpid() % 100000}"
    ns, near, far = tag, f"{tag}a", f"{tag}b"
    steps = [["ip", "netns", "add", ns],
             ["ip", "link", "add", near, "type", "veth", "peer", "name", far],
             ["ip", "link", "set", far, "netns", ns],
             ["ip", "addr", "add", "10.213.7.1/30", "dev", near], ["ip", "link", "set", near, "up"],
             ["ip", "-n", ns, "addr", "add", "10.213.7.2/30", "dev", far],
             ["ip", "-n", ns, "link", "set", far, "up"]]
    try:
        for step in steps:
            subprocess.run(step, check=True, capture_output=True)
        yield ["ip", "netns", "exec", ns], "10.213.7.1"
    finally:
        subprocess.run(["ip", "link", "del", near], capture_output=True, check=False)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)


@pytest.fixture(params=["soft", pytest.param("bmv2", marks=pytest.mark.bmv2)])
def fabric(request):
    if request.param == "bmv2":
        require_bmv2()
    with MrcNetwork(NetworkConfig(fabric=FABRIC, target=request.param),
                    log=lambda *_: None) as net:
        net.start()
        yield net


def untouched(net: MrcNetwork) -> None:
    assert [net.controller.verify(sw.name) for sw in FABRIC.switches] == \
        [""] * len(FABRIC.switches)


def test_nothing_outside_reaches_a_control_port(fabric: MrcNetwork, other_host) -> None:
    ns, address = other_host
    sw = fabric.ports[FABRIC.switches[0].name]  # the run's ports (safety.runports)
    assert connects([], "127.0.0.1", sw.thrift)  # root on this machine: yes
    before = shield.dropped(fabric.shield_table)
    for port in (sw.thrift, sw.grpc):
        assert not connects(ns, address, port), f"port {port} reachable from another host"
        assert not connects(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}",
                             "--clear-groups"], "127.0.0.1", port), \
            f"port {port} reachable by a local user"
    assert shield.dropped(fabric.shield_table) > before  # dropped by the shield, not by chance
    unreadable = subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}",
                                 "--clear-groups", "cat",
                                 str(fabric.credentials.directory / tls.CLIENT_KEY)],
                                capture_output=True, text=True)
    assert unreadable.returncode != 0 and "Permission denied" in unreadable.stderr
    untouched(fabric)


def test_root_without_the_runs_keys_gets_nowhere(fabric: MrcNetwork) -> None:
    sw = fabric.ports[FABRIC.switches[0].name]
    for creds in (None, tls.ClientTls(fabric.credentials.client.ca, b"", b"")):
        channel = tls.channel(sw.grpc_address, creds) if creds is None else \
            grpc.secure_channel(sw.grpc_address, grpc.ssl_channel_credentials(creds.ca))
        stub = p4runtime_pb2_grpc.P4RuntimeStub(channel)
        with pytest.raises(grpc.RpcError) as refused:
            stub.Capabilities(p4runtime_pb2.CapabilitiesRequest(), timeout=3)
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        channel.close()
    if fabric.target == "soft":
        token = fabric.credentials.control_token
        before = request(sw.thrift, {"cmd": "queues"}, token=token)["queues"]
        for wrong in (None, "0" * 64):
            with pytest.raises(ControlError, match="control token"):
                request(sw.thrift, {"cmd": "set_queue_rate", "rate": 1}, token=wrong)
        assert request(sw.thrift, {"cmd": "queues"}, token=token)["queues"] == before
    untouched(fabric)


# ---- a local user on the default ports before the run (issue 54) ------------------------

SMALL = Fabric(1, 1, 1, 1)  # two switches
AS_NOBODY = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
# Listens on every port of argv and reports each connection and each chunk it receives on
# stdout, flushed line by line, so what it saw survives its SIGKILL.
SQUAT = """
import selectors, socket, sys
sel = selectors.DefaultSelector()
for port in map(int, sys.argv[1:]):
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", port))
    srv.listen(16)
    sel.register(srv, selectors.EVENT_READ, port)
print("listening", flush=True)
while True:
    for key, _ in sel.select():
        if isinstance(key.data, int):
            conn, _ = key.fileobj.accept()
            print("connection to", key.data, flush=True)
            sel.register(conn, selectors.EVENT_READ, ("from", key.data))
        elif data := key.fileobj.recv(65536):
            print("bytes", len(data), "to", key.data[1], flush=True)
        else:
            sel.unregister(key.fileobj)
            key.fileobj.close()
"""


@pytest.mark.parametrize("target", ["soft", pytest.param("bmv2", marks=pytest.mark.bmv2)])
def test_a_local_user_on_the_default_ports_does_not_stop_the_fabric(target: str) -> None:
    """nobody listens first on a switch's default P4Runtime and runtime ports: the run moves
    that switch to free ports and says so, the fabric comes up and is programmed, and the
    squatter never hears from it. Before, the switch could not bind (the software switch
    exited, BMv2 gave up after 30 s) and the readiness probe connected to the squatter."""
    if target == "bmv2":
        require_bmv2()
    sw = SMALL.switches[0]
    logs: list[str] = []
    squatter = subprocess.Popen([*AS_NOBODY, "/usr/bin/python3", "-c", SQUAT,
                                 str(sw.grpc_port), str(sw.thrift_port)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert squatter.stdout is not None and squatter.stderr is not None
        assert squatter.stdout.readline().strip() == "listening", squatter.stderr.read()
        with MrcNetwork(NetworkConfig(fabric=SMALL, target=target, agents=False),
                        log=logs.append) as net:
            net.start()
            moved = net.ports[sw.name]
            assert moved.grpc != sw.grpc_port and moved.thrift != sw.thrift_port
            for port, new in ((sw.grpc_port, moved.grpc), (sw.thrift_port, moved.thrift)):
                assert any(f"port {port} is listened on by uid {NOBODY}" in line
                           and f"uses port {new} instead" in line for line in logs), logs
            assert [net.controller.verify(s.name) for s in SMALL.switches] == ["", ""]
            assert net.credentials is not None  # the controller CLI's --tls-dir finds them:
            assert tls.load_addresses(net.credentials.directory) == net.ports.addresses()
            covered = shield.nft_run(["list", "table", "inet", net.shield_table]).stdout
            assert str(moved.grpc) in covered and str(moved.thrift) in covered
    finally:
        squatter.kill()  # by its PID (setpriv exec'd python3 in place)
        heard = squatter.communicate(timeout=10)[0]
    assert "connection" not in heard and "bytes" not in heard, heard


@pytest.mark.bmv2
def test_a_local_user_on_a_rebooting_switchs_ports_does_not_keep_it_down() -> None:
    """BMv2's reboot is a fresh process, so its ports are free for a moment: nobody listens
    on both then. The switch comes back on free ports (said in the log, shielded, written
    beside the keys), the controller programs it there, and the squatter hears nothing.
    Before, the readiness probe refused the squatter and the reboot failed."""
    require_bmv2()
    sw = SMALL.switches[0]
    logs: list[str] = []
    squatters: list[subprocess.Popen] = []
    with MrcNetwork(NetworkConfig(fabric=SMALL, target="bmv2", agents=False),
                    log=logs.append) as net:
        net.start()
        node, old = net.net[sw.name], net.ports[sw.name]
        real_stop = node.stop

        def stop_then_squat(*args, **kwargs) -> None:
            real_stop(*args, **kwargs)  # the old process is gone: its ports are free
            squatters.append(subprocess.Popen(
                [*AS_NOBODY, "/usr/bin/python3", "-c", SQUAT, str(old.grpc), str(old.thrift)],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
            assert squatters[0].stdout is not None and squatters[0].stderr is not None
            line = squatters[0].stdout.readline().strip()
            assert line == "listening", squatters[0].stderr.read()

        node.stop = stop_then_squat
        try:
            net.reboot_switch(sw.name)
            moved = net.ports[sw.name]
            assert moved.grpc != old.grpc and moved.thrift != old.thrift
            for port, new in ((old.grpc, moved.grpc), (old.thrift, moved.thrift)):
                assert any(f"port {port} is listened on by uid {NOBODY}" in line
                           and f"uses port {new} instead" in line for line in logs), logs
            assert (node.grpc_port, node.thrift_port) == (moved.grpc, moved.thrift)
            assert [net.controller.verify(s.name) for s in SMALL.switches] == ["", ""]
            assert net.credentials is not None
            assert tls.load_addresses(net.credentials.directory) == net.ports.addresses()
            covered = shield.nft_run(["list", "table", "inet", net.shield_table]).stdout
            assert str(moved.grpc) in covered and str(moved.thrift) in covered
        finally:
            node.stop = real_stop
            for squatter in squatters:
                squatter.kill()  # by its PID (setpriv exec'd python3 in place)
    assert squatters, "the reboot never stopped the switch"
    heard = squatters[0].communicate(timeout=10)[0]
    assert "connection" not in heard and "bytes" not in heard, heard


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v"]))
