"""What every simulator scenario shares: its description, the failure timing, and helpers.

Scenario modules (sim.scenarios, sim.failures, sim.collective) build on this one; the
registry of named scenarios and run_scenario live in sim.scenarios.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fabric.topology import Fabric
from sim.errors import SimError
from sim.harness import Harness
from sim.host import HostAdapter
from wire import DATA_DSCPS, decode_frame

DEFAULT_FABRIC = Fabric(planes=4, t0_per_plane=2, t1_per_plane=2, hosts_per_t0=2)
# The paper's incast victim (also the bench's, bench.experiments.paper): 7 senders off T0 0
# write to h0; the victim, the last host, writes to h0's neighbour across the same spines'
# downlinks.
# Two planes of 3 T0 x 3 T1 x 4 hosts: 3 spines carry 1.5x h0's and h1's NIC capacity.
VICTIM_FABRIC = Fabric(planes=2, t0_per_plane=3, t1_per_plane=3, hosts_per_t0=4)
INCAST_SENDERS = 7
INCAST_PER_VICTIM = 4  # the incast moves this many times the victim's bytes
FAILURE_AT = 0.3  # fraction of the ideal transfer time at which failures strike
TIME_LIMIT_FACTOR = 50  # give up after this many ideal transfer times (+ 50 ms)

Finisher = Callable[[dict[str, Any]], None]


class ScenarioError(SimError, ValueError):
    """Unknown scenario name or unusable parameters."""


@dataclass(frozen=True)
class Scenario:
    name: str
    fabric: Fabric
    summary: str
    setup: Callable[[Harness, int], Finisher]
    min_hosts: int = 2  # on another fabric (--fabric): the hosts its setup names
    min_hosts_per_t0: int = 1
    min_t0: int = 2  # T0 switches per plane: 2 for a path across the spines

    def refusal(self, fabric: Fabric) -> str | None:
        """Why `fabric` cannot run this scenario, or None."""
        if fabric.t0_per_plane < self.min_t0:
            return (f"{self.name} sends across spines: it needs at least {self.min_t0} T0 "
                    "switches per plane")
        if fabric.hosts < self.min_hosts or fabric.hosts_per_t0 < self.min_hosts_per_t0:
            return (f"{self.name} needs at least {self.min_hosts} hosts and "
                    f"{self.min_hosts_per_t0} per T0; the fabric has {fabric.hosts} and "
                    f"{fabric.hosts_per_t0}")
        return None


def ideal_time(h: Harness) -> float:
    """The whole run's bytes at the usable capacity."""
    planned = h.planned_bytes or len(h.transfers[0].data) * len(h.transfers)
    return planned * 8 / h.capacity_log[-1][1]


def recovery(h: Harness, sender: HostAdapter, routes: set, t_fail: float) -> float:
    last = max((sender.last_data_tx_route.get(r, -1.0) for r in routes), default=-1.0)
    return max(0.0, last - t_fail) / h.base_rtt if last > t_fail else 0.0


def single(h: Harness, size: int) -> tuple[HostAdapter, int, int]:
    src, dst = 0, h.fabric.hosts - 1  # first and last host: on different T0s (cross-spine)
    h.add_transfer(src, dst, size)
    return h.adapters[src], src, dst


class DataCounter:
    """Sits in front of a host's adapter and counts the data frames (trimmed or not) that
    reach it, so a scenario can report exactly how many data frames the fabric lost."""

    def __init__(self, h: Harness, host: int) -> None:
        self.inner = h.adapters[host]
        self.frames = 0
        h.net.attach(host, self)

    def on_frame(self, plane: int, frame: bytearray) -> None:
        if decode_frame(frame)[0].dscp in DATA_DSCPS:
            self.frames += 1
        self.inner.on_frame(plane, frame)

    def on_nic_state(self, plane: int, up: bool) -> None:
        self.inner.on_nic_state(plane, up)


def neighbour(fabric: Fabric, host: int) -> int:
    """Another host on the same T0 (the ecn scenario's background endpoints)."""
    t0 = fabric.nic(host, 0).t0
    return next(x for x in range(fabric.hosts) if x != host and fabric.nic(x, 0).t0 == t0)


def victim_layout(fabric: Fabric) -> tuple[list[int], int, int, int]:
    """(incast senders, incast receiver, victim sender, victim receiver) on `fabric`: the
    receivers are h0 and its neighbour on T0 0; the victim sender is the last host, the
    senders up to INCAST_SENDERS hosts before it off T0 0. ScenarioError if it has no room."""
    t0_of = [fabric.nic(h, 0).t0 for h in range(fabric.hosts)]
    off = [h for h in range(fabric.hosts) if t0_of[h] != t0_of[0]]
    if fabric.hosts_per_t0 < 2 or len(off) < 2:
        raise ScenarioError("the victim scenario needs 2 hosts on T0 0 and 2 off it")
    return off[:-1][:INCAST_SENDERS], 0, off[-1], neighbour(fabric, 0)


def ideal_time_for(h: Harness, size: int) -> float:
    """Ideal transfer time before start() has logged capacity: evaluate it now."""
    if not h.capacity_log:
        h.note_capacity()
    return size * 8 / h.capacity_log[-1][1]


class FailingUplink:
    """One cross-spine transfer (single) and the link its failure scenarios hit, picked as the
    bench's Injector picks it: the sender's T0's busiest plane-0 uplink (most frames sent so
    far, the lowest spine on a tie), chosen when the failure strikes, so a contender on one
    hashed path is hit as MRC is. pick() names the spine and sets `routes`, the transfer's
    routes over that link."""

    PLANE = 0

    def __init__(self, h: Harness, size: int) -> None:
        self.h = h
        self.sender, self.src, self.dst = single(h, size)
        fabric = h.fabric
        self.t0 = fabric.t0(self.PLANE, fabric.nic(self.src, self.PLANE).t0).name
        self.t1: str | None = None
        self.routes: set = set()

    def _sent(self, spine: int) -> int:
        link = self.h.net.link(self.t0, self.h.fabric.t1(self.PLANE, spine).name)
        return next(p.tx_packets for p in link.ports if p.node.name == self.t0)

    def pick(self) -> str:
        fabric = self.h.fabric
        spine = max(range(fabric.t1_per_plane), key=lambda j: (self._sent(j), -j))
        self.t1 = fabric.t1(self.PLANE, spine).name
        self.routes = {p.address for p in fabric.paths(self.src, self.dst, self.PLANE)
                       if p.spine == spine}
        return self.t1
