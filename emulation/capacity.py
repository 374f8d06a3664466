"""Whether this machine can hold a fabric, asked before anything starts.

A fabric that does not fit in memory fails late and messily: switch processes killed by the
OOM killer halfway through bring-up, a machine swapping. So MrcNetwork asks first, from the
resident memory measured per process on this testbed (docs/benchmarks.md, "Cost of scale"):
a BMv2 switch is a process of its own (48-51 MB idle, from 16 to 144 switches; 60 allows for
traffic); software switches share a process per CPU (about 55 MB each, plus about 0.6 MB per
switch it serves; 2 allows for queues); an agent is about 21 MB; every Mininet node keeps a
shell. The refusal names what the fabric needs, what the machine has, and the largest fabric
of that shape it can hold.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from emulation.netconfig import NetworkError
from fabric.topology import Fabric

MB = 1 << 20
BMV2_SWITCH_MB = 60
SOFT_PROCESS_MB = 80
SOFT_SWITCH_MB = 2
AGENT_MB = 30
NODE_SHELL_MB = 4  # Mininet's bash per node
USABLE = 0.85  # of MemAvailable: the rest is the kernel's, the controller's, the user's


class CapacityError(NetworkError):
    """The fabric would not fit on this machine; the message says what would."""


def available_mb(meminfo: Path = Path("/proc/meminfo")) -> float:
    for line in meminfo.read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 1024
    raise CapacityError(f"{meminfo} has no MemAvailable line: cannot tell what fits")


def needed_mb(fabric: Fabric, target: str, soft_processes: int) -> float:
    """Resident memory a running fabric takes, by the figures above."""
    switches = len(fabric.switches)
    if target == "bmv2":
        switch_mb = switches * BMV2_SWITCH_MB
    else:
        switch_mb = min(soft_processes, switches) * SOFT_PROCESS_MB + switches * SOFT_SWITCH_MB
    return switch_mb + fabric.hosts * AGENT_MB + (switches + fabric.hosts) * NODE_SHELL_MB


def largest_fitting(fabric: Fabric, target: str, soft_processes: int, budget: float) -> str:
    """The largest fabric with fewer T1 switches per plane that fits, as advice."""
    for t1 in range(fabric.t1_per_plane - 1, 0, -1):
        smaller = dataclasses.replace(fabric, t1_per_plane=t1)
        if needed_mb(smaller, target, soft_processes) <= budget:
            return (f"{fabric.planes}x{fabric.t0_per_plane}x{t1}x{fabric.hosts_per_t0} "
                    f"({len(smaller.switches)} switches) fits")
    return "no fabric of this shape fits"


def check(fabric: Fabric, target: str, soft_processes: int, free_mb: float | None = None) -> None:
    """Raise CapacityError if the fabric would not fit in this machine's available memory."""
    free_mb = available_mb() if free_mb is None else free_mb
    need, budget = needed_mb(fabric, target, soft_processes), USABLE * free_mb
    if need <= budget:
        return
    hint = "; the software switch needs far less (--target soft)" if target == "bmv2" else ""
    raise CapacityError(
        f"a {len(fabric.switches)}-switch fabric on {target} needs about {need / 1024:.1f} GB "
        f"and this machine has {free_mb / 1024:.1f} GB available ({USABLE:.0%} usable): "
        f"{largest_fitting(fabric, target, soft_processes, budget)}{hint}")
