"""bench.runner.wait_fabric_quiet: a contender starts only once what the previous one queued
has drained (a go-back-N storm's resends kept the next MRC run's flows at 0.6 of their rate
in a full run); probe-sized traffic does not count as busy."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from bench import runner
from wire.layout import FULL_DATA_FRAME_LEN


class DrainingFabric:
    """Two switches whose ports send `per_poll` bytes per poll for `busy_polls` polls, then
    `idle_bytes` per poll."""

    def __init__(self, busy_polls: int, per_poll: int, idle_bytes: int = 0) -> None:
        self.fabric = SimpleNamespace(switches=[SimpleNamespace(name="a"),
                                                SimpleNamespace(name="b")])
        self.reads = 0
        self.busy_polls, self.per_poll, self.idle = busy_polls, per_poll, idle_bytes
        self.total = 0

    def port_sent_bytes(self, name: str) -> dict[int, int]:
        if name == "a":  # one poll = one read of every switch
            self.total += self.per_poll if self.reads < self.busy_polls else self.idle
            self.reads += 1
        return {1: self.total // 2, 2: self.total - self.total // 2}


@pytest.fixture(autouse=True)
def fast_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner, "QUIET_POLL_S", 0.001)
    monkeypatch.setattr(runner, "QUIET_LIMIT_S", 2.0)


def test_waits_while_frames_drain() -> None:
    net = DrainingFabric(busy_polls=20, per_poll=22 * FULL_DATA_FRAME_LEN)
    assert runner.wait_fabric_quiet(net) is not None  # type: ignore[arg-type]
    assert net.reads >= 20


def test_probes_alone_are_quiet() -> None:
    net = DrainingFabric(busy_polls=0, per_poll=0, idle_bytes=3 * 100)
    assert runner.wait_fabric_quiet(net) is not None  # type: ignore[arg-type]
    assert net.reads <= 3


def test_a_fabric_that_never_drains_gives_up() -> None:
    net = DrainingFabric(busy_polls=10**9, per_poll=2 * FULL_DATA_FRAME_LEN)
    assert runner.wait_fabric_quiet(net) is None  # type: ignore[arg-type]
