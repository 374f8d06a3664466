"""The loopback ports every switch of one run listens on, chosen once when the run starts.

The fabric model gives each switch fixed ports (fabric.topology: GRPC_BASE_PORT + device id
for P4Runtime, THRIFT_BASE_PORT + device id for the runtime control), and any local user may
listen on one of them first: BMv2 gave up after 30 s, the software switch exited, and the
readiness probe connected to the squatter (issue 54). So the run, once it holds the fabric
lock and a killed run's leftovers are gone (safety.runguard), takes the default ports
except those already in use, which it replaces by free ones and logs, naming the holder.

This PortPlan is the one statement of which port a switch of the running network uses:
the switch nodes are started on it (MrcTopo), the controller connects to it, the shield
covers it, and the run records its P4Runtime addresses next to its keys, where
`python -m controller --tls-dir` finds them (p4rt.tls.ADDRESSES). `fabric.topology.Switch`'s
`grpc_port` and `thrift_port` are only the defaults.
A cluster run keeps the defaults: its forwarders bring every server's ports to the same
numbers here (emulation.cluster.clusternet).

A switch whose process restarts (BMv2's reboot) frees its ports for a moment, and a local
user may listen on one then. The readiness probe refuses that listener; the run then `move`s
the switch to free ports (emulation.faults), as at the start.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from fabric.topology import EPHEMERAL_PORT_START, GRPC_BASE_PORT, THRIFT_BASE_PORT, Fabric
from safety import listeners
from safety.errors import SafetyError


class PortPlanError(SafetyError, RuntimeError):
    """No free replacement for a port in use (the message says which)."""


@dataclass(frozen=True)
class SwitchPorts:
    """One switch's P4Runtime port and runtime-control (Thrift) port, on 127.0.0.1."""
    grpc: int
    thrift: int

    @property
    def grpc_address(self) -> str:
        return f"127.0.0.1:{self.grpc}"


@dataclass(frozen=True)
class PortPlan:
    """Switch name -> its ports, for one run (module docstring)."""
    ports: dict[str, SwitchPorts]

    @classmethod
    def defaults(cls, fabric: Fabric) -> PortPlan:
        return cls({sw.name: SwitchPorts(sw.grpc_port, sw.thrift_port)
                    for sw in fabric.switches})

    def __getitem__(self, name: str) -> SwitchPorts:
        return self.ports[name]

    def moved(self, name: str, ports: SwitchPorts) -> PortPlan:
        """The same plan with switch `name` on `ports`."""
        return PortPlan({**self.ports, name: ports})

    def all(self) -> list[int]:
        """Every switch's runtime and P4Runtime port: what the run's shield covers."""
        return [p for sp in self.ports.values() for p in (sp.thrift, sp.grpc)]

    def addresses(self) -> dict[str, str]:
        """Switch name -> P4Runtime address, for the controller."""
        return {name: sp.grpc_address for name, sp in self.ports.items()}

    def node_options(self, name: str) -> dict[str, int]:
        """The switch node's keyword arguments (nodes.p4switch.P4RuntimeSwitch)."""
        sp = self.ports[name]
        return {"grpc_port": sp.grpc, "thrift_port": sp.thrift}

    def to_json(self) -> dict[str, list[int]]:
        return {name: [sp.grpc, sp.thrift] for name, sp in self.ports.items()}

    @classmethod
    def from_json(cls, data: object) -> PortPlan:
        if not isinstance(data, dict):
            raise ValueError("a port plan is an object of switch name -> [grpc, thrift]")
        ports = {}
        for name, pair in data.items():
            if not (isinstance(pair, list) and len(pair) == 2 and all(
                    isinstance(p, int) and 1 <= p <= 65535 for p in pair)):
                raise ValueError(f"bad ports for {name!r}: {pair!r}")
            ports[str(name)] = SwitchPorts(pair[0], pair[1])
        return cls(ports)


def _candidates(base: int, fabric: Fabric) -> Iterator[int]:
    """Replacements for a port of `base`'s block: the ports above the fabric's block, up to
    the ephemeral range (where an outgoing connection may hold a port at any moment)."""
    yield from range(base + max(sw.device_id for sw in fabric.switches) + 1,
                     EPHEMERAL_PORT_START)


class _Chooser:
    """Keeps each port of a plan, or replaces one in use by a free one (logged with who
    holds it); never hands out a port twice."""

    def __init__(self, fabric: Fabric, taken: set[int], table: list[listeners.TcpSocket],
                 log: Callable[[str], None]) -> None:
        self.taken, self.table, self.log = taken, table, log
        self.spare = {"P4Runtime": _candidates(GRPC_BASE_PORT, fabric),
                      "runtime": _candidates(THRIFT_BASE_PORT, fabric)}

    def choose(self, name: str, kind: str, port: int) -> int:
        held = listeners.holder(port, self.table)
        if held is None:
            return port
        for new in self.spare[kind]:
            if new not in self.taken and listeners.holder(new, self.table) is None:
                self.taken.add(new)
                self.log(f"{name}'s {kind} port {port} is {held}: {name} uses port {new} "
                         "instead")
                return new
        raise PortPlanError(f"{name}'s {kind} port {port} is {held}, and no port up to "
                            f"{EPHEMERAL_PORT_START - 1} is free to replace it")

    def ports(self, name: str, sp: SwitchPorts) -> SwitchPorts:
        return SwitchPorts(self.choose(name, "P4Runtime", sp.grpc),
                           self.choose(name, "runtime", sp.thrift))


def assign(fabric: Fabric, log: Callable[[str], None] = print,
           table: list[listeners.TcpSocket] | None = None) -> PortPlan:
    """The defaults, each port already in use replaced by a free one (logged with who
    holds it). Call it holding the fabric lock, after clean_leftovers: no switch of ours
    runs then, so whatever holds a port is someone else's."""
    table = listeners.socket_table() if table is None else table
    defaults = PortPlan.defaults(fabric)
    chooser = _Chooser(fabric, set(defaults.all()), table, log)
    return PortPlan({name: chooser.ports(name, sp) for name, sp in defaults.ports.items()})


def move(plan: PortPlan, name: str, fabric: Fabric, log: Callable[[str], None] = print,
         table: list[listeners.TcpSocket] | None = None) -> PortPlan:
    """`plan` with switch `name`'s ports that are in use now replaced by free ones. Call it
    while that switch's process is stopped (a reboot that found a stranger on its port):
    whatever holds one of its ports then is someone else's."""
    table = listeners.socket_table() if table is None else table
    chooser = _Chooser(fabric, set(plan.all()), table, log)
    return plan.moved(name, chooser.ports(name, plan[name]))
