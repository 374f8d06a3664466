"""What the emulation's own processes spent per packet while a run went: its live cost.

Every switch and agent is a Python process, and what one packet costs them bounds the rate
the fabric can be run at faithfully. Read at the start and the end of a run from the
processes themselves:

- each switch and agent process's time on a CPU (emulation.fidelity.on_cpu_ns; software
  switches sharing a process count once);
- the frames every switch sent (its interfaces' kernel counters): each frame a switch sends
  is one switch hop, data and acknowledgements alike;
- the MRC data packets the agents sent (their endpoints' `tx_data_packets`, resends included).

From those: switch CPU per hop (µs), switch CPU per data packet (µs; every hop of the data
packet and its share of acknowledgements), hops per data packet, and agent CPU per 1,000 data
packets (ms, every agent together: the sender's work and the receiver's). A process that
started during the run (an agent restarted in another mode) counts from zero; one that ended
cannot be read and is named in `unread`. `python -m bench.costs.live_cost` holds these beside
bench.costs.forwarding and bench.costs.agent_speed, which measure the same code alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from emulation.agents import AgentError
from emulation.fidelity import on_cpu_ns


@dataclass(frozen=True)
class Reading:
    """One look at the processes: CPU ns per (role, pid), switch frames sent, data packets
    sent per host (None: the agent did not answer)."""

    cpu_ns: dict[tuple[str, int], int]
    switch_frames: int
    data_packets: dict[int, int | None]


def read(net: Any) -> Reading:
    """The processes of `net` (an emulation.network.MrcNetwork) as they are now."""
    pids = {("switch", pid) for sw in net.fabric.switches
            if (pid := net.switch_pid(sw.name)) is not None}
    pids |= {("agent", pid) for h in range(net.fabric.hosts)
             if (pid := net.agent_pid(h)) is not None}
    cpu = {key: ns for key in pids if (ns := on_cpu_ns(key[1])) is not None}
    frames = sum(s["out"] for s in net.switch_frames().values())
    data: dict[int, int | None] = {}
    for h in sorted(net.agents):  # a fabric built without agents has none to ask
        try:
            data[h] = int(net.agent(h).call("counters", wait=5.0)["counters"]["tx_data_packets"])
        except AgentError:
            data[h] = None
    return Reading(cpu, frames, data)


def cost(before: Reading, after: Reading) -> dict[str, Any]:
    """The live cost between two readings (module docstring)."""
    spent = {"switch": 0, "agent": 0}
    unread = sorted(f"{role} {pid}" for role, pid in before.cpu_ns if (role, pid)
                    not in after.cpu_ns)
    for (role, pid), ns in after.cpu_ns.items():
        spent[role] += ns - before.cpu_ns.get((role, pid), 0)
    data = 0
    for h, now in after.data_packets.items():
        was = before.data_packets.get(h)
        if now is None or was is None:
            unread.append(f"h{h} counters")
            continue
        data += now - was if now >= was else now  # a restarted agent counts from zero
    hops = after.switch_frames - before.switch_frames
    switch_s, agent_s = spent["switch"] / 1e9, spent["agent"] / 1e9
    return {
        "switch_cpu_s": round(switch_s, 4), "agent_cpu_s": round(agent_s, 4),
        "switch_hops": hops, "data_packets": data,
        "switch_cpu_us_per_hop": round(switch_s / hops * 1e6, 2) if hops else None,
        "switch_cpu_us_per_data_packet": round(switch_s / data * 1e6, 2) if data else None,
        "hops_per_data_packet": round(hops / data, 2) if data else None,
        "agent_cpu_ms_per_1000_data_packets": round(agent_s / data * 1e6, 2) if data else None,
        "unread": unread,
    }


def summary_line(c: dict[str, Any]) -> str:
    """The live cost in one line, as the demo and the bench print it."""
    def fmt(value: float | None, unit: str) -> str:
        return "n/a" if value is None else f"{value:.1f} {unit}"

    return (f"live cost: agents {fmt(c['agent_cpu_ms_per_1000_data_packets'], 'ms')} per "
            f"1,000 data packets; switches {fmt(c['switch_cpu_us_per_hop'], 'us')} per hop, "
            f"{fmt(c['hops_per_data_packet'], 'hops')} and "
            f"{fmt(c['switch_cpu_us_per_data_packet'], 'us')} per data packet "
            f"({c['data_packets']} data packets)")
