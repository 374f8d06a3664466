"""The Mininet objects of a fabric: nodes, batched veths, shared software-switch processes.

MrcNetwork asks for a started Mininet here and gives it back here; what costs time per switch
and per link at scale is done in bulk: every veth pair in one `ip -batch` (emulation.veths),
software switches dealt to one process per CPU (nodes.softswitch_node.SoftSwitchProcess),
switch processes told to stop all at once and then waited for. The switch ports are kept
from the root namespace's IPv4 stack by the run's port guard (safety.portguard), loaded
once they exist and removed with them.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from mininet.net import Mininet
from mininet.node import Host

from emulation.mrctopo import MrcTopo, node_mac
from emulation.netconfig import NetworkConfig, NetworkError
from emulation.nicpacing import CONTROL_RATE_FACTOR
from emulation.veths import PrebuiltIntf, PrebuiltLink, VethPair, create_pairs, delete_pairs
from fabric.topology import Fabric
from nodes.p4switch import STOP_TIMEOUT_S, SwitchProcessError
from nodes.softswitch_node import SoftSwitch, SoftSwitchProcess
from nodes.targets import switch_class
from p4rt.names import PRIORITY_HIGH
from safety import portguard
from safety.credentials import RunCredentials
from safety.procs import stop_process
from safety.runports import PortPlan
from safety.runstate import fabric_interfaces
from safety.shield import ShieldError

QUEUE_SETUP_WORKERS = 8  # switches whose queues are set at once (BMv2: a CLI process each)


def switch_processes(fabric: Fabric, count: int, workdir: Path,
                     credentials: RunCredentials | None) -> dict[int, SoftSwitchProcess]:
    """Plane -> the software-switch process serving it: planes dealt round-robin to `count`
    processes, so a packet's hops inside a plane stay in one."""
    count = min(count, fabric.planes)
    procs = [SoftSwitchProcess(f"{i}", str(workdir / f"softswitch-{i}.log"), credentials)
             for i in range(count)]
    return {plane: procs[plane % count] for plane in range(fabric.planes)}


def veth_pairs(fabric: Fabric, net: Mininet) -> list[VethPair]:
    """One pair per fabric link, its switch end first (switches live in the root namespace)."""
    pairs = []
    for lk in fabric.links:
        (sw, sw_port), (other, other_port) = ((lk.a, lk.a_port), (lk.b, lk.b_port)) \
            if lk.a in fabric.by_name else ((lk.b, lk.b_port), (lk.a, lk.a_port))
        netns = None if other in fabric.by_name else net[other].pid
        pairs.append(VethPair(f"{sw}-eth{sw_port}", node_mac(fabric, sw, sw_port),
                              f"{other}-eth{other_port}", node_mac(fabric, other, other_port),
                              netns))
    return pairs


def empty_net() -> Mininet:
    """The Mininet a builder fills (the caller holds it first, so that a failure halfway
    through still stops the nodes made). Not topo=: build() would add the graph itself."""
    return Mininet(topo=None, controller=None, build=False, autoSetMacs=False,
                   autoStaticArp=False, waitConnected=False)


def add_nodes(net: Mininet, config: NetworkConfig, target: str, workdir: Path,
              credentials: RunCredentials | None, ports: PortPlan) -> None:
    """The switch and host nodes of the fabric's graph (MrcTopo, the switches on the run's
    `ports`; host shells running, no links yet: start() adds them from the same graph)."""
    fabric = config.fabric
    topo = MrcTopo(fabric=fabric, switch_opts={"credentials": credentials}, ports=ports)
    cls = switch_class(target)
    net.fabric_topo = topo  # type: ignore[attr-defined] (start() adds its links)
    groups = switch_processes(fabric, config.soft_processes, workdir, credentials) \
        if cls is SoftSwitch else {}
    for name in topo.switches(sort=False):
        extra = {"switch_process": groups[fabric.by_name[name].plane]} if groups else {}
        net.addSwitch(name, cls=cls, log_path=str(workdir / f"{name}.log"), batch_start=True,
                      **topo.nodeInfo(name), **extra)
    for name in topo.hosts(sort=False):
        net.addHost(name, cls=Host, **topo.nodeInfo(name))


def start(net: Mininet, fabric: Fabric,
          record_table: Callable[[str], None] = lambda _name: None) -> None:
    """Links made, their switch ends guarded (`record_table` hears the guard's table name,
    for the run manifest) and switch processes up (not yet programmed). On failure the
    caller stops `net` (stop_switches, remove_links, net.stop)."""
    pairs = veth_pairs(fabric, net)
    net.pairs = pairs  # type: ignore[attr-defined] (teardown needs them if start fails)
    create_pairs(pairs, {h.pid: h for h in net.hosts})
    try:
        guard = portguard.install(fabric_interfaces(fabric), record_table)
    except ShieldError as exc:
        raise NetworkError(str(exc)) from exc
    net.port_guard = guard  # type: ignore[attr-defined] (remove_links removes it)
    for _a, _b, info in net.fabric_topo.links(sort=False, withInfo=True):  # type: ignore[attr-defined]
        net.addLink(cls=PrebuiltLink, intf=PrebuiltIntf, **info)  # info: node1/2, port1/2, addr1/2
    net.build()
    net.start()  # each switch node silences the kernel's IPv6 on its ports


def stop_switches(net: Mininet) -> None:
    """Every switch process told to stop at once, then each waited for (by its PID)."""
    procs = {}
    for node in net.switches:
        proc = getattr(node, "proc", None)
        if proc is not None and proc.poll() is None:
            procs[proc.pid] = proc
    for proc in procs.values():
        proc.terminate()
    for proc in procs.values():
        stop_process(proc, STOP_TIMEOUT_S)
    for node in net.switches:
        node.stop(deleteIntfs=False)  # reaped above: forgets the process, stops no other


def set_queues(net: Mininet, names: list[str], config: NetworkConfig) -> None:
    """Data queues at the port rate, the high-priority queue CONTROL_RATE_FACTOR faster, the
    depth; one runtime-CLI call per switch (BMv2's is a process of its own each time),
    QUEUE_SETUP_WORKERS switches at once."""
    rate = config.port_rate_pps

    def one(name: str) -> None:
        node = net[name]
        commands = [] if rate is None else [
            f"set_queue_rate {rate}",
            *(f"set_queue_rate {rate * CONTROL_RATE_FACTOR} {port} {PRIORITY_HIGH}"
              for port in sorted(node._data_ports()))]
        if config.link_delay_s and isinstance(node, SoftSwitch):  # BMv2: emulation.linkdelay
            hosts = host_ports(config.fabric, name)
            commands.append(" ".join(["set_link_delay", repr(config.link_delay_s),
                                      *map(str, hosts)]))
        node.cli([*commands, f"set_queue_depth {config.queue_depth}"])

    with ThreadPoolExecutor(QUEUE_SETUP_WORKERS) as pool:
        list(pool.map(one, names))


def host_ports(fabric: Fabric, name: str) -> list[int]:
    """The ports of switch `name` that face hosts (a T0's; none on a T1)."""
    sw = fabric.by_name[name]
    if sw.role != fabric.t0(sw.plane, 0).role:
        return []
    return sorted(fabric.host_port(fabric.nic(h, sw.plane).local) for h in range(fabric.hosts)
                  if fabric.nic(h, sw.plane).t0 == sw.index)


def remove_links(net: Mininet) -> None:
    """The fabric's veths in one batch (Mininet's links then delete nothing themselves), and
    the port guard over their switch ends."""
    try:
        delete_pairs(getattr(net, "pairs", []))
    finally:
        portguard.remove(getattr(net, "port_guard", None))
        net.port_guard = None  # type: ignore[attr-defined]


def port_counters(net: Mininet, name: str, counter: str) -> dict[int, int]:
    """A kernel counter of each port's interface of switch `name`: the same reading for
    every target."""
    node = net[name]
    ports = node._data_ports()
    try:  # on another server, through the node's shell there
        values = node.read_counters(list(ports.values()), counter)
    except SwitchProcessError as exc:
        raise NetworkError(str(exc)) from exc
    return dict(zip(ports, values, strict=True))


def switch_frames(net: Mininet, fabric: Fabric,
                  is_here: Callable[[str], bool]) -> dict[str, dict[str, int]]:
    """Frames each switch took in and sent out, from its interfaces' kernel counters.
    `consumed` = in - out: P4 drops, queue tail drops and anything the switch process itself
    lost (BMv2 was reported to lose frames of large bursts before any queue). Read before
    and after a run, the difference charges such losses to the switch rather than to MRC."""
    out = {}
    for name, ports in switch_packet_counts(net, fabric, is_here).items():
        rx = sum(r for r, _ in ports.values())
        tx = sum(t for _, t in ports.values())
        out[name] = {"in": rx, "out": tx, "consumed": rx - tx}
    return out


PROC_NET_DEV = Path("/proc/net/dev")


def local_packet_counts() -> dict[str, tuple[int, int]]:
    """Interface -> (rx packets, tx packets) of every interface in this namespace, from one
    read of /proc/net/dev: the run view samples hundreds of switch ports twice a second, and
    one file costs less than two sysfs files per port."""
    out = {}
    for line in PROC_NET_DEV.read_text().splitlines()[2:]:
        name, _, fields = line.partition(":")
        values = fields.split()
        if len(values) >= 10:  # rx: bytes packets ... (8 fields), tx: bytes packets ...
            out[name.strip()] = (int(values[1]), int(values[9]))
    return out


def switch_packet_counts(net: Mininet, fabric: Fabric, is_here: Callable[[str], bool]
                         ) -> dict[str, dict[int, tuple[int, int]]]:
    """Switch -> port -> (rx, tx) packets: local ports from /proc/net/dev at once, a switch on
    another server through its node's shell (port_counters)."""
    local = local_packet_counts()
    out = {}
    for name, (ports, here) in _port_map(net, fabric, is_here).items():
        if here and all(n in local for n in ports.values()):
            out[name] = {p: local[n] for p, n in ports.items()}
            continue
        rx = port_counters(net, name, "rx_packets")
        tx = port_counters(net, name, "tx_packets")
        out[name] = {p: (rx[p], tx[p]) for p in ports}
    return out


_PORT_MAPS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _port_map(net: Mininet, fabric: Fabric,
              is_here: Callable[[str], bool]) -> dict[str, tuple[dict[int, str], bool]]:
    """Switch -> (port -> interface, on this machine), built once per Mininet: sampled
    twice a second, and a switch's interfaces outlive its process (a reboot keeps them)."""
    found = _PORT_MAPS.get(net)
    if found is None:
        found = {sw.name: (net[sw.name]._data_ports(), is_here(sw.name))
                 for sw in fabric.switches}
        _PORT_MAPS[net] = found
    return found
