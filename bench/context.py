"""What every benchmark scenario shares: the sizes (QUICK, FULL), the run's Context, the
scenario fabrics, opening a fabric for a scenario, running one contender under the fidelity
monitor, and how targets and verdicts are reported. The scenarios themselves are in
bench.scenarios (permutation, incast, all-reduce), bench.experiments.failures (failures on one
flow) and bench.experiments.paper (the paper's loss, victim and start-up experiments).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from bench.contenders.mrc_flows import FlowSpec
from bench.runner import (
    CONTENDERS,
    KERNEL,
    Injector,
    flow_summary,
    kernel_skip_reason,
    open_network,
    payload_bytes,
    run_contender,
    set_mode,
    wait_fabric_quiet,
)
from bench.view import BenchView
from emulation import fidelity, livecost
from emulation.cluster.cluster import Cluster
from emulation.fidelity import EMULATION_BOUND, Monitor
from emulation.netconfig import DEFAULT_PORT_RATE_PPS, DEFAULT_RX_HOLD_MS
from emulation.network import MrcNetwork, NetworkConfig
from fabric.topology import Fabric

DEFAULT_FABRIC = Fabric(planes=4, t0_per_plane=2, t1_per_plane=2, hosts_per_t0=2)
INCAST_FABRIC = Fabric(planes=4, t0_per_plane=2, t1_per_plane=2, hosts_per_t0=4)
# two flows leave every T0 on every plane over two uplinks: the baseline's hash can collide
COLLISION_FABRIC = Fabric(planes=4, t0_per_plane=4, t1_per_plane=2, hosts_per_t0=2)


@dataclass(frozen=True)
class Sizes:
    flow_bytes: int  # one flow of the failure scenarios
    incast_bytes: int  # total over all senders
    allreduce_bytes: int  # the buffer every host reduces
    allreduce_steps: int
    convergence_delay: float
    incast_fabric: Fabric
    perm_fabric: Fabric
    perm_bytes: int  # per permutation flow
    salts: int  # permutation repetitions, each with fresh QPs (new ECMP hashes)
    loss_bytes: int
    victim_bytes: int  # the victim's flow; the incast moves 4x as much
    startup_bytes: int  # per host pair of the start-up all-to-all


QUICK = Sizes(256 * 1024, 384 * 1024, 96 * 1024, 5, 1.0, DEFAULT_FABRIC, DEFAULT_FABRIC,
              256 * 1024, 1, 128 * 1024, 128 * 1024, 32 * 1024)
FULL = Sizes(2 * 1024 * 1024, 6 * 1024 * 1024, 768 * 1024, 40, 3.0, INCAST_FABRIC,
             COLLISION_FABRIC, 4 * 1024 * 1024, 3, 1024 * 1024, 1024 * 1024, 256 * 1024)


@dataclass
class Context:
    sizes: Sizes
    target: str
    log: Callable[[str], None]
    tick: Callable[[str], None]  # progress: one call per contender run
    contenders: tuple[str, ...] = CONTENDERS
    rate: int | None = DEFAULT_PORT_RATE_PPS  # port packets/s (bench --rate, or calibrated)
    rx_hold_ms: float = DEFAULT_RX_HOLD_MS  # the agents' interrupt moderation (--rx-hold-ms)
    fabric: Fabric | None = None  # --fabric: every scenario's fabric (victim's excepted)
    cluster: Cluster | None = None  # --servers/--cluster: the fabric over these servers
    link_delay_s: float = 0.0  # --link-delay: every link's propagation delay, each way
    view: BenchView | None = None  # --web/--report: every contender run is sampled
    scenario: str = ""  # the scenario running (names its runs in the view)

    def fabric_for(self, own: Fabric) -> Fabric:
        """The fabric a scenario runs on: the one named on the command line, else its own."""
        return self.fabric or own

    def chosen(self, wanted: tuple[str, ...]) -> list[str]:
        """The scenario's contenders the user asked for, in the scenario's order."""
        return [c for c in wanted if c in self.contenders]


def network_params(net: MrcNetwork, capacity_pps: float) -> dict[str, Any]:
    c = net.config
    f = net.fabric
    return {
        "fabric": {"planes": f.planes, "t0_per_plane": f.t0_per_plane,
                   "t1_per_plane": f.t1_per_plane, "hosts_per_t0": f.hosts_per_t0,
                   "hosts": f.hosts},
        "network": {"target": net.target, "port_rate_pps": c.port_rate_pps,
                    "queue_depth": c.queue_depth, "ecn_threshold": c.ecn_threshold,
                    "trim_threshold": c.trim_threshold,
                    "convergence_delay_s": c.convergence_delay, "rx_hold_ms": c.rx_hold_ms,
                    "link_delay_s": c.link_delay_s,
                    "base_rtt_s": c.effective_base_rtt, "startup_s": net.timings},
        "capacity_pps": capacity_pps,
    }


def open_fabric(ctx: Context, fabric: Fabric, trimming: bool = True) -> MrcNetwork:
    return open_network(NetworkConfig(fabric=fabric, target=ctx.target, keep_ipv6=True,
                                      port_rate_pps=ctx.rate,
                                      convergence_delay=ctx.sizes.convergence_delay,
                                      trimming=trimming, rx_hold_ms=ctx.rx_hold_ms,
                                      cluster=ctx.cluster, link_delay_s=ctx.link_delay_s),
                        ctx.log)


def ideal_s(nbytes: int, capacity_pps: float) -> float:
    return nbytes / (capacity_pps * metrics_payload())


def metrics_payload() -> int:
    return payload_bytes("mrc", [])


def run_one(ctx: Context, net: MrcNetwork, name: str, specs: list[FlowSpec], timeout: float,
            capacity_pps: float, injector: Injector | None = None) -> dict[str, Any]:
    """One contender's flows with the fidelity monitor running; flows, summary, verdict."""
    skip = kernel_skip_reason(name)
    if skip is not None:
        ctx.tick(f"{name} skipped")
        return {"skipped": skip}
    quiet_after = wait_fabric_quiet(net)  # what the previous contender left has drained
    cpu = fidelity.cpu_times()
    spent = livecost.read(net)
    monitor = Monitor(net)
    monitor.start()
    try:
        if ctx.view is not None and name not in KERNEL:
            set_mode(net, specs, name)  # any agent restart before the view samples the run
        with watched(ctx, net, name, specs, capacity_pps, injector):
            flows = run_contender(net, name, specs, timeout,
                                  injector.start if injector else None)
    finally:
        verdict = monitor.stop()
    busy = fidelity.cpu_busy(cpu, fidelity.cpu_times())
    cost = livecost.cost(spent, livecost.read(net))
    info = injector.finish() if injector else None
    ctx.tick(name)
    payload = payload_bytes(name, flows)
    summary = flow_summary(flows)
    summary["payload_bytes_per_packet"] = payload
    summary["cpu_busy"] = busy  # both CPUs, everyone's processes, while the flows ran
    summary["capacity_bps"] = capacity_pps * payload * 8
    if summary.get("aggregate_goodput_bps"):
        summary["aggregate_over_capacity"] = (summary["aggregate_goodput_bps"]
                                              / summary["capacity_bps"])
    out: dict[str, Any] = {"flows": flows, "summary": summary, "fidelity": verdict,
                           "live_cost": cost, "fabric_quiet_after_s": quiet_after}
    if info is not None:
        out["failure"] = info
    return out


@contextmanager
def watched(ctx: Context, net: MrcNetwork, name: str, specs: list[FlowSpec],
            capacity_pps: float, injector: Injector | None = None) -> Iterator[None]:
    """The block's flows sampled for the live view and report, when asked for (bench.view)."""
    if ctx.view is None:
        yield
        return
    label = f"{ctx.scenario} / {name}" + (f" / {injector.kind} failure" if injector else "")
    with ctx.view.watch(net, label, [(s.src, s.dst) for s in specs],
                        capacity_bps=capacity_pps * metrics_payload() * 8,
                        goodput=name not in KERNEL):
        yield


def target(figure: str, want: str, measured: float | None,
           test: Callable[[float], bool], *, bound: bool = False) -> dict[str, Any]:
    """A figure against its target; `bound`: a contender it depends on was emulation-bound."""
    return {"figure": figure + (" [emulation-bound]" if bound else ""), "target": want,
            "measured": measured, "met": None if measured is None else bool(test(measured))}


def bound(*runs: dict[str, Any]) -> bool:
    """Whether any of these contender results was marked emulation-bound."""
    return any(verdicts(r) & {EMULATION_BOUND} for r in runs)


def verdicts(run: dict[str, Any]) -> set[str]:
    found = set()
    for part in (run, run.get("clean", {}), run.get("failed", {}), *run.get("salts", [])):
        v = part.get("fidelity", {}).get("verdict") if isinstance(part, dict) else None
        if v:
            found.add(v)
    return found


def completion(result: dict[str, Any], key: str = "max") -> float | None:
    dist = result.get("summary", {}).get("completion_s")
    return dist[key] if dist and result["summary"]["completed"] == result["summary"]["flows"] \
        else None
