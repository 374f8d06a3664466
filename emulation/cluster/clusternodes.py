"""Mininet nodes on another server of a cluster: Cluster Edition's RemoteMixin, reached the
way the cluster (emulation.cluster.cluster) says.

Cluster Edition runs every remote command as `sudo -E -u USER ssh -q -o BatchMode=yes -o
ForwardAgent=yes -tt USER@IP sudo -E CMD`. The testbed's user is root on every server, so
here no sudo is needed on either side (Debian servers need not have it), no agent is
forwarded, and ssh reads the cluster's own config file (host keys pinned, the run's key)
when one is given. Cluster Edition's cleanup hook would run Mininet's machine-wide cleanup
command over ssh on every server, which kills by name; nodes made here take their server out
of that hook, and a run cleans up exactly what it made (docs/decisions.md, "Several
machines").
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mininet.node import Host

from emulation.cluster.cluster import Cluster
from emulation.cluster.remote import DIE_WITH_PARENT, RemoteProcess, SshTarget
from nodes.bmv2_switch import Bmv2Switch
from nodes.p4switch import SwitchProcessError
from nodes.softswitch_node import SoftSwitch

SHELL_EXIT_S = 2.0  # a remote shell's ssh client, after each signal
REPO = Path(__file__).resolve().parents[2]  # the same path on every server
REMOTE_ENV = ("PATH", "PYTHONPATH")  # what of a switch process's environment crosses ssh

PidSink = Callable[[str, int], None]  # (server, remote PID): what the server's run records


def _no_sink(_server: str, _pid: int) -> None:
    return None


def remote_classes(cluster: Cluster, record: PidSink = _no_sink) -> dict[str, type]:
    """Node classes bound to `cluster`: {"host", "soft", "bmv2", "mixin"}; imported lazily,
    like Cluster Edition itself (it needs distutils, gone from Python 3.12). `record` hears
    of every process a node starts on its server (emulation.cluster.serverrun keeps the list)."""
    cluster_mixin = _cluster_mixin(cluster)
    switch_mixin = _cluster_switch_mixin(cluster_mixin, record)

    class ClusterHost(cluster_mixin, Host):
        """A Mininet host on whichever server of the cluster it is placed on."""

    class ClusterSoftSwitch(switch_mixin, SoftSwitch):
        """The software switch on whichever server it is placed on."""

    class ClusterBmv2Switch(switch_mixin, Bmv2Switch):
        """BMv2 on whichever server it is placed on."""

    return {"mixin": cluster_mixin, "host": ClusterHost, "soft": ClusterSoftSwitch,
            "bmv2": ClusterBmv2Switch}


def _cluster_mixin(cluster: Cluster) -> type:
    """RemoteMixin bound to `cluster`, a class made per call because Cluster Edition can only
    be imported lazily (it needs distutils) and the ssh it uses is the cluster's."""
    from mininet.examples.cluster import ClusterCleanup, RemoteMixin

    class ClusterMixin(RemoteMixin):
        """RemoteMixin over the cluster's ssh, as root, without Mininet's cleanup command."""

        def __init__(self, name: str, server: str = "localhost", **kwargs: Any) -> None:
            place = cluster.server(server)
            local = place is cluster.servers[0]
            super().__init__(name, server="localhost" if local else server,
                             user=cluster.user, serverIP=place.address, **kwargs)

        def startShell(self, *args: Any, **kwargs: Any) -> None:  # noqa: N802 (Mininet's)
            """Node.__init__ starts the shell: our ssh must be in place before it does."""
            ClusterCleanup.serveruser.pop(self.server, None)  # never that command over ssh
            if self.isRemote:
                self.target = SshTarget(self.server, cluster.user, cluster.ssh_config)
                self.sshcmd = [*DIE_WITH_PARENT, *self.target.argv("-q", "-tt")]
            super().startShell(*args, **kwargs)

        def _popen(self, cmd: Any, sudo: bool = True, tt: bool = True, **params: Any) -> Any:
            """Root on every server: never wrap in sudo (RemoteMixin would, on both ends).
            ssh hands the server's shell one string, so an argv is quoted into one here: an
            argument with spaces or quotes (python -c SCRIPT) arrives whole. A string is
            left to the server's shell, as Cluster Edition does."""
            if self.isRemote and not isinstance(cmd, str):
                cmd = [shlex.join(str(c) for c in cmd)]
            return super()._popen(cmd, sudo=not self.isRemote and sudo, tt=tt, **params)

        def terminate(self) -> None:
            """Node.terminate sends the shell's group SIGHUP and then waits without a limit.
            A remote node's shell is our ssh client, which ignores SIGHUP when we were started
            ignoring it (nohup, some CI runners): the wait never ended. So SIGHUP, then SIGTERM,
            then SIGKILL of our own ssh client, each given SHELL_EXIT_S; the server's sshd
            hangs the session up either way."""
            shell = self.shell
            if self.isRemote and shell is not None:
                for sig in (signal.SIGHUP, signal.SIGTERM, signal.SIGKILL):
                    if shell.poll() is not None:
                        break
                    os.killpg(shell.pid, sig)
                    try:
                        shell.wait(SHELL_EXIT_S)
                    except subprocess.TimeoutExpired:
                        continue
            super().terminate()

    return ClusterMixin


def _cluster_switch_mixin(cluster_mixin: type, record: PidSink) -> type:
    """The switch nodes' remote side on top of `cluster_mixin`, a class made per call so that
    every process it starts is reported to this cluster run's `record`."""
    class ClusterSwitchMixin(cluster_mixin):
        """A P4Runtime switch node (nodes.p4switch) on another server: its process
        started there over ssh (RemoteProcess), and its ports and readiness handled through
        the node's own shell there, never through this machine's /proc."""

        def silence_port(self, ifname: str) -> None:
            if not self.isRemote:
                super().silence_port(ifname)
                return
            out = self.cmd(f"echo 1 > /proc/sys/net/ipv6/conf/{shlex.quote(ifname)}"
                           "/disable_ipv6")
            if out.strip():
                raise SwitchProcessError(f"{self.name}: cannot silence {ifname} on "
                                         f"{self.server}: {out.strip()}")

        def launch(self, cmd: list[str], log_path: str | None,
                   env: dict[str, str] | None) -> Any:
            if not self.isRemote:
                return super().launch(cmd, log_path, env)
            wanted = {k: v for k, v in (env or os.environ).items() if k in REMOTE_ENV}
            proc = RemoteProcess(self.target, cmd, cwd=str(REPO), env=wanted,
                                 log_path=log_path)
            record(self.server, proc.start())
            return proc

        def listening(self, probe: Any) -> bool:
            """A switch on this machine: its own sockets (P4RuntimeSwitch.listening); one on
            another server: its P4Runtime port answers there (a cluster keeps fixed ports,
            safety.runports)."""
            if not self.isRemote:
                return super().listening(probe)
            command = (f"(exec 3<>/dev/tcp/127.0.0.1/{self.grpc_port}) 2>/dev/null "
                       "&& echo open || echo closed")
            return self.cmd(command).strip().endswith("open")

        def read_counters(self, names: list[str], counter: str) -> list[int]:
            """A kernel counter of each interface, read on the node's server."""
            if not self.isRemote:
                return super().read_counters(names, counter)
            files = " ".join(f"/sys/class/net/{shlex.quote(n)}/statistics/{counter}"
                             for n in names)
            values = self.cmd(f"cat {files}").split()
            if len(values) != len(names) or not all(v.isdigit() for v in values):
                raise SwitchProcessError(f"{self.name}: cannot read {counter} of {names} on "
                                         f"{self.server}: {' '.join(values)[:200]}")
            return [int(v) for v in values]

    return ClusterSwitchMixin
