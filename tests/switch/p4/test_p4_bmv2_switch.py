"""Bmv2Switch: command line and argument checks everywhere; a real start/stop in Mininet
where simple_switch_grpc exists and we are root."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

import pytest

from emulation.network import acquire_fabric_lock
from fabric.topology import GRPC_BASE_PORT, THRIFT_BASE_PORT, Fabric
from nodes import bmv2_switch
from nodes.bmv2_switch import (
    Bmv2Error,
    Bmv2Switch,
    bmv2_command,
    runtime_cli,
    runtime_cli_argv,
)
from p4rt.names import PRIORITY_QUEUES
from tests.support import require_bmv2, require_root


@pytest.fixture
def fabric_lock():
    """These tests use the fabric's switch names: wait for any running fabric, as it does."""
    fd = acquire_fabric_lock(600.0, log=lambda *_: None)
    try:
        yield
    finally:
        os.close(fd)


def test_command_line() -> None:
    cmd = bmv2_command(3, {2: "p0l0-eth2", 1: "p0l0-eth1"}, 50003, 9093)
    assert cmd[0] == "simple_switch_grpc"
    assert cmd[cmd.index("--device-id") + 1] == "3"
    assert cmd[cmd.index("--thrift-port") + 1] == "9093"
    assert [cmd[i + 1] for i, a in enumerate(cmd) if a == "-i"] == ["1@p0l0-eth1", "2@p0l0-eth2"]
    assert "--no-p4" in cmd
    target = cmd[cmd.index("--") + 1:]  # target options follow "--"
    assert target == ["--grpc-server-addr", "127.0.0.1:50003",
                      "--priority-queues", str(PRIORITY_QUEUES)]


@pytest.mark.parametrize("kwargs,message", [
    ({"device_id": 0}, "device_id"),
    ({"grpc_port": 70000}, "grpc_port"),
    ({"thrift_port": 0}, "thrift_port"),
    ({"priority_queues": 1}, "priority_queues"),
    ({"priority_queues": 9}, "priority_queues"),
])
def test_invalid_configuration_is_rejected(kwargs: dict, message: str) -> None:
    args = {"device_id": 1, "ports": {}, "grpc_port": 50001, "thrift_port": 9091, **kwargs}
    with pytest.raises(ValueError, match=message):
        bmv2_command(**args)


@pytest.mark.root
def test_node_can_be_created_in_mininet(fabric_lock) -> None:
    """Creating the node needs no BMv2; Mininet itself sets `pid` (its shell) on every node."""
    if os.geteuid() != 0:
        pytest.skip("Mininet needs root")
    from mininet.net import Mininet

    sw = Fabric().switches[0]
    net = Mininet(controller=None, build=False, autoSetMacs=False)
    try:
        s = net.addSwitch(sw.name, cls=Bmv2Switch, device_id=sw.device_id)
        assert s.switch_pid is None  # no switch process before start()
        assert s.grpc_address == f"127.0.0.1:{GRPC_BASE_PORT + sw.device_id}"
    finally:
        net.stop()


@pytest.mark.bmv2
@pytest.mark.root
def test_start_stop_in_mininet(fabric_lock) -> None:
    require_bmv2(("simple_switch_grpc", "simple_switch_CLI"))
    require_root("Mininet")
    from mininet.net import Mininet

    sw = Fabric().switches[0]
    net = Mininet(controller=None, build=False, autoSetMacs=False)
    try:
        s = net.addSwitch(sw.name, cls=Bmv2Switch, device_id=sw.device_id)
        h = net.addHost("h0")
        net.addLink(h, s, port2=1)
        net.build()
        net.start()
        assert s.grpc_address == f"127.0.0.1:{GRPC_BASE_PORT + sw.device_id}"
        assert s.thrift_port == THRIFT_BASE_PORT + sw.device_id
        pid = s.switch_pid
        assert pid is not None and os.path.exists(f"/proc/{pid}")
        s.set_queue_depth(64)
        s.set_queue_rate(1000, port=1)
        with socket.create_connection(("127.0.0.1", s.grpc_port), timeout=2):
            pass
    finally:
        net.stop()
    cmdline = Path(f"/proc/{pid}/cmdline")
    assert not cmdline.exists() or b"simple_switch" not in cmdline.read_bytes()


def test_runtime_cli_runs_with_an_interpreter_that_has_thrift(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch):
    """A CLI script starting with `#!/usr/bin/env python3` must not run with whatever python3
    is first on PATH (a pyenv one lacks thrift): we start it with a thrift-capable one."""
    script = tmp_path / "simple_switch_CLI"
    script.write_text("#!/usr/bin/env python3\nimport sys, thrift\n"
                      "print('cli ok', sys.executable, ' '.join(sys.argv[1:]), sys.stdin.read())\n")
    script.chmod(0o755)
    decoy = tmp_path / "python3"  # first on PATH, cannot run anything
    decoy.write_text("#!/bin/sh\necho 'wrong interpreter' >&2\nexit 3\n")
    decoy.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    runtime_cli_argv.cache_clear()
    try:
        if not any(bmv2_switch._has_thrift(p) for p in (sys.executable,
                                                        bmv2_switch.SYSTEM_PYTHON)):
            with pytest.raises(Bmv2Error, match="needs the Python module 'thrift'"):
                runtime_cli_argv()
            return
        out = runtime_cli(9999, ["set_queue_rate 500"])
    finally:
        runtime_cli_argv.cache_clear()
    assert "cli ok" in out and "--thrift-port 9999" in out and "set_queue_rate 500" in out
    assert str(decoy) not in out
