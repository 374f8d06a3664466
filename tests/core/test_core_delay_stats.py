"""The sender's delay figures an operator compares across emulation targets: RTT percentiles
(rto.rtt_summary) and, per path, the longest wait between deliveries while packets were in
flight (the silence loss-detection rule B must not take for a dead path)."""

from __future__ import annotations

import functools

import pytest

from host_agent.core import FixedWindow, WriteCompleted
from host_agent.core.rto import RTT_BIN_S, RTT_BINS, RtoEstimator, rtt_summary
from tests.core.harness import BASE_RTT, QP_A, Harness, pattern, small_config

SLOW = ("A", 0, 1)  # plane 0, spine 1
FAST = ("A", 0, 0)


def test_rtt_summary_gives_bin_upper_edges_in_ms() -> None:
    bins = [0] * RTT_BINS
    bins[4], bins[9], bins[49] = 900, 95, 5  # 1000 samples: 4-5 ms, 9-10 ms, 49-50 ms
    assert rtt_summary(bins) == {"samples": 1000, "p50": 5.0, "p99": 10.0, "p99.9": 50.0,
                                 "max": 50.0}
    bins[9], bins[4] = 0, 995
    assert rtt_summary(bins)["p99"] == 5.0
    assert rtt_summary([0] * RTT_BINS) == {"samples": 0}


def test_rto_estimator_counts_each_sample_in_its_bin_and_overflow_in_the_last() -> None:
    rto = RtoEstimator(0.01, 0.002, 1.0)
    rto.sample(10.5 * RTT_BIN_S, 10, 0)
    rto.sample(RTT_BINS * RTT_BIN_S * 3, 11, 0)
    assert rto.rtt_bins[10] == 1 and rto.rtt_bins[-1] == 1 and sum(rto.rtt_bins) == 2


def _transfer_with_stall(stall_rtts: float) -> dict:
    """One 1 MB write over two paths; from 20 base RTTs on, SLOW's delay steps up by
    `stall_rtts` base RTTs (a FIFO whose deliveries pause that long). The reorder window is
    long enough that rule B waits the pause out: a path declared dead ends no pause."""
    cfg = small_config(cc_factory=functools.partial(FixedWindow, 16 * 1024),
                       reorder_window=4 * stall_rtts * BASE_RTT)
    h = Harness(planes=1, spines=2, seed=7, config=cfg)

    def step(src: str, tx) -> bool:
        if h.now >= 20 * BASE_RTT:
            h.link.route_delay[SLOW] = stall_rtts * BASE_RTT
        return True

    h.link.filter = step
    mr = h.b.register_memory(1 << 20)
    h.a.post_write(QP_A, pattern(1 << 20, 3), mr.va, mr.rkey, now=0.0)
    h.run(until=5.0, stop=lambda: h.of_type("A", WriteCompleted))
    assert h.of_type("A", WriteCompleted)
    return h.a.stats()


@pytest.mark.parametrize("stall_rtts", [3.0, 6.0])
def test_a_paused_path_reports_its_pause_and_the_rtt_tail_shows_it(stall_rtts: float) -> None:
    stats = _transfer_with_stall(stall_rtts)
    pauses = stats["max_delivery_pause_ms"]
    slow, fast = pauses[str(SLOW)], pauses[str(FAST)]
    assert slow >= (stall_rtts - 0.5) * BASE_RTT * 1e3 > fast
    assert stats["ev_retired"] == 0
    assert stats["rtt_ms"]["samples"] > 100  # every one in the first 1 ms bin at this scale
