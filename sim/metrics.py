"""Reference figures a scenario is judged against: base RTT and usable capacity.

Capacity is fabric.capacity's max-flow over the *live* simulated fabric (each port's rate;
links and switches that are down carry nothing). Background traffic is not subtracted: a
scenario that injects it (ecn) therefore cannot reach a ratio of 1.
"""

from __future__ import annotations

from collections.abc import Iterable

from fabric.capacity import max_flow
from fabric.topology import Path
from sim.network import Network


def path_rtt(net: Network, path: Path, data_bytes: int, ack_bytes: int) -> float:
    """Unloaded RTT: a data frame out along `path` and an ack frame back, store-and-forward."""
    total = 0.0
    for a, b in net.fabric.path_links(path):
        out, back = _hop_times(net, a, b, data_bytes, ack_bytes)
        total += out
        total += back
    return total


def _hop_times(net: Network, a: str, b: str, data_bytes: int,
               ack_bytes: int) -> tuple[float, float]:
    """A data frame from a to b, and an ack frame back, over their link, store-and-forward."""
    link = net.link(a, b)
    out = next(p for p in link.ports if p.node.name == a)
    back = next(p for p in link.ports if p.node.name == b)
    return (data_bytes * 8 / out.rate_bps + out.delay_s,
            ack_bytes * 8 / back.rate_bps + back.delay_s)


def _hop_rtt(net: Network, a: str, b: str, data_bytes: int, ack_bytes: int) -> float:
    out, back = _hop_times(net, a, b, data_bytes, ack_bytes)
    return out + back


class RttTable:
    """What every host's RTT hint needs, computed once per fabric and link rates: per plane,
    each T0's two worst host links down (a source leaves its own out), each T0-spine hop, and
    per spine its two worst continuations down to a host (a source leaves its own T0 out).
    Building it costs planes x (hosts + T0s x spines); a host's hint then costs planes x
    spines (it was hosts x spines per host, hosts^2 x spines for the fabric: minutes at
    1,024 hosts)."""

    def __init__(self, net: Network, data_bytes: int, ack_bytes: int) -> None:
        fabric = net.fabric
        self.net, self.data_bytes, self.ack_bytes = net, data_bytes, ack_bytes
        self.rate_changes = net.rate_changes
        per_t0 = fabric.hosts_per_t0
        # per plane: T0 names, per T0 its two worst (rtt, host) down, per T0 per spine the
        # hop's RTT, per spine its two worst (rtt via the T0 and down to a host, T0)
        self.planes: list[tuple[list[str], list[list[tuple[float, int]]],
                                list[list[float]], list[list[tuple[float, int]]]]] = []
        for plane in range(fabric.planes):
            t0s = [fabric.t0(plane, t).name for t in range(fabric.t0_per_plane)]
            spines = [fabric.t1(plane, s).name for s in range(fabric.t1_per_plane)]
            down = [_worst_two((self.hop(name, fabric.host_name(h)), h)
                               for h in range(t * per_t0, (t + 1) * per_t0))
                    for t, name in enumerate(t0s)]
            t0_spine = [[self.hop(t0, s) for s in spines] for t0 in t0s]
            beyond = [_worst_two((self.hop(s, t0s[t]) + down[t][0][0], t)
                                 for t in range(len(t0s)) if down[t])
                      for s in spines]
            self.planes.append((t0s, down, t0_spine, beyond))

    def hop(self, a: str, b: str) -> float:
        return _hop_rtt(self.net, a, b, self.data_bytes, self.ack_bytes)

    def current(self, net: Network, data_bytes: int, ack_bytes: int) -> bool:
        """Whether the table still describes `net` (no link rate changed since) for these
        frame sizes."""
        return (net is self.net and net.rate_changes == self.rate_changes
                and (data_bytes, ack_bytes) == (self.data_bytes, self.ack_bytes))

    def longest_rtt_from(self, src: int) -> float:
        """max(path_rtt) over every path from host `src` to every other host, without
        listing the paths."""
        fabric = self.net.fabric
        me, best = fabric.host_name(src), 0.0
        for plane, (t0s, down, t0_spine, beyond) in enumerate(self.planes):
            home = fabric.nic(src, plane).t0
            up = self.hop(me, t0s[home])
            local = _worst_but(down[home], src)
            if local is not None:
                best = max(best, up + local)
            for s, far in enumerate(beyond):
                other = _worst_but(far, home)
                if other is not None:
                    best = max(best, up + t0_spine[home][s] + other)
        return best


def _worst_two(items: Iterable[tuple[float, int]]) -> list[tuple[float, int]]:
    """The two largest (value, key) by value, largest first."""
    top: list[tuple[float, int]] = []
    for value, key in items:
        if len(top) < 2:
            top.append((value, key))
            top.sort(key=lambda vk: -vk[0])
        elif value > top[1][0]:
            top[1] = (value, key)
            if value > top[0][0]:
                top.reverse()
    return top


def _worst_but(top: list[tuple[float, int]], key: int) -> float | None:
    """The largest value of a _worst_two list whose key is not `key`."""
    for value, k in top:
        if k != key:
            return value
    return None


def capacity_bps(net: Network, senders: Iterable[int], receivers: Iterable[int]) -> float:
    """fabric.capacity.max_flow over the simulated fabric as it is now: its links' rates,
    links and switches that are down carry nothing."""
    rates: dict[tuple[str, str], float] = {}
    down: list[tuple[str, str]] = []
    for link in net.links.values():
        for port in link.ports:
            rates[port.node.name, port.peer.node.name] = port.rate_bps  # type: ignore[union-attr]
        if not link.up:
            down.append(tuple(port.node.name for port in link.ports))  # type: ignore[arg-type]
    return max_flow(net.fabric, senders, receivers, lambda a, b: rates[a, b], down_links=down,
                    down_switches=[n for n, sw in net.switches.items() if not sw.up])
