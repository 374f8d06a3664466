"""bench.contenders.kernel_flows between two namespaces joined by two veth "planes" (root only).

Checks the delivery timeline a server reports (every byte, monotonic samples), that MPTCP
with the bench's endpoint commands puts a subflow on each plane (both rate-limited veths carry
a fair part of the flow), and
that the processes stay bounded (a client to a dead port fails, a server with no client
gives up at its timeout).
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench import metrics
from bench.contenders.kernel_flows import mptcp_enabled, mptcp_host_commands

REPO = Path(__file__).resolve().parents[2]
KERNEL_FLOWS = (sys.executable, "-m", "bench.contenders.kernel_flows")
PLANES = 2
PLANE_RATE = "160mbit"  # tbf on each client NIC in the MPTCP test

pytestmark = [pytest.mark.root, pytest.mark.skipif(os.geteuid() != 0, reason="needs root")]


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


def _addr(plane: int, side: int) -> str:
    return f"fd00:0:{plane:x}::{side + 1}"


@pytest.fixture()
def lab() -> Iterator[tuple[str, str]]:
    tag = uuid.uuid4().hex[:6]
    names = (f"bkfa{tag}", f"bkfb{tag}")
    created: list[str] = []
    try:
        for ns in names:
            _ip("netns", "add", ns)
            created.append(ns)
            _ip("-n", ns, "link", "set", "lo", "up")
        for p in range(PLANES):
            a, b = f"bk{tag}a{p}", f"bk{tag}b{p}"
            _ip("link", "add", a, "type", "veth", "peer", "name", b)
            for side, (ns, ifname) in enumerate(zip(names, (a, b), strict=True)):
                _ip("link", "set", ifname, "netns", ns)
                _ip("-n", ns, "link", "set", ifname, "name", f"eth{p}")
                _ip("-n", ns, "addr", "add", f"{_addr(p, side)}/64", "dev", f"eth{p}", "nodad")
                _ip("-n", ns, "link", "set", f"eth{p}", "up")
        yield names
    finally:
        for ns in created:  # deleting a namespace removes its veth ends too
            subprocess.run(["ip", "netns", "del", ns], check=False)


def _tx_bytes(ns: str, ifname: str) -> int:
    out = subprocess.run(["ip", "netns", "exec", ns, "cat",
                          f"/sys/class/net/{ifname}/statistics/tx_bytes"],
                         check=True, capture_output=True, text=True).stdout
    return int(out)


def _run_flow(names: tuple[str, str], proto: str, nbytes: int) -> tuple[dict, dict]:
    client_ns, server_ns = names
    binds = [a for p in range(PLANES) for a in ("--bind", _addr(p, 1))]
    server = subprocess.Popen(
        ["ip", "netns", "exec", server_ns, *KERNEL_FLOWS, "server",
         *binds, "--port", "5201", "--proto", proto, "--count", "1", "--timeout", "30"],
        cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        assert server.stdout.readline().strip() == "READY"
        client = subprocess.run(
            ["ip", "netns", "exec", client_ns, *KERNEL_FLOWS,
             "client", "--src", _addr(0, 0), "--dst", _addr(0, 1), "--port", "5201",
             "--proto", proto, "--bytes", str(nbytes), "--timeout", "30"],
            cwd=REPO, capture_output=True, text=True, timeout=60)
        out, _ = server.communicate(timeout=60)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    assert client.stdout.splitlines()[0] == "CONNECTED"
    return json.loads(client.stdout.splitlines()[-1]), json.loads(out.splitlines()[0])


def test_tcp_flow_timeline(lab: tuple[str, str]) -> None:
    nbytes = 50_000_000
    client, server = _run_flow(lab, "tcp", nbytes)
    assert client["ok"], client
    assert server["complete"] and server["bytes"] == nbytes
    samples = [(t - server["start"], b) for t, b in server["samples"]]
    metrics.check_timeline(samples)
    assert samples[-1][1] == nbytes
    assert len(samples) >= 2
    assert metrics.completion_time(samples, nbytes) is not None


def test_mptcp_uses_every_plane(lab: tuple[str, str]) -> None:
    ok, why = mptcp_enabled()
    if not ok:
        pytest.skip(f"kernel MPTCP unavailable: {why}")
    client_ns, server_ns = lab
    for ns, side, server in ((client_ns, 0, False), (server_ns, 1, True)):
        nics = [(f"eth{p}", _addr(p, side)) for p in range(PLANES)]
        for cmd in mptcp_host_commands(nics, server=server):
            subprocess.run(["ip", "netns", "exec", ns, *cmd], check=True, capture_output=True)
    for p in range(PLANES):  # a plane alone cannot carry the flow at line rate
        subprocess.run(["ip", "netns", "exec", client_ns, "tc", "qdisc", "add", "dev", f"eth{p}",
                        "root", "tbf", "rate", PLANE_RATE, "burst", "64kb", "latency", "50ms"],
                       check=True, capture_output=True)
    before = [_tx_bytes(client_ns, f"eth{p}") for p in range(PLANES)]
    nbytes = 40_000_000  # ~1 s on both planes
    client, server = _run_flow(lab, "mptcp", nbytes)
    assert client["ok"], client
    assert server["bytes"] == nbytes
    sent = [_tx_bytes(client_ns, f"eth{p}") - b for p, b in enumerate(before)]
    # Unshaped veths once left a plane with 24 KB of 400 MB: the scheduler keeps to the
    # subflow with the lowest RTT while it is not cwnd-limited, and a CPU-bound veth never is.
    # Shaped, each plane must carry a fair part of the flow.
    assert all(s > nbytes // 5 for s in sent), f"bytes per plane {sent}: a plane was unused"


def test_client_to_closed_port_fails_cleanly(lab: tuple[str, str]) -> None:
    client_ns, _ = lab
    result = subprocess.run(
        ["ip", "netns", "exec", client_ns, *KERNEL_FLOWS, "client",
         "--src", _addr(0, 0), "--dst", _addr(0, 1), "--port", "5999", "--bytes", "1000",
         "--timeout", "5"], cwd=REPO, capture_output=True, text=True, timeout=30)
    report = json.loads(result.stdout)
    assert result.returncode == 1 and not report["ok"] and "Refused" in report["error"]


def test_server_gives_up_without_client(lab: tuple[str, str]) -> None:
    _, server_ns = lab
    result = subprocess.run(
        ["ip", "netns", "exec", server_ns, *KERNEL_FLOWS, "server",
         "--bind", _addr(0, 1), "--port", "5202", "--timeout", "0.5"],
        cwd=REPO, capture_output=True, text=True, timeout=30)
    assert result.returncode == 1 and result.stdout.strip() == "READY"


def test_server_refuses_foreign_address(lab: tuple[str, str]) -> None:
    _, server_ns = lab
    result = subprocess.run(
        ["ip", "netns", "exec", server_ns, *KERNEL_FLOWS, "server",
         "--bind", _addr(0, 0), "--port", "5203", "--timeout", "1"],
        cwd=REPO, capture_output=True, text=True, timeout=30)
    assert result.returncode == 2 and "cannot bind" in result.stderr


def test_server_reports_only_after_every_connection(lab: tuple[str, str]) -> None:
    """A reader that drains the server only after its clients finish must not block it: the
    server holds its reports (a full stdout pipe would stop it reading the other flows)."""
    client_ns, server_ns = lab
    server = subprocess.Popen(
        ["ip", "netns", "exec", server_ns, *KERNEL_FLOWS, "server",
         "--bind", _addr(0, 1), "--port", "5204", "--count", "2", "--timeout", "30"],
        cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        assert server.stdout.readline().strip() == "READY"
        client = [*KERNEL_FLOWS, "client", "--src", _addr(0, 0),
                  "--dst", _addr(0, 1), "--port", "5204", "--bytes", "100000"]
        first = subprocess.run(["ip", "netns", "exec", client_ns, *client], cwd=REPO,
                               capture_output=True, text=True, timeout=30)
        assert first.returncode == 0, first.stderr
        ready, _, _ = select.select([server.stdout], [], [], 0.5)
        assert not ready, "the server reported before its last connection ended"
        second = subprocess.run(["ip", "netns", "exec", client_ns, *client], cwd=REPO,
                                capture_output=True, text=True, timeout=30)
        assert second.returncode == 0, second.stderr
        out, _ = server.communicate(timeout=30)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    reports = [json.loads(line) for line in out.splitlines()]
    assert [r["bytes"] for r in reports] == [100000, 100000]
    assert all(r["complete"] for r in reports)
