"""Processes on another server of a cluster, and its loopback ports brought to this one.

Two primitives the cluster's switch and agent nodes are built on (docs/decisions.md,
"Several machines"):
- RemoteProcess: a command started on a server over ssh. Its PID is the one the server's own
  shell reports (never looked up in this machine's /proc, where it means nothing), and it is
  stopped by that PID through ssh. The ssh session stays open for the process's life with a
  terminal (-tt): if this machine's process dies, even by SIGKILL, the kernel ends our ssh
  client (PR_SET_PDEATHSIG), the server's sshd hangs the session up, and the process gets
  SIGHUP. So a killed first server leaves nothing running elsewhere.
- Forwarder: one `ssh -N -L` per server that brings its switches' P4Runtime and control ports
  (bound to the server's loopback only) to the same port numbers on this machine's loopback.
  The controller then reaches every switch at 127.0.0.1:PORT wherever it runs, with the
  run's mutual TLS and tokens unchanged.
"""

from __future__ import annotations

import shlex
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from emulation.errors import EmulationError
from safety.procs import stop_process

START_TIMEOUT_S = 15.0
STOP_TIMEOUT_S = 5.0


class RemoteError(EmulationError, RuntimeError):
    """A remote command or tunnel failed; the message names the server and what it said."""


# Our ssh clients end when this process ends, however it ends: the kernel signals them
# (PR_SET_PDEATHSIG) when the *thread* that started them exits, so they are started from a
# thread that lives as long as the run (the main thread), never from a worker pool. util-linux
# `setpriv` sets it and execs ssh: a preexec_fn would run Python in the forked child, which
# crashed there (gRPC's epoll "Check failed: next_worker->state == KICKED") once the
# controller's gRPC threads were running.
DIE_WITH_PARENT = ("setpriv", "--pdeathsig", "TERM", "--")


@dataclass(frozen=True)
class SshTarget:
    """How to reach one server: an ssh name, the user, and an optional ssh config file."""
    host: str
    user: str = "root"
    config: Path | None = None

    def argv(self, *options: str) -> list[str]:
        cmd = ["ssh", "-o", "BatchMode=yes"]
        if self.config is not None:
            cmd += ["-F", str(self.config)]
        return [*cmd, *options, "-l", self.user, self.host]

    def run(self, command: str, timeout: float = 30.0, input: str | None = None) -> str:  # noqa: A002
        """A short command on the server (`input` on its stdin); its output, or RemoteError
        with it."""
        stdin = {"input": input} if input is not None else {"stdin": subprocess.DEVNULL}
        done = subprocess.run([*self.argv("-T"), "--", command], capture_output=True,
                              text=True, timeout=timeout, **stdin)
        if done.returncode != 0:
            raise RemoteError(f"{self.host}: {command!r} exited {done.returncode}: "
                              f"{(done.stderr or done.stdout).strip()[-500:]}")
        return done.stdout


class RemoteProcess:
    """`argv` running on `target` (started by start(), stopped by stop())."""

    def __init__(self, target: SshTarget, argv: Sequence[str], *, cwd: str = "/",
                 env: dict[str, str] | None = None, log_path: str | None = None) -> None:
        self.target, self.argv, self.cwd = target, list(argv), cwd
        self.env, self.log_path = dict(env or {}), log_path
        self.remote_pid: int | None = None  # on the server, from its own shell
        self.session: subprocess.Popen | None = None

    def _script(self) -> str:
        exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items()))
        out = shlex.quote(self.log_path) if self.log_path else "/dev/null"
        run = shlex.join(self.argv)
        # the shell reports its PID, then becomes the command (same PID)
        return (f"cd {shlex.quote(self.cwd)} && echo MRCPID $$ && "
                f"exec env {exports} {run} >>{out} 2>&1 </dev/null")

    def start(self, timeout: float = START_TIMEOUT_S) -> int:
        self.session = subprocess.Popen(
            [*DIE_WITH_PARENT, *self.target.argv("-tt"), "--", self._script()],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        assert self.session.stdout is not None
        deadline = time.monotonic() + timeout
        seen = b""
        while time.monotonic() < deadline:
            line = self.session.stdout.readline()
            if not line:
                break
            seen += line
            words = line.decode(errors="replace").split()
            if len(words) == 2 and words[0] == "MRCPID" and words[1].isdigit():
                self.remote_pid = int(words[1])
                return self.remote_pid
        code = self.session.poll()
        self._end_session()
        raise RemoteError(f"{self.target.host}: {self.argv[0]} did not start (ssh exit "
                          f"{code}; log {self.log_path or 'none'}): "
                          f"{seen.decode(errors='replace').strip()[-500:]}")

    def alive(self) -> bool:
        """Asked of the server: is our PID still running there?"""
        if self.remote_pid is None:
            return False
        out = self.target.run(f"kill -0 {self.remote_pid} 2>/dev/null && echo alive || "
                              "echo gone")
        return out.strip() == "alive"

    # ---- what subprocess.Popen offers, so code that stops processes needs no other path --
    # `pid` is our ssh client's: the one PID on this machine whose end ends the process, so a
    # run manifest or a later cleanup that kills it by PID does the right thing here.

    @property
    def pid(self) -> int | None:
        return self.session.pid if self.session is not None else None

    @property
    def returncode(self) -> int | None:
        return self.session.returncode if self.session is not None else None

    def poll(self) -> int | None:
        """The session ends when the process does (ssh returns its exit status)."""
        return self.session.poll() if self.session is not None else 0

    def terminate(self) -> None:
        self._signal("TERM")

    def kill(self) -> None:
        self._signal("KILL")

    def wait(self, timeout: float | None = None) -> int:
        assert self.session is not None
        code = self.session.wait(timeout)
        self.remote_pid = None
        return code

    def _signal(self, name: str) -> None:
        if self.remote_pid is not None and self.poll() is None:
            self.target.run(f"kill -{name} {self.remote_pid} 2>/dev/null; true")

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM by PID on the server, SIGKILL if it outlives `timeout`; then the session."""
        stop_process(self, timeout)  # through the Popen interface above
        self._end_session()

    def _end_session(self) -> None:
        if self.session is not None:
            end_session(self.session)
            self.session = None


class RemoteLauncher:
    """emulation.agents.Launcher for a node on another server: the process runs there in the
    node's namespaces (mnexec), over ssh; `record` hears of its PID there (that server's
    serverrun sweeps it if need be)."""

    def __init__(self, record: Callable[[str, int], None]) -> None:
        self.record = record

    def start(self, node: Any, argv: Sequence[str], cwd: str, env: dict[str, str],
              log: Path) -> tuple[RemoteProcess, int]:
        proc = RemoteProcess(node.target, ["mnexec", "-a", str(node.pid), *argv], cwd=cwd,
                             env=env, log_path=str(log))
        pid = proc.start()
        self.record(node.server, pid)
        return proc, pid

    def stop(self, proc: RemoteProcess, timeout: float) -> None:
        proc.stop(timeout)  # and its ssh session


class Forwarder:
    """This machine's 127.0.0.1:PORT -> the server's 127.0.0.1:PORT, for each port given, and
    this machine's Unix socket -> the server's, for each (local, remote) path pair given (the
    agents' control sockets; the local ones belong in a private directory)."""

    def __init__(self, target: SshTarget, ports: Sequence[int],
                 sockets: Sequence[tuple[Path, Path]] = ()) -> None:
        self.target, self.ports = target, sorted(set(ports))
        self.sockets = list(sockets)
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = START_TIMEOUT_S) -> None:
        taken = [p for p in self.ports if _listening(p)]
        if taken:
            raise RemoteError(f"cannot forward {self.target.host}'s ports: 127.0.0.1 ports "
                              f"{taken} are already in use here")
        forwards = [a for p in self.ports for a in ("-L", f"127.0.0.1:{p}:127.0.0.1:{p}")]
        forwards += [a for local, remote in self.sockets for a in ("-L", f"{local}:{remote}")]
        self.proc = subprocess.Popen(
            [*DIE_WITH_PARENT, *self.target.argv("-N", "-o", "ExitOnForwardFailure=yes",
                                                 "-o", "StreamLocalBindUnlink=yes", *forwards)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + timeout
        while not (all(_listening(p) for p in self.ports)
                   and all(local.exists() for local, _ in self.sockets)):
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode(errors="replace") if self.proc.stderr else ""
                self.proc = None
                raise RemoteError(f"{self.target.host}: port forwarding failed: {err.strip()}")
            if time.monotonic() > deadline:
                self.stop()
                raise RemoteError(f"{self.target.host}: ports {self.ports} not forwarded "
                                  f"after {timeout:.0f} s")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is not None:
            end_session(self.proc)
            self.proc = None
        for local, _ in self.sockets:
            local.unlink(missing_ok=True)


def end_session(proc: subprocess.Popen) -> None:
    """Our ssh client: SIGTERM, SIGKILL if it lingers, reaped, its pipes closed."""
    stop_process(proc, STOP_TIMEOUT_S)
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()


def _listening(port: int) -> bool:
    """Someone listens on our 127.0.0.1:port (the local end of a forward)."""
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0
