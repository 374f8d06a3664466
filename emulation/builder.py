"""Where a run's fabric is built: the one seam between one machine and several.

MrcNetwork drives a Builder through the same calls whichever it has (build, start, cut,
remove_links, close) and never asks which one it is. OneMachine, here, builds the fabric on
this machine (emulation.fabricnet); emulation.cluster.clusternet.ClusterRun builds the same
fabric over several servers with Mininet Cluster Edition. clusternet.builder_type
picks one from NetworkConfig.cluster: the only place that looks.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from mininet.net import Mininet

from emulation import fabricnet
from emulation.netconfig import NetworkConfig, NetworkError
from safety.credentials import RunCredentials
from safety.runports import PortPlan


class Builder(Protocol):
    """What MrcNetwork needs of a place to build a fabric."""

    # May a switch whose loopback port another user took move to a free one (safety.runports)?
    # Not where forwarders bring each server's fixed ports here.
    replace_ports: bool

    def build(self, net: Mininet, target: str) -> None:
        """Every node added to `net` (fabricnet.empty_net): host shells running, no links."""

    def start(self, net: Mininet) -> None:
        """Links made and switch processes up; on failure the caller stops `net`, then
        calls remove_links and close."""

    def own_pid(self, node: Any) -> int | None:
        """The PID here that stands for `node` (recorded for a second Ctrl-C)."""

    def local_pid(self, proc: Any) -> int | None:
        """A process's PID on this machine, None when it runs on another server."""

    def is_here(self, node: str) -> bool:
        """Whether `node` runs on this machine (its interfaces are in this kernel)."""

    def server_of(self, node: str) -> str:
        """The server `node` runs on."""

    def agent_options(self, node: Any) -> dict[str, Any]:
        """emulation.agents.AgentProcess's placement options for the agent on `node`."""

    def is_cut(self, a: str, b: str) -> bool:
        """The link a - b is a cable between servers and cut."""

    def cut(self, a: str, b: str, on: bool) -> int:
        """Cut (on) or mend a cable between servers; the packets it dropped when mending."""

    def remove_links(self, net: Mininet) -> None:
        """The fabric's links and their guards, in batches."""

    def close(self) -> dict[str, Any]:
        """Everything the builder holds beyond `net`, released: server -> what it swept."""

    def summary(self) -> dict[str, Any]:
        """For a run's report: the servers and how the fabric was spread ({} on one)."""


THIS_MACHINE = "this machine"


class OneMachine:
    """The fabric on this machine: veths, one port guard, switch processes (fabricnet)."""

    replace_ports = True

    def __init__(self, config: NetworkConfig, workdir: Path,
                 credentials: RunCredentials | None, log: Callable[[str], None] = print,
                 record_table: Callable[[str], None] = lambda _name: None,
                 ports: PortPlan | None = None) -> None:
        self.config, self.workdir, self.credentials = config, workdir, credentials
        self.record_table = record_table
        self.ports = ports if ports is not None else PortPlan.defaults(config.fabric)

    def build(self, net: Mininet, target: str) -> None:
        fabricnet.add_nodes(net, self.config, target, self.workdir, self.credentials,
                            self.ports)

    def start(self, net: Mininet) -> None:
        fabricnet.start(net, self.config.fabric, self.record_table)

    def own_pid(self, node: Any) -> int | None:
        return node.pid

    def local_pid(self, proc: Any) -> int | None:
        return proc.pid

    def is_here(self, node: str) -> bool:
        return True

    def server_of(self, node: str) -> str:
        return THIS_MACHINE

    def agent_options(self, node: Any) -> dict[str, Any]:
        return {}

    def is_cut(self, a: str, b: str) -> bool:
        return False

    def cut(self, a: str, b: str, on: bool) -> int:
        raise NetworkError("a cable cut drops a tunnel's packets on the underlay: only links "
                           "between servers (--servers) have one; take the link down instead")

    def remove_links(self, net: Mininet) -> None:
        fabricnet.remove_links(net)

    def close(self) -> dict[str, Any]:
        return {}

    def summary(self) -> dict[str, Any]:
        return {}
