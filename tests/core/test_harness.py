"""Checks of the core test harness itself."""

from __future__ import annotations

from tests.core.harness import BASE_RTT, QP_A, Harness, pattern


def test_harness_idle_connection_has_no_traffic_or_timers() -> None:
    h = Harness()
    h.run(until=1.0)
    assert h.sent == []
    assert h.a.get_timer() is None and h.b.get_timer() is None


def test_harness_trim_cuts_to_headers() -> None:
    h = Harness()
    h.link.faults.trim = 1.0
    h.link.filter = lambda src, tx: src == "A"  # stop at the first delivery: drop B's NACK
    mr = h.b.register_memory(4096)
    h.a.post_write(QP_A, pattern(2048), mr.va, mr.rkey, now=0.0)
    h.run(until=BASE_RTT)
    assert h.b.stats()["trims_received"] >= 1
    assert bytes(mr.buffer) == bytes(4096)  # nothing placed from trimmed packets
