"""The software switch started as a testbed fabric starts it answers only the run's
controller: P4Runtime wants a client certificate from the run's CA (as simple_switch_grpc
with --grpc-server-ssl --grpc-server-with-client-auth), the runtime control port the run's
token. Without those options it serves as before (a switch of one's own)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

from p4rt import tls
from softswitch.cli import ControlError, request
from tests.switch.p4rt_support import free_port
from topologies import credentials
from topologies.privdir import PrivateDir
from topologies.softswitch_node import softswitch_command

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def secured(tmp_path):
    with PrivateDir(tmp_path / "run") as rundir:
        creds = credentials.issue(rundir)
    grpc_port, control_port = free_port(), free_port()
    cmd = softswitch_command(1, {}, grpc_port, control_port, credentials=creds)
    proc = subprocess.Popen(cmd, cwd=REPO, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", grpc_port)) == 0:
                break
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        time.sleep(0.1)
    try:
        yield creds, f"127.0.0.1:{grpc_port}", control_port
    finally:
        proc.terminate()
        proc.wait(10)


def capabilities(address: str, creds: grpc.ChannelCredentials | None) -> grpc.StatusCode:
    channel = grpc.insecure_channel(address) if creds is None else \
        grpc.secure_channel(address, creds)
    try:
        p4runtime_pb2_grpc.P4RuntimeStub(channel).Capabilities(
            p4runtime_pb2.CapabilitiesRequest(), timeout=3)
        return grpc.StatusCode.OK
    except grpc.RpcError as err:
        return err.code()
    finally:
        channel.close()


def test_p4runtime_wants_the_runs_client_certificate(secured, tmp_path) -> None:
    creds, address, _ = secured
    assert capabilities(address, creds.client.credentials()) == grpc.StatusCode.OK
    assert capabilities(address, None) == grpc.StatusCode.UNAVAILABLE
    assert capabilities(address, grpc.ssl_channel_credentials(creds.client.ca)) == \
        grpc.StatusCode.UNAVAILABLE  # trusts the server, presents no certificate
    with PrivateDir(tmp_path / "other") as other_dir:  # another run's (valid) certificate
        other = credentials.issue(other_dir)
    forged = tls.ClientTls(creds.client.ca, other.client.cert, other.client.key)
    assert capabilities(address, forged.credentials()) == grpc.StatusCode.UNAVAILABLE


def test_the_runtime_port_wants_the_runs_token(secured) -> None:
    creds, _, port = secured
    assert request(port, {"cmd": "stats"}, token=creds.control_token)["ok"]
    for token in (None, "", "0" * 64, creds.control_token[:-1]):
        with pytest.raises(ControlError, match="control token"):
            request(port, {"cmd": "set_queue_rate", "rate": 1}, token=token)
    stats = request(port, {"cmd": "stats"}, token=creds.control_token)["stats"]
    assert stats["control_refused"] == 4


def test_tls_options_without_ssl_are_refused(tmp_path) -> None:
    out = subprocess.run([sys.executable, "-m", "softswitch", "--grpc-server-cert", "x.pem"],
                         cwd=REPO, capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and "need --grpc-server-ssl" in out.stderr
