"""softswitch.loop: a heap of due times serves only the switches whose time has come, and a
switch drops the calls it has moved."""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest

from softswitch import dataplane as dp
from softswitch.loop import EventLoop


class Recorder:
    def __init__(self, loop: EventLoop, name: str, log: list) -> None:
        self.loop, self.name, self.log = loop, name, log

    def on_due(self, when: float, now: float) -> None:
        self.log.append((self.name, when))
        assert now >= when


def _run_for(loop: EventLoop, seconds: float) -> None:
    """Run the loop until `seconds` have passed: a byte on a socket of its own wakes it."""
    wake, poke = socket.socketpair()

    def stop() -> None:
        wake.recv(1)
        loop.stopping = True

    loop.register(wake, stop)
    timer = threading.Timer(seconds, lambda: poke.send(b"!"))
    timer.start()
    loop.run()
    timer.join()
    loop.unregister(wake)
    wake.close()
    poke.close()


def test_due_calls_come_in_time_order_and_only_when_due() -> None:
    loop, log = EventLoop(), []
    a, b = Recorder(loop, "a", log), Recorder(loop, "b", log)
    now = time.monotonic()
    loop.wake_at(now + 0.03, a)
    loop.wake_at(now + 0.01, b)
    loop.wake_at(now + 0.02, a)
    loop.wake_at(now + 5.0, b)  # not due within the run
    _run_for(loop, 0.1)
    assert log == [("b", now + 0.01), ("a", now + 0.02), ("a", now + 0.03)]
    loop.close()


class FakeSocket:
    def __init__(self, sent: list) -> None:
        self.sent = sent

    def send(self, frame: bytes) -> None:
        self.sent.append(bytes(frame))


class FakePipeline:
    def forward(self, frame: bytearray, port: int):
        return 2, 0, frame

    def egress(self, port: int, priority: int, enq: int, deq: int) -> None:
        pass


def test_a_paced_switch_asks_once_per_departure_and_drops_moved_calls(monkeypatch) -> None:
    clock = [100.0]
    monkeypatch.setattr(dp, "_monotonic", lambda: clock[0])
    asked: list[float] = []
    d = dp.Dataplane({1: "a", 2: "b"}, priorities=1)
    monkeypatch.setattr(d.loop, "wake_at", lambda when, switch: asked.append(when))
    sent: list = []
    d.socks = {2: FakeSocket(sent)}
    d.pipeline = FakePipeline()
    d.control(json.dumps({"cmd": "set_queue_rate", "rate": 100.0}).encode())  # 10 ms apart
    for name in (b"x", b"y", b"z"):
        d._ingress(bytearray(name), 1)
    assert sent == [b"x"] and asked == [100.01]  # y and z queued: one call, the earliest
    d.on_due(99.0, 100.01)  # a call for a time since moved: nothing happens
    assert sent == [b"x"]
    clock[0] = 100.01
    d.on_due(100.01, 100.01)
    assert sent == [b"x", b"y"] and asked == pytest.approx([100.01, 100.02])
    clock[0] = asked[1]
    d.on_due(asked[1], asked[1])
    assert sent == [b"x", b"y", b"z"] and len(asked) == 2  # nothing left to ask
    d.loop.close()
