"""The MRC paper's experiments as scenarios: random loss, incast victim, job start-up.

Each figure is set next to the paper's figure for the same experiment (PAPER) in the summary.
The paper measured 400-800 Gbit/s NICs; these fabrics run at hundreds of packets/s per port,
so only ratios compare, never rates, and the shape of an effect may differ where it depends on
time scales (timers, queue sizes in packets) that do not shrink with the rate.
"""

from __future__ import annotations

import math
from typing import Any

from bench import metrics
from bench.contenders.mrc_flows import FlowSpec
from bench.context import (
    QUICK,
    Context,
    bound,
    ideal_s,
    network_params,
    open_fabric,
    run_one,
    target,
)
from bench.runner import path_bdp_bytes
from emulation.impair import LinkLoss, loss_unavailable
from emulation.netconfig import NetworkConfig
from fabric.topology import Fabric
from host_agent.core import DEFAULT_MTU
from sim.scenario_kit import INCAST_PER_VICTIM, VICTIM_FABRIC, victim_layout

LOSS_PERCENT = 1.0
LOSS_CONTENDERS = ("mrc", "roce", "roce:8", "tcp")
VICTIM_CONTENDERS = ("mrc", "roce")
STARTUP_CONTENDERS = ("mrc", "roce")
# The incast victim's fabric and hosts are the simulator's (sim.scenario_kit), so that both
# run one experiment: 7 senders on T0s 1-2 write to h0 on T0 0; the victim h11 (T0 2) -> h1
# (T0 0) shares their spines' downlinks into T0 0. Two planes keep the switch count (12)
# within the CPUs' reach.
VICTIM_INCAST_SENDERS, VICTIM_INCAST_RECEIVER, *VICTIM_FLOW = victim_layout(VICTIM_FABRIC)
STARTUP_FABRIC = Fabric(planes=4, t0_per_plane=2, t1_per_plane=2, hosts_per_t0=2)

PAPER = {
    "permutation": "one RoCE QP gets about half the possible throughput, very little gain "
                   "beyond 8 QPs; one MRC QP over 256 paths beats 16 RoCE QPs (all-reduce, "
                   "64 GPUs)",
    "loss": "1% loss: RoCE is pretty much unusable, MRC gets around a third of line rate",
    "victim": "7->1 incast: DCQCN's victim loses about 25% (up to 75% in some intervals with "
              "several QPs); MRC's victim is unaffected",
    "flap": "a flapping transceiver costs about 25% of throughput",
    "startup": "at job start-up MRC loses under 5 packets per QP (EV denylist empty)",
}


LOSS_FLOW_RTTS = 100  # the loss flow lasts at least this many base RTTs at capacity


def loss_flow_bytes(size: int, config: NetworkConfig) -> int:
    """The loss flow's size: `size`, or LOSS_FLOW_RTTS of the path's bandwidth-delay
    product if that is more. A short flow measures its first and last RTTs, not loss
    recovery: the last resend that is lost again is found only by the RTO, two to four RTTs
    after the rest (docs/benchmarks.md, "The loss experiment")."""
    bdp = path_bdp_bytes(config)
    if bdp is None:
        return size
    return max(size, math.ceil(LOSS_FLOW_RTTS * bdp / DEFAULT_MTU) * DEFAULT_MTU)


def loss(ctx: Context) -> dict[str, Any]:
    """One flow h0 -> h3 across spines with every switch port dropping 1% (emulation.impair):
    goodput / capacity per contender."""
    fabric = ctx.fabric_for(Fabric(planes=4, t0_per_plane=2, t1_per_plane=2, hosts_per_t0=2))
    why = loss_unavailable()
    if why:
        return {"skipped": why, "contenders": {}, "figures": {}, "targets": [],
                "fabric": {}, "network": {}, "capacity_pps": None}
    with open_fabric(ctx, fabric) as net:
        size = ctx.sizes.loss_bytes  # --quick (a smoke test) keeps its small flow
        spec = FlowSpec(0, fabric.hosts - 1,
                        size if ctx.sizes is QUICK else loss_flow_bytes(size, net.config))
        cap = metrics.capacity_pps(fabric, net.config.port_rate_pps, [spec.src], [spec.dst])
        timeout = 40 * ideal_s(spec.nbytes, cap) * fabric.planes + 30
        result = network_params(net, cap)
        runs: dict[str, Any] = {}
        for name in ctx.chosen(LOSS_CONTENDERS):
            with LinkLoss(net, LOSS_PERCENT) as lossy:
                r = run_one(ctx, net, name, [spec], timeout, cap)
                if "skipped" not in r:
                    r["dropped_by_loss_rules"] = lossy.dropped()
            runs[name] = r
    result["contenders"] = runs
    result["loss_percent_per_switch_port"] = LOSS_PERCENT
    result["figures"] = {n: {"goodput_over_capacity": _goodput_share(r)}
                         for n, r in runs.items() if "skipped" not in r}
    mrc, roce = runs.get("mrc", {}), runs.get("roce", {})
    gain = metrics.ratio(_goodput_share(mrc), _goodput_share(roce))
    result["figures"]["mrc_over_roce"] = gain
    result["targets"] = [target("1% loss: MRC goodput / roce goodput", ">= 3", gain,
                                lambda v: v >= 3, bound=bound(mrc, roce))]
    return result


def _goodput_share(run: dict[str, Any]) -> float | None:
    """Goodput over the flow's own duration (completed or given up) / capacity."""
    flows, summary = run.get("flows"), run.get("summary", {})
    if not flows or not summary.get("capacity_bps"):
        return None
    return sum(f.get("goodput_bps", 0.0) for f in flows) / summary["capacity_bps"]


def victim(ctx: Context) -> dict[str, Any]:
    """The victim flow alone (clean), then again next to a 7 -> 1 incast that shares its
    spines; victim goodput with the incast / victim goodput alone."""
    senders, receiver = VICTIM_INCAST_SENDERS, VICTIM_INCAST_RECEIVER
    v_src, v_dst = VICTIM_FLOW
    vspec = FlowSpec(v_src, v_dst, ctx.sizes.victim_bytes)
    per = ctx.sizes.victim_bytes * INCAST_PER_VICTIM // len(senders)
    incast = [FlowSpec(s, receiver, per) for s in senders]
    fabric = VICTIM_FABRIC
    with open_fabric(ctx, fabric) as net:
        vcap = metrics.capacity_pps(fabric, net.config.port_rate_pps, [v_src], [v_dst])
        icap = metrics.capacity_pps(fabric, net.config.port_rate_pps, senders, [receiver])
        timeout = 20 * (ideal_s(per * len(senders), icap) + ideal_s(vspec.nbytes, vcap)) \
            * fabric.planes + 30
        result = network_params(net, vcap)
        runs: dict[str, Any] = {}
        for name in ctx.chosen(VICTIM_CONTENDERS):
            clean = run_one(ctx, net, name, [vspec], timeout, vcap)
            mixed = run_one(ctx, net, name, [vspec, *incast], timeout, vcap)
            runs[name] = {"clean": clean, "failed": mixed,
                          **_victim_figures(clean, mixed)}
    result["contenders"] = runs
    result.update(incast_senders=senders, incast_receiver=receiver, victim=[v_src, v_dst])
    result["figures"] = {n: {k: r.get(k) for k in ("victim_over_clean", "worst_interval")}
                         for n, r in runs.items()}
    mrc = runs.get("mrc", {})
    result["targets"] = [target("MRC victim goodput with incast / alone", ">= 0.9",
                                mrc.get("victim_over_clean"), lambda v: v >= 0.9,
                                bound=bound(mrc))]
    return result


def _victim_figures(clean: dict[str, Any], mixed: dict[str, Any]) -> dict[str, Any]:
    alone, together = clean["flows"][0], mixed["flows"][0]
    out: dict[str, Any] = {"victim_over_clean": metrics.ratio(together.get("goodput_bps"),
                                                              alone.get("goodput_bps"))}
    timeline, rate = together.get("timeline"), alone.get("goodput_bps")
    if timeline and rate:
        span = timeline[-1][0]
        width = max(span / 10, 0.1)
        series = metrics.goodput_series(timeline, width, span)
        out["worst_interval"] = min(v for _, v in series) / rate if series else None
    return out


def startup(ctx: Context) -> dict[str, Any]:
    """Fresh QPs, then every host writes to every other at once (an all-to-all job start):
    frames the switches dropped (not trimmed) while it ran, per QP and per host pair."""
    fabric = ctx.fabric_for(STARTUP_FABRIC)
    specs = [FlowSpec(a, b, ctx.sizes.startup_bytes) for a in range(fabric.hosts)
             for b in range(fabric.hosts) if a != b]
    with open_fabric(ctx, fabric) as net:
        cap = metrics.capacity_pps(fabric, net.config.port_rate_pps, [0], [1])
        timeout = 20 * ideal_s(ctx.sizes.startup_bytes * (fabric.hosts - 1), cap) \
            * fabric.planes + 30
        result = network_params(net, cap)
        runs: dict[str, Any] = {}
        for name in ctx.chosen(STARTUP_CONTENDERS):
            before = net.switch_frames()
            r = run_one(ctx, net, name, specs, timeout, cap)
            after = net.switch_frames()
            dropped = sum(after[s]["consumed"] - before[s]["consumed"] for s in after)
            qps = len(specs) * (1 if name == "mrc" else fabric.planes)
            r.update(switch_drops=dropped, qps=qps, drops_per_qp=dropped / qps,
                     drops_per_pair=dropped / len(specs),
                     job_s=max((f.get("duration_s") or 0.0) for f in r["flows"]))
            runs[name] = r
    result["contenders"] = runs
    result["figures"] = {n: {k: r.get(k) for k in ("drops_per_qp", "drops_per_pair", "job_s")}
                         for n, r in runs.items()}
    mrc = runs.get("mrc", {})
    result["targets"] = [target("MRC frames dropped per QP at job start", "< 5",
                                mrc.get("drops_per_qp"), lambda v: v < 5, bound=bound(mrc))]
    return result


SCENARIOS = {"loss": loss, "victim": victim, "startup": startup}


def runs_expected(name: str, contenders: tuple[str, ...]) -> int:
    wanted = {"loss": LOSS_CONTENDERS, "victim": VICTIM_CONTENDERS,
              "startup": STARTUP_CONTENDERS}[name]
    return len([c for c in wanted if c in contenders]) * (2 if name == "victim" else 1)
