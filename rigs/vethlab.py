"""Veth pairs into network namespaces for driving a live switch (tests and benchmark).

Port i of the switch is the root-namespace end `<tag>p<i>`; its peer is `eth0` inside
namespace `<tag>h<i>`. Everything created is recorded and removed by name in close(),
also after a failure half-way. IPv6 is disabled on these interfaces so the kernel sends
no router/neighbour solicitations that would pollute counters.
"""

from __future__ import annotations

import ctypes
import os
import socket
import subprocess

CLONE_NEWNET = 0x40000000
ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4


class LabError(RuntimeError):
    """A namespace or veth could not be created; the message has the failing command."""


def _run(*cmd: str) -> None:
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise LabError(f"{' '.join(cmd)}: {result.stderr.strip()}")


class VethLab:
    """`count` namespaces, each joined to the root namespace by one veth pair."""

    def __init__(self, tag: str, count: int) -> None:
        if not tag.isalnum() or len(tag) > 8:
            raise ValueError(f"lab tag must be 1..8 alphanumerics, got {tag!r}")
        self.tag = tag
        self.ports = {i: f"{tag}p{i}" for i in range(1, count + 1)}
        self.namespaces = {i: f"{tag}h{i}" for i in self.ports}
        self._links: list[str] = []
        self._netns: list[str] = []

    def __enter__(self) -> VethLab:
        try:
            for i, ifname in self.ports.items():
                ns = self.namespaces[i]
                _run("ip", "netns", "add", ns)
                self._netns.append(ns)
                _run("ip", "link", "add", ifname, "type", "veth", "peer", "name", "eth0",
                     "netns", ns)
                self._links.append(ifname)
                _run("sysctl", "-qw", f"net.ipv6.conf.{ifname}.disable_ipv6=1")
                _run("ip", "link", "set", ifname, "up")
                _run("ip", "netns", "exec", ns, "sysctl", "-qw",
                     "net.ipv6.conf.all.disable_ipv6=1")
                _run("ip", "-n", ns, "link", "set", "eth0", "up")
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        errors = []
        for ifname in self._links:
            r = subprocess.run(["ip", "link", "del", ifname], capture_output=True, text=True)
            if r.returncode != 0:
                errors.append(r.stderr.strip())
        for ns in self._netns:
            r = subprocess.run(["ip", "netns", "del", ns], capture_output=True, text=True)
            if r.returncode != 0:
                errors.append(r.stderr.strip())
        self._links, self._netns = [], []
        if errors:
            raise LabError("cleanup failed: " + "; ".join(errors))

    def host_socket(self, port: int) -> socket.socket:
        """A raw socket on `eth0` inside the namespace of switch port `port`."""
        libc = ctypes.CDLL(None, use_errno=True)
        with open("/proc/self/ns/net") as home, open(f"/run/netns/{self.namespaces[port]}") as ns:
            if libc.setns(ns.fileno(), CLONE_NEWNET) != 0:
                raise LabError(f"setns into {self.namespaces[port]}: "
                               f"{os.strerror(ctypes.get_errno())}")
            try:
                s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)  # nothing until bound
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
                s.bind(("eth0", ETH_P_ALL))
            finally:
                if libc.setns(home.fileno(), CLONE_NEWNET) != 0:
                    raise LabError(f"setns back home: {os.strerror(ctypes.get_errno())}")
        return s


def receive(sock: socket.socket, timeout: float) -> bytes | None:
    """The next frame that arrived on this socket (not one it sent), or None on timeout."""
    sock.settimeout(timeout)
    while True:
        try:
            frame, addr = sock.recvfrom(65535)
        except TimeoutError:
            return None
        if addr[2] != PACKET_OUTGOING:
            return frame
