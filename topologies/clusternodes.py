"""Mininet nodes on another server of a cluster: Cluster Edition's RemoteMixin, reached the
way the cluster (topologies.cluster) says.

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
from typing import Any

from mininet.node import Host

from topologies.cluster import Cluster
from topologies.remote import SshTarget

SHELL_EXIT_S = 2.0  # a remote shell's ssh client, after each signal


def remote_classes(cluster: Cluster) -> dict[str, type]:
    """Node classes bound to `cluster`: {"host": ...}; imported lazily, like Cluster
    Edition itself (it needs distutils, gone from Python 3.12)."""
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
                self.sshcmd = self.target.argv("-q", "-tt")
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

    class ClusterHost(ClusterMixin, Host):
        """A Mininet host on whichever server of the cluster it is placed on."""

    return {"mixin": ClusterMixin, "host": ClusterHost}
