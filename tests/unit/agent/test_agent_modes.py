"""Agent modes: MRC's one sprayed QP, roce's K plane-pinned QPs with writes striped over them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fabric.topology import Fabric
from host_agent.agent import Agent
from host_agent.control import Reply
from host_agent.core import DEFAULT_MTU, EndpointConfig, FailReason, WriteCompleted, WriteFailed
from host_agent.hostconfig import HostConfig
from host_agent.modes import MRC_MODE, ROCE, AgentMode, ModeError, roce_endpoint_config, stripe

FABRIC = Fabric(planes=2, t0_per_plane=1, t1_per_plane=2, hosts_per_t0=2)


def test_parse_names_and_rejects() -> None:
    assert AgentMode.parse("mrc", 4) == MRC_MODE
    assert AgentMode.parse("roce", 4) == AgentMode(ROCE, 4)  # one QP per plane
    assert AgentMode.parse("roce:16", 4).qps == 16
    assert AgentMode.parse("single_port", 4) == AgentMode(ROCE, 1)
    assert [AgentMode.parse(t, 4).name for t in ("mrc", "roce:8", "single_port")] == \
        ["mrc", "roce:8", "single_port"]
    for bad in ("tcp", "roce:0", "roce:65", "mrc:2", "roce:x"):
        with pytest.raises(ModeError):
            AgentMode.parse(bad, 4)


def test_stripe_is_mtu_aligned_and_covers_the_message() -> None:
    assert stripe(4 * DEFAULT_MTU, 4, DEFAULT_MTU) == [(i * 1024, 1024) for i in range(4)]
    assert stripe(3000, 2, 1024) == [(0, 2048), (2048, 952)]
    assert stripe(100, 16, 1024) == [(0, 100)]  # one packet: one part
    parts = stripe(16 * 1024 + 1, 16, 1024)
    assert sum(n for _, n in parts) == 16 * 1024 + 1 and all(o % 1024 == 0 for o, _ in parts)


def _agent(tmp_path: Path, host: int, mode: AgentMode) -> Agent:
    config = EndpointConfig() if mode.is_mrc else roce_endpoint_config(0.005)
    return Agent(HostConfig.from_fabric(FABRIC, host), config,
                 str(tmp_path / f"h{host}.sock"), seed=None, mode=mode, exchange=True)


def _call(agent: Agent, cmd: str, **args: Any) -> list[dict[str, Any]]:
    answers: list[dict[str, Any]] = []
    reply: Reply = answers.append
    agent.commands.handle({"cmd": cmd, **args}, reply)
    return answers


def _exchange(a: Agent, b: Agent, lanes: int) -> None:
    for lane in range(lanes):
        oa = _call(a, "qp_info", peer=1, lane=lane)[0]
        ob = _call(b, "qp_info", peer=0, lane=lane)[0]
        _call(a, "qp_connect", peer=1, lane=lane, qpn=ob["qpn"], psn=ob["psn"])
        _call(b, "qp_connect", peer=0, lane=lane, qpn=oa["qpn"], psn=oa["psn"])


def test_roce_lanes_are_pinned_one_plane_each_with_distinct_evs(tmp_path: Path) -> None:
    mode = AgentMode(ROCE, 4)  # 4 QPs over 2 planes
    a, b = _agent(tmp_path, 0, mode), _agent(tmp_path, 1, mode)
    _exchange(a, b, 4)
    qpns = a.driver.adapter.qpns_of(1)
    assert len(qpns) == 4 and _call(a, "status")[0]["lanes"] == 4
    evs = set()
    for lane, qpn in enumerate(qpns):
        conn = a.endpoint.connection(qpn)
        entries = conn.evs.entries()
        assert [e.path.plane for e in entries] == [lane % 2]  # one EV, on the lane's plane
        assert entries[0].path.route == a.config.peer_address[(1, lane % 2)]  # baseline LPM
        evs.add(entries[0].ev)
    assert len(evs) == 4  # each QP hashes differently at the switches' ECMP
    with pytest.raises(Exception, match="lane"):
        _call(a, "qp_info", peer=1, lane=4)


def test_a_roce_write_is_striped_and_answers_when_every_part_is_done(tmp_path: Path) -> None:
    mode = AgentMode(ROCE, 2)
    a, b = _agent(tmp_path, 0, mode), _agent(tmp_path, 1, mode)
    _exchange(a, b, 2)
    region = _call(b, "register", size=8192)[0]
    answers: list[dict[str, Any]] = []
    a.commands.handle({"cmd": "write", "peer": 1, "bytes": 3000, "va": region["va"],
                       "rkey": region["rkey"]}, answers.append)
    parts = sorted(a.commands.pending)
    assert [q for q, _ in parts] == sorted(a.driver.adapter.qpns_of(1))  # one part per lane
    a.commands.on_event(WriteCompleted(*parts[0]))
    assert answers == []  # half done
    a.commands.on_event(WriteCompleted(*parts[1]))
    assert answers and answers[0]["ok"] and answers[0]["bytes"] == 3000
    assert a.commands.pending == {}
    # one failing part fails the write at once; the other part's completion is ignored
    a.commands.handle({"cmd": "write", "peer": 1, "bytes": 3000, "va": region["va"],
                       "rkey": region["rkey"]}, answers.append)
    parts = sorted(a.commands.pending)
    a.commands.on_event(WriteFailed(*parts[0], reason=FailReason.TIMEOUT))
    assert len(answers) == 2 and not answers[1]["ok"] and a.commands.pending == {}
    a.commands.on_event(WriteCompleted(*parts[1]))
    assert len(answers) == 2


def test_a_write_reads_only_the_cheap_counters(tmp_path: Path, monkeypatch) -> None:
    """A write's before/after figures come from Endpoint.counters(): Endpoint.stats() formats
    every EV's route and once cost an agent 80% of its CPU when called twice per write."""
    a, b = _agent(tmp_path, 0, MRC_MODE), _agent(tmp_path, 1, MRC_MODE)
    _exchange(a, b, 1)
    region = _call(b, "register", size=8192)[0]

    def expensive() -> None:
        raise AssertionError("Endpoint.stats() called on the write path")

    monkeypatch.setattr(a.endpoint, "stats", expensive)
    answers: list[dict[str, Any]] = []
    a.commands.handle({"cmd": "write", "peer": 1, "bytes": 3000, "va": region["va"],
                       "rkey": region["rkey"]}, answers.append)
    (part,) = a.commands.pending
    a.endpoint._stats["tx_data_packets"] += 3  # as if three packets left during the write
    a.commands.on_event(WriteCompleted(*part))
    assert answers[0]["ok"] and answers[0]["tx_data_packets"] == 3
