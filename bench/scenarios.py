"""The benchmark scenarios: one fabric each, every contender in turn, figures and targets.

Each scenario returns a JSON-able dict: its fabric and network parameters, per contender the
flows (with delivery timelines) and a summary, the figures the issue asks for and the targets
with the measured value and whether it was met. Figures are computed from the timelines and
counters (bench.metrics); nothing is tuned per contender.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench import metrics, results
from bench.allreduce import run_allreduce
from bench.mrc_flows import FlowSpec
from bench.runner import (
    CONTENDERS,
    Injector,
    flow_summary,
    kernel_skip_reason,
    open_network,
    payload_bytes,
    relative_failure,
    retire_rtts,
    run_contender,
)
from fabric.topology import Fabric
from topologies.network import MrcNetwork, NetworkConfig

DEFAULT_FABRIC = Fabric(planes=4, t0_per_plane=2, t1_per_plane=2, hosts_per_t0=2)
INCAST_FABRIC = Fabric(planes=4, t0_per_plane=2, t1_per_plane=2, hosts_per_t0=4)
FAILURE_AT = 0.3  # failures strike at this fraction of MRC's ideal transfer time
FAILURE_FIGURES = ("stall_s", "stall_rtts", "completed", "completion_ratio",
                   "goodput_after_over_clean", "retire_rtts")


@dataclass(frozen=True)
class Sizes:
    flow_bytes: int
    incast_bytes: int  # total over all senders
    allreduce_bytes: int  # the buffer every host reduces
    allreduce_steps: int
    convergence_delay: float
    incast_fabric: Fabric


QUICK = Sizes(256 * 1024, 384 * 1024, 96 * 1024, 5, 1.0, DEFAULT_FABRIC)
FULL = Sizes(4 * 1024 * 1024, 6 * 1024 * 1024, 768 * 1024, 40, 3.0, INCAST_FABRIC)


@dataclass
class Context:
    sizes: Sizes
    target: str
    log: Callable[[str], None]
    tick: Callable[[str], None]  # progress: one call per contender run
    contenders: tuple[str, ...] = CONTENDERS


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
                    "convergence_delay_s": c.convergence_delay,
                    "base_rtt_s": c.effective_base_rtt, "startup_s": net.timings},
        "capacity_pps": capacity_pps,
    }


def _network(ctx: Context, fabric: Fabric, trimming: bool = True) -> MrcNetwork:
    return open_network(NetworkConfig(fabric=fabric, target=ctx.target, keep_ipv6=True,
                                      convergence_delay=ctx.sizes.convergence_delay,
                                      trimming=trimming), ctx.log)


def _ideal_s(nbytes: int, capacity_pps: float) -> float:
    return nbytes / (capacity_pps * metrics_payload())


def metrics_payload() -> int:
    return payload_bytes("mrc", [])


def _contender(ctx: Context, net: MrcNetwork, name: str, specs: list[FlowSpec], timeout: float,
               capacity_pps: float, injector: Injector | None = None) -> dict[str, Any]:
    skip = kernel_skip_reason(name)
    if skip is not None:
        ctx.tick(f"{name} skipped")
        return {"skipped": skip}
    cpu = results.cpu_times()
    flows = run_contender(net, name, specs, timeout, injector.start if injector else None)
    busy = results.cpu_busy(cpu, results.cpu_times())
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
    out: dict[str, Any] = {"flows": flows, "summary": summary}
    if info is not None:
        out["failure"] = info
    return out


def _target(figure: str, target: str, measured: float | None,
            test: Callable[[float], bool]) -> dict[str, Any]:
    return {"figure": figure, "target": target, "measured": measured,
            "met": None if measured is None else bool(test(measured))}


def _completion(result: dict[str, Any], key: str = "max") -> float | None:
    dist = result.get("summary", {}).get("completion_s")
    return dist[key] if dist and result["summary"]["completed"] == result["summary"]["flows"] \
        else None


# ---- permutation ---------------------------------------------------------------------------

def permutation(ctx: Context) -> dict[str, Any]:
    fabric = DEFAULT_FABRIC
    shift = fabric.hosts // 2  # host i -> i + hosts/2: always a different T0, across spines
    specs = [FlowSpec(i, (i + shift) % fabric.hosts, ctx.sizes.flow_bytes)
             for i in range(fabric.hosts)]
    with _network(ctx, fabric) as net:
        cap = sum(metrics.capacity_pps(fabric, net.config.port_rate_pps, [s.src], [s.dst])
                  for s in specs)
        timeout = 20 * _ideal_s(ctx.sizes.flow_bytes * len(specs), cap) + 20
        result = network_params(net, cap)
        result["contenders"] = {n: _contender(ctx, net, n, specs, timeout, cap)
                                for n in ctx.contenders}
    c = result["contenders"]
    mrc_p100, sp_p100 = _completion(c.get("mrc", {})), _completion(c.get("single_path", {}))
    speedup = metrics.ratio(sp_p100, mrc_p100)
    agg = c.get("mrc", {}).get("summary", {}).get("aggregate_over_capacity")
    result["figures"] = {
        "slowest_flow_s": {n: _completion(r) for n, r in c.items()},
        "median_flow_s": {n: _completion(r, "p50") for n, r in c.items()},
        "slowest_speedup_mrc_vs_single_path": speedup,
        "aggregate_over_capacity": {n: r.get("summary", {}).get("aggregate_over_capacity")
                                    for n, r in c.items()},
    }
    result["targets"] = [
        _target("slowest flow: single-path / MRC", ">= 1.5", speedup, lambda v: v >= 1.5),
        _target("MRC aggregate / capacity", ">= 0.9", agg, lambda v: v >= 0.9)]
    return result


# ---- failures on one flow ------------------------------------------------------------------

def _failure_scenario(ctx: Context, kind: str) -> dict[str, Any]:
    fabric = DEFAULT_FABRIC
    src, dst = 0, fabric.hosts - 1  # different T0s
    spec = FlowSpec(src, dst, ctx.sizes.flow_bytes)
    with _network(ctx, fabric) as net:
        cap = metrics.capacity_pps(fabric, net.config.port_rate_pps, [src], [dst])
        ideal = _ideal_s(spec.nbytes, cap)
        # a single-plane flow takes `planes` x the ideal; a dead NIC never lets it finish
        timeout = 4 * ideal * fabric.planes + 2 * ctx.sizes.convergence_delay + 5
        result = network_params(net, cap)
        rtt = net.config.effective_base_rtt
        runs: dict[str, Any] = {}
        for name in ctx.contenders:
            clean = _contender(ctx, net, name, [spec], timeout, cap)
            if "skipped" in clean:
                runs[name] = clean
                ctx.tick(f"{name} skipped")  # its failure run is skipped too
                continue
            injector = Injector(net, src, dst, FAILURE_AT * ideal, kind)
            failed = _contender(ctx, net, name, [spec], timeout, cap, injector)
            runs[name] = {"clean": clean, "failed": failed,
                          **_failure_figures(net, name, spec, clean, failed, rtt, kind)}
        result["contenders"] = runs
    result["failure_at_fraction_of_ideal"] = FAILURE_AT
    result["figures"] = {name: {k: r.get(k) for k in FAILURE_FIGURES}
                         for name, r in runs.items() if "skipped" not in r}
    return result


def _failure_figures(net: MrcNetwork, name: str, spec: FlowSpec, clean: dict[str, Any],
                     failed: dict[str, Any], rtt: float, kind: str) -> dict[str, Any]:
    flow, info = failed["flows"][0], failed.get("failure", {})
    at = relative_failure(info, flow)
    out: dict[str, Any] = {"failure_at_s": at}
    if at is None or not flow.get("timeline"):
        return out
    clean_t, failed_t = _completion(clean), _completion(failed)
    # a flow that never finished is observed until it was given up
    end = failed_t if failed_t is not None else flow.get("duration_s", flow["timeline"][-1][0])
    stall = metrics.longest_stall(flow["timeline"], after=at, until=end)
    out.update(stall_s=stall, stall_rtts=stall / rtt, completed=failed_t is not None,
               completion_clean_s=clean_t, completion_failed_s=failed_t,
               completion_ratio=metrics.ratio(failed_t, clean_t))
    if end > at:
        out["goodput_after_bps"] = metrics.rate_bps(flow["timeline"], at, end)
    if at > 0:
        out["goodput_before_bps"] = metrics.rate_bps(flow["timeline"], 0.0, at)
    clean_bps = clean["flows"][0].get("goodput_bps")
    out["goodput_after_over_clean"] = metrics.ratio(out.get("goodput_after_bps"), clean_bps)
    if name == "mrc" and kind == "link" and "link" in info:
        out["retire_rtts"] = retire_rtts(net, spec.src, spec.dst, info["link"], info["at"])
    return out


def link_failure(ctx: Context) -> dict[str, Any]:
    result = _failure_scenario(ctx, "link")
    c, delay = result["contenders"], ctx.sizes.convergence_delay
    mrc = c.get("mrc", {})
    result["targets"] = [
        _target("MRC stall (base RTTs)", "< 5", mrc.get("stall_rtts"), lambda v: v < 5),
        _target("MRC completion failed / clean", "<= 1.10", mrc.get("completion_ratio"),
                lambda v: v <= 1.10)]
    for name in ("single_path", "tcp"):
        result["targets"].append(_target(
            f"{name} stall (s)", f">= convergence delay {delay} s",
            c.get(name, {}).get("stall_s"), lambda v: v >= delay))
    return result


def plane_failure(ctx: Context) -> dict[str, Any]:
    result = _failure_scenario(ctx, "nic")
    planes = result["fabric"]["planes"]
    want = 0.9 * (planes - 1) / planes
    measured = result["contenders"].get("mrc", {}).get("goodput_after_over_clean")
    result["targets"] = [_target("MRC goodput after / clean", f">= {want:.3f}", measured,
                                 lambda v: v >= want)]
    return result


def switch_reboot(ctx: Context) -> dict[str, Any]:
    result = _failure_scenario(ctx, "reboot")
    result["targets"] = []  # the issue asks for the measurement, with no target figure
    return result


# ---- incast --------------------------------------------------------------------------------

def _contender_order(name: str) -> int:
    """Report order: the no-trim variant right after MRC."""
    order = [*CONTENDERS[:1], "mrc_no_trim", *CONTENDERS[1:]]
    return order.index(name) if name in order else len(order)


def incast(ctx: Context) -> dict[str, Any]:
    fabric = ctx.sizes.incast_fabric
    receiver = 0
    senders = [h for h in range(fabric.hosts) if h != receiver]
    per = max(1, ctx.sizes.incast_bytes // len(senders))
    specs = [FlowSpec(s, receiver, per) for s in senders]
    with _network(ctx, fabric) as net:
        cap = metrics.capacity_pps(fabric, net.config.port_rate_pps, senders, [receiver])
        ideal = _ideal_s(per * len(senders), cap)
        timeout = 20 * ideal * fabric.planes + 20
        result = network_params(net, cap)
        runs = {name: _contender(ctx, net, name, specs, timeout, cap)
                for name in ctx.contenders}
    if "mrc" in ctx.contenders:  # the same MRC flows on a fabric that tail-drops
        with _network(ctx, fabric, trimming=False) as net:
            runs["mrc_no_trim"] = _contender(ctx, net, "mrc", specs, timeout, cap)
            result["no_trim_threshold"] = net.thresholds.trim
        runs = {name: runs[name] for name in sorted(runs, key=_contender_order)}
    result["contenders"] = runs
    result.update(senders=senders, receiver=receiver, ideal_s=ideal)
    figures: dict[str, Any] = {}
    for name, r in runs.items():
        if "skipped" in r:
            continue
        s = r["summary"]
        # the ideal is in MRC payload terms; kernel flows carry more payload per packet
        scale = s["payload_bytes_per_packet"] / metrics_payload()
        figures[name] = {"completion_over_ideal": metrics.ratio(_completion(r), ideal / scale),
                         "timeouts": s.get("timeouts"),
                         "spurious_timeouts": s.get("spurious_timeouts"), "nacks": s.get("nacks"),
                         "trims": s.get("trims")}
    result["figures"] = figures
    mrc = figures.get("mrc", {})
    result["targets"] = [
        # a timeout answered later by the timed-out transmission was a host pause, not a loss
        _target("MRC (trimming) timeouts, not spurious", "== 0", _lost(mrc), lambda v: v == 0),
        _target("MRC (trimming) completion / ideal", "<= 1.3", mrc.get("completion_over_ideal"),
                lambda v: v <= 1.3)]
    return result



def _lost(figures: dict[str, Any]) -> int | None:
    timeouts, spurious = figures.get("timeouts"), figures.get("spurious_timeouts")
    return None if timeouts is None else timeouts - (spurious or 0)


# ---- allreduce -----------------------------------------------------------------------------

def allreduce(ctx: Context) -> dict[str, Any]:
    fabric = DEFAULT_FABRIC
    steps = ctx.sizes.allreduce_steps
    fail_step = steps // 3
    with _network(ctx, fabric) as net:
        cap = metrics.capacity_pps(fabric, net.config.port_rate_pps, [0], [1])
        result = network_params(net, cap)
        timeout = 10 * ctx.sizes.convergence_delay + 30
        runs: dict[str, Any] = {}
        for name in ("mrc", "single_path"):
            if name not in ctx.contenders:
                continue
            runs[name] = run_allreduce(net, ctx.sizes.allreduce_bytes, steps,
                                       single_path=name == "single_path", fail_step=fail_step,
                                       timeout=timeout, tick=lambda: ctx.tick("step"))
        result["contenders"] = runs
    result["figures"] = {name: r.get("step_time_s") for name, r in runs.items()}
    mrc, sp = runs.get("mrc", {}), runs.get("single_path", {})
    worst = metrics.ratio(sp.get("step_time_s", {}).get("max"),
                          mrc.get("step_time_s", {}).get("max"))
    result["figures"]["max_step_single_path_over_mrc"] = worst
    result["targets"] = []  # the issue asks for the distribution, with no target figure
    return result


SCENARIOS: dict[str, Callable[[Context], dict[str, Any]]] = {
    "permutation": permutation, "link-failure": link_failure, "plane-failure": plane_failure,
    "switch-reboot": switch_reboot, "incast": incast, "allreduce": allreduce}


def runs_expected(name: str, sizes: Sizes, contenders: tuple[str, ...]) -> int:
    """Progress-bar units a scenario will report (one per contender run or all-reduce step)."""
    n = len(contenders)
    if name == "permutation":
        return n
    if name == "incast":
        return n + ("mrc" in contenders)
    if name == "allreduce":
        return sizes.allreduce_steps * len([c for c in contenders if c in ("mrc", "single_path")])
    return 2 * n
