"""The software switch's link delay (set_link_delay), on a fake clock: a frame leaves its
port `delay` after it left its FIFO (after serialization at the port's rate), a frame from a
host-facing port arrives `delay` late, held frames count in no queue depth, and bad settings
are refused."""

from __future__ import annotations

import json

import pytest

from softswitch import dataplane as dp
from softswitch.cli import parse_command


class FakeSocket:
    def __init__(self, sent: list) -> None:
        self.sent = sent

    def send(self, frame: bytes) -> None:
        self.sent.append(frame)


class FakePipeline:
    """Forwards everything from port 1 to port 2 and back, data priority; records egress."""

    def __init__(self) -> None:
        self.egress_depths: list[tuple[int, int]] = []

    def forward(self, frame: bytearray, port: int):
        return (2 if port == 1 else 1), 0, frame

    def egress(self, port: int, priority: int, enq: int, deq: int) -> None:
        self.egress_depths.append((enq, deq))


@pytest.fixture
def switch(monkeypatch: pytest.MonkeyPatch):
    clock = [100.0]
    monkeypatch.setattr(dp, "_monotonic", lambda: clock[0])
    d = dp.Dataplane({1: "h", 2: "s"}, priorities=2)
    sent: dict[int, list] = {1: [], 2: []}
    d.socks = {p: FakeSocket(sent[p]) for p in sent}
    d.pipeline = FakePipeline()
    return d, clock, sent


def control(d: dp.Dataplane, **req) -> dict:
    return d.control(json.dumps(req).encode())


def run_until(d: dp.Dataplane, clock: list, until: float) -> None:
    """The event loop's part: wake at each next departure up to `until`."""
    while (t := d.next_departure()) is not None and t <= until:
        clock[0] = t
        d.drain_all(t)
    clock[0] = until


def test_no_delay_sends_at_once(switch) -> None:
    d, clock, sent = switch
    d._ingress(bytearray(b"a"), 2)
    assert sent[1] == [b"a"] and not d.has_backlog()


def test_frames_leave_a_delay_after_their_fifo(switch) -> None:
    d, clock, sent = switch
    assert control(d, cmd="set_link_delay", delay=0.01, host_ports=[1]) == {"ok": True}
    assert control(d, cmd="set_queue_rate", rate=100.0) == {"ok": True}  # 10 ms a packet
    for name in (b"a", b"b", b"c"):
        d._ingress(bytearray(name), 2)  # from the spine side: no ingress delay
    run_until(d, clock, 100.0099)
    assert sent[1] == []  # a left its FIFO at 100.00 and is still on the wire
    run_until(d, clock, 100.0100)
    assert sent[1] == [b"a"]
    run_until(d, clock, 100.0301)
    assert sent[1] == [b"a", b"b", b"c"]  # 100.02 and 100.03: paced, then delayed
    # the queue depth each saw counts only the FIFO, never frames on the wire
    assert d.pipeline.egress_depths == [(0, 0), (0, 1), (1, 0)]  # b and c queued behind a


def test_host_frames_arrive_a_delay_late_and_then_leave_one_later(switch) -> None:
    d, clock, sent = switch
    control(d, cmd="set_link_delay", delay=0.005, host_ports=[1])
    d._ingress(bytearray(b"up"), 1)  # from the host: its link's delay first
    assert d.pipeline.egress_depths == [] and d.has_backlog()
    run_until(d, clock, 100.0049)
    assert d.pipeline.egress_depths == []
    run_until(d, clock, 100.0101)
    assert sent[2] == [b"up"]  # 5 ms host link + 5 ms this switch's uplink
    assert not d.has_backlog()


def test_turning_it_off_and_bad_settings(switch) -> None:
    d, clock, sent = switch
    control(d, cmd="set_link_delay", delay=0.005, host_ports=[1])
    assert control(d, cmd="set_link_delay", delay=0) == {"ok": True}
    d._ingress(bytearray(b"x"), 1)
    assert sent[2] == [b"x"]
    for bad in ({"delay": -1}, {"delay": 2.0}, {"delay": "1"}, {"delay": True},
                {"delay": 0.001, "host_ports": [9]}, {"delay": 0.001, "host_ports": 1}):
        reply = control(d, cmd="set_link_delay", **bad)
        assert reply["ok"] is False and ("delay" in reply["error"] or "port" in reply["error"])


def test_cli_syntax() -> None:
    assert parse_command(["set_link_delay", "0.002", "1", "2"]) == {
        "cmd": "set_link_delay", "delay": 0.002, "host_ports": [1, 2]}
    with pytest.raises(ValueError, match="set_link_delay <seconds>"):
        parse_command(["set_link_delay", "soon"])
