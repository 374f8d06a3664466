"""The goodput timeline: the receiver's placed payload bytes (`rx_data_bytes`) polled every
SAMPLE_S in a thread, and goodput around the failure (demo.run's docstring says which
windows are compared)."""

from __future__ import annotations

import itertools
import threading
import time
from typing import Any

from emulation.agents import AgentProxy

SAMPLE_S = 0.05  # goodput timeline: receiver counters polled this often
CLEAN_FROM_S = 0.4  # the clean goodput reference starts this long after the transfer
AFTER_FAILURE_S = 1.0  # goodput window after the failure begins


class ProgressSampler:
    """Polls an agent's `rx_data_bytes` in a thread: (monotonic time, bytes) pairs."""

    def __init__(self, agent: AgentProxy, period: float = SAMPLE_S) -> None:
        self._agent, self._period = agent, period
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"progress-h{agent.host}",
                                        daemon=True)

    def start(self) -> ProgressSampler:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                got = self._agent.call("counters", wait=5.0)
            except Exception:  # noqa: BLE001 (a missed sample only thins the timeline)
                got = None
            if got is not None:
                self.samples.append((time.monotonic(), int(got["counters"]["rx_data_bytes"])))
            self._stop.wait(self._period)

    def stop(self) -> list[tuple[float, int]]:
        self._stop.set()
        self._thread.join(10.0)
        return self.samples


def bytes_at(samples: list[tuple[float, int]], t: float) -> float | None:
    """Received bytes at time t, interpolated between samples; None outside them."""
    for (t0, b0), (t1, b1) in itertools.pairwise(samples):
        if t0 <= t <= t1:
            return b0 + (b1 - b0) * ((t - t0) / (t1 - t0) if t1 > t0 else 1.0)
    return None


def rate_bps(samples: list[tuple[float, int]], start: float, end: float) -> float | None:
    b0, b1 = bytes_at(samples, start), bytes_at(samples, end)
    if b0 is None or b1 is None or end <= start:
        return None
    return (b1 - b0) * 8 / (end - start)


def goodput_around_failure(samples: list[tuple[float, int]], started: float,
                           fail_begin: float) -> dict[str, Any]:
    """Clean goodput (CLEAN_FROM_S after the start until the failure) and goodput in the
    AFTER_FAILURE_S after the failure began (module docstring)."""
    clean = rate_bps(samples, started + CLEAN_FROM_S, fail_begin)
    end = fail_begin + AFTER_FAILURE_S
    after = rate_bps(samples, fail_begin, end)
    times = [t for t, _ in samples]
    inside = [b - a for a, b in itertools.pairwise(times) if b > started + CLEAN_FROM_S and a < end]
    return {"clean_bps": clean, "after_failure_bps": after,
            "after_failure_of_clean": after / clean if clean and after is not None else None,
            "window_s": AFTER_FAILURE_S,
            "max_sample_gap_s": max(inside, default=None)}
