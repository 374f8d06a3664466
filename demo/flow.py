"""The flow the demo watches, before and after: its capacity, its unloaded RTT, the sender's
EVs and event cursor, both agents' counters and the switches' frames, read in one go before
the transfer (prepare) and after it (finish); and the report's figures from the two."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from emulation.netconfig import flow_capacity_bps
from emulation.network import MrcNetwork

RTT_SAMPLES = 5


@dataclass
class Flow:
    """What the demo knows of its flow src -> dst before the transfer, and its counters after."""

    src: int
    dst: int
    single_path: bool
    capacity_bps: float | None
    nbytes: int
    rtt: float  # the least of RTT_SAMPLES one-packet writes
    before: dict[int, dict]  # each host's agent stats
    frames_before: dict[str, dict[str, int]]
    qpn: int  # the sender's QP towards dst (0 single path)
    evs: dict[int, dict]  # its EVs: route and state
    seq0: int  # the sender's last event before the transfer
    after: dict[int, dict] = field(default_factory=dict)
    consumed: dict[str, int] = field(default_factory=dict)  # frames each switch lost


def prepare(net: MrcNetwork, src: int, dst: int, single_path: bool, seconds: float) -> Flow:
    """Size the transfer to `seconds` at the flow's capacity and read the flow as it is."""
    capacity = flow_capacity_bps(net.fabric, net.config.port_rate_pps, single_path, src, dst)
    nbytes = int(seconds * capacity / 8) if capacity else 20_000_000
    rtt = min(net.transfer(src, dst, 64, single_path=single_path)["duration_s"]
              for _ in range(RTT_SAMPLES))
    before = {h: net.stats(h) for h in (src, dst)}
    frames = net.switch_frames()
    # the RTT writes left both agents in the transfer's mode: this QP is the transfer's
    qpn, evs = ev_layout(net, src, dst) if not single_path else (0, {})
    return Flow(src, dst, single_path, capacity, nbytes, rtt, before, frames, qpn, evs,
                last_event_seq(net, src))


def finish(net: MrcNetwork, flow: Flow) -> None:
    """Both agents' counters and the frames each switch consumed, after the transfer."""
    flow.after = {h: net.stats(h) for h in (flow.src, flow.dst)}
    frames = net.switch_frames()
    flow.consumed = {name: frames[name]["consumed"] - flow.frames_before[name]["consumed"]
                     for name in frames}


def ev_layout(net: MrcNetwork, src: int, dst: int) -> tuple[int, dict[int, dict]]:
    """src's QPN towards dst and its EVs (route, state) from the agent's per-EV stats."""
    (qpn,) = net.agent(src).call("status")["qps"][str(dst)]  # an MRC agent: one QP per peer
    per_ev = net.stats(src, per_ev=True)["per_ev"][f"{qpn:#x}"]
    return qpn, {int(ev): info for ev, info in per_ev.items()}


def last_event_seq(net: MrcNetwork, host: int) -> int:
    return int(net.agent(host).call("events", since=(1 << 62))["last"])


def delta(after: dict, before: dict, key: str) -> int:
    return int(after[key]) - int(before[key])


def build_report(net: MrcNetwork, flow: Flow, result: dict, failure: dict) -> dict[str, Any]:
    """The report's figures: the fabric, the transfer against the flow's capacity, the
    counters' differences, where the packets went, how the run was built."""
    src, dst, before, after = flow.src, flow.dst, flow.before, flow.after
    rtt, capacity, single_path = flow.rtt, flow.capacity_bps, flow.single_path
    s0, s1 = before[src]["endpoint"], after[src]["endpoint"]
    d0, d1 = before[dst]["endpoint"], after[dst]["endpoint"]
    planes = {p: s1["per_plane"][p]["tx_packets"] - s0["per_plane"][p]["tx_packets"]
              for p in s1["per_plane"]}
    paths = []
    r0, r1 = before[src]["per_route"], after[src]["per_route"]
    for route, info in sorted(r1.items(), key=lambda kv: (kv[1]["plane"], kv[0])):
        sent = info["tx_data_packets"] - r0.get(route, {}).get("tx_data_packets", 0)
        if sent:
            paths.append({"route": route, "plane": info["plane"], "data_packets": sent})
    packets = {h: delta(after[h]["endpoint"], before[h]["endpoint"], "tx_packets")
               + delta(after[h]["endpoint"], before[h]["endpoint"], "rx_packets")
               for h in (src, dst)}
    cpu = {h: after[h]["cpu_seconds"] - before[h]["cpu_seconds"] for h in (src, dst)}
    return {
        "fabric": {"planes": net.fabric.planes, "t0": net.fabric.t0_per_plane,
                   "t1": net.fabric.t1_per_plane, "hosts": net.fabric.hosts,
                   "target": net.target, "port_rate_pps": net.config.port_rate_pps,
                   "queue_depth": net.config.queue_depth},
        "mode": "single-path" if single_path else "mrc",
        "bring_up_s": net.timings,
        "transfer": {"src": src, "dst": dst, "bytes": result["bytes"], "ok": result["ok"],
                     "verified": result.get("verified", False),
                     "error": result.get("error", ""),
                     "duration_s": result.get("duration_s"),
                     "goodput_bps": result.get("goodput_bps"),
                     "capacity_bps": capacity,
                     "goodput_of_capacity": (result["goodput_bps"] / capacity
                                             if capacity and result.get("goodput_bps") else None)},
        "counters": {"retransmits": delta(s1, s0, "retransmits"),
                     "timeouts": delta(s1, s0, "timeouts"),
                     "nacks_received": delta(s1, s0, "nacks_received"),
                     "trims_received": delta(d1, d0, "trims_received"),
                     "ecn_marks_received": delta(d1, d0, "ecn_marks_received"),
                     "ev_retired": delta(s1, s0, "ev_retired"),
                     "ev_reinstated": delta(s1, s0, "ev_reinstated"),
                     "probes_sent": delta(s1, s0, "probes_sent")},
        "per_plane_tx_packets": planes,
        "per_path": paths,
        "failure": failure,
        "rtt_s": rtt,
        "convergence_delay_s": net.config.convergence_delay,
        "base_rtt_config_s": net.config.effective_base_rtt,
        # rule B's silence allowance (before any widening after spurious retransmissions)
        "reorder_window_s": after[src]["reorder_window_s"],
        "rtt_ms": s1.get("rtt_ms"),  # the sender's RTT samples over the whole QP
        "max_delivery_pause_ms": s1.get("max_delivery_pause_ms"),
        "agent_cpu_per_1000_packets_s": {f"h{h}": 1000 * cpu[h] / packets[h]
                                         for h in (src, dst) if packets[h]},
        "switch_frames_consumed": {k: v for k, v in flow.consumed.items() if v},
        "bringup_s": dict(net.timings),
        **_spread(net),
    }


def _spread(net: MrcNetwork) -> dict[str, Any]:
    """{"cluster": how the fabric was spread over servers}, nothing on one machine."""
    assert net.builder is not None
    spread = net.builder.summary()
    return {"cluster": spread} if spread else {}
