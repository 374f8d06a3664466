"""Helpers for the Mininet end-to-end tests: skip reasons, leak snapshots, a kernel TCP echo.

A snapshot is taken while holding the machine-wide fabric lock, so another fabric (e.g. a
benchmark) cannot be running at that moment: two snapshots taken that way should be equal
unless our own tests leaked something.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest


def skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "end-to-end fabric tests need root (Mininet, namespaces, raw sockets)"
    try:
        import mininet.net  # noqa: F401
    except ImportError:
        return "Mininet is not importable (apt install mininet)"
    if shutil.which("mnexec") is None:
        return "mnexec not on PATH (apt install mininet)"
    return None


def require_fabric() -> None:
    reason = skip_reason()
    if reason:
        pytest.skip(reason)


@dataclass(frozen=True)
class Snapshot:
    links: frozenset[str]
    netns: frozenset[str]
    children: frozenset[int]
    workdirs: frozenset[str]  # runs' own work directories (safety.runstate.make_workdir)

    def leaks_since(self, before: Snapshot) -> list[str]:
        out = []
        if self.links - before.links:
            out.append(f"interfaces {sorted(self.links - before.links)}")
        if self.netns - before.netns:
            out.append(f"namespaces {sorted(self.netns - before.netns)}")
        if self.children - before.children:
            out.append(f"processes {sorted(self.children - before.children)}")
        if self.workdirs - before.workdirs:
            out.append(f"work directories {sorted(self.workdirs - before.workdirs)}")
        return out


def _lines(cmd: list[str]) -> list[str]:
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.splitlines()


def descendants(root: int) -> set[int]:
    """Every live process below `root` (from /proc, so no psutil)."""
    parent: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as f:
                stat = f.read()
        except OSError:
            continue  # exited while we looked
        fields = stat[stat.rindex(")") + 2:].split()
        if fields[0] != "Z":
            parent[int(entry)] = int(fields[1])
    out: set[int] = set()
    frontier = {root}
    while frontier:
        frontier = {pid for pid, ppid in parent.items() if ppid in frontier} - out
        out |= frontier
    return out


def run_workdirs() -> frozenset[str]:
    """The mrc-net-* work directories in the temporary directory now."""
    return frozenset(str(p) for p in Path(tempfile.gettempdir()).glob("mrc-net-*"))


def snapshot() -> Snapshot:
    from emulation.network import acquire_fabric_lock

    fd = acquire_fabric_lock(600.0, log=lambda *_: None)
    try:
        links = frozenset(line.split(":")[1].strip().split("@")[0]
                          for line in _lines(["ip", "-o", "link"]))
        netns = frozenset(line.split()[0] for line in _lines(["ip", "netns", "list"]) if line)
        return Snapshot(links, netns, frozenset(descendants(os.getpid())), run_workdirs())
    finally:
        os.close(fd)


def loss_report(net, hosts) -> dict:
    """Where a run may have lost packets or time, for a failing test's message. Software
    switches: queue tail drops and socket-buffer drops from their runtime. Every target:
    `consumed`, frames a switch took in and did not send (kernel counters; BMv2 exposes no
    tail-drop counter). Agents: socket drops and how late their timers ran."""
    from softswitch.cli import request

    report: dict = {}
    frames = net.switch_frames()
    for sw in net.fabric.switches:
        entry = {}
        if frames[sw.name]["consumed"]:
            entry["consumed"] = frames[sw.name]["consumed"]
        if net.target == "soft":
            port = net.ports[sw.name].thrift  # the run's (safety.runports)
            token = net.credentials.control_token  # the run's: the switches refuse others
            stats = request(port, {"cmd": "stats"}, token=token)["stats"]
            queues = request(port, {"cmd": "queues"}, token=token)["queues"]
            tail = sum(f["tail_drops"] for fifos in queues.values() for f in fifos)
            if tail or stats["rx_kernel_drops"]:
                entry.update(queue_tail_drops=tail, rx_kernel_drops=stats["rx_kernel_drops"])
        if entry:
            report[sw.name] = entry
    for h in hosts:
        st = net.stats(h)
        drops = sum(d.get("rx_kernel_drops", 0) for d in st["driver"].values())
        report[f"h{h}"] = {"rx_kernel_drops": drops,
                           "max_timer_lateness_ms": round(st["max_timer_lateness_s"] * 1e3, 1)}
    return report


def fabric_drops(losses: dict, before: dict | None = None) -> int:
    """Frames the switches lost or dropped, from a loss_report; with `before` (a loss_report
    taken when the traffic began), only those since then. The whole run's count includes the
    hosts' own start-up frames (neighbour discovery, MLD) that the P4 program drops: about 25
    on BMv2 on the incast fabric, all before the first transfer."""
    def total(report: dict) -> int:
        return sum(v.get("consumed", 0) + v.get("rx_kernel_drops", 0)
                   for name, v in report.items() if not name.startswith("h"))
    return total(losses) - (total(before) if before is not None else 0)


# argv: role (server|client), local address, peer address, port. The server echoes one
# message reversed; the client retries until the server listens, prints the reply.
_ECHO = """
import socket, sys, time
role, local, peer, port = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
if role == "server":
    srv = socket.create_server((local, port), family=socket.AF_INET6)
    srv.settimeout(20)
    conn, _ = srv.accept()
    conn.settimeout(10)
    conn.sendall(conn.recv(64)[::-1])
    conn.close()
else:
    end = time.monotonic() + 10
    while True:
        try:
            sock = socket.create_connection((peer, port), timeout=5, source_address=(local, 0))
            break
        except ConnectionRefusedError:
            if time.monotonic() > end:
                raise
            time.sleep(0.2)
    sock.sendall(b"mrc-echo")
    print(sock.recv(64).decode())
"""


def tcp_echo(net, src: int, dst: int, plane: int, port: int) -> str:
    """One kernel TCP round trip between the hosts' plane-`plane` NIC addresses (the switches'
    baseline routes carry it); returns the client's output (the reversed message, or an
    error), so a missing address, route or neighbour shows up as a failure."""
    fabric = net.fabric
    a, b = str(fabric.nic(src, plane).address), str(fabric.nic(dst, plane).address)
    server = net.host(dst).popen([sys.executable, "-c", _ECHO, "server", b, a, str(port)],
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        client = net.host(src).popen([sys.executable, "-c", _ECHO, "client", a, b, str(port)],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            out, _ = client.communicate(timeout=30)
        finally:
            if client.poll() is None:
                client.kill()
                client.wait()
        return out.decode(errors="replace").strip()
    finally:
        if server.poll() is None:
            server.kill()
        server.wait()


DEMO_TIMEOUT_S = 300


def run_demo_json(target: str, *args: str) -> dict:
    """`two_tier.py --no-cli --json --target TARGET ARGS` as users run it; its JSON report
    (fails the test with the script's stderr if it exits non-zero)."""
    repo = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, str(repo / "topologies" / "two_tier.py"), "--no-cli",
                           "--json", "--target", target, *args], cwd=repo, capture_output=True,
                          text=True, timeout=DEMO_TIMEOUT_S)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])
