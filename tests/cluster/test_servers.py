"""The emulated-servers harness itself: servers are separate, reach one another over ssh,
leave the root network namespace alone, and vanish completely on exit, whatever ends the
`with` block. Skips (with the reason) where it cannot run: not root, a tool or sshd missing."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys

import pytest

from tests.cluster.servers import (
    UNDERLAY_PREFIX,
    EmulatedServers,
    HarnessError,
    children,
    process_stat,
    unavailable_reason,
)
from tests.support import wait_until

pytestmark = pytest.mark.root

# One ICMP echo over a raw socket: the machine has no `ping` and the test should not need one.
ICMP_ECHO = """\
import socket, struct, sys
def checksum(data):
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    total = (total >> 16) + (total & 0xFFFF)
    return ~(total + (total >> 16)) & 0xFFFF
sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
sock.settimeout(5)
request = struct.pack("!BBHHH", 8, 0, 0, 0x4D43, 1) + b"mcl-ping"
sock.sendto(request[:2] + struct.pack("!H", checksum(request)) + request[4:], (sys.argv[1], 0))
while True:
    data, peer = sock.recvfrom(2048)
    icmp = data[(data[0] & 15) * 4:]
    if peer[0] == sys.argv[1] and icmp[0] == 0 and icmp[4:6] == b"MC":
        print("reply from", peer[0])
        break
"""


def require_harness() -> None:
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)


def out(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 0, f"rc {done.returncode}: {done.stderr}"
    return done.stdout.strip()


def test_each_server_has_its_own_hostname(servers: EmulatedServers) -> None:
    for i, server in enumerate(servers.servers):
        assert server.address == f"{UNDERLAY_PREFIX}{i + 1}"
        assert out(servers.run(i, ["hostname"], capture_output=True, text=True)) == f"srv{i}"


def test_first_server_reaches_every_server_over_ssh(servers: EmulatedServers) -> None:
    for to_i in range(3):
        argv = servers.ssh_argv(0, to_i, "hostname")
        assert out(servers.run(0, argv, capture_output=True, text=True)) == f"srv{to_i}"
    argv = servers.ssh_argv(2, 1, ["cat", "/proc/sys/kernel/hostname"])
    assert out(servers.run(2, argv, capture_output=True, text=True)) == "srv1"


def test_server_pings_another_over_the_underlay(servers: EmulatedServers) -> None:
    target = servers.servers[2].address
    done = servers.run(1, [sys.executable, "-I", "-S", "-c", ICMP_ECHO, target],
                       capture_output=True, text=True, timeout=15)
    assert out(done) == f"reply from {target}"


def test_servers_have_private_run_and_tmp(servers: EmulatedServers) -> None:
    mark = f"/tmp/{servers.prefix}-mark"
    servers.run(1, ["sh", "-c", f"echo 1 > {mark}"], check=True)
    assert servers.run(1, ["test", "-e", mark]).returncode == 0
    assert servers.run(2, ["test", "-e", mark]).returncode != 0
    assert not os.path.exists(mark)
    assert servers.run(0, ["test", "-d", "/run/sshd"]).returncode == 0


def test_root_namespace_is_untouched(servers: EmulatedServers) -> None:
    addrs = subprocess.run(["ip", "-o", "addr"], capture_output=True, text=True, check=True)
    assert UNDERLAY_PREFIX not in addrs.stdout
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True)
    assert servers.prefix not in links.stdout
    routes = subprocess.run(["ip", "route", "show", "table", "all"], capture_output=True,
                            text=True, check=True)
    assert UNDERLAY_PREFIX not in routes.stdout
    get = subprocess.run(["ip", "route", "get", servers.servers[1].address],
                         capture_output=True, text=True)
    assert get.returncode != 0 or servers.prefix not in get.stdout  # the default route at most
    server_ns = os.readlink(f"/proc/{servers.servers[0].pid}/ns/net")
    assert os.readlink("/proc/self/ns/net") != server_ns


def pid_namespace_members(pid: int) -> list[tuple[int, int]]:
    """Every process in `pid`'s PID namespace, as (pid, start time) seen from here."""
    target = os.readlink(f"/proc/{pid}/ns/pid")
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            stat = process_stat(int(entry))
            if os.readlink(f"/proc/{entry}/ns/pid") == target and stat is not None:
                found.append((int(entry), stat[1]))
    return found


def alive(pid: int, start: int) -> bool:
    stat = process_stat(pid)
    return stat is not None and stat[1] == start


def test_exit_ends_every_process_and_leaves_nothing() -> None:
    require_harness()
    with EmulatedServers(3) as emulated:
        sleeper = emulated.popen(1, ["sleep", "300"])
        sleep_pid = wait_until(lambda: children(sleeper.pid), "sleep under nsenter")[0]
        ssh = emulated.ssh_argv(0, 1, "setsid sleep 301 </dev/null >/dev/null 2>&1 &")
        emulated.run(0, ssh, check=True, capture_output=True)
        members = pid_namespace_members(emulated.servers[1].pid)
        assert sleep_pid in {pid for pid, _ in members}
        assert len(members) >= 4  # PID 1, sshd, both sleeps
        tmpdir = emulated.tmpdir
    assert sleeper.wait(timeout=10) != 0  # killed with its PID namespace
    assert [pid for pid, start in members if alive(pid, start)] == []
    assert emulated.leftovers() == []
    assert not tmpdir.exists()


@pytest.mark.parametrize("error", [RuntimeError, KeyboardInterrupt])
def test_error_inside_with_still_cleans_up(error: type[BaseException]) -> None:
    require_harness()
    with pytest.raises(error), EmulatedServers(2) as emulated:
        assert emulated.run(1, ["true"]).returncode == 0
        raise error("boom")
    assert emulated.leftovers() == []


def test_failure_while_entering_cleans_up(monkeypatch: pytest.MonkeyPatch) -> None:
    require_harness()
    real = EmulatedServers._start_sshd

    def flaky(self: EmulatedServers, server: object) -> None:
        if getattr(server, "index", 0) == 1:
            raise HarnessError("injected")
        real(self, server)  # type: ignore[arg-type]

    monkeypatch.setattr(EmulatedServers, "_start_sshd", flaky)
    emulated = EmulatedServers(3)
    with pytest.raises(HarnessError, match="injected"), emulated:
        pass
    assert emulated.leftovers() == []
    assert emulated.servers[0].pid and emulated.servers[0].sshd is not None  # got that far
