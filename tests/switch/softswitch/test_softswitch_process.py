"""One `python -m softswitch --switch ... --switch ...` process serving two switches.

Unit (no root): `--switch` parsing and the process's config checks refuse bad text with a
clear message; nodes.softswitch_node.group_command builds the argv of a group.
Live (root, veth pairs into namespaces): each switch has its own P4Runtime server, control
port, counters and tables and forwards on its own; a P4Runtime request for one switch's
device id is refused by the other's server; `detach` removes one switch (its ports closed)
while the other forwards on, and the process exits 0 when the last one leaves.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc
from p4runtime_sh.p4runtime import P4RuntimeClient

from nodes.softswitch_node import group_command
from p4rt import corpus
from p4rt.corpus import case_updates
from rigs.vethlab import VethLab, receive
from safety.procs import stop_process
from softswitch.__main__ import ConfigError, SwitchSpec, main, parse_switch
from softswitch.cli import ControlError, request
from tests.support import wait_until
from tests.switch.p4rt_support import CODEC, free_port, reset_pipeline, wait_listening

REPO = Path(__file__).resolve().parents[3]
A, B = 11, 12  # device ids of the two switches
SENT = 20  # frames a live test sends into one switch
CASES = corpus.load_cases() if corpus.CASES_PATH.exists() else []
NEEDS_ROOT = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ip") is None,
                                reason="needs root and iproute2")
NEEDS_CORPUS = pytest.mark.skipif(not CASES, reason="golden corpus tests/golden/cases.json "
                                                    "not present")


# ---- unit: command line -------------------------------------------------------------

def test_parse_switch_accepts_the_documented_shape() -> None:
    assert parse_switch("3:50003:9093:1@s3-eth1,2@s3-eth2") == SwitchSpec(
        3, "127.0.0.1:50003", 9093, {1: "s3-eth1", 2: "s3-eth2"})


@pytest.mark.parametrize(("text", "message"), [
    ("1:50001:1@eth1", "must look like DEVICE_ID:GRPC_PORT:CONTROL_PORT"),
    ("x:50001:9091:1@eth1", "must look like DEVICE_ID:GRPC_PORT:CONTROL_PORT"),
    ("1:50001:9091:eth1", "must look like PORT@IFNAME"),
    ("1:50001:9091:1@e1,1@e2", "same port number is given twice"),
    ("1:50001:70000:1@eth1", "control port 70000 not in 1..65535"),
])
def test_parse_switch_refuses_bad_text(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_switch(text)


@pytest.mark.parametrize(("argv", "message"), [
    (["--switch", "1:50001:9091:1@a", "--switch", "1:50002:9092:1@b"], "device id 1 is given"),
    (["--switch", "1:50001:9091:1@a", "--switch", "2:50001:9092:1@b"],
     "loopback port 50001 is given twice"),
    (["--switch", "1:50001:9091:1@a", "--switch", "2:50002:9091:1@b"], "loopback port 9091"),
    (["--switch", "1:50001:9091:1@a", "--switch", "2:9091:50001:1@b"], "loopback port"),
    (["--switch", "1:50001:9091:1@a", "--device-id", "5"], "either --switch .* not both"),
    (["--switch", "1:99999:9091:1@a"], "port in 1..65535"),
    (["-i", "1@a", "-i", "2@a"], "same interface is given twice"),
    (["--switch", "1:50001:9091:1@a", "--switch", "2:50002:9092:2@a"], "interface a is given"),
    (["--switch", "1:50001:9091:1@a", "-i", "2@b"], "either --switch .* not both"),
    (["--switch", "1:50001:9091:1@a", "--thrift-port", "9092"], "either --switch .* not both"),
    (["--switch", "1:50001:9091"], "must look like DEVICE_ID"),
])
def test_process_refuses_bad_switch_config(argv: list[str], message: str,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*argv, "--no-p4"]) == 2  # refused before any socket is opened
    err = capsys.readouterr().err
    assert err.startswith("softswitch: ") and "Traceback" not in err
    assert re.search(message, err), err


def test_group_command_for_two_switches() -> None:
    cmd = group_command({2: (50002, 9092, {2: "s2-eth2", 1: "s2-eth1"}),
                         1: (50001, 9091, {1: "s1-eth1"})}, priority_queues=2)
    assert cmd == [sys.executable, "-m", "softswitch",
                   "--switch", "1:50001:9091:1@s1-eth1",
                   "--switch", "2:50002:9092:1@s2-eth1,2@s2-eth2",
                   "--no-p4", "--priority-queues", "2", "--log-level", "warn"]
    with pytest.raises(ValueError, match="device_id"):
        group_command({0: (50001, 9091, {})})


# ---- live: one process, two switches ------------------------------------------------

@dataclass
class Member:
    """One switch of the process: its ports, and raw sockets on its hosts' ends."""
    grpc_port: int
    control_port: int
    lab: VethLab
    socks: dict[int, socket.socket]

    def stats(self) -> dict[str, int]:
        return request(self.control_port, {"cmd": "stats"})["stats"]

    def client(self, device_id: int) -> P4RuntimeClient:
        return P4RuntimeClient(device_id, f"127.0.0.1:{self.grpc_port}", (0, 1))


@dataclass
class Group:
    """The process, its switches by device id, and its log (stdout and stderr)."""
    proc: subprocess.Popen
    members: dict[int, Member]
    log: Path


def listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture
def group(tmp_path: Path) -> Iterator[Group]:
    """Two switches (A and B, 4 veth ports each) in one softswitch process."""
    tag = f"sp{os.getpid() % 100000}"
    with VethLab(f"{tag}a", 4) as lab_a, VethLab(f"{tag}b", 4) as lab_b:
        members = {d: Member(free_port(), free_port(), lab, {})
                   for d, lab in ((A, lab_a), (B, lab_b))}
        cmd = group_command({d: (m.grpc_port, m.control_port, m.lab.ports)
                             for d, m in members.items()})
        log = tmp_path / "softswitch.log"
        with log.open("w") as out:
            proc = subprocess.Popen(cmd, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
        try:
            for m in members.values():
                wait_listening(m.grpc_port, proc)
                for p in m.lab.ports:
                    m.socks[p] = m.lab.host_socket(p)
            yield Group(proc, members, log)
        finally:
            stop_process(proc, 10)
            for m in members.values():
                for s in m.socks.values():
                    s.close()


def program(members: dict[int, Member], updates: list[p4runtime_pb2.Update]) -> None:
    """Commit the P4Info on each switch over its own P4Runtime server, then `updates`."""
    for device_id, m in members.items():
        client = m.client(device_id)
        try:
            reset_pipeline(client, device_id, updates)
        finally:
            client.tear_down()


def forwards(m: Member, case: corpus.Case, timeout: float = 2.0) -> bool:
    """`case`'s frame into port `case.ingress_port` of `m` leaves on its expected port."""
    m.socks[case.ingress_port].send(case.frame)
    out = case.outputs[0]
    return receive(m.socks[out.port], timeout) == out.frame


@pytest.mark.parametrize("first", [A, B])
@pytest.mark.root
@NEEDS_ROOT
def test_each_switch_counts_its_own_frames(group: Group, first: int) -> None:
    """Frames into an unprogrammed switch are its no_pipeline, not the other switch's (a
    stray frame the kernel sends on a port may add a few to either, never SENT)."""
    other = B if first == A else A
    m, o = group.members[first], group.members[other]
    assert all(listening(x.grpc_port) for x in (m, o))
    before, other_before = m.stats(), o.stats()
    for _ in range(SENT):
        m.socks[1].send(bytes(14) + bytes(50))
    wait_until(lambda: m.stats()["no_pipeline"] >= before["no_pipeline"] + SENT,
               f"switch {first} to count {SENT} frames as no_pipeline")
    after = o.stats()
    assert after["no_pipeline"] - other_before["no_pipeline"] < SENT
    assert after["rx"] - other_before["rx"] < SENT
    assert group.proc.poll() is None


@NEEDS_CORPUS
@pytest.mark.root
@NEEDS_ROOT
def test_both_switches_forward_independently(group: Group) -> None:
    case = next(c for c in CASES if c.name == "usid_shift_t0_up")
    program(group.members, case_updates(CODEC, case))
    a, b = group.members[A], group.members[B]
    tx_a, tx_b = a.stats()["tx"], b.stats()["tx"]
    assert forwards(a, case)
    assert all(receive(s, 0.1) is None for s in b.socks.values())  # nothing leaks into B
    assert (a.stats()["tx"], b.stats()["tx"]) == (tx_a + 1, tx_b)
    assert forwards(b, case)
    assert all(receive(s, 0.1) is None for s in a.socks.values())
    assert (a.stats()["tx"], b.stats()["tx"]) == (tx_a + 1, tx_b + 1)
    program({A: a}, [])  # A's tables emptied, B's kept
    assert forwards(b, case) and not forwards(a, case, 0.3)


@pytest.mark.root
@NEEDS_ROOT
def test_one_server_answers_for_each_switch_it_serves_and_no_other(group: Group) -> None:
    """P4Runtime's device_id picks the switch (softswitch.router): any of the process's ports
    reaches A and B; a device id the process does not serve is NOT_FOUND."""
    a, b = group.members[A], group.members[B]
    unknown = max(A, B) + 7
    for port in (a.grpc_port, b.grpc_port):
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = p4runtime_pb2_grpc.P4RuntimeStub(channel)
            for device_id in (A, B, unknown):
                req = p4runtime_pb2.GetForwardingPipelineConfigRequest(device_id=device_id)
                try:
                    stub.GetForwardingPipelineConfig(req, timeout=5)
                    code = grpc.StatusCode.OK
                except grpc.RpcError as err:
                    code = err.code()
                assert (code == grpc.StatusCode.NOT_FOUND) == (device_id == unknown), \
                    (port, device_id, code)
            read = p4runtime_pb2.ReadRequest(device_id=unknown)
            read.entities.add().table_entry.SetInParent()
            with pytest.raises(grpc.RpcError) as err:
                list(stub.Read(read, timeout=5))
            assert err.value.code() == grpc.StatusCode.NOT_FOUND
            assert "unknown" in err.value.details()


def get_config_code(port: int, device_id: int) -> grpc.StatusCode:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = p4runtime_pb2_grpc.P4RuntimeStub(channel)
        req = p4runtime_pb2.GetForwardingPipelineConfigRequest(device_id=device_id)
        try:
            stub.GetForwardingPipelineConfig(req, timeout=5)
        except grpc.RpcError as err:
            return err.code()
    return grpc.StatusCode.OK


def wait_down(m: Member, down: bool) -> None:
    def answered() -> bool:
        try:
            return request(m.control_port, {"cmd": "stats"})["down"] == down
        except ControlError:  # the control socket is being re-made
            return False
    wait_until(answered, f"the switch to be {'down' if down else 'up'}", 5.0)


@NEEDS_CORPUS
@pytest.mark.root
@NEEDS_ROOT
def test_one_switch_crashes_and_reboots_while_the_other_forwards(group: Group) -> None:
    case = next(c for c in CASES if c.name == "usid_shift_t0_up")
    program(group.members, case_updates(CODEC, case))
    a, b = group.members[A], group.members[B]
    client_a = a.client(A)  # a controller stays connected to A across its crash
    try:
        assert request(a.control_port, {"cmd": "detach"}) == {"ok": True}
        wait_down(a, True)
        assert get_config_code(a.grpc_port, A) == grpc.StatusCode.UNAVAILABLE
    finally:
        client_a.tear_down()
    assert group.proc.poll() is None, group.log.read_text()
    for refused in ("detach", "queues"):
        with pytest.raises(ControlError, match="down"):
            request(a.control_port, {"cmd": refused})
    assert b.stats()["tx"] == 0
    assert forwards(b, case)  # B's ports and tables are untouched
    a.socks[case.ingress_port].send(case.frame)  # A's ports are closed: nothing forwards
    assert receive(a.socks[case.outputs[0].port], 0.3) is None
    assert b.stats()["tx"] == 1  # A's frame is not B's either
    assert request(a.control_port, {"cmd": "attach"}) == {"ok": True}
    wait_down(a, False)
    with pytest.raises(ControlError, match="up"):
        request(a.control_port, {"cmd": "attach"})
    assert get_config_code(a.grpc_port, A) == grpc.StatusCode.FAILED_PRECONDITION  # empty
    assert not forwards(a, case, 0.3)  # back on its ports, with no tables
    program({A: a}, case_updates(CODEC, case))
    assert forwards(a, case) and forwards(b, case)
    assert a.stats()["tx"] == 1  # counters restarted with the switch
    assert group.proc.poll() is None
