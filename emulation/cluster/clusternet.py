"""A fabric's Mininet objects spread over several servers (NetworkConfig.cluster).

emulation.fabricnet builds a fabric on one machine; this module builds the same one over the
servers of an emulation.cluster.cluster.Cluster, on Mininet Cluster Edition's extension points:
- emulation.cluster.placement chooses each node's server (the plane or rack cut with fewer crossing
  links); nodes placed on another server are clusternodes classes, whose shells and
  switch processes run there over ssh; nodes on the first server are the usual ones;
- every other server is held by a serverrun session (lock, manifest, keys, shield,
  work directory, cleanup if this machine's process dies);
- links inside one server are veth pairs made in one `ip -batch` per server; links between
  servers are VXLAN tunnels (one random VNI per link), made by one more batch per server once
  the server's VXLAN guard (emulation.cluster.vxguard) lets only the cluster's servers reach them;
- every server's switch ports are kept from its root namespace's IPv4 stack by the run's
  switch-port guard (safety.portguard); the first server's guards are removed by close(),
  the others' with their serverrun session;
- one emulation.cluster.remote.Forwarder per server brings its switches' P4Runtime and runtime
  ports and its agents' control sockets to this machine, so the controller and the agent
  proxies work unchanged.
"""

from __future__ import annotations

import shlex
import subprocess
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from mininet.net import Mininet
from mininet.node import Host

from controller.tables import LinkKey, link_key
from emulation.builder import OneMachine
from emulation.cluster import vxguard
from emulation.cluster.cablecut import CableCuts
from emulation.cluster.clusternodes import REPO, remote_classes
from emulation.cluster.placement import Placement, place
from emulation.cluster.remote import (
    Forwarder,
    RemoteError,
    RemoteLauncher,
    RemoteProcess,
    SshTarget,
)
from emulation.cluster.serverrun import ServerRun
from emulation.cluster.vxlan import (
    VniAllocator,
    end_lines,
    parse_underlay_device,
    temp_name,
    underlay_query,
)
from emulation.fabricnet import veth_pairs
from emulation.mrctopo import node_mac
from emulation.netconfig import NetworkConfig, NetworkError
from emulation.veths import (
    IP_TIMEOUT_S,
    PrebuiltIntf,
    PrebuiltLink,
    VethError,
    VethPair,
    create_pairs,
    ip_batch,
)
from nodes.softswitch_node import SoftSwitch, SoftSwitchProcess
from nodes.targets import switch_class
from safety import portguard, shield
from safety.credentials import RunCredentials
from safety.runports import PortPlan
from safety.shield import ShieldError


class ClusterRun:
    """One run's placement, server sessions, tunnels and forwarders (module docstring): the
    several-server emulation.builder.Builder."""

    replace_ports = False  # each server's ports are fixed: its forwarder brings them here

    def __init__(self, config: NetworkConfig, workdir: Path,
                 credentials: RunCredentials | None, log=print,
                 record_table: Callable[[str], None] = lambda _name: None,
                 ports: PortPlan | None = None) -> None:
        """`ports` is the one-machine builder's: a cluster keeps the default ports."""
        assert config.cluster is not None
        self.config, self.cluster, self.fabric = config, config.cluster, config.fabric
        self.workdir, self.credentials, self.log = workdir, credentials, log
        self.placement: Placement = place(self.fabric, len(self.cluster.servers))
        self.first = self.cluster.servers[0].name
        self.runs: dict[str, ServerRun] = {}
        self.forwarders: list[Forwarder] = []
        self.pairs: dict[str, list[VethPair]] = {}  # server -> its veth pairs
        self.tunnel_ends: dict[str, list[str]] = {}  # server -> its root-namespace tunnel ends
        self.vnis = VniAllocator()
        self.link_vnis: dict[LinkKey, int] = {}  # links between servers -> their VNI
        self.cut_vnis: set[int] = set()
        self.local_cuts = CableCuts(record_table)  # the first server's (its run manifest)
        self.record_table = record_table
        self.local_guards: list[str] = []  # the first server's guard tables (close removes)
        self.timings: dict[str, float] = {}
        self.released: dict[str, Any] = {}

    # ---- where things are --------------------------------------------------------------------

    def server_of(self, node: str) -> str:
        return self.cluster.servers[self.placement.server_of(node)].name

    def target(self, server: str) -> SshTarget:
        return SshTarget(server, self.cluster.user, self.cluster.ssh_config)

    def dir_on(self, server: str) -> Path:
        """The run's work directory on `server` (logs, agents' sockets)."""
        if server == self.first:
            return self.workdir
        workdir = self.runs[server].workdir
        assert workdir is not None
        return workdir

    def credentials_on(self, server: str) -> RunCredentials | None:
        """The run's credentials as a switch on `server` finds them (its run directory)."""
        if self.credentials is None or server == self.first:
            return self.credentials
        rundir = self.runs[server].rundir
        assert rundir is not None
        return replace(self.credentials, directory=rundir)

    def control_ports_on(self, server: str) -> list[int]:
        """P4Runtime and runtime ports of the switches placed on `server`."""
        return [p for sw in self.fabric.switches if self.server_of(sw.name) == server
                for p in (sw.grpc_port, sw.thrift_port)]

    def record(self, server: str, pid: int) -> None:
        """A process or shell of the run on `server` (its serverrun sweeps it if need be)."""
        if server != self.first:
            self.runs[server].add_pids([pid])

    def is_here(self, node: str) -> bool:
        return self.server_of(node) == self.first

    def own_pid(self, node: Any) -> int | None:
        """A node on another server: its ssh client here (its PID there means nothing here)."""
        if getattr(node, "isRemote", False) and node.shell is not None:
            return node.shell.pid
        return node.pid

    def local_pid(self, proc: Any) -> int | None:
        return None if isinstance(proc, RemoteProcess) else proc.pid

    def agent_options(self, node: Any) -> dict[str, Any]:
        """A host on another server: its agent's files there, started there over ssh."""
        if not getattr(node, "isRemote", False):
            return {}
        return {"server_dir": self.dir_on(node.server), "launcher": RemoteLauncher(self.record)}

    def summary(self) -> dict[str, Any]:
        return {**self.placement.summary(self.fabric), "servers": self.cluster.names,
                "timings": self.timings}

    def switch_ports_on(self, server: str) -> list[str]:
        """The root-namespace interfaces of the switches placed on `server`: their ports."""
        return [f"{node}-eth{port}" for lk in self.fabric.links
                for node, port in ((lk.a, lk.a_port), (lk.b, lk.b_port))
                if node in self.fabric.by_name and self.server_of(node) == server]

    # ---- bring-up ----------------------------------------------------------------------------

    def open_servers(self) -> None:
        """Take every other server (serverrun), in parallel, and give each its keys."""
        start = time.monotonic()
        for server in self.cluster.names[1:]:  # launched here: ssh dies with its thread
            self.runs[server] = ServerRun(self.target(server), self.control_ports_on(server),
                                          REPO)
            self.runs[server].launch()
        for run in self.runs.values():  # they start side by side
            run.await_ready()
            if self.credentials is not None:
                run.put_keys(self.credentials.directory)
        self.timings["servers_s"] = time.monotonic() - start

    def build(self, net: Mininet, target: str) -> None:
        """The placement logged, every other server taken, every node on its server."""
        self.log(f"placement over {', '.join(self.cluster.names)}: "
                 f"{self.placement.summary(self.fabric)}")
        self.open_servers()
        self.add_nodes(net, target)

    def add_nodes(self, net: Mininet, target: str) -> None:
        """Every node on its server (shells running there, no links yet)."""
        start = time.monotonic()
        classes = remote_classes(self.cluster, self.record)
        groups = self._switch_processes(target)
        for sw in self.fabric.switches:
            server = self.server_of(sw.name)
            local = server == self.first
            extra: dict[str, Any] = {} if local else {"server": server}
            if groups:
                extra["switch_process"] = groups[server, sw.plane]
            node = net.addSwitch(sw.name, cls=switch_class(target) if local else classes[target],
                                 device_id=sw.device_id,
                                 log_path=str(self.dir_on(server) / f"{sw.name}.log"),
                                 credentials=self.credentials_on(server), batch_start=True,
                                 **extra)
            self.record(server, node.pid)
        for h in range(self.fabric.hosts):
            name = self.fabric.host_name(h)
            server = self.server_of(name)
            if server == self.first:
                net.addHost(name, cls=Host, ip=None)
            else:
                self.record(server, net.addHost(name, cls=classes["host"], server=server,
                                                ip=None).pid)
        self.timings["nodes_s"] = time.monotonic() - start

    def _switch_processes(self, target: str) -> dict[tuple[str, int], SoftSwitchProcess]:
        """(server, plane) -> the software-switch process serving that plane's switches on
        that server: each server's planes dealt to up to soft_processes processes."""
        if switch_class(target) is not SoftSwitch:
            return {}
        planes: dict[str, list[int]] = {}
        for sw in self.fabric.switches:
            server = self.server_of(sw.name)
            if sw.plane not in planes.setdefault(server, []):
                planes[server].append(sw.plane)
        out = {}
        for server, on in planes.items():
            count = min(self.config.soft_processes, len(on))
            procs = [SoftSwitchProcess(f"{server}-{i}",
                                       str(self.dir_on(server) / f"softswitch-{i}.log"),
                                       self.credentials_on(server)) for i in range(count)]
            for i, plane in enumerate(sorted(on)):
                out[server, plane] = procs[i % count]
        return out

    def start(self, net: Mininet) -> None:
        """Links made on every server, forwarders up, switch processes started. On failure
        the caller stops `net` and then calls close()."""
        start = time.monotonic()
        by_server: dict[str, list[VethPair]] = {}
        crossing = []
        for lk, pair in zip(self.fabric.links, veth_pairs(self.fabric, net), strict=True):
            a, b = self.server_of(lk.a), self.server_of(lk.b)
            if a == b:
                by_server.setdefault(a, []).append(pair)
            else:
                crossing.append(lk)
        self.pairs = by_server
        for server, pairs in by_server.items():
            # PIDs are per server (each its own PID namespace): only this server's hosts
            hosts = {h.pid: h for h in net.hosts if self.server_of(h.name) == server}
            if server != self.first:
                self.runs[server].add_interfaces([p.name1 for p in pairs])
            create_pairs(pairs, hosts, batch=self._batcher(server))
        self._make_tunnels(net, crossing)
        for server in self.cluster.names:
            ports = self.switch_ports_on(server)
            if ports:
                self.load_guard(server, "port_guard", ports)
        for lk in self.fabric.links:
            net.addLink(lk.a, lk.b, port1=lk.a_port, port2=lk.b_port, cls=PrebuiltLink,
                        intf=PrebuiltIntf, addr1=node_mac(self.fabric, lk.a, lk.a_port),
                        addr2=node_mac(self.fabric, lk.b, lk.b_port))
        self.timings["links_s"] = time.monotonic() - start
        start = time.monotonic()
        self._forward(net)
        self.timings["forwarders_s"] = time.monotonic() - start
        start = time.monotonic()
        net.build()
        net.start()
        self.timings["switches_s"] = time.monotonic() - start

    def _batcher(self, server: str):
        if server == self.first:
            return ip_batch

        def remote(lines, force: bool = False) -> None:
            text = "".join(f"{line}\n" for line in lines)
            if text:
                self.target(server).run("ip -force -batch -" if force else "ip -batch -",
                                        timeout=IP_TIMEOUT_S, input=text)
        return remote

    def _make_tunnels(self, net: Mininet, links: list) -> None:
        """Both ends of every crossing link: one ip batch per server makes its ends (with
        temporary names, unique per VNI), moves host ends into their namespaces and names the
        root-namespace ends; host ends are then named and brought up in their shells."""
        batches: dict[str, list[str]] = {}
        in_node: dict[str, list[str]] = {}
        vnis_on: dict[str, list[int]] = {}  # server -> VNIs of its tunnel ends
        devices = {s.name: self._underlay_device(s.name, s.address)
                   for s in self.cluster.servers
                   if any(self.server_of(n) == s.name for lk in links for n in (lk.a, lk.b))}
        mtu = self.cluster.tunnel_mtu
        for lk in links:
            vni = self.vnis.next()
            self.link_vnis[link_key(lk.a, lk.b)] = vni
            ends = ((lk.a, lk.a_port, lk.b), (lk.b, lk.b_port, lk.a))
            for node, port, peer in ends:
                server, other = self.server_of(node), self.server_of(peer)
                local_ip = self.cluster.server(server).address
                remote_ip = self.cluster.server(other).address
                tmp, name = temp_name(vni), f"{node}-eth{port}"
                mac = node_mac(self.fabric, node, port)
                lines = batches.setdefault(server, [])
                vnis_on.setdefault(server, []).append(vni)
                lines += end_lines(vni, local_ip, remote_ip, devices[server], mtu)
                if node in self.fabric.by_name:  # a switch: root namespace
                    lines += [f"link set {tmp} name {name} address {mac}",
                              f"link set {name} up"]
                    self.tunnel_ends.setdefault(server, []).append(name)
                else:
                    lines.append(f"link set {tmp} netns {net[node].pid}")
                    in_node.setdefault(node, []).append(
                        f"ip link set {tmp} name {name} address {mac} && ip link set {name} up")
        for server, vnis in vnis_on.items():  # before any of its tunnels exists
            self.load_guard(server, "vxlan_guard", vnis)
        for server, lines in batches.items():
            if server != self.first:
                self.runs[server].add_interfaces(self.tunnel_ends.get(server, []))
            self._batcher(server)(lines)
        for node, commands in in_node.items():
            out = net[node].cmd(" && ".join(commands))
            if out.strip():
                raise NetworkError(f"{node}: naming its tunnel ends: {out.strip()}")

    def load_guard(self, server: str, kind: str, data: list[Any]) -> None:
        """The run's `kind` guard on `server`: "vxlan_guard" over `data`, the VNIs of its
        tunnel ends, from the cluster's servers (emulation.cluster.vxguard); "port_guard" over
        `data`, its switch ports (safety.portguard). The first server's is in the run
        manifest (record_table) and close() removes it; another's is its serverrun
        session's, removed when the server is released."""
        addresses = [s.address for s in self.cluster.servers]
        try:
            if server != self.first and kind == "vxlan_guard":
                self.runs[server].guard_tunnels(addresses, data)
            elif server != self.first:
                self.runs[server].guard_ports(data)
            elif kind == "vxlan_guard":
                self.local_guards.append(vxguard.install(addresses, data, self.record_table))
            else:
                self.local_guards.append(portguard.install(data, self.record_table))
        except (RemoteError, ShieldError, ValueError) as exc:
            raise NetworkError(f"{server}: loading the run's {kind.replace('_', ' ')}: "
                               f"{exc}") from exc

    def _underlay_device(self, server: str, address: str) -> str:
        command = underlay_query(address)
        if server == self.first:
            out = subprocess.run(shlex.split(command), capture_output=True, text=True).stdout
        else:
            out = self.target(server).run(command)
        return parse_underlay_device(out, server, address)

    def _forward(self, net: Mininet) -> None:
        for server in self.cluster.names[1:]:
            ports = self.control_ports_on(server)
            sockets = [(self.workdir / f"h{h}.sock", self.dir_on(server) / f"h{h}.sock")
                       for h in range(self.fabric.hosts)
                       if self.server_of(self.fabric.host_name(h)) == server]
            if ports or sockets:
                forwarder = Forwarder(self.target(server), ports, sockets)
                self.forwarders.append(forwarder)
                forwarder.start()

    # ---- failures -----------------------------------------------------------------------------

    def is_cut(self, a: str, b: str) -> bool:
        """The link a - b is between servers and cut."""
        vni = self.link_vnis.get(link_key(a, b))
        return vni is not None and vni in self.cut_vnis

    def cut(self, a: str, b: str, on: bool) -> int:
        """Cut (on) or mend the link a - b between two servers (emulation.cluster.cablecut) on both
        its servers; returns the packets the cut had dropped when mending, else 0."""
        vni = self.link_vnis.get(link_key(a, b))
        if vni is None:
            raise NetworkError(f"{a} - {b} is not a link between servers (both are on "
                               f"{self.server_of(a)}): a cable cut drops a tunnel's packets on "
                               "the underlay; take this link down instead")
        (self.cut_vnis.add if on else self.cut_vnis.discard)(vni)
        dropped = 0
        for server in {self.server_of(a), self.server_of(b)}:
            wanted = {v for key, v in self.link_vnis.items() if v in self.cut_vnis
                      and server in {self.server_of(n) for n in key}}
            try:
                done = (self.local_cuts.set(wanted) if server == self.first
                        else self.runs[server].cut(sorted(wanted)))
            except (RemoteError, ShieldError) as exc:
                raise NetworkError(f"cutting {a} - {b} on {server}: {exc}") from exc
            dropped += done.get(vni, 0)
        return dropped

    # ---- teardown ----------------------------------------------------------------------------

    def remove_links(self, _net: Mininet | None = None) -> None:
        """Veth pairs and root-namespace tunnel ends, one batch per server (host ends go with
        their namespaces)."""
        errors = []
        for server in self.cluster.names:
            names = [p.name1 for p in self.pairs.get(server, [])]
            names += self.tunnel_ends.get(server, [])
            if not names:
                continue
            try:
                self._batcher(server)((f"link del dev {n}" for n in names), force=True)
            except (RemoteError, VethError, subprocess.SubprocessError) as exc:
                errors.append(f"{server}: {exc}")
        self.pairs, self.tunnel_ends = {}, {}
        if errors:
            raise NetworkError("removing links: " + "; ".join(errors))

    def close(self) -> dict[str, Any]:
        """Forwarders down, every server's logs copied into workdir/<server>/, every server
        released (its serverrun sweeps what is left); returns what each swept."""
        for forwarder in self.forwarders:
            forwarder.stop()
        self.forwarders = []
        self.local_cuts.close()  # the other servers' go with their release
        for table in self.local_guards:
            shield.remove(table)
        self.local_guards = []
        for server, run in self.runs.items():
            try:
                run.fetch_logs(self.workdir / server)
            except (RemoteError, subprocess.SubprocessError, OSError) as exc:
                self.log(f"{server}: logs not copied: {exc}")
            self.released[server] = run.stop()
        self.runs = {}
        return self.released


def builder_type(config: NetworkConfig) -> type[OneMachine] | type[ClusterRun]:
    """The builder of a run (emulation.builder): several servers when the config names a
    cluster, else this machine. The one place that asks."""
    return OneMachine if config.cluster is None else ClusterRun
