"""What a fabric is built with: NetworkConfig, its defaults and the rules that reject a
configuration before anything starts (emulation.network runs it).

- single_path: agents start in single-path mode (the `--baseline` fabric).
- base_rtt defaults to None = derived from the port rate (base_rtt_for).
- trimming=False: every port's trim threshold is NO_TRIM_THRESHOLD, which no queue reaches
  (queue_depth must stay below it), so a full queue tail-drops instead of trimming; the
  queue_depth > trim_threshold rule then does not apply.
- pace_nics: with a port rate, each host NIC's qdisc sends at that rate (emulation.nicpacing);
  False gives the unpaced veth of earlier runs, for comparison.
- keep_ipv6: a NIC keeps its kernel address while down (keep_addr_on_down), and nic_up puts
  back the neighbour and route Linux removes with the link, so kernel sockets work again.

Rates: software switches are slow, so each egress port is rate limited well below what a
switch process can forward on this 2-core machine: the emulated links, not the CPU, are the
bottleneck and queues build where the model says they would. port_rate_pps defaults to
TARGET_RATE, the rate chosen by measurement for the target the fabric runs on
(default_rate_for; docs/getting-started.md, "The demo in detail"): 16 BMv2 processes cost
about 6 times the software switch's CPU per frame, and at the software switch's 500
packets/s they starved the two CPUs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from controller.convergence import DEFAULT_DELAY
from controller.tables import DEFAULT_ECN_THRESHOLD, DEFAULT_TRIM_THRESHOLD, PortThresholds
from emulation.cluster.cluster import Cluster
from fabric.capacity import max_flow
from fabric.topology import Fabric
from host_agent.agent import AGENT_OVERHEAD_S
from host_agent.loop import MAX_HOLD
from nodes.targets import resolve
from p4rt.names import QDEPTH_BITS
from safety.runstate import RunStateError
from wire.layout import DEFAULT_MTU

DEFAULT_PORT_RATE_PPS = 500  # the software switch's
# Half the software switch's: BMv2 stays faithful there (docs/decisions.md, "Port rate").
BMV2_PORT_RATE_PPS = 250
TARGET_RATE = "target"  # NetworkConfig.port_rate_pps: default_rate_for(target)
AUTO_RATE = "auto"  # NetworkConfig.port_rate_pps: MrcNetwork.start calibrates first
# Twice BMv2's default (64): deep enough that a 4:1 incast trims instead of tail-dropping
# (docs/decisions.md, "Fabric timing defaults").
DEFAULT_QUEUE_DEPTH = 128
# Rate-limited hops a data packet and its SACK cross: the sender's paced NIC, then T0, T1, T0
# each way (a SACK's hops are faster: the rest is margin).
RTT_HOPS = 7
# Packet times of standing queue the timers allow for beyond the unloaded RTT (docs/decisions.md,
# "Fabric timing defaults").
STANDING_QUEUE = 8
# Links a round trip across spines crosses: host-T0, T0-T1, T1-T0, T0-host, each way.
RTT_LINKS = 8
MAX_LINK_DELAY_S = 1.0
NO_TRIM_THRESHOLD = (1 << QDEPTH_BITS) - 1  # the largest trim threshold; trimming=False uses it


class NetworkError(RunStateError):
    """The fabric could not be built, programmed or driven; the message says what failed."""


def default_rate_for(target: str) -> int:
    """The port rate a target sustains on a 2-core machine with CPU to spare."""
    concrete = resolve(target) if target == "auto" else target  # `auto` never raises
    return BMV2_PORT_RATE_PPS if concrete == "bmv2" else DEFAULT_PORT_RATE_PPS


def base_rtt_for(port_rate_pps: int | None, link_delay_s: float = 0.0) -> float:
    """RTT across spines: a packet time per rate-limited hop and a short standing queue, the
    links' propagation delay, plus the agents' own processing."""
    serialization = (RTT_HOPS + STANDING_QUEUE) / port_rate_pps if port_rate_pps else 0.0
    return serialization + RTT_LINKS * link_delay_s + AGENT_OVERHEAD_S


MAX_RX_HOLD_MS = MAX_HOLD * 1000  # the agents' event loop refuses a longer hold
# The agents' interrupt moderation on the testbed's networks: 5 ms more than halves their CPU
# per packet paced. The healthy-route retirements once blamed on it happen with it off too
# (BMv2 stalls; docs/benchmarks.md, "The agents' hold"). --rx-hold-ms 0 turns it off; an
# agent started by hand (host_agent.agent) holds only when told to.
DEFAULT_RX_HOLD_MS = 5.0


@dataclass(frozen=True)
class NetworkConfig:
    fabric: Fabric = field(default_factory=Fabric)
    target: str = "auto"
    # packets/s; None: unlimited (CPU-bound); TARGET_RATE: default_rate_for(target);
    # AUTO_RATE: measured by MrcNetwork.start (emulation.calibration) before the fabric starts
    port_rate_pps: int | None | str = TARGET_RATE
    queue_depth: int = DEFAULT_QUEUE_DEPTH
    ecn_threshold: int = DEFAULT_ECN_THRESHOLD
    trim_threshold: int = DEFAULT_TRIM_THRESHOLD
    convergence_delay: float = DEFAULT_DELAY
    base_rtt: float | None = None  # None: base_rtt_for(port_rate_pps, link_delay_s)
    agents: bool = True
    keep_ipv6: bool = False
    single_path: bool = False
    trimming: bool = True  # False: trim threshold NO_TRIM_THRESHOLD, full queues tail-drop
    pace_nics: bool = True  # host NICs send at port_rate_pps (emulation.nicpacing)
    lock_timeout: float = 600.0  # seconds to wait for another fabric on this machine to stop
    rx_hold_ms: float = DEFAULT_RX_HOLD_MS  # agents' interrupt moderation (host_agent.loop)
    # host -> Unix socket of a core served from elsewhere (agent --served-core): the grader's
    # live stage, whose student cores run in its sandbox (rubrics.remote_core.served_cores)
    served_cores: tuple[tuple[int, str], ...] = ()
    # software switches: how many processes serve them (planes split among them); None: one
    # per CPU. BMv2 always runs one process per switch.
    switch_processes: int | None = None
    # the servers the fabric is spread over (emulation.cluster.cluster); None: this machine alone
    cluster: Cluster | None = None
    # every link's propagation delay, each way (fabric.options --link-delay); the software
    # switches hold frames that long, BMv2 needs the kernel's netem (emulation.linkdelay)
    link_delay_s: float = 0.0

    def __post_init__(self) -> None:
        if self.port_rate_pps == TARGET_RATE:
            object.__setattr__(self, "port_rate_pps", default_rate_for(self.target))
        if isinstance(self.port_rate_pps, str) and self.port_rate_pps != AUTO_RATE:
            raise NetworkError(f"port_rate_pps must be packets/s, None, {TARGET_RATE!r} or "
                               f"{AUTO_RATE!r}, "
                               f"got {self.port_rate_pps!r}")
        if isinstance(self.port_rate_pps, int) and self.port_rate_pps < 1:
            raise NetworkError(f"port_rate_pps must be >= 1 packet/s or None, "
                               f"got {self.port_rate_pps}")
        if not 0.0 <= self.rx_hold_ms <= MAX_RX_HOLD_MS:
            raise NetworkError(f"rx_hold_ms must be 0 (off) to {MAX_RX_HOLD_MS:g} ms, "
                               f"got {self.rx_hold_ms}")
        if self.trimming and self.queue_depth <= self.trim_threshold:
            raise NetworkError(f"queue_depth ({self.queue_depth}) must exceed the trim threshold "
                               f"({self.trim_threshold}), or data is tail-dropped, not trimmed; "
                               "set trimming=False for a fabric that never trims")
        if not self.trimming and self.queue_depth >= NO_TRIM_THRESHOLD:
            raise NetworkError(f"trimming=False needs queue_depth below {NO_TRIM_THRESHOLD} "
                               f"packets (the largest trim threshold), got {self.queue_depth}")
        if self.base_rtt is not None and self.base_rtt <= 0:
            raise NetworkError(f"base_rtt must be a positive number of seconds, got "
                               f"{self.base_rtt}")
        if not 0.0 <= self.link_delay_s <= MAX_LINK_DELAY_S:
            raise NetworkError(f"link_delay_s must be 0 to {MAX_LINK_DELAY_S:g} s, got "
                               f"{self.link_delay_s}")
        if self.switch_processes is not None and self.switch_processes < 1:
            raise NetworkError(f"switch_processes must be >= 1 (or None: one per CPU), got "
                               f"{self.switch_processes}")
        _ = self.port_thresholds  # raises TopologyError for thresholds out of range

    @property
    def soft_processes(self) -> int:
        """Software-switch processes to run: never more than switches."""
        wanted = self.switch_processes or os.cpu_count() or 1
        return max(1, min(wanted, len(self.fabric.switches)))

    @property
    def port_thresholds(self) -> PortThresholds:
        """What every switch port is programmed with (NO_TRIM_THRESHOLD without trimming)."""
        return PortThresholds(self.ecn_threshold,
                              self.trim_threshold if self.trimming else NO_TRIM_THRESHOLD)

    @property
    def effective_base_rtt(self) -> float:
        if self.port_rate_pps == AUTO_RATE:
            raise NetworkError("the port rate is 'auto': MrcNetwork.start measures it first")
        if self.base_rtt is not None:
            return self.base_rtt
        return base_rtt_for(self.port_rate_pps, self.link_delay_s)


def flow_capacity_bps(fabric: Fabric, rate_pps: int | None, single_path: bool, src: int,
                      dst: int) -> float | None:
    """The flow src -> dst's capacity in payload bits/s at `rate_pps` data packets/s per
    port (the demo and the live view): fabric.capacity's max-flow for MRC, one port's rate
    for a single path (one route: its slowest port)."""
    if rate_pps is None:
        return None
    pps = rate_pps if single_path else max_flow(fabric, [src], [dst], rate_pps)
    return pps * DEFAULT_MTU * 8
