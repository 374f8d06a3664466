"""What the fabric can carry: the one definition of a flow's (or a set of flows') capacity.

A max-flow (Dinic) from the senders' NICs to the receivers' NICs over the fabric's
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
    """Dinic's max-flow on the capacities `cap` (cap[a][b] and cap[b][a] are one cable's two
    directions): shortest augmenting paths found a BFS level graph at a time. Edmonds-Karp's
    one BFS per path took 34 s for a 1,024-host permutation (8,192 NIC-wide paths); a fabric's
    paths all have one of two lengths, so Dinic needs a handful of level graphs."""
    index = {name: i for i, name in enumerate(cap)}
    heads: list[list[int]] = [[] for _ in index]
    to: list[int] = []
    left: list[float] = []  # residual capacity of arc e; e ^ 1 is its reverse
    for a, outs in cap.items():
        for b, c in outs.items():
            if index[a] < index[b] or a not in cap.get(b, {}):
                for u, v, amount in ((a, b, c), (b, a, cap.get(b, {}).get(a, 0.0))):
                    heads[index[u]].append(len(to))
                    to.append(index[v])
                    left.append(amount)
    source, sink = index[_SOURCE], index[_SINK]
    flow = 0.0
    while True:
        level = _levels(heads, to, left, source)
        if level[sink] < 0:
            return flow
        arcs = [0] * len(heads)
        while True:
            pushed = _push(heads, to, left, level, arcs, source, sink, float("inf"))
            if pushed <= _EPS:
                break
            if pushed == float("inf"):
                raise ValueError("a path from a sender to a receiver has no finite capacity")
            flow += pushed


_EPS = 1e-9


def _levels(heads: list[list[int]], to: list[int], left: list[float], source: int) -> list[int]:
    level = [-1] * len(heads)
    level[source] = 0
    todo = deque([source])
    while todo:
        u = todo.popleft()
        for e in heads[u]:
            v = to[e]
            if level[v] < 0 and left[e] > _EPS:
                level[v] = level[u] + 1
                todo.append(v)
    return level


def _push(heads: list[list[int]], to: list[int], left: list[float], level: list[int],
          arcs: list[int], u: int, sink: int, limit: float) -> float:
    """One augmenting path from u along the level graph (depth: the fabric's path length),
    skipping arcs found dead (`arcs`, per node)."""
    if u == sink:
        return limit
    mine = heads[u]
    while arcs[u] < len(mine):
        e = mine[arcs[u]]
        v = to[e]
        if left[e] > _EPS and level[v] == level[u] + 1:
            got = _push(heads, to, left, level, arcs, v, sink, min(limit, left[e]))
            if got > _EPS:
                left[e] -= got
                left[e ^ 1] += got
                return got
        arcs[u] += 1
    return 0.0


def flow_share_left(fabric: Fabric, src: int, dst: int, a: str, b: str) -> float:
    """The share of the flow src -> dst's capacity the fabric keeps with the cable a - b
    down: a host's NIC takes its plane with it; a switch link leaves the NICs the
    bottleneck where the plane has another way round."""
    whole = max_flow(fabric, [src], [dst], 1.0)
    return max_flow(fabric, [src], [dst], 1.0, down_links=[(a, b)]) / whole if whole else 0.0
