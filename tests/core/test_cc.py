"""Congestion control: NSCC quadrants, bounds, config validation, fixed window."""

from __future__ import annotations

import pytest

from host_agent.core import CongestionControl, FixedWindow, LocalProtocolError, Nscc, NsccConfig

BASE = 1e-3
CFG = NsccConfig(base_rtt=BASE, target_delay=0.5e-3, min_cwnd=1024, max_cwnd=1024 * 1024,
                 initial_cwnd=64 * 1024)  # fmt: skip
LOW = BASE + 0.1e-3  # queuing delay 0.1 ms < target
HIGH = BASE + 2e-3  # queuing delay 2 ms > target


@pytest.mark.parametrize("make", [lambda: Nscc(CFG), lambda: FixedWindow(4096)],
                         ids=["nscc", "fixed"])
def test_every_controller_gates_sending_by_its_window(make) -> None:
    """What the sender relies on of any CongestionControl: a positive int window, one packet
    always allowed with nothing in flight (however big), nothing past the window, and
    negative counts refused as the caller's error."""
    cc: CongestionControl = make()
    w = cc.cwnd
    assert isinstance(w, int) and w > 0
    assert cc.can_send(0, 4 * w)
    assert cc.can_send(w - 100, 100) and not cc.can_send(w - 99, 100)
    for bad in ((-1, 100), (0, -1)):
        with pytest.raises(LocalProtocolError):
            cc.can_send(*bad)


def test_a_fixed_window_ignores_every_signal() -> None:
    cc = FixedWindow(4096)
    cc.on_ack(1024, HIGH, True, 0.0)
    cc.on_nack(0.1)
    cc.on_loss(0.2)
    cc.on_timeout(0.3)
    assert cc.cwnd == 4096


def test_no_ecn_low_delay_proportional_increase() -> None:
    cc = Nscc(CFG)
    start = cc.cwnd
    cc.on_ack(1024, LOW, False, 0.0)
    grow_low = cc.cwnd - start
    assert grow_low > 0
    cc2 = Nscc(CFG)
    cc2.on_ack(1024, BASE, False, 0.0)  # zero queuing delay grows more than a small one
    assert cc2.cwnd - start > grow_low
    assert cc.counters["proportional_increase"] == 1


def test_no_ecn_high_delay_fair_increase_is_additive() -> None:
    cc = Nscc(CFG)
    start = cc.cwnd
    for _ in range(64):  # one window of 1 KiB ACKs -> about fi_gain MTU
        cc.on_ack(1024, HIGH, False, 0.0)
    assert 0 < cc.cwnd - start <= 2 * CFG.mtu
    assert cc.counters["fair_increase"] == 64


def test_ecn_high_delay_multiplicative_decrease_once_per_rtt() -> None:
    cc = Nscc(CFG)
    start = cc.cwnd
    cc.on_ack(1024, HIGH, True, 1.0)
    after = cc.cwnd
    assert after < start and after >= start * (1 - CFG.md_max) - 1
    cc.on_ack(1024, HIGH, True, 1.0 + BASE / 2)  # same window's news: suppressed
    assert cc.cwnd == after and cc.counters["md_suppressed"] == 1
    cc.on_ack(1024, HIGH, True, 1.0 + 1.01 * BASE)
    assert cc.cwnd < after


def test_ecn_low_delay_holds() -> None:
    cc = Nscc(CFG)
    start = cc.cwnd
    cc.on_ack(1024, LOW, True, 0.0)
    assert cc.cwnd == start and cc.counters["hold"] == 1


def test_unknown_rtt_counts_as_low_delay() -> None:
    cc = Nscc(CFG)
    start = cc.cwnd
    cc.on_ack(1024, None, False, 0.0)
    assert cc.cwnd > start
    cc.on_ack(1024, None, True, 0.0)
    assert cc.counters["hold"] == 1


def test_base_rtt_learned_downwards() -> None:
    cc = Nscc(CFG)
    cc.on_ack(1024, 0.4e-3, False, 0.0)
    assert cc.base_rtt == pytest.approx(0.4e-3)
    assert cc.target_delay == CFG.target_delay
    auto = Nscc(NsccConfig(base_rtt=BASE))
    auto.on_ack(1024, 0.2e-3, False, 0.0)
    assert auto.target_delay == pytest.approx(0.1e-3)


def test_window_bounds_hold() -> None:
    cc = Nscc(CFG)
    for _ in range(10_000):
        cc.on_ack(64 * 1024, BASE, False, 0.0)
    assert cc.cwnd == CFG.max_cwnd
    for i in range(200):
        cc.on_ack(1024, HIGH, True, float(i))
        cc.on_nack(float(i))
        cc.on_timeout(float(i))
    assert cc.cwnd == CFG.min_cwnd


def test_nack_timeout_and_loss() -> None:
    cc = Nscc(CFG)
    start = cc.cwnd
    cc.on_nack(0.0)
    assert cc.cwnd == start - CFG.mtu
    cc.on_loss(0.0)  # a path failure, not congestion: window unchanged
    assert cc.cwnd == start - CFG.mtu and cc.counters["losses"] == 1
    cc.on_timeout(0.0)
    assert cc.cwnd == (start - CFG.mtu) // 2


def test_can_send() -> None:
    cc = Nscc(CFG)
    w = cc.cwnd
    assert cc.can_send(w - 1024, 1024)
    assert not cc.can_send(w - 1023, 1024)
    tiny = FixedWindow(100)
    assert tiny.can_send(0, 1024)  # an empty pipe always lets one packet out
    assert not tiny.can_send(1, 1024)
    with pytest.raises(LocalProtocolError, match="inflight_bytes"):
        cc.can_send(-1, 10)


def test_fixed_window_ignores_signals() -> None:
    fw = FixedWindow(8192)
    fw.on_ack(1024, HIGH, True, 0.0)
    fw.on_nack(0.0)
    fw.on_loss(0.0)
    fw.on_timeout(0.0)
    assert fw.cwnd == 8192
    with pytest.raises(ValueError, match="window_bytes"):
        FixedWindow(0)


def test_bad_inputs() -> None:
    cc = Nscc(CFG)
    with pytest.raises(LocalProtocolError, match="rtt"):
        cc.on_ack(1024, 0.0, False, 0.0)
    with pytest.raises(LocalProtocolError, match="acked_bytes"):
        cc.on_ack(-1, None, False, 0.0)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"mtu": 0}, "mtu"),
        ({"min_cwnd": 512}, "min_cwnd .* mtu"),
        ({"initial_cwnd": 10**9}, "initial_cwnd <= max_cwnd"),
        ({"base_rtt": 0}, "base_rtt"),
        ({"target_delay": -1.0}, "target_delay"),
        ({"md_max": 1.0}, "md_max"),
        ({"timeout_factor": 2.0}, "timeout_factor"),
        ({"pi_gain": float("nan")}, "pi_gain"),
        ({"max_cwnd": 1.5}, "max_cwnd"),
    ],
)
def test_config_validation(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        NsccConfig(**kwargs)  # type: ignore[arg-type]


def test_for_link_sizes_window_from_bdp() -> None:
    cfg = NsccConfig.for_link(100e6, 1e-3)  # 100 Mb/s x 1 ms = 12500 B
    assert cfg.initial_cwnd == 13 * 1024
    assert cfg.max_cwnd == 19 * 1024
    assert cfg.min_cwnd == cfg.mtu == 1024
    assert NsccConfig.for_link(1e6, 1e-6).max_cwnd == 1024  # tiny BDP: one packet
