"""The sender's retransmission timeout: RFC 6298 smoothing with the floors MRC spraying needs.

RTO = srtt + max(4 rttvar, rto_min), as Linux adds its floor to srtt (rather than
max(rto_min, srtt + 4 rttvar), which a burst of similar samples collapses to rto_min), never
below a slowly decaying maximum RTT sample x MAX_MARGIN (sprayed packets see every path's
queue; a timeout shorter than the slowest path's RTT would retire EVs that are merely
congested), at least rto_initial until the window in flight at the first sample is
acknowledged, doubled per expiry (backoff), capped at rto_max. Why each rule:
docs/decisions.md, "Retransmission timeout".
"""

from __future__ import annotations

import wire

RTT_MAX_DECAY = 0.999  # per RTT sample: the remembered maximum halves in ~700 samples
MAX_MARGIN = 1.5  # RTO >= this x the remembered maximum RTT
MAX_BACKOFF = 64
# RTT samples are counted in 1 ms bins (the last bin holds everything longer), so an operator
# can compare the delay tails of two emulation targets (docs/benchmarks.md, "BMv2 jitter").
RTT_BIN_S = 0.001
RTT_BINS = 1024
RTT_PERCENTILES = (50.0, 99.0, 99.9)


class RtoEstimator:
    def __init__(self, rto_initial: float, rto_min: float, rto_max: float) -> None:
        self._initial, self._min, self._max = rto_initial, rto_min, rto_max
        self.srtt: float | None = None
        self._rttvar = 0.0
        self._rtt_max = 0.0
        self.rto = rto_initial  # before backoff
        self._backoff = 1
        self._first_round_end: int | None = None  # next PSN when the first RTT sample came
        self.rtt_bins = [0] * RTT_BINS

    def sample(self, rtt: float, next_psn: int, snd_una: int) -> None:
        """One unambiguous RTT sample; next_psn/snd_una tell whether the first window is done."""
        if self.srtt is None:
            self.srtt, self._rttvar = rtt, rtt / 2
            self._first_round_end = next_psn
        else:
            self._rttvar = 0.75 * self._rttvar + 0.25 * abs(self.srtt - rtt)
            self.srtt = 0.875 * self.srtt + 0.125 * rtt
        self._rtt_max = max(rtt, self._rtt_max * RTT_MAX_DECAY)
        b = int(rtt / RTT_BIN_S)
        self.rtt_bins[b if b < RTT_BINS else RTT_BINS - 1] += 1
        rto = max(self.srtt + max(4 * self._rttvar, self._min), MAX_MARGIN * self._rtt_max)
        if self._first_round_end is not None:
            if wire.psn_diff(snd_una, self._first_round_end) < 0:
                rto = max(rto, self._initial)
            else:
                self._first_round_end = None
        self.rto = min(rto, self._max)

    def current(self) -> float:
        """The timeout in force now, backoff included."""
        return min(self.rto * self._backoff, self._max)

    def back_off(self) -> None:
        self._backoff = min(self._backoff * 2, MAX_BACKOFF)

    def progress(self) -> None:
        """New data was acknowledged: the backoff ends."""
        self._backoff = 1


def rtt_summary(bins: list[int]) -> dict[str, float]:
    """Sample count and RTT percentiles in ms (each the upper edge of its bin) of RTT bins."""
    total = sum(bins)
    summary: dict[str, float] = {"samples": total}
    if not total:
        return summary
    wanted = [(pct / 100 * total, f"p{pct:g}") for pct in RTT_PERCENTILES]
    wanted.append((total, "max"))
    seen = 0
    for b, count in enumerate(bins):
        seen += count
        while wanted and seen >= wanted[0][0]:
            summary[wanted.pop(0)[1]] = round((b + 1) * RTT_BIN_S * 1e3, 3)
    return summary
