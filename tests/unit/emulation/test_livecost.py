"""emulation.livecost: the processes' CPU per hop and per data packet, from two readings."""

from __future__ import annotations

import os
import time

from emulation.agents import AgentError
from emulation.fidelity import on_cpu_ns
from emulation.livecost import Reading, cost, read, summary_line
from fabric.topology import Fabric


def test_cost_divides_each_role_by_its_packets() -> None:
    before = Reading({("switch", 10): 1_000, ("switch", 11): 0, ("agent", 20): 5_000_000},
                     switch_frames=100, data_packets={0: 10, 1: 0})
    after = Reading({("switch", 10): 2_001_000, ("switch", 11): 2_000_000,
                     ("agent", 20): 65_000_000},
                    switch_frames=100 + 400, data_packets={0: 110, 1: 0})
    c = cost(before, after)
    assert c["switch_cpu_s"] == 0.004 and c["agent_cpu_s"] == 0.06
    assert c["switch_hops"] == 400 and c["data_packets"] == 100
    assert c["switch_cpu_us_per_hop"] == 10.0
    assert c["switch_cpu_us_per_data_packet"] == 40.0
    assert c["hops_per_data_packet"] == 4.0
    assert c["agent_cpu_ms_per_1000_data_packets"] == 600.0
    assert c["unread"] == []
    assert "600.0 ms per 1,000 data packets" in summary_line(c)
    assert "10.0 us per hop" in summary_line(c)


def test_restarted_and_vanished_processes() -> None:
    before = Reading({("agent", 20): 7_000, ("agent", 21): 3_000}, 0, {0: 500, 1: 5})
    # agent 20 ended (restarted as 22, which counts from zero); h0's counters restarted too
    after = Reading({("agent", 21): 4_000, ("agent", 22): 9_000}, 0, {0: 40, 1: None})
    c = cost(before, after)
    assert c["agent_cpu_s"] == round((1_000 + 9_000) / 1e9, 4)
    assert c["data_packets"] == 40
    assert c["unread"] == ["agent 20", "h1 counters"]
    assert c["switch_cpu_us_per_hop"] is None and "switches n/a per hop" in summary_line(c)


def test_on_cpu_ns_follows_this_process() -> None:
    first = on_cpu_ns(os.getpid())
    end = time.process_time() + 0.02
    while time.process_time() < end:
        pass
    second = on_cpu_ns(os.getpid())
    assert first is not None and second is not None and second - first >= 15_000_000
    assert on_cpu_ns(2 ** 22 + 12345) is None  # beyond pid_max: no such process


class _Agent:
    def __init__(self, packets: int | None) -> None:
        self.packets = packets

    def call(self, cmd: str, *, wait: float) -> dict:
        assert cmd == "counters"
        if self.packets is None:
            raise AgentError("no answer")
        return {"counters": {"tx_data_packets": self.packets}}


class _Net:
    fabric = Fabric(planes=1, t0_per_plane=1, t1_per_plane=1, hosts_per_t0=3)
    agents = {0: object(), 1: object()}  # h2 runs none

    def switch_pid(self, name: str) -> int:
        return os.getpid()  # every switch in this process: counted once

    def agent_pid(self, host: int) -> int | None:
        return None  # an agent on another server

    def switch_frames(self) -> dict:
        return {"p0l0": {"in": 9, "out": 7, "consumed": 2}, "p0s0": {"in": 3, "out": 3,
                                                                    "consumed": 0}}

    def agent(self, host: int) -> _Agent:
        return _Agent(12 if host == 0 else None)


def test_read_takes_each_process_once_and_tolerates_a_silent_agent() -> None:
    r = read(_Net())
    assert list(r.cpu_ns) == [("switch", os.getpid())]
    assert r.switch_frames == 10
    assert r.data_packets == {0: 12, 1: None}
