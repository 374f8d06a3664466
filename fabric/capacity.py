"""What the fabric can carry: the one definition of a flow's (or a set of flows') capacity.

A max-flow (Edmonds-Karp) from the senders' NICs to the receivers' NICs over the fabric's
cables, each carrying `rate` each way, summed over planes. Hosts other than the senders and
receivers do not relay. A host that both sends and receives (a permutation) is two nodes,
its sending and its receiving half, so its own traffic cannot short-cut the fabric; the
figure is then the aggregate max-flow, which bounds what the flows can carry together (on a
non-blocking fabric, as the presets are, it is what they can carry). The unit is the
rate's: packets/s for the emulation's ports, bits/s for the simulator's links.

The demo's capacity, the bench's, the live view's and the simulator's all come from here.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable

from fabric.topology import Fabric

_SOURCE, _SINK = "__source__", "__sink__"
# A cable's rate from node a to node b, or one rate for every cable.
Rate = float | Callable[[str, str], float]


def max_flow(fabric: Fabric, senders: Iterable[int], receivers: Iterable[int], rate: Rate, *,
             down_links: Iterable[tuple[str, str]] = (),
             down_switches: Iterable[str] = ()) -> float:
    """The most the live fabric carries from `senders` to `receivers` (module docstring);
    `down_links` (either order) and `down_switches` carry nothing."""
    send, recv = set(senders), set(receivers)
    host_index = {fabric.host_name(h): h for h in range(fabric.hosts)}
    dead = {frozenset(pair) for pair in down_links}
    off = set(down_switches)
    rate_of = rate if callable(rate) else (lambda _a, _b: float(rate))
    cap: dict[str, dict[str, float]] = {_SOURCE: {}, _SINK: {}}

    def edge(a: str, b: str, c: float) -> None:
        cap.setdefault(a, {})
        cap.setdefault(b, {})
        cap[a][b] = cap[a].get(b, 0.0) + c
        cap[b].setdefault(a, 0.0)

    for lk in fabric.links:
        if frozenset((lk.a, lk.b)) in dead or lk.a in off or lk.b in off:
            continue
        for u, v in ((lk.a, lk.b), (lk.b, lk.a)):
            if u in host_index and host_index[u] not in send \
                    or v in host_index and host_index[v] not in recv:
                continue
            edge(u + "/tx" if u in host_index else u, v + "/rx" if v in host_index else v,
                 rate_of(u, v))
    for h in send:
        edge(_SOURCE, fabric.host_name(h) + "/tx", float("inf"))
    for h in recv:
        edge(fabric.host_name(h) + "/rx", _SINK, float("inf"))
    return _augment(cap)


def _augment(cap: dict[str, dict[str, float]]) -> float:
    """Edmonds-Karp on the residual capacities `cap` (changed in place): shortest
    augmenting paths by BFS until none is left."""
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


def flow_share_left(fabric: Fabric, src: int, dst: int, a: str, b: str) -> float:
    """The share of the flow src -> dst's capacity the fabric keeps with the cable a - b
    down: a host's NIC takes its plane with it; a switch link leaves the NICs the
    bottleneck where the plane has another way round."""
    whole = max_flow(fabric, [src], [dst], 1.0)
    return max_flow(fabric, [src], [dst], 1.0, down_links=[(a, b)]) / whole if whole else 0.0
