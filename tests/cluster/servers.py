"""Several emulated "servers" on one machine, for tests of Mininet Cluster Edition.

Cluster Edition drives remote servers over `ssh -o BatchMode=yes`, so tests need machines with
their own hostname, address, processes and sshd. Each server is a long-lived PID 1 in new
network, UTS, PID and mount namespaces; its `ul0` veth meets the others on a bridge in an
underlay netns of its own. The root network namespace gets nothing, not even a route, so ssh
clients run inside a server (`run`), as a Cluster controller would on the first one. Names
start with `mcl{tag}`, `tag` random: runs never collide and a leak is attributable.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import secrets
import select
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

UNDERLAY_PREFIX = "10.251.0."  # 10.251.0.0/24: private, far from Mininet's 10.0.0.0/8 hosts
UNDERLAY_PREFIXLEN = 24
UNDERLAY_MTU = 1500  # what a plain Ethernet link between real servers carries
SERVER_IF = "ul0"  # each server's underlay interface, inside its own network namespace
SSHD = "/usr/sbin/sshd"
TOOLS = ("unshare", "nsenter", "ip", "ssh-keygen", "ssh", "mount", "hostname")
INSTALL_ENV = "MCL_INSTALL"
STATE_PARENT = "/var/tmp"  # not /tmp or /run: every server mounts a private tmpfs over those
START_TIMEOUT = 15.0
STOP_TIMEOUT = 5.0
MAX_NAME = 15  # IFNAMSIZ - 1: the longest interface name Linux accepts

# PID 1 of a server; the harness SIGTERMs it to end the server. It blocks what it waits for,
# since a namespace's init ignores signals it has no handler for, and reaps adopted orphans.
_INIT = """\
import contextlib, os, signal
wanted = {signal.SIGCHLD, signal.SIGTERM, signal.SIGINT, signal.SIGHUP}
signal.pthread_sigmask(signal.SIG_BLOCK, wanted)
os.write(1, b"ready\\n")
os.close(1)
while signal.sigwaitinfo(wanted).si_signo == signal.SIGCHLD:
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass
"""
_LIBC = ctypes.CDLL(None)
_PR_SET_PDEATHSIG = 1


class HarnessError(RuntimeError):
    """A server could not be set up; the message carries the command's or daemon's output."""


@functools.cache  # one apt-get per session at most, however many tests ask
def unavailable_reason() -> str | None:
    """Why the harness cannot run here, or None. sshd is installed only with MCL_INSTALL=1:
    installing is a change to the machine, which CI's installer is expected to make."""
    if os.geteuid() != 0:
        return "needs root (network, PID and mount namespaces)"
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        return f"{', '.join(missing)} not on PATH"
    if os.path.exists(SSHD):
        return None
    if os.environ.get(INSTALL_ENV) != "1":
        return f"{SSHD} is missing: apt-get install openssh-server, or run with {INSTALL_ENV}=1"
    return install_sshd()


def install_sshd() -> str | None:
    """apt-get install openssh-server; return why it failed, or None. Without a policy-rc.d,
    the postinst may start a system sshd: not ours to stop, so only reported, by its pidfile."""
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", "openssh-server"]
    done = subprocess.run(install, env=env, capture_output=True, text=True)
    if done.returncode != 0:  # perhaps no package lists yet
        subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True)
        done = subprocess.run(install, env=env, capture_output=True, text=True)
    if done.returncode != 0 or not os.path.exists(SSHD):
        return f"apt-get install openssh-server failed: {done.stderr.strip()[-500:]}"
    with contextlib.suppress(OSError, ValueError):
        pid = int(Path("/run/sshd.pid").read_text().split()[0])
        if process_stat(pid) is not None:
            warnings.warn(f"openssh-server's postinst left a system sshd running (PID {pid}, "
                          "from /run/sshd.pid); the harness did not stop it", stacklevel=2)
    return None


def children(pid: int) -> list[int]:
    """Children of single-threaded `pid`: how the harness finds what unshare, nsenter forked."""
    with contextlib.suppress(OSError):
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    return []


def process_stat(pid: int) -> tuple[str, int] | None:
    """(state, start time) of `pid`, or None: start time tells a reused PID from ours."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[0], int(fields[19])


def _die_with_parent() -> None:
    """In the forked unshare: if the harness dies, unshare dies, and its --kill-child ends
    the server's PID 1 and so the whole server."""
    _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


@contextlib.contextmanager
def _sigint_deferred() -> Iterator[None]:
    """Hold Ctrl-C back during cleanup, so a second interrupt cannot strand namespaces."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous if previous is not None else signal.SIG_DFL)
        if caught:
            raise KeyboardInterrupt


def _tail(path: Path) -> str:
    return path.read_bytes()[-1500:].decode(errors="replace").strip() if path.exists() else ""


@dataclass
class Server:
    """One emulated server; `pid` is its PID 1 as the root namespace sees it (for nsenter)."""

    index: int
    name: str
    address: str
    veth: str  # the underlay end of its veth pair, in the underlay namespace
    pid: int = 0
    sshd_pid: int = 0
    unshare: subprocess.Popen[bytes] | None = None
    sshd: subprocess.Popen[bytes] | None = None


class EmulatedServers:
    """`count` servers srv0..srv{count-1} reachable over ssh from one another (not from here)."""

    def __init__(self, count: int = 3, tag: str | None = None) -> None:
        self.tag = tag if tag is not None else secrets.token_hex(3)
        prefix = f"mcl{self.tag}"
        if not self.tag.isalnum() or not self.tag.isascii():
            raise ValueError(f"tag must be ASCII letters and digits: {self.tag!r}")
        if not 1 <= count <= 253 or len(f"{prefix}s{count - 1}") > MAX_NAME:
            raise ValueError(f"count {count} with tag {self.tag!r} gives names over {MAX_NAME}")
        self.prefix = prefix
        self.underlay = f"{prefix}u"  # the underlay's network namespace (ip netns)
        self.bridge = f"{prefix}br"  # inside the underlay namespace
        self.servers = [Server(i, f"srv{i}", f"{UNDERLAY_PREFIX}{i + 1}", f"{prefix}s{i}")
                        for i in range(count)]
        self.tmpdir = Path()
        self.ssh_config_path = Path()
        self._pids: list[tuple[int, int, str]] = []  # (pid, start time, what) we started
        self._underlay_made = False

    def __enter__(self) -> EmulatedServers:
        try:
            self.tmpdir = Path(tempfile.mkdtemp(prefix=f"{self.prefix}-", dir=STATE_PARENT))
            self._write_keys_and_configs()
            for server in self.servers:  # before the underlay, so no copy of its netns mount
                self._start_server(server)
            self._make_underlay()
            for server in self.servers:
                self._start_sshd(server)
            self._wait_listening()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def nsenter_argv(self, i: int, argv: Sequence[str]) -> list[str]:
        """`argv` wrapped to run in server i's namespaces (cwd becomes that server's `/`)."""
        target = f"--target={self.servers[i].pid}"
        return ["nsenter", target, "--net", "--uts", "--pid", "--mount", "--", *argv]

    def run(self, i: int, argv: Sequence[str], **kwargs: Any) -> subprocess.CompletedProcess:
        """subprocess.run in server i; a timeout kills nsenter, its child lives to the end."""
        if "input" not in kwargs:
            kwargs.setdefault("stdin", subprocess.DEVNULL)
        kwargs.setdefault("timeout", 60)
        return subprocess.run(self.nsenter_argv(i, argv), **kwargs)

    def popen(self, i: int, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen:
        """subprocess.Popen inside server i; its pid is nsenter's, `children()` finds argv's."""
        kwargs.setdefault("stdin", subprocess.DEVNULL)
        return subprocess.Popen(self.nsenter_argv(i, argv), **kwargs)

    def ssh_argv(self, from_i: int, to_i: int, command: str | Sequence[str]) -> list[str]:
        """ssh argv that, given to run(from_i, ...), runs `command` on server to_i."""
        if not (0 <= from_i < len(self.servers) and 0 <= to_i < len(self.servers)):
            raise IndexError(f"no server {from_i} or {to_i}")
        remote = command if isinstance(command, str) else shlex.join(command)
        return ["ssh", "-F", str(self.ssh_config_path), f"srv{to_i}", "--", remote]

    def _write(self, name: str, text: str) -> Path:
        (self.tmpdir / name).write_text(text)  # private: mkdtemp made the directory 0700
        return self.tmpdir / name

    def _keygen(self, name: str) -> str:
        """A fresh ed25519 key pair in the temp dir; returns the public key's first two fields."""
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"{self.prefix}",
                        "-f", str(self.tmpdir / name)], check=True, capture_output=True)
        return " ".join((self.tmpdir / f"{name}.pub").read_text().split()[:2])

    def _write_keys_and_configs(self) -> None:
        """Client key, one host key per server (so ssh proves which server it reached),
        pre-filled known_hosts (no trust on first use), sshd and ssh configs."""
        client = self.tmpdir / "client_ed25519"
        self._write("authorized_keys", self._keygen(client.name) + "\n")
        known, hosts = [], []
        for s in self.servers:
            host_key = f"host_{s.name}_ed25519"
            known.append(f"{s.name},{s.address} {self._keygen(host_key)}\n")
            hosts.append(f"Host {s.name}\n    HostName {s.address}\n")
            self._write(f"sshd_config_{s.name}", "\n".join([
                f"ListenAddress {s.address}", "Port 22", f"HostKey {self.tmpdir / host_key}",
                "PermitRootLogin prohibit-password", "PubkeyAuthentication yes",
                "PasswordAuthentication no", "KbdInteractiveAuthentication no",
                f"AuthorizedKeysFile {self.tmpdir / 'authorized_keys'}",
                "StrictModes no", "UsePAM no", "PidFile none", "UseDNS no", "PrintMotd no",
                "PrintLastLog no", "Subsystem sftp internal-sftp", ""]))
        known_hosts = self._write("known_hosts", "".join(known))
        self.ssh_config_path = self._write("ssh_config", "".join(hosts) + "\n".join([
            "Host *", "    User root", "    Port 22", f"    IdentityFile {client}",
            "    IdentitiesOnly yes", f"    UserKnownHostsFile {known_hosts}",
            "    GlobalKnownHostsFile /dev/null", "    StrictHostKeyChecking yes",
            "    BatchMode yes", "    UpdateHostKeys no", "    ConnectTimeout 5",
            "    LogLevel ERROR", ""]))

    def _track(self, pid: int, what: str) -> None:
        stat = process_stat(pid)
        if stat is not None:
            self._pids.append((pid, stat[1], what))

    def _start_server(self, s: Server) -> None:
        """PID 1 of server s: unshare forks it into the new namespaces, with a fresh /proc."""
        log = self.tmpdir / f"{s.name}.log"
        with open(log, "ab") as err:
            s.unshare = subprocess.Popen(
                ["unshare", "--net", "--uts", "--pid", "--mount", "--fork", "--kill-child",
                 "--propagation", "private", "--mount-proc",
                 sys.executable, "-I", "-S", "-c", _INIT],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err,
                start_new_session=True, preexec_fn=_die_with_parent)  # no terminal's Ctrl-C
        self._track(s.unshare.pid, f"{s.name} unshare")
        assert s.unshare.stdout is not None
        with s.unshare.stdout as out:
            ready = select.select([out], [], [], START_TIMEOUT)[0] and out.readline()
        found = children(s.unshare.pid)
        if ready != b"ready\n" or len(found) != 1:
            raise HarnessError(f"{s.name}: PID 1 did not start: {_tail(log)}")
        s.pid = found[0]
        self._track(s.pid, f"{s.name} init")

    def _make_underlay(self) -> None:
        """The underlay netns and bridge; each veth is born with its server end in the server."""
        self._underlay_made = True  # set first: an interrupt may land after `ip` succeeded
        subprocess.run(["ip", "netns", "add", self.underlay], check=True, capture_output=True)
        lines = ["link set lo up", f"link add {self.bridge} type bridge",
                 f"link set {self.bridge} mtu {UNDERLAY_MTU} up"]
        for s in self.servers:
            lines += [f"link add {s.veth} mtu {UNDERLAY_MTU} type veth peer name {SERVER_IF}"
                      f" mtu {UNDERLAY_MTU} netns {s.pid}",
                      f"link set {s.veth} master {self.bridge} up"]
        done = subprocess.run(["ip", "-n", self.underlay, "-batch", "-"], capture_output=True,
                              text=True, input="\n".join(lines) + "\n")
        if done.returncode != 0:
            raise HarnessError(f"underlay {self.underlay}: {done.stderr.strip()}")

    def _start_sshd(self, s: Server) -> None:
        """Hostname, private /run and /tmp (so sshd's run state is per server), own /sys,
        ul0's address; then the shell becomes sshd -D, so any failure lands in its log."""
        config = self.tmpdir / f"sshd_config_{s.name}"
        script = "\n".join([
            "set -e", f"hostname {s.name}",
            "mount -t tmpfs -o mode=0755,nosuid,nodev tmpfs /run",
            "mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /tmp",
            "mkdir -m 0755 /run/sshd", "mount -t sysfs sysfs /sys", "ip link set lo up",
            f"ip addr add {s.address}/{UNDERLAY_PREFIXLEN} dev {SERVER_IF}",
            f"ip link set {SERVER_IF} mtu {UNDERLAY_MTU} up", f"exec {SSHD} -D -e -f {config}"])
        with open(self.tmpdir / f"{s.name}.sshd.log", "ab") as log:
            s.sshd = self.popen(s.index, ["sh", "-c", script], stdout=log, stderr=log,
                                start_new_session=True)
        self._track(s.sshd.pid, f"{s.name} nsenter sshd")

    def _wait_listening(self) -> None:
        """Until each sshd logs that it listens; also learns sshd's PID to stop it by."""
        deadline = time.monotonic() + START_TIMEOUT
        waiting = list(self.servers)
        while waiting:
            s = waiting[0]
            log = self.tmpdir / f"{s.name}.sshd.log"
            assert s.sshd is not None
            if not s.sshd_pid and (found := children(s.sshd.pid)):
                s.sshd_pid = found[0]
                self._track(s.sshd_pid, f"{s.name} sshd")
            if s.sshd_pid and f"listening on {s.address} port 22".encode() in log.read_bytes():
                waiting.pop(0)
                continue
            if s.sshd.poll() is not None or time.monotonic() > deadline:
                raise HarnessError(f"{s.name}: sshd is not listening: {_tail(log)}")
            time.sleep(0.05)

    def _signal(self, pid: int, sig: int) -> None:
        """Signal `pid` only if it is still the process we started (not a reused PID)."""
        stat = process_stat(pid)
        if stat is not None and (pid, stat[1]) in {(p, start) for p, start, _ in self._pids}:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

    def _stop(self, pairs: list[tuple[subprocess.Popen[bytes] | None, int]]) -> None:
        """SIGTERM the real process of each (launcher, pid) pair, then reap the launcher."""
        for popen, pid in pairs:
            if popen is not None and popen.poll() is None:
                self._signal(pid or popen.pid, signal.SIGTERM)
        for popen, pid in pairs:
            if popen is not None:
                try:
                    popen.wait(timeout=STOP_TIMEOUT)
                except subprocess.TimeoutExpired:
                    self._signal(pid, signal.SIGKILL)
                    popen.kill()
                    popen.wait()

    def close(self) -> None:
        """Stop every sshd, then every PID 1 (ending its PID namespace, so everything started
        inside), drop the underlay and the temp dir. Idempotent; __exit__ calls it."""
        with _sigint_deferred():
            self._stop([(s.sshd, s.sshd_pid) for s in self.servers])
            self._stop([(s.unshare, s.pid) for s in self.servers])
            if self._underlay_made:
                subprocess.run(["ip", "netns", "del", self.underlay], capture_output=True)
                self._underlay_made = False
            if self.tmpdir != Path():
                shutil.rmtree(self.tmpdir, ignore_errors=True)

    def leftovers(self) -> list[str]:
        """What of this instance still exists: namespaces, interfaces, PIDs, the temp dir."""
        found = []
        if os.path.exists(f"/run/netns/{self.underlay}"):
            found.append(f"netns {self.underlay}")
        found += [f"link {name}" for name in sorted(os.listdir("/sys/class/net"))
                  if name.startswith(self.prefix)]
        for pid, start, what in self._pids:
            stat = process_stat(pid)
            if stat is not None and stat[1] == start:
                found.append(f"pid {pid} ({what}, state {stat[0]})")
        if self.tmpdir != Path() and self.tmpdir.exists():
            found.append(f"dir {self.tmpdir}")
        return found
