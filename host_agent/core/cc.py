"""Window congestion control for the sans-IO core: an NSCC-style controller and a fixed window.

NSCC (the UET "network signal" congestion control that MRC adopts [ocp-api][secondary]) reads two
signals per ACK, ECN and queuing delay (RTT minus base RTT), and picks one of four moves:

    ==========  ==================  =========================================
    ECN?        delay > target?     move
    ==========  ==================  =========================================
    no          no                  proportional increase (fills spare capacity fast)
    no          yes                 fair increase (additive: ~fi_gain MTU per RTT)
    yes         yes                 multiplicative decrease (at most once per base RTT)
    yes         no                  hold (the queue is elsewhere / transient: EV SKIP handles it)
    ==========  ==================  =========================================

The exact gains of the UET specification are not public here; the gains below are the
testbed's [choice] and are documented on NsccConfig. All windows are in bytes and always
stay within [min_cwnd, max_cwnd]. Times are float seconds, passed in by the caller.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from host_agent.core.errors import ConfigError, LocalProtocolError
from wire.layout import DEFAULT_MTU  # payload bytes per data packet (wire-format.md §6)

DEFAULT_BASE_RTT = 1e-3
"""Unloaded RTT (s) assumed when none is configured: a BMv2 software fabric is about a
millisecond; erring high is safe because Nscc lowers its estimate to the smallest RTT it sees."""


@runtime_checkable
class CongestionControl(Protocol):
    """What the endpoint needs from a congestion controller (one instance per QP)."""

    @property
    def cwnd(self) -> int: ...

    def can_send(self, inflight_bytes: int, packet_bytes: int) -> bool: ...

    def on_ack(self, acked_bytes: int, rtt: float | None, ecn: bool, now: float) -> None: ...

    def on_nack(self, now: float) -> None: ...

    def on_loss(self, now: float) -> None: ...

    def on_timeout(self, now: float) -> None: ...


def _window_allows(cwnd: int, inflight_bytes: int, packet_bytes: int) -> bool:
    """A window always lets one packet out when nothing is in flight, so a window smaller
    than a packet still makes progress."""
    if inflight_bytes < 0 or packet_bytes < 0:
        raise LocalProtocolError(
            f"inflight_bytes ({inflight_bytes}) and packet_bytes ({packet_bytes}) must be >= 0"
        )
    return inflight_bytes == 0 or inflight_bytes + packet_bytes <= cwnd


def _check_positive(name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{name} must be a number, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{name} must be a finite number > 0, got {value!r}")


@dataclass(frozen=True)
class NsccConfig:
    """NSCC parameters. Defaults suit the testbed (1024-byte MTU, ~1 ms base RTT).

    mtu: payload bytes per packet; the fair-increase step and the NACK decrease are in MTUs.
    base_rtt: upper guess of the unloaded RTT (s); the estimate drops to the smallest RTT sample.
    target_delay: queuing delay (s) above which delay is "high"; None = half the base RTT estimate.
    min_cwnd / max_cwnd / initial_cwnd: window bounds and start (bytes); min_cwnd >= mtu.
        max_cwnd should be about the bandwidth-delay product (see NsccConfig.for_link).
    pi_gain: proportional increase = acked_bytes * pi_gain * (target - delay) / target.
    fi_gain: fair increase = fi_gain * mtu * acked_bytes / cwnd (fi_gain MTUs per window).
    md_gain / md_max: multiplicative decrease by min(md_max, md_gain * (delay - target) / delay).
    nack_decrease_mtus: a trimmed packet (NACK) shrinks the window by this many MTUs.
    timeout_factor: an RTO multiplies the window by this factor; 1 leaves it (the RoCE-like
        baseline: DCQCN cuts its rate on congestion notifications, not on a timeout).
    """

    mtu: int = DEFAULT_MTU
    base_rtt: float = DEFAULT_BASE_RTT
    target_delay: float | None = None
    min_cwnd: int = DEFAULT_MTU
    max_cwnd: int = 256 * 1024
    initial_cwnd: int = 32 * 1024
    pi_gain: float = 1.0
    fi_gain: float = 1.0
    md_gain: float = 1.0
    md_max: float = 0.5
    nack_decrease_mtus: float = 1.0
    timeout_factor: float = 0.5

    def __post_init__(self) -> None:
        for name in ("mtu", "min_cwnd", "max_cwnd", "initial_cwnd"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ConfigError(f"NsccConfig.{name} must be an int > 0 (bytes), got {value!r}")
        for name in ("base_rtt", "pi_gain", "fi_gain", "md_gain", "md_max", "timeout_factor"):
            _check_positive(f"NsccConfig.{name}", getattr(self, name))
        if self.target_delay is not None:
            _check_positive("NsccConfig.target_delay", self.target_delay)
        _check_positive("NsccConfig.nack_decrease_mtus", self.nack_decrease_mtus)
        if self.min_cwnd < self.mtu:
            raise ConfigError(
                f"NsccConfig.min_cwnd ({self.min_cwnd}) must be >= mtu ({self.mtu}): "
                "a window must hold at least one packet"
            )
        if not self.min_cwnd <= self.initial_cwnd <= self.max_cwnd:
            raise ConfigError(
                "NsccConfig needs min_cwnd <= initial_cwnd <= max_cwnd, got "
                f"{self.min_cwnd} / {self.initial_cwnd} / {self.max_cwnd}"
            )
        if self.md_max >= 1 or self.timeout_factor > 1:
            raise ConfigError(
                f"NsccConfig.md_max ({self.md_max}) must be < 1 and timeout_factor "
                f"({self.timeout_factor}) at most 1, so a decrease never grows the window"
            )

    @classmethod
    def for_link(
        cls, line_rate_bps: float, base_rtt: float, *, mtu: int = DEFAULT_MTU, **overrides: object
    ) -> NsccConfig:
        """Size the window from the path: max_cwnd = 1.5 x BDP, initial_cwnd = BDP (MTU-rounded)."""
        _check_positive("line_rate_bps", line_rate_bps)
        _check_positive("base_rtt", base_rtt)
        bdp = line_rate_bps / 8 * base_rtt
        max_cwnd = max(mtu, math.ceil(1.5 * bdp / mtu) * mtu)
        initial = min(max_cwnd, max(mtu, math.ceil(bdp / mtu) * mtu))
        values: dict[str, object] = {
            "mtu": mtu,
            "base_rtt": base_rtt,
            "min_cwnd": mtu,
            "max_cwnd": max_cwnd,
            "initial_cwnd": initial,
        }
        values.update(overrides)
        return cls(**values)  # type: ignore[arg-type]


class Nscc(CongestionControl):
    """NSCC-style window controller; see the module docstring for the quadrant table."""

    def __init__(self, config: NsccConfig | None = None) -> None:
        self.config = config if config is not None else NsccConfig()
        self._cwnd = float(self.config.initial_cwnd)
        self._min_cwnd = float(self.config.min_cwnd)
        self._max_cwnd = float(self.config.max_cwnd)
        self.base_rtt = self.config.base_rtt
        self._last_decrease: float | None = None
        self.counters: dict[str, int] = {
            "proportional_increase": 0,
            "fair_increase": 0,
            "multiplicative_decrease": 0,
            "hold": 0,
            "md_suppressed": 0,
            "nacks": 0,
            "losses": 0,
            "timeouts": 0,
        }

    @property
    def cwnd(self) -> int:
        return int(self._cwnd)

    @property
    def target_delay(self) -> float:
        if self.config.target_delay is not None:
            return self.config.target_delay
        return self.base_rtt / 2

    def can_send(self, inflight_bytes: int, packet_bytes: int) -> bool:
        if inflight_bytes >= 0 and packet_bytes >= 0:  # _window_allows, inlined
            return inflight_bytes == 0 or inflight_bytes + packet_bytes <= int(self._cwnd)
        return _window_allows(self.cwnd, inflight_bytes, packet_bytes)

    def _set(self, cwnd: float) -> None:
        self._cwnd = min(float(self.config.max_cwnd), max(float(self.config.min_cwnd), cwnd))

    def on_ack(self, acked_bytes: int, rtt: float | None, ecn: bool, now: float) -> None:
        """One ACK/SACK: `rtt` is None when the sample is ambiguous (e.g. a retransmission);
        then delay counts as low, so only ECN can slow the sender."""
        if acked_bytes < 0:
            raise LocalProtocolError(f"acked_bytes must be >= 0, got {acked_bytes}")
        if rtt is not None:
            if not math.isfinite(rtt) or rtt <= 0:
                raise LocalProtocolError(f"rtt must be a finite number > 0 or None, got {rtt!r}")
            if rtt < self.base_rtt:
                self.base_rtt = rtt
        delay = 0.0 if rtt is None else rtt - self.base_rtt
        cfg = self.config
        target = cfg.target_delay if cfg.target_delay is not None else self.base_rtt / 2
        if not ecn and delay <= target:
            self.counters["proportional_increase"] += 1
            cwnd = self._cwnd + acked_bytes * cfg.pi_gain * (target - delay) / target
            if cwnd >= self._max_cwnd:  # _set, inlined
                self._cwnd = self._max_cwnd
            else:
                self._cwnd = cwnd if cwnd > self._min_cwnd else self._min_cwnd
        elif not ecn:
            self.counters["fair_increase"] += 1
            self._set(self._cwnd + cfg.fi_gain * cfg.mtu * acked_bytes / self._cwnd)
        elif delay > target:
            if self._decrease_allowed(now):
                self.counters["multiplicative_decrease"] += 1
                factor = min(cfg.md_max, cfg.md_gain * (delay - target) / delay)
                self._set(self._cwnd * (1 - factor))
            else:
                self.counters["md_suppressed"] += 1
        else:
            self.counters["hold"] += 1

    def _decrease_allowed(self, now: float) -> bool:
        """One multiplicative decrease per base RTT: the ACKs of one window all carry the same
        congestion news, reacting to each would collapse the window."""
        if self._last_decrease is not None and now - self._last_decrease < self.base_rtt:
            return False
        self._last_decrease = now
        return True

    def on_nack(self, now: float) -> None:
        """A trimmed packet: the bottleneck queue held one packet too many, so give one back."""
        self.counters["nacks"] += 1
        self._set(self._cwnd - self.config.nack_decrease_mtus * self.config.mtu)

    def on_loss(self, now: float) -> None:
        """An untrimmed loss means a failed path, not congestion [paper]: the EV set retires
        the EV and the window stays; only counted."""
        self.counters["losses"] += 1

    def on_timeout(self, now: float) -> None:
        """A retransmission timeout: nothing got through for an RTO, back off."""
        self.counters["timeouts"] += 1
        self._set(self._cwnd * self.config.timeout_factor)


class FixedWindow(CongestionControl):
    """A constant window, for tests and baselines: every signal is ignored by design."""

    def __init__(self, window_bytes: int) -> None:
        if isinstance(window_bytes, bool) or not isinstance(window_bytes, int) or window_bytes <= 0:
            raise ConfigError(f"FixedWindow window_bytes must be an int > 0, got {window_bytes!r}")
        self._cwnd = window_bytes

    @property
    def cwnd(self) -> int:
        return self._cwnd

    def can_send(self, inflight_bytes: int, packet_bytes: int) -> bool:
        return _window_allows(self._cwnd, inflight_bytes, packet_bytes)

    def on_ack(self, acked_bytes: int, rtt: float | None, ecn: bool, now: float) -> None:
        """Ignored: the window is fixed."""

    def on_nack(self, now: float) -> None:
        """Ignored: the window is fixed."""

    def on_loss(self, now: float) -> None:
        """Ignored: the window is fixed."""

    def on_timeout(self, now: float) -> None:
        """Ignored: the window is fixed."""
