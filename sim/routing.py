"""The baseline's routing in the simulator: the controller's own convergence
(controller.convergence.Convergence, a routing protocol's hold timer) on the simulation's
clock, writing its recomputed tables into the simulated switches.

MRC's tables (uSID shifts) never change; this only re-points the plain IPv6 routes and ECMP
groups the RoCE-like and single-path contenders use, `delay` after a T0-T1 link goes down
or comes back, as the emulation's controller does. A switch that is down when its tables
change gets them at its reboot (Network.current_tables). Host links are not routed: a dead
NIC link is the host's to notice.
"""

from __future__ import annotations

from collections.abc import Callable

from controller.convergence import Convergence
from controller.tables import SwitchTables, diff
from sim.network import LinkState, Network, NetworkConfigError


class LoopScheduler:
    """controller.convergence.Scheduler on the simulation's clock."""

    def __init__(self, net: Network) -> None:
        self.loop = net.loop

    def call_later(self, delay: float, fn: Callable[[], None]) -> None:
        self.loop.after(delay, fn)


class SwitchWriter:
    """controller.convergence.Writer into the simulated switches' device states: the fewest
    writes (controller.tables.diff), encoded as the emulation's installer encodes them."""

    def __init__(self, net: Network) -> None:
        self.net = net

    def apply(self, name: str, new: SwitchTables) -> list:
        net = self.net
        updates = diff(net.tables_of(net.fabric.by_name[name]), new)  # type: ignore[arg-type]
        net.current_tables[name] = new
        node = net.switches[name]
        if not node.up:
            return updates  # written whole when it comes back
        errors = [e for e in node.state.write([net.codec.update(u.kind, u.entity)
                                               for u in updates]) if e is not None]
        if errors:
            raise NetworkConfigError(f"{name}: convergence write rejected: {errors[0]}")
        return updates


def converge(net: Network, delay: float) -> Convergence:
    """Route around failed T0-T1 links `delay` seconds after each change (the baseline)."""
    conv = Convergence(net.fabric, SwitchWriter(net), delay, LoopScheduler(net),
                       net.queues.thresholds())
    switches = {s.name for s in net.fabric.switches}

    def on_link(link: LinkState, up: bool) -> None:
        if link.a in switches and link.b in switches:
            (conv.link_up if up else conv.link_down)(link.a, link.b)
    net.link_listeners.append(on_link)
    return conv
