"""The benchmark scenarios: one fabric each, every contender in turn, figures and targets.

Each scenario returns a JSON-able dict: its fabric and network parameters, per contender the
flows (with delivery timelines) and a summary, the figures the issue asks for and the targets
with the measured value and whether it was met. Figures are computed from the timelines and
counters (bench.metrics); nothing is tuned per contender.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bench import metrics
from bench.contenders.mrc_flows import FlowSpec
from bench.context import (
    DEFAULT_FABRIC,
    Context,
    Sizes,
    bound,
    completion,
    ideal_s,
    metrics_payload,
    network_params,
    open_fabric,
    run_one,
    target,
    verdicts,
    watched,
)
from bench.experiments.allreduce import run_allreduce
from bench.experiments.failures import (
    FAILURE_CONTENDERS,
    flap,
    link_failure,
    plane_failure,
    switch_reboot,
)
from bench.runner import CONTENDERS
from emulation.fidelity import Monitor

INCAST_CONTENDERS = ("mrc", "roce", "tcp", "mptcp")
ALLREDUCE_CONTENDERS = ("mrc", "roce", "roce:16")  # the paper: one MRC QP beats 16
SLOW_FLOW = 0.5  # a flow below this fraction of its fair rate counts as hit by collisions


# ---- permutation ---------------------------------------------------------------------------

def permutation(ctx: Context) -> dict[str, Any]:
    """Host i -> i + hosts/2 (always another T0, across spines), all at once, `salts` times
    with fresh QPs (new ECMP hashes) per contender; per-flow distributions pooled."""
    fabric = ctx.fabric_for(ctx.sizes.perm_fabric)
    shift = fabric.hosts // 2
    specs = [FlowSpec(i, (i + shift) % fabric.hosts, ctx.sizes.perm_bytes)
             for i in range(fabric.hosts)]
    with open_fabric(ctx, fabric) as net:
        per_flow = [metrics.capacity_pps(fabric, net.config.port_rate_pps, [s.src], [s.dst])
                    for s in specs]
        cap = sum(per_flow)
        timeout = 20 * ideal_s(ctx.sizes.perm_bytes * len(specs), cap) * fabric.planes + 20
        result = network_params(net, cap)
        runs: dict[str, Any] = {}
        for _salt in range(ctx.sizes.salts):
            for name in ctx.chosen(CONTENDERS):
                r = run_one(ctx, net, name, specs, timeout, cap)
                if "skipped" in r:
                    runs[name] = r
                    continue
                runs.setdefault(name, {"salts": []})["salts"].append(r)
        result["contenders"] = {n: _pool(r, per_flow, specs) for n, r in runs.items()}
    result["salts"] = ctx.sizes.salts
    c = result["contenders"]
    mrc, roce = c.get("mrc", {}), c.get("roce", {})
    p100 = metrics.ratio(_p100(roce), _p100(mrc))
    agg = mrc.get("summary", {}).get("aggregate_over_capacity")
    result["figures"] = {n: {k: r.get("summary", {}).get(k) for k in (
        "completion_p50_s", "completion_p100_s", "slow_flow_fraction",
        "aggregate_over_capacity")} | {"verdicts": sorted(verdicts(r))}
        for n, r in c.items() if "skipped" not in r}
    result["figures"]["p100_roce_over_mrc"] = p100
    result["targets"] = [
        target("P100: roce (1 QP per plane) / MRC", ">= 1.5", p100, lambda v: v >= 1.5,
               bound=bound(mrc, roce)),
        target("MRC aggregate / capacity", ">= 0.9", agg, lambda v: v >= 0.9, bound=bound(mrc))]
    return result


def _p100(pooled: dict[str, Any]) -> float | None:
    return pooled.get("summary", {}).get("completion_p100_s")


def _pool(run: dict[str, Any], per_flow_pps: list[float], specs: list[FlowSpec]
          ) -> dict[str, Any]:
    """Per-flow figures over every salt: completion P50/P100 (P100 = median over salts of
    each salt's slowest flow), the fraction of flows below SLOW_FLOW of their fair rate."""
    if "skipped" in run:
        return run
    salts = run["salts"]
    done = [f["completion_s"] for r in salts for f in r["flows"] if f.get("completion_s")]
    slowest = [completion(r) for r in salts]
    slow = 0
    for r in salts:
        payload = r["summary"]["payload_bytes_per_packet"]
        for f, pps, spec in zip(r["flows"], per_flow_pps, specs, strict=True):
            took = f.get("completion_s") or f.get("duration_s")
            if not took or spec.nbytes * 8 / took < SLOW_FLOW * pps * payload * 8:
                slow += 1
    aggregate = [r["summary"].get("aggregate_over_capacity") for r in salts]
    summary = {
        "flows": sum(r["summary"]["flows"] for r in salts),
        "completed": sum(r["summary"]["completed"] for r in salts),
        "ok": all(r["summary"]["ok"] for r in salts),
        "completion_s": metrics.distribution(done) if done else None,
        "completion_p50_s": metrics.percentile(done, 50) if done else None,
        "completion_p100_s": (None if None in slowest
                              else metrics.percentile(slowest, 50)),
        "slowest_per_salt_s": slowest,
        "slow_flow_fraction": slow / max(1, sum(len(r["flows"]) for r in salts)),
        "aggregate_over_capacity": (None if None in aggregate
                                    else metrics.percentile(aggregate, 50)),
        "payload_bytes_per_packet": salts[0]["summary"]["payload_bytes_per_packet"],
    }
    return {"salts": salts, "summary": summary}


# ---- incast --------------------------------------------------------------------------------

def _contender_order(name: str) -> int:
    """Report order: the no-trim variant right after MRC."""
    order = [*CONTENDERS[:1], "mrc_no_trim", *CONTENDERS[1:]]
    return order.index(name) if name in order else len(order)


def incast(ctx: Context) -> dict[str, Any]:
    fabric = ctx.fabric_for(ctx.sizes.incast_fabric)
    receiver = 0
    senders = [h for h in range(fabric.hosts) if h != receiver]
    per = max(1, ctx.sizes.incast_bytes // len(senders))
    specs = [FlowSpec(s, receiver, per) for s in senders]
    with open_fabric(ctx, fabric) as net:
        cap = metrics.capacity_pps(fabric, net.config.port_rate_pps, senders, [receiver])
        ideal = ideal_s(per * len(senders), cap)
        timeout = 20 * ideal * fabric.planes + 20
        result = network_params(net, cap)
        runs = {name: run_one(ctx, net, name, specs, timeout, cap)
                for name in ctx.chosen(INCAST_CONTENDERS)}
    if "mrc" in ctx.contenders:  # the same MRC flows on a fabric that tail-drops
        with open_fabric(ctx, fabric, trimming=False) as net:
            runs["mrc_no_trim"] = run_one(ctx, net, "mrc", specs, timeout, cap)
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
        figures[name] = {"completion_over_ideal": metrics.ratio(completion(r), ideal / scale),
                         "timeouts": s.get("timeouts"),
                         "spurious_timeouts": s.get("spurious_timeouts"), "nacks": s.get("nacks"),
                         "trims": s.get("trims")}
    result["figures"] = figures
    mrc = figures.get("mrc", {})
    result["targets"] = [
        # a timeout answered later by the timed-out transmission was a host pause, not a loss
        target("MRC (trimming) timeouts, not spurious", "== 0", _lost(mrc), lambda v: v == 0),
        target("MRC (trimming) completion / ideal", "<= 1.3", mrc.get("completion_over_ideal"),
                lambda v: v <= 1.3)]
    return result



def _lost(figures: dict[str, Any]) -> int | None:
    timeouts, spurious = figures.get("timeouts"), figures.get("spurious_timeouts")
    return None if timeouts is None else timeouts - (spurious or 0)


# ---- allreduce -----------------------------------------------------------------------------

def allreduce(ctx: Context) -> dict[str, Any]:
    fabric = ctx.fabric_for(DEFAULT_FABRIC)
    steps = ctx.sizes.allreduce_steps
    fail_step = steps // 3
    with open_fabric(ctx, fabric) as net:
        cap = metrics.capacity_pps(fabric, net.config.port_rate_pps, [0], [1])
        result = network_params(net, cap)
        timeout = 10 * ctx.sizes.convergence_delay + 30
        runs: dict[str, Any] = {}
        for name in ctx.chosen(ALLREDUCE_CONTENDERS):
            monitor = Monitor(net)  # the steps' verdict, as run_one gives the flows'
            monitor.start()
            ring = [FlowSpec(h, (h + 1) % fabric.hosts, 1) for h in range(fabric.hosts)]
            try:
                with watched(ctx, net, name, ring, cap):
                    runs[name] = run_allreduce(net, ctx.sizes.allreduce_bytes, steps,
                                               contender=name, fail_step=fail_step,
                                               timeout=timeout, tick=lambda: ctx.tick("step"))
            finally:
                verdict = monitor.stop()
            runs[name]["fidelity"] = verdict
        result["contenders"] = runs
    result["figures"] = {name: r.get("step_time_s") for name, r in runs.items()}
    mrc, sp = runs.get("mrc", {}), runs.get("roce", {})
    worst = metrics.ratio(sp.get("step_time_s", {}).get("max"),
                          mrc.get("step_time_s", {}).get("max"))
    result["figures"]["max_step_roce_over_mrc"] = worst
    result["targets"] = []  # the issue asks for the distribution, with no target figure
    return result


SCENARIOS: dict[str, Callable[[Context], dict[str, Any]]] = {
    "permutation": permutation, "link-failure": link_failure, "plane-failure": plane_failure,
    "switch-reboot": switch_reboot, "incast": incast, "allreduce": allreduce, "flap": flap}


def runs_expected(name: str, sizes: Sizes, contenders: tuple[str, ...]) -> int:
    """Progress-bar units a scenario will report (one per contender run or all-reduce step)."""
    def n(wanted: tuple[str, ...]) -> int:
        return len([c for c in wanted if c in contenders])
    if name == "permutation":
        return sizes.salts * n(CONTENDERS)
    if name == "incast":
        return n(INCAST_CONTENDERS) + ("mrc" in contenders)
    if name == "allreduce":
        return sizes.allreduce_steps * n(ALLREDUCE_CONTENDERS)
    if name in ("link-failure", "plane-failure", "switch-reboot", "flap"):
        return 2 * n(FAILURE_CONTENDERS)
    return n(CONTENDERS)
