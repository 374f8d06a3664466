"""A run's switch ports (safety.runports) and the readiness probe (safety.listeners).

A local user listening first on a switch's default port (issue 54) stopped every fabric:
the run now replaces a port in use by a free one and says who holds it, and a switch is
ready only when the listening sockets are its own process's (matched by inode in /proc), so
a listener someone else put on the port is refused instead of trusted."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest

from emulation.mrctopo import MrcTopo
from fabric.topology import EPHEMERAL_PORT_START, Fabric
from nodes.p4switch import P4RuntimeSwitch, SwitchProcessError, await_listening
from p4rt import tls
from safety import listeners
from safety.runports import PortPlan, SwitchPorts, assign, move

FABRIC = Fabric(1, 1, 1, 1)
NOBODY = 65534


def hold(port: int) -> socket.socket:
    """This process listens on `port` (skips the test if someone else on the machine does)."""
    try:
        return socket.create_server(("127.0.0.1", port))  # SO_REUSEADDR: TIME_WAIT is no bar
    except OSError:
        pytest.skip(f"port {port} is in use on this machine already")


def test_a_port_in_use_is_replaced_and_the_holder_named() -> None:
    sw = FABRIC.switches[1]
    logs: list[str] = []
    with hold(sw.grpc_port):
        plan = assign(FABRIC, logs.append)
    new = plan[sw.name].grpc
    defaults = PortPlan.defaults(FABRIC).all()
    assert new != sw.grpc_port and new not in defaults and new < EPHEMERAL_PORT_START
    assert logs == [f"{sw.name}'s P4Runtime port {sw.grpc_port} is listened on by "
                    f"{listeners.describe_uid(os.getuid())}: {sw.name} uses port {new} instead"]
    assert plan[sw.name].thrift == sw.thrift_port
    assert len(set(plan.all())) == len(plan.all())  # no port given twice


def test_a_switch_moves_off_a_port_taken_while_it_was_down() -> None:
    """A rebooting switch's process freed its ports and a stranger took one: `move` gives
    that switch free ports no other switch of the plan has, and leaves the others alone."""
    plan = PortPlan.defaults(FABRIC)
    sw, other = FABRIC.switches
    logs: list[str] = []
    with hold(sw.thrift_port):
        moved = move(plan, sw.name, FABRIC, logs.append)
    new = moved[sw.name].thrift
    assert new not in plan.all() and new < EPHEMERAL_PORT_START
    assert moved[sw.name].grpc == sw.grpc_port and moved[other.name] == plan[other.name]
    assert logs == [f"{sw.name}'s runtime port {sw.thrift_port} is listened on by "
                    f"{listeners.describe_uid(os.getuid())}: {sw.name} uses port {new} instead"]
    assert move(moved, sw.name, FABRIC, logs.append) == moved  # nothing held: nothing moves
    assert plan == PortPlan.defaults(FABRIC)  # plans are values


def test_a_port_bound_without_listening_is_in_use_too() -> None:
    with socket.socket() as bound:
        bound.bind(("127.0.0.1", 0))
        port = bound.getsockname()[1]
        held = listeners.holder(port, listeners.socket_table())
    assert held is not None and "holder unknown" in held
    assert listeners.holder(port, listeners.socket_table()) is None  # closed: free again


def test_the_plan_round_trips_and_is_what_the_nodes_get() -> None:
    plan = PortPlan({"p0l0": SwitchPorts(20900, 9900), "p0s0": SwitchPorts(20002, 9092)})
    assert PortPlan.from_json(plan.to_json()) == plan
    assert plan.addresses()["p0l0"] == "127.0.0.1:20900"
    info = MrcTopo(fabric=FABRIC, ports=plan).nodeInfo("p0l0")
    assert (info["grpc_port"], info["thrift_port"]) == (20900, 9900)
    assert MrcTopo(fabric=FABRIC).nodeInfo("p0s0")["grpc_port"] == FABRIC.switches[1].grpc_port
    for bad in ([], {"p0l0": [1]}, {"p0l0": [0, 9091]}, {"p0l0": ["20001", 9091]}):
        with pytest.raises(ValueError):
            PortPlan.from_json(bad)


def test_the_addresses_beside_the_keys_are_what_the_controller_cli_reads(tmp_path) -> None:
    plan = PortPlan({"p0l0": SwitchPorts(20900, 9900), "p0s0": SwitchPorts(20002, 9092)})
    assert tls.load_addresses(tmp_path) == {}  # keys of one's own: the fabric's defaults
    record = tmp_path / tls.ADDRESSES
    record.write_bytes(tls.addresses_file(plan.addresses()))
    record.chmod(0o644)
    with pytest.raises(tls.TlsError, match="mode 600"):  # as the keys: only a private file
        tls.load_addresses(tmp_path)
    record.chmod(0o600)
    assert tls.load_addresses(tmp_path) == {"p0l0": "127.0.0.1:20900",
                                            "p0s0": "127.0.0.1:20002"}


# ---- the readiness probe ------------------------------------------------------------------

LISTEN = """
import socket, sys, time
socks = [socket.create_server(("127.0.0.1", int(p))) for p in sys.argv[1:]]
print("listening", flush=True)
time.sleep(600)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Node:
    """What await_listening asks of a switch node, with P4RuntimeSwitch's own check."""
    log_path = None
    listening = P4RuntimeSwitch.listening

    def __init__(self, proc: subprocess.Popen, grpc_port: int, thrift_port: int) -> None:
        self.name, self.proc = "s1", proc
        self.grpc_port, self.thrift_port = grpc_port, thrift_port


@pytest.fixture
def listener() -> Iterator[tuple[subprocess.Popen, subprocess.Popen, list[int]]]:
    """(ours, nobody's, [our two ports, nobody's port]): two processes listening, each
    killed by its PID."""
    ports = [free_port() for _ in range(3)]
    started: list[subprocess.Popen] = []
    try:
        for prefix, mine in (([], ports[:2]), ([
                "setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"],
                ports[2:])):
            proc = subprocess.Popen([*prefix, sys.executable if not prefix else
                                     "/usr/bin/python3", "-c", LISTEN, *map(str, mine)],
                                    stdout=subprocess.PIPE, text=True)
            started.append(proc)
            assert proc.stdout is not None and proc.stdout.readline().strip() == "listening"
        yield started[0], started[1], ports
    finally:
        for proc in started:
            proc.kill()
            proc.communicate(timeout=10)


@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                    reason="needs root and setpriv (plays the user nobody)")
def test_the_readiness_probe_trusts_only_our_own_listener(listener) -> None:
    ours, _theirs, (a, b, squatted) = listener
    await_listening(ours, [Node(ours, a, b)], 10.0, "switch")  # its own sockets: ready
    with pytest.raises(SwitchProcessError,
                       match=rf"port {squatted} is listened on by a socket that is not our "
                             rf"switch process {ours.pid}'s \(uid {NOBODY}"):
        await_listening(ours, [Node(ours, squatted, a)], 10.0, "switch")
    assert not listeners.Snapshot().listens(free_port(), ours.pid)  # nobody yet: waits
