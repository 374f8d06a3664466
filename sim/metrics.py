"""Reference figures a scenario is judged against: base RTT and usable capacity.

Capacity is a max-flow: for the set of sending hosts and the set of receiving hosts it is
the most bits/s the *live* fabric could carry from the senders' NICs to the receivers'
NICs, summed over planes, using each port's rate. Hosts other than the senders and
receivers do not relay. A host that both sends and receives (a permutation) is two nodes, its
sending and its receiving half, so its own traffic cannot short-cut the fabric; the figure is
then the aggregate max-flow, which bounds what the flows can carry together (on a
non-blocking fabric, as the presets are, it is what they can carry). Background traffic is
not subtracted: a scenario that injects it (ecn) therefore cannot reach a ratio of 1.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from fabric.topology import Path
from sim.network import HostNode, Network, SwitchNode

_SOURCE = "__source__"
_SINK = "__sink__"


def path_rtt(net: Network, path: Path, data_bytes: int, ack_bytes: int) -> float:
    """Unloaded RTT: a data frame out along `path` and an ack frame back, store-and-forward."""
    total = 0.0
    for a, b in net.fabric.path_links(path):
        out, back = _hop_times(net, a, b, data_bytes, ack_bytes)
        total += out
        total += back
    return total


def _tx(host: str) -> str:
    return host + "/tx"


def _rx(host: str) -> str:
    return host + "/rx"


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
    """Max-flow (Edmonds-Karp) from the senders' NICs to the receivers' NICs over live links."""
    send, recv = set(senders), set(receivers)
    cap: dict[str, dict[str, float]] = {}

    def edge(a: str, b: str, c: float) -> None:
        cap.setdefault(a, {})
        cap.setdefault(b, {})
        cap[a][b] = cap[a].get(b, 0.0) + c
        cap[b].setdefault(a, 0.0)

    for link in net.links.values():
        if not link.up:
            continue
        for port in link.ports:
            a, b = port.node, port.peer.node  # type: ignore[union-attr]
            if isinstance(a, SwitchNode) and not a.up or isinstance(b, SwitchNode) and not b.up:
                continue
            if isinstance(a, HostNode) and a.index not in send:
                continue
            if isinstance(b, HostNode) and b.index not in recv:
                continue
            edge(_tx(a.name) if isinstance(a, HostNode) else a.name,
                 _rx(b.name) if isinstance(b, HostNode) else b.name, port.rate_bps)
    for h in send:
        edge(_SOURCE, _tx(net.hosts[h].name), float("inf"))
    for h in recv:
        edge(_rx(net.hosts[h].name), _SINK, float("inf"))
    flow = 0.0
    while True:
        parent: dict[str, str] = {_SOURCE: _SOURCE}
        todo = deque([_SOURCE])
        while todo and _SINK not in parent:
            u = todo.popleft()
            for v, c in cap[u].items():
                if c > 1e-9 and v not in parent:
                    parent[v] = u
                    todo.append(v)
        if _SINK not in parent:
            return flow
        bottleneck = float("inf")
        v = _SINK
        while v != _SOURCE:
            bottleneck = min(bottleneck, cap[parent[v]][v])
            v = parent[v]
        v = _SINK
        while v != _SOURCE:
            u = parent[v]
            cap[u][v] -= bottleneck
            cap[v][u] += bottleneck
            v = u
        flow += bottleneck
