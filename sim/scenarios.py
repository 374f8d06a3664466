"""The named scenarios of `python -m sim` and the figures each one reports.

Every scenario moves `size` bytes of seeded random data with RDMA WRITEs and checks them
byte for byte (see harness.py for duration, goodput, capacity and base RTT). Failure
scenarios add recovery_rtts: (time of the last *data* packet the sender put on a failed
route after the failure - failure time) / base_rtt_s, 0 if it sent none; probes and other
control packets are excluded. Failures happen at FAILURE_AT x the ideal transfer time
(size / capacity), i.e. mid-transfer.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from dataclasses import asdict
from functools import partial
from typing import Any

from fabric.topology import Fabric
from host_agent.core import EndpointConfig, Event, PeerPlaneChanged
from sim import collective, failures
from sim.harness import Harness, SimSettings
from sim.host import HostAdapter
from sim.scenario_kit import (
    DEFAULT_FABRIC,
    FAILURE_AT,
    INCAST_PER_VICTIM,
    TIME_LIMIT_FACTOR,
    VICTIM_FABRIC,
    DataCounter,
    FailingUplink,
    Finisher,
    Scenario,
    ScenarioError,
    ideal_time,
    ideal_time_for,
    neighbour,
    recovery,
    single,
    victim_layout,
)
from sim.traffic import ConstantRateSource, CountingSink

INCAST_FABRIC = Fabric(planes=4, t0_per_plane=3, t1_per_plane=2, hosts_per_t0=3)
CONGESTION_AT = 0.25  # ecn: background load starts here
BACKGROUND_SHARE = 0.8  # ecn: background rate as a fraction of the link rate
LOSS_PROBABILITY = 0.01  # loss: what every switch port sends, as the bench's emulation.impair


def _clean(h: Harness, size: int) -> Finisher:
    single(h, size)
    return lambda result: None


def _loss(h: Harness, size: int) -> Finisher:
    sender, _, dst = single(h, size)
    for link in h.net.links.values():
        for port in link.ports:
            if port.switch_port:
                h.net.set_port_loss(port, LOSS_PROBABILITY)
    arrived = DataCounter(h, dst)

    def finish(result: dict[str, Any]) -> None:
        result["loss_probability_per_switch_port"] = LOSS_PROBABILITY
        result["data_frames_lost"] = sum(sender.data_tx_per_plane) - arrived.frames
    return finish


def _link_failure(h: Harness, size: int) -> Finisher:
    up = FailingUplink(h, size)
    t_fail = FAILURE_AT * ideal_time_for(h, size)
    before: dict[str, int] = {}

    def fail() -> None:
        t1 = up.pick()
        before["data"] = sum(up.sender.data_tx_per_route[r] for r in up.routes)
        h.net.set_link_up(h.net.link(up.t0, t1), False)
    h.at(t_fail, fail)

    def finish(result: dict[str, Any]) -> None:
        after = sum(up.sender.data_tx_per_route[r] for r in up.routes) - before.get("data", 0)
        result.update(failed_link=[up.t0, up.t1], failure_at_s=t_fail,
                      recovery_rtts=recovery(h, up.sender, up.routes, t_fail),
                      data_on_failed_path_after_failure=after,
                      **failures.retirements(h, up.sender, up.routes))
    return finish


def _plane_failure(h: Harness, size: int) -> Finisher:
    sender, src, dst = single(h, size)
    plane = 0
    routes = {p.address for p in h.fabric.paths(src, dst, plane)}
    t_fail = FAILURE_AT * ideal_time_for(h, size)
    notified: dict[str, float] = {}

    def on_event(now: float, adapter: HostAdapter, event: Event) -> None:
        if (adapter is sender and isinstance(event, PeerPlaneChanged) and event.peer == dst
                and event.plane == plane and not event.up and "at" not in notified):
            notified["at"] = now
            notified["data"] = sender.data_tx_per_plane[plane]
    h.listeners.append(on_event)
    h.at(t_fail, lambda: h.net.set_link_up(h.net.host_link(dst, plane), False))

    def finish(result: dict[str, Any]) -> None:
        t = h.transfers[0]
        done_before = max((b for when, b in t.progress if when <= t_fail), default=0)
        end = h.end_time or h.loop.now
        after_bps = (len(t.data) - done_before) * 8 / (end - t_fail) if end > t_fail else 0.0
        result.update(
            failed_nic=[h.fabric.host_name(dst), plane], failure_at_s=t_fail,
            recovery_rtts=recovery(h, sender, routes, t_fail),
            peer_notified_after_rtts=((notified["at"] - t_fail) / h.base_rtt
                                      if "at" in notified else None),
            data_on_failed_plane_after_notification=(
                sender.data_tx_per_plane[plane] - notified["data"] if "at" in notified else None),
            goodput_after_failure_bps=after_bps,
            goodput_ratio_after_failure=after_bps / h.capacity_log[-1][1])
    return finish


def _incast(h: Harness, size: int) -> Finisher:
    receiver, senders = 0, range(1, 9)
    for s in senders:
        h.add_transfer(s, receiver, max(1, size // len(senders)))
    return lambda result: result.update(senders=list(senders), receiver=receiver)


def _victim(h: Harness, size: int, *, incast: bool = True) -> Finisher:
    """The victim flow (a fifth of `size`), with or without the 7 -> 1 incast that moves
    the other four fifths into its receiver's T0 over the same spines."""
    senders, receiver, v_src, v_dst = victim_layout(h.fabric)
    victim_bytes = max(1, size // (1 + INCAST_PER_VICTIM))
    h.add_transfer(v_src, v_dst, victim_bytes)  # transfer 0: the base RTT is the victim's
    if incast:
        for s in senders:
            h.add_transfer(s, receiver, max(1, victim_bytes * INCAST_PER_VICTIM // len(senders)))

    def finish(result: dict[str, Any]) -> None:
        done = h.transfers[0].done_at
        result.update(victim=[v_src, v_dst], incast_senders=senders if incast else [],
                      incast_receiver=receiver,
                      victim_goodput_bps=victim_bytes * 8 / done if done else 0.0)
    return finish


def _ecn(h: Harness, size: int) -> Finisher:
    sender, src, dst = single(h, size)
    spine = 1
    fabric = h.fabric
    bg_src = neighbour(fabric, src)
    bg_dst = neighbour(fabric, dst)
    sink = CountingSink()
    h.net.attach(bg_dst, sink)
    bg_rate = BACKGROUND_SHARE * h.settings.rate_bps
    source = ConstantRateSource(h.net, bg_src, bg_dst, spine, bg_rate, active=lambda: h.pending > 0)
    t_cong = CONGESTION_AT * ideal_time_for(h, size)
    source.start(t_cong)
    hot = {p.address for p in fabric.all_paths(src, dst) if p.spine == spine}
    snapshot: dict[str, int] = {}

    def take() -> None:
        snapshot["hot"] = sum(sender.data_tx_per_route[r] for r in hot)
        snapshot["all"] = sum(sender.data_tx_per_plane)
    h.at(t_cong, take)

    def finish(result: dict[str, Any]) -> None:
        hot_now = sum(sender.data_tx_per_route[r] for r in hot)
        all_now = sum(sender.data_tx_per_plane)
        b_hot, b_all = snapshot.get("hot", hot_now), snapshot.get("all", all_now)
        result.update(
            congested_spine=spine, congestion_at_s=t_cong,
            background={"src": fabric.host_name(bg_src), "dst": fabric.host_name(bg_dst),
                        "rate_bps": bg_rate, "frames": source.sent,
                        "delivered_frames": sink.frames},
            congested_share_before=b_hot / b_all if b_all else None,
            congested_share_after=((hot_now - b_hot) / (all_now - b_all)
                                   if all_now > b_all else None))
    return finish


def _permutation(h: Harness, size: int) -> Finisher:
    """Every host writes size / hosts bytes to one other host, and receives from one: host i
    of the first half writes to i + hosts/2, host j of the second half to the next host of
    the first half ((j - hosts/2 + 1) mod hosts/2). No two hosts write to each other (the
    simulator's endpoints keep one QP per peer), and with an even number of T0s every flow
    crosses the spines."""
    hosts = h.fabric.hosts
    half = hosts // 2
    each = max(1, size // hosts)
    for src in range(2 * half):
        h.add_transfer(src, src + half if src < half else (src - half + 1) % half, each)
    return lambda result: result.update(bytes_per_host=each)


def _sim_costs(h: Harness, ep: dict[str, int], marks: list[float]) -> dict[str, Any]:
    """What the run cost: events, wall time (in all, and building the network, setting up
    the endpoints and transfers, running), and data packets delivered whole (each is
    answered by one SACK; probe replies are SACKs too) per second of wall time in all."""
    delivered = ep.get("sacks_sent", 0) - ep.get("probe_replies", 0)
    wall_s = marks[-1] - marks[0]
    return {"events": h.loop.events_run, "wall_s": wall_s, "network_s": marks[1] - marks[0],
            "setup_s": marks[2] - marks[1], "run_s": marks[3] - marks[2],
            "data_packets": delivered,
            "data_packets_per_s": delivered / wall_s if wall_s > 0 else 0.0,
            "events_per_data_packet": h.loop.events_run / delivered if delivered else None}


SCENARIOS: dict[str, Scenario] = {s.name: s for s in (
    Scenario("clean", DEFAULT_FABRIC, "one cross-spine transfer, nothing goes wrong", _clean),
    Scenario("loss", DEFAULT_FABRIC,
             f"every switch port loses {LOSS_PROBABILITY:.0%} of what it sends", _loss),
    Scenario("link-failure", DEFAULT_FABRIC,
             "the sender's T0 loses its busiest plane-0 uplink mid-transfer", _link_failure),
    Scenario("plane-failure", DEFAULT_FABRIC,
             "the receiver's NIC link on plane 0 dies mid-transfer", _plane_failure),
    Scenario("incast", INCAST_FABRIC, "8 senders write to one receiver at once", _incast,
             min_hosts=9),
    Scenario("victim", VICTIM_FABRIC, "a victim flow into T0 0 beside a 7 -> 1 incast into "
             "its neighbour, over the same spines", _victim, min_hosts_per_t0=2),
    Scenario("victim-alone", VICTIM_FABRIC, "the victim's flow with no incast (victim's "
             "clean run)", partial(_victim, incast=False), min_hosts_per_t0=2),
    Scenario("ecn", DEFAULT_FABRIC,
             "background load congests one spine on every plane mid-transfer", _ecn,
             min_hosts_per_t0=2),
    Scenario("permutation", DEFAULT_FABRIC,
             "every host writes size/hosts bytes to a host half the fabric away",
             _permutation, min_hosts=4),
    Scenario("flap", DEFAULT_FABRIC, "the sender's T0's busiest plane-0 uplink flaps "
             f"({failures.FLAP_HALF_PERIOD_RTTS:g} RTTs down, as long up) mid-transfer",
             failures.flap),
    Scenario("switch-reboot", DEFAULT_FABRIC, "the spine of the sender's busiest plane-0 uplink "
             "reboots mid-transfer "
             f"(away {failures.REBOOT_RTTS:g} RTTs, tables reinstalled)", failures.switch_reboot),
    Scenario("allreduce", DEFAULT_FABRIC, f"{collective.STEPS} steps of a ring all-reduce of "
             "a size-byte buffer over every host", collective.allreduce, min_hosts=3),
    Scenario("allreduce-flap", DEFAULT_FABRIC, "the all-reduce while T0-T1 links flap across "
             f"the fabric ({collective.FLAPS_PER_STEP:g} per expected step time)",
             collective.allreduce_flap, min_hosts=3),
    Scenario("allreduce-reboot", DEFAULT_FABRIC, "the all-reduce; spine 0 of plane 0 reboots "
             f"as step {collective.REBOOT_STEP} starts", collective.allreduce_reboot,
             min_hosts=3),
    *(Scenario(f"allreduce-2d{suffix}", INCAST_FABRIC, f"{what}, hierarchical: rings within "
               "each T0, then across T0s", partial(setup, build=collective.hierarchical_allreduce),
               min_hosts_per_t0=3, min_t0=3)
      for suffix, what, setup in (("", "allreduce", collective.allreduce),
                                  ("-flap", "allreduce-flap", collective.allreduce_flap),
                                  ("-reboot", "allreduce-reboot", collective.allreduce_reboot))),
)}


def run_scenario(name: str, *, size: int = 32 * 1024 * 1024, settings: SimSettings | None = None,
                 config: EndpointConfig | None = None,
                 fabric: Fabric | None = None,
                 endpoints: Callable[[Harness, int], Any] | None = None) -> dict[str, Any]:
    """Run one scenario to completion (or its time limit) and return its JSON-able result;
    `fabric` replaces the scenario's own (fabric.options: --fabric); `endpoints` builds the
    hosts' endpoints (Harness.endpoints: the grader's, in a sandbox)."""
    scenario = SCENARIOS.get(name)
    if scenario is None:
        raise ScenarioError(f"unknown scenario {name!r}; choose one of {', '.join(SCENARIOS)}")
    if size < 1:
        raise ScenarioError(f"size must be at least 1 byte, got {size}")
    settings = settings or SimSettings()
    f = fabric or scenario.fabric
    refusal = scenario.refusal(f)
    if refusal:
        raise ScenarioError(refusal)
    wall = [time.perf_counter()]
    h = Harness(f, settings, config)
    h.endpoints = endpoints
    wall.append(time.perf_counter())
    finish = scenario.setup(h, size)
    h.base_rtt = h.path_rtt(h.transfers[0].sender, h.transfers[0].receiver)
    h.capacity_log.clear()
    h.start()
    wall.append(time.perf_counter())
    # the baseline's routing may take its hold time to route around a failure
    limit = TIME_LIMIT_FACTOR * ideal_time(h) + 0.05 + settings.convergence_delay_s
    gc.freeze()  # the fabric and endpoints outlive the run: full collections skip them
    try:
        finished = h.run(limit)
    finally:
        gc.unfreeze()
    wall.append(time.perf_counter())
    end = h.end_time if finished and h.end_time is not None else h.loop.now
    total = sum(len(t.data) for t in h.transfers)
    duration = end - h.start_time
    goodput = total * 8 / duration if finished and duration > 0 else 0.0
    capacity = h.mean_capacity(end)
    ep = h.endpoint_totals()
    result: dict[str, Any] = {
        "scenario": name, "contender": h.mode.name, "seed": settings.seed,
        "fabric": {"planes": f.planes, "t0_per_plane": f.t0_per_plane,
                   "t1_per_plane": f.t1_per_plane, "hosts_per_t0": f.hosts_per_t0,
                   "hosts": f.hosts, "link_rate_bps": settings.rate_bps,
                   "delay_s": settings.delay_s, "queue": asdict(settings.queues),
                   "mtu": h.adapter_mtu()},
        "transfers": [{"sender": t.sender, "receiver": t.receiver, "bytes": len(t.data),
                       "done_at_s": t.done_at, "progress": t.progress} for t in h.transfers],
        "bytes": total, "ok": finished and h.verified(), "completed": finished,
        "duration_s": duration, "goodput_bps": goodput, "capacity_bps": capacity,
        "goodput_ratio": goodput / capacity if capacity else 0.0, "base_rtt_s": h.base_rtt,
        "timeouts": ep.get("timeouts", 0), "nacks": ep.get("nacks_sent", 0),
        "trims": h.net.trims, "trims_received": ep.get("trims_received", 0),
        "retired_evs": ep.get("ev_retired", 0), "reinstated_evs": ep.get("ev_reinstated", 0),
        "retransmits": ep.get("retransmits", 0), "ecn_marks": h.net.ecn_marks,
        "drops": dict(sorted(h.net.drops.items())),
        "tx_packets_per_plane": {a.endpoint.name: a.tx_per_plane for a in h.adapters.values()},
        "data_tx_per_plane": {a.endpoint.name: a.data_tx_per_plane for a in h.adapters.values()},
        "endpoint": {k: ep[k] for k in sorted(ep)},
        "sim": _sim_costs(h, ep, wall),
    }
    finish(result)
    return result
