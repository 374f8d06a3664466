"""The software switch started as a testbed fabric starts it answers only the run's
controller: P4Runtime wants a client certificate from the run's CA (as simple_switch_grpc
with --grpc-server-ssl --grpc-server-with-client-auth), the runtime control port a client
that proves the run's token (softswitch.control_auth). Without those options it serves as
before (a switch of one's own).

The token never travels: a listener that took the port (issue 54: a local user listened on
it during a reboot and received the token in clear, and root believed its forged reply) gets
a random hello and nothing more, and the client refuses to go on. A request with a wrong
MAC, and one replayed from a captured session, are refused by the switch."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

from nodes.softswitch_node import softswitch_command
from p4rt import tls
from safety import credentials
from safety.privdir import PrivateDir
from softswitch import control_auth as auth
from softswitch.cli import ControlError, request
from tests.support import wait_until
from tests.switch.p4rt_support import free_port

REPO = Path(__file__).resolve().parents[3]


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
    """Without the token the switch refuses; with a wrong one, the switch's proof does not
    check out and the client sends nothing (so only the token-less request is counted)."""
    creds, _, port = secured
    assert request(port, {"cmd": "stats"}, token=creds.control_token)["ok"]
    for token in (None, "", "0" * 64, creds.control_token[:-1]):
        with pytest.raises(ControlError, match="control token"):
            request(port, {"cmd": "set_queue_rate", "rate": 1}, token=token)
    stats = request(port, {"cmd": "stats"}, token=creds.control_token)["stats"]
    assert stats["control_refused"] == 1


def test_tls_options_without_ssl_are_refused(tmp_path) -> None:
    out = subprocess.run([sys.executable, "-m", "softswitch", "--grpc-server-cert", "x.pem"],
                         cwd=REPO, capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and "need --grpc-server-ssl" in out.stderr


# ---- the challenge-response: nothing for an impostor, no forged or replayed request ----

TOKEN = "5e" * 32  # the shape of a run's token (credentials.issue: 256 bits, hex)


class FakeListener:
    """A listener that took the switch's port: records every byte it receives and answers
    each line with the next of `replies` (None: hangs up), in a thread of its own."""

    def __init__(self, replies: list[bytes | None]) -> None:
        self.replies = list(replies)
        self.received = b""
        self.srv = socket.create_server(("127.0.0.1", 0))
        self.port = self.srv.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        conn, _ = self.srv.accept()
        with conn:
            conn.settimeout(10)
            while self.replies:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                self.received += chunk
                if b"\n" in chunk:
                    reply = self.replies.pop(0)
                    if reply is None:
                        return
                    conn.sendall(reply)
            while chunk := conn.recv(65536):  # all the client still sends, until it closes
                self.received += chunk

    def done(self) -> bytes:
        self.thread.join(10)
        self.srv.close()
        assert not self.thread.is_alive()
        return self.received


FORGED_CHALLENGE = json.dumps({"ok": True, "nonce": "ab" * 32, "proof": "cd" * 32}).encode()
IMPOSTORS = {
    "answers like an old switch": [b'{"ok": true, "down": false, "stats": {}}\n'],
    "forges a challenge": [FORGED_CHALLENGE + b"\n", b'{"ok": true}\n'],
    "claims to have no token": [b'{"ok": false, "error": "no control token here"}\n'],
    "hangs up": [None],
}


@pytest.mark.parametrize("behaviour", sorted(IMPOSTORS))
def test_a_listener_without_the_token_learns_nothing_and_is_not_believed(behaviour) -> None:
    fake = FakeListener(IMPOSTORS[behaviour])
    with pytest.raises(ControlError, match="not the run's switch|control port"):
        request(fake.port, {"cmd": "set_queue_rate", "rate": 1}, token=TOKEN)
    received = fake.done()
    for secret in (TOKEN.encode(), TOKEN.encode().hex().encode(), bytes.fromhex(TOKEN)):
        assert secret not in received
    assert b"set_queue_rate" not in received  # nor the request: only a hello of random bytes
    assert list(json.loads(received.split(b"\n")[0])) == ["hello"]


def test_an_impostors_challenge_is_refused_with_the_reason() -> None:
    fake = FakeListener([FORGED_CHALLENGE + b"\n"])
    with pytest.raises(ControlError, match="not the run's switch"):
        request(fake.port, {"cmd": "stats"}, token=TOKEN)
    assert fake.done().count(b"\n") == 1


def lines(sock: socket.socket) -> Iterator[dict]:
    with sock.makefile("rb") as f:
        for line in f:
            yield json.loads(line)


def hello(sock: socket.socket, token: str) -> tuple[bytes, bytes, Iterator[dict]]:
    """The client's half of the challenge, done by hand: (Nc, Ns, replies to come)."""
    client_nonce = auth.new_nonce()
    sock.sendall(json.dumps({"hello": client_nonce.hex()}).encode() + b"\n")
    replies = lines(sock)
    challenge = next(replies)
    server_nonce = bytes.fromhex(challenge["nonce"])
    auth.check(token, auth.SERVER, client_nonce, server_nonce, b"", challenge["proof"])
    return client_nonce, server_nonce, replies


def test_a_request_with_a_wrong_mac_is_refused(secured) -> None:
    creds, _, port = secured
    body = json.dumps({"cmd": "detach"}).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        cn, sn, replies = hello(sock, creds.control_token)  # the genuine switch's proof
        wrong = auth.tag("0" * 64, auth.REQUEST, cn, sn, body)
        sock.sendall(json.dumps({"body": body.decode(), "mac": wrong}).encode() + b"\n")
        answer = next(replies)
    assert answer["ok"] is False and "authentication is wrong" in answer["error"]
    stats = request(port, {"cmd": "stats"}, token=creds.control_token)
    assert stats["down"] is False and stats["stats"]["control_refused"] == 1


class Recorder:
    """A relay between a client and the switch that keeps what the client sent (what an
    eavesdropper with a capture would have)."""

    def __init__(self, port: int) -> None:
        self.target, self.sent = port, b""
        self.srv = socket.create_server(("127.0.0.1", 0))
        self.port = self.srv.getsockname()[1]
        self.thread = threading.Thread(target=self._relay, daemon=True)
        self.thread.start()

    def _relay(self) -> None:
        client, _ = self.srv.accept()
        with client, socket.create_connection(("127.0.0.1", self.target), timeout=10) as up:
            up_reader = threading.Thread(target=self._copy, args=(up, client), daemon=True)
            up_reader.start()
            client.settimeout(10)
            while chunk := client.recv(65536):
                self.sent += chunk
                up.sendall(chunk)
            up.shutdown(socket.SHUT_WR)
            up_reader.join(10)

    @staticmethod
    def _copy(src: socket.socket, dst: socket.socket) -> None:
        while chunk := src.recv(65536):
            dst.sendall(chunk)
        dst.shutdown(socket.SHUT_WR)

    def captured(self) -> bytes:
        self.thread.join(10)
        self.srv.close()
        assert not self.thread.is_alive()
        return self.sent


def test_a_replayed_request_is_refused(secured) -> None:
    creds, _, port = secured
    token = creds.control_token
    recorder = Recorder(port)
    assert request(recorder.port, {"cmd": "detach"}, token=token) == {"ok": True}
    captured = recorder.captured()
    assert captured.count(b"\n") == 2 and b"detach" in captured  # hello, request
    wait_until(lambda: request(port, {"cmd": "stats"}, token=token)["down"], "the detach")
    assert request(port, {"cmd": "attach"}, token=token) == {"ok": True}
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(captured)  # the captured session again, on a new connection
        replies = list(lines(sock))
    assert len(replies) == 2 and "nonce" in replies[0]  # a fresh challenge: not the old one
    assert replies[1]["ok"] is False and "replayed" in replies[1]["error"]
    stats = request(port, {"cmd": "stats"}, token=token)
    assert stats["down"] is False and stats["stats"]["control_refused"] == 1
