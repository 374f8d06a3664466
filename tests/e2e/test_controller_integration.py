"""The controller against real switch processes (P4Runtime only, no data ports).

Target "soft" runs `python -m softswitch`; target "bmv2" runs simple_switch_grpc and is skipped
where BMv2/p4c are not installed. The switches listen on free loopback ports instead of the
topology's GRPC_BASE_PORT + id so these tests never collide with a fabric someone else is running;
every process is stopped by its PID.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from controller.convergence import Convergence
from controller.install import Controller, InstallError, SwitchSession
from controller.shell import SHELL_ELECTION_ID, check_pipeline
from fabric.topology import Fabric
from p4rt import names as p4names
from p4rt.entities import Group
from safety.procs import stop_process
from tests.support import require_bmv2

REPO = Path(__file__).resolve().parents[2]

FABRIC = Fabric(planes=1, t0_per_plane=2, t1_per_plane=2, hosts_per_t0=1)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Switches:
    """softswitch processes keyed by switch name; restart keeps the address."""

    def __init__(self, fabric: Fabric, target: str) -> None:
        self.fabric, self.target = fabric, target
        self.addresses = {s.name: f"127.0.0.1:{free_port()}" for s in fabric.switches}
        self.procs: dict[str, subprocess.Popen] = {}

    def start(self, name: str) -> None:
        switch = self.fabric.by_name[name]
        if self.target == "soft":
            cmd = [sys.executable, "-m", "softswitch", "--device-id", str(switch.device_id),
                   "--grpc-server-addr", self.addresses[name], "--log-level", "warn"]
        else:
            cmd = ["simple_switch_grpc", "--device-id", str(switch.device_id), "--no-p4",
                   "--thrift-port", str(free_port()), "--",
                   "--grpc-server-addr", self.addresses[name]]
        self.procs[name] = subprocess.Popen(
            cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        host, port = self.addresses[name].split(":")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            assert self.procs[name].poll() is None, f"softswitch {name} exited"
            try:
                socket.create_connection((host, int(port)), timeout=1).close()
                return
            except OSError:
                time.sleep(0.1)
        raise AssertionError(f"softswitch {name} did not listen on {self.addresses[name]}")

    def stop(self, name: str) -> None:
        stop_process(self.procs.pop(name), 5)


def skip_unless_available(target: str) -> None:
    """BMv2 may be missing on a user's machine; the software switch is part of this tree."""
    if target == "bmv2":
        require_bmv2(("simple_switch_grpc", "p4c-bm2-ss"))


@pytest.fixture(params=["soft", pytest.param("bmv2", marks=pytest.mark.bmv2)])
def switches(request: pytest.FixtureRequest) -> Iterator[Switches]:
    skip_unless_available(request.param)
    sw = Switches(FABRIC, request.param)
    try:
        for s in FABRIC.switches:
            sw.start(s.name)
        yield sw
    finally:
        for name in list(sw.procs):
            sw.stop(name)


@pytest.fixture
def controller(switches: Switches) -> Iterator[Controller]:
    ctl = Controller(FABRIC, switches.target, timeout=10.0, addresses=switches.addresses)
    try:
        results = ctl.install_all()
        assert [r.error for r in results] == [""] * len(results)
        yield ctl
    finally:
        ctl.close()


def test_install_read_back_restart_reinstall(switches: Switches, controller: Controller) -> None:
    for name in controller.current:
        assert controller.verify(name) == ""
        assert controller.read(name) == set(controller.current[name].entities())
    assert controller.install("p0l0").ok  # a live switch: same session, same tables
    assert controller.verify("p0l0") == ""
    switches.stop("p0s1")
    assert "p0s1" in controller.verify("p0s1")  # the read fails, named by switch
    switches.start("p0s1")
    result = controller.install("p0s1")
    assert result.ok, result.error
    assert controller.read("p0s1") == set(controller.current["p0s1"].entities())


def test_backup_client_cannot_take_over(switches: Switches, controller: Controller) -> None:
    switch = FABRIC.by_name["p0l0"]
    with pytest.raises(InstallError, match="not primary"):
        SwitchSession(switch, switches.addresses["p0l0"], 5.0, SHELL_ELECTION_ID)
    assert check_pipeline(switches.addresses["p0l0"], switch.device_id) == ""
    assert controller.verify("p0l0") == ""


def test_dead_switch_reported_by_name(switches: Switches) -> None:
    switches.stop("p0l1")
    ctl = Controller(FABRIC, switches.target, timeout=3.0, addresses=switches.addresses)
    try:
        results = {r.name: r for r in ctl.install_all()}
    finally:
        ctl.close()
    assert not results["p0l1"].ok
    assert results["p0l1"].error.startswith("p0l1: no P4Runtime server")
    assert all(r.ok for name, r in results.items() if name != "p0l1")


def groups_on(controller: Controller, name: str) -> dict[int, tuple[int, ...]]:
    return {e.group_id: e.member_ids for e in controller.read(name) if isinstance(e, Group)}


def test_convergence_removes_dead_member_after_delay(controller: Controller) -> None:
    delay = 2.0
    conv = Convergence(FABRIC, controller, delay=delay)
    both = (FABRIC.uplink_port(0), FABRIC.uplink_port(1))
    assert groups_on(controller, "p0l0") == {2: both}
    started = time.monotonic()
    conv.link_down("p0l0", "p0s0")
    before = groups_on(controller, "p0l0")
    checked_at = time.monotonic() - started
    if checked_at < delay / 2:  # only meaningful when the machine was not stalled
        assert before == {2: both}
    time.sleep(delay + 2.0)
    assert groups_on(controller, "p0l0") == {2: (FABRIC.uplink_port(1),)}
    assert groups_on(controller, "p0l1") == {1: (FABRIC.uplink_port(1),)}
    conv.link_up("p0l0", "p0s0")
    time.sleep(delay + 2.0)
    assert groups_on(controller, "p0l0") == {2: both}
    assert all(controller.verify(name) == "" for name in controller.current)
    assert [a.errors for a in conv.history] == [(), ()]


def test_shell_reads_a_live_switch(switches: Switches, controller: Controller) -> None:
    """`python -m controller shell` (p4runtime-sh as a backup client) against a live switch,
    driven through its stdin: it reads the tables the controller installed and cannot write."""
    name = "p0l0"
    entries = len([e for e in controller.current[name].entities()
                   if getattr(e, "table", None) == p4names.MY_USID_TABLE])
    script = (f"print('usid entries', len(list(table_entry['{p4names.MY_USID_TABLE}'].read())))\n"
              f"te = table_entry['{p4names.MY_USID_TABLE}'](action='{p4names.SHIFT_USID}')\n"
              "te.match['usid_prefix'] = '0xfcbbbbbb0fff'\n"
              "te.insert()\n")
    dims = (FABRIC.planes, FABRIC.t0_per_plane, FABRIC.t1_per_plane, FABRIC.hosts_per_t0)
    code = ("import sys; from controller.shell import run; from fabric.topology import Fabric;"
            f" sys.exit(run(Fabric{dims}, {name!r}, {switches.addresses[name]!r}))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, input=script,
                          capture_output=True, text=True, timeout=120)
    out = proc.stdout + proc.stderr
    assert f"usid entries {entries}" in out, out[-3000:]
    assert "not the primary client" in out or "PERMISSION_DENIED" in out, out[-3000:]
    assert controller.verify(name) == ""  # the shell changed nothing
