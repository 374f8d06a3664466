"""The event loop's hold (interrupt moderation): frames wait for the hold, timers do not."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from emulation.agents import AgentProcess
from emulation.netconfig import NetworkConfig, NetworkError
from fabric.topology import Fabric
from host_agent.loop import MAX_HOLD, EventLoop
from host_agent.modes import MRC_MODE


class FakeTime:
    """A clock that only sleep() moves."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(round(seconds, 9))
        self.now += seconds


class Deadline:
    """A deadline source with one deadline (or none), recording when it ran."""

    def __init__(self, when: float | None) -> None:
        self.when = when
        self.ran_at: list[float] = []

    def deadline(self) -> float | None:
        return self.when

    def on_deadline(self, now: float) -> None:
        self.ran_at.append(now)
        self.when = None

    def after_wakeup(self) -> None:
        pass


def _pair() -> tuple[socket.socket, socket.socket]:
    rx, tx = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    rx.setblocking(False)
    return rx, tx


def _run(loop: EventLoop, source: Deadline, *socks: socket.socket) -> None:
    """Run the loop until a callback stops it, then close it and `socks`, also on failure."""
    try:
        loop.run(source)
    finally:
        loop.close()
        for s in socks:
            s.close()


def _serve(hold: float, source: Deadline, frames: int) -> tuple[FakeTime, list[float]]:
    """Each frame the loop reads makes the next one arrive at once; the loop stops after
    `frames`. Returns the fake time and when each frame was read."""
    t = FakeTime()
    loop = EventLoop(t, hold=hold, sleep=t.sleep)
    rx, tx = _pair()
    read_at: list[float] = []

    def on_read() -> None:
        rx.recv(16)
        read_at.append(t.now)
        if len(read_at) == frames:
            loop.stop()
        else:
            tx.send(b"x")

    loop.add_reader(rx, on_read, held=True)
    tx.send(b"x")
    _run(loop, source, rx, tx)
    return t, read_at


def test_without_a_hold_every_frame_is_read_at_once() -> None:
    t, read_at = _serve(0.0, Deadline(None), 3)
    assert read_at == [0.0, 0.0, 0.0] and t.sleeps == []


def test_a_hold_spaces_the_wakeups_that_read_frames() -> None:
    t, read_at = _serve(0.01, Deadline(None), 3)
    assert read_at == pytest.approx([0.0, 0.01, 0.02])
    assert t.sleeps == pytest.approx([0.01, 0.01])


def test_a_timer_due_inside_the_hold_runs_on_time() -> None:
    source = Deadline(0.004)
    t, read_at = _serve(0.01, source, 2)
    assert source.ran_at == pytest.approx([0.004])  # not at the end of the hold
    assert t.sleeps == pytest.approx([0.004])
    assert read_at == pytest.approx([0.0, 0.004])  # the waiting frame is read in that wake-up


def test_hold_and_network_config_are_validated() -> None:
    for bad in (-0.001, MAX_HOLD + 0.001):
        with pytest.raises(ValueError, match="hold"):
            EventLoop(hold=bad)
    with pytest.raises(NetworkError, match="rx_hold_ms"):
        NetworkConfig(rx_hold_ms=500.0)


def test_agents_get_the_option_only_when_it_is_set(tmp_path: Path) -> None:
    def command(hold: float) -> list[str]:
        return AgentProcess(None, 0, Fabric(), tmp_path, base_rtt=0.01, keep_ipv6=False,
                            mode=MRC_MODE, rx_hold_ms=hold).command()

    assert "--rx-hold-ms" not in command(0.0)
    cmd = command(2.5)
    assert cmd[cmd.index("--rx-hold-ms") + 1] == "2.5"


def test_the_demo_refuses_a_hold_out_of_range() -> None:
    proc = subprocess.run([sys.executable, "topologies/two_tier.py", "--rx-hold-ms", "500",
                           "--no-cli"], cwd=Path(__file__).resolve().parents[3],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "rx_hold_ms must be 0 (off) to 100 ms" in proc.stderr


def test_the_testbed_and_the_agent_program_share_the_default() -> None:
    """Networks, the demo and the bench share one default (5 ms); an agent started by hand
    holds only when told to."""
    from bench.__main__ import parse_args
    from emulation.netconfig import DEFAULT_RX_HOLD_MS
    from host_agent.agent import parse_args as agent_args
    from topologies.two_tier import build_parser as demo_parser

    assert DEFAULT_RX_HOLD_MS == 5.0
    assert NetworkConfig().rx_hold_ms == DEFAULT_RX_HOLD_MS
    assert parse_args(["loss"]).rx_hold_ms == DEFAULT_RX_HOLD_MS
    assert demo_parser().parse_args([]).rx_hold_ms == DEFAULT_RX_HOLD_MS
    assert parse_args(["loss", "--rx-hold-ms", "0"]).rx_hold_ms == 0.0
    assert agent_args(["--host", "0", "--socket", "/tmp/unused.sock"]).rx_hold_ms == 0.0


def test_sockets_that_are_not_held_are_served_during_a_hold() -> None:
    """A NIC frame starts the hold; a control request that arrives inside it is answered at
    once, and the next NIC frame still waits for the end of the hold."""
    t = FakeTime()
    loop = EventLoop(t, hold=0.005, sleep=t.sleep)
    (nic, nic_peer), (ctl, ctl_peer) = _pair(), _pair()
    seen: list[tuple[str, float]] = []

    def on_nic() -> None:
        nic.recv(16)
        seen.append(("nic", t.now))
        if len(seen) == 1:
            nic_peer.send(b"x")  # the next frame, held back
            ctl_peer.send(b"x")  # a control request, not held back
        else:
            loop.stop()

    def on_ctl() -> None:
        ctl.recv(16)
        seen.append(("ctl", t.now))

    loop.add_reader(nic, on_nic, quiet=True, held=True)
    loop.add_reader(ctl, on_ctl)
    nic_peer.send(b"x")
    _run(loop, Deadline(None), nic, nic_peer, ctl, ctl_peer)
    assert seen[:2] == [("nic", 0.0), ("ctl", 0.0)]
    assert seen[2][0] == "nic"  # read once the hold was over (the unheld poll timed out)
    assert loop.wakeups == 3


def test_a_socket_that_is_not_held_never_starts_a_hold() -> None:
    t = FakeTime()
    loop = EventLoop(t, hold=0.005, sleep=t.sleep)
    ctl, ctl_peer = _pair()
    read_at: list[float] = []

    def on_ctl() -> None:
        ctl.recv(16)
        read_at.append(t.now)
        if len(read_at) == 3:
            loop.stop()
        else:
            ctl_peer.send(b"x")

    loop.add_reader(ctl, on_ctl)
    ctl_peer.send(b"x")
    _run(loop, Deadline(None), ctl, ctl_peer)
    assert read_at == [0.0, 0.0, 0.0] and t.sleeps == []


def test_a_socket_cannot_become_held_after_it_was_registered_without() -> None:
    loop = EventLoop(hold=0.005)
    rx, tx = _pair()
    try:
        loop.set_writer(rx, lambda: None)
        with pytest.raises(ValueError, match="without a hold"):
            loop.add_reader(rx, lambda: None, held=True)
    finally:
        loop.close()
        rx.close()
        tx.close()
