"""A failure injector is started when the flows start sending, not before their set-up calls:
a failure timed from it must land inside the flow (the quick bench's failures struck a few ms
before the flow began when the set-up calls were slow)."""

from __future__ import annotations

import time

import pytest

from bench.contenders import mrc_flows
from bench.contenders.mrc_flows import FlowSpec


class FakeAgent:
    def __init__(self, log: list[str]) -> None:
        self.log = log

    def call(self, command: str, **_: object) -> dict:
        self.log.append(command)
        answers = {"register": {"va": 0, "rkey": 1}, "events": {"last": 0},
                   "stats": {"endpoint": dict.fromkeys(
                       mrc_flows.SENDER_STATS + mrc_flows.RECEIVER_STATS, 0)},
                   "messages": {"messages": []}, "deregister": {}}
        return answers[command]


class FakeNet:
    def __init__(self) -> None:
        self.log: list[str] = []

    def agent(self, _host: int) -> FakeAgent:
        return FakeAgent(self.log)


def test_on_start_runs_once_after_set_up_and_before_the_first_write(
        monkeypatch: pytest.MonkeyPatch) -> None:
    net = FakeNet()
    monkeypatch.setattr(mrc_flows, "post_chunks",
                        lambda *a, **k: net.log.append("write") or ["stopped here"])
    flows = mrc_flows.run_flows(net, [FlowSpec(0, 1, 1000)], timeout=1.0,
                                on_start=lambda: net.log.append("on_start"))
    assert net.log.index("on_start") == net.log.index("write") - 1
    assert net.log[:net.log.index("on_start")] == ["register", "events", "stats", "stats"]
    assert flows[0]["start"] > 0 and not flows[0]["ok"]


def test_on_start_runs_once_for_several_flows(monkeypatch: pytest.MonkeyPatch) -> None:
    net = FakeNet()
    monkeypatch.setattr(mrc_flows, "post_chunks", lambda *a, **k: ["stopped here"])
    calls: list[int] = []
    mrc_flows.run_flows(net, [FlowSpec(i, i + 1, 1000) for i in range(4)], timeout=1.0,
                        on_start=lambda: calls.append(1))
    assert calls == [1]


class GrowingLog:
    """A receiver whose message log keeps its last `keep` records, growing by `per_read`
    records between two reads, as an agent's does while a flow runs."""

    def __init__(self, keep: int, per_read: int) -> None:
        self.keep, self.per_read, self.seq, self.reads = keep, per_read, 0, 0

    def call(self, command: str, since: int = 0, **_: object) -> dict:
        assert command == "messages"
        self.reads += 1
        self.seq += self.per_read
        first = max(1, self.seq - self.keep + 1)
        return {"messages": [{"seq": s, "length": 1} for s in range(max(first, since + 1),
                                                                   self.seq + 1)],
                "evicted_through": first - 1}


def test_the_message_reader_gathers_more_records_than_the_log_keeps(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mrc_flows, "MESSAGE_POLL_S", 0.01)
    log = GrowingLog(keep=100, per_read=60)
    with mrc_flows.MessageReader(log, since=0) as reader:
        while log.reads < 5:
            time.sleep(0.001)
    assert [m["seq"] for m in reader.records] == list(range(1, log.seq + 1))
    assert log.seq > log.keep and not reader.overflowed


def test_the_message_reader_says_when_records_were_lost(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mrc_flows, "MESSAGE_POLL_S", 60.0)  # only the final read
    log = GrowingLog(keep=100, per_read=150)
    with mrc_flows.MessageReader(log, since=0) as reader:
        pass
    assert reader.overflowed and len(reader.records) == 100
