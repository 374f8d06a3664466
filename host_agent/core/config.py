"""Endpoint configuration: one frozen dataclass, validated up front so misuse fails early."""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field

from host_agent.core.cc import DEFAULT_BASE_RTT, DEFAULT_MTU, CongestionControl, Nscc, NsccConfig
from host_agent.core.errors import ConfigError
from host_agent.core.evstate import EvConfig
from host_agent.core.types import StrEnum
from wire import PSN_MOD

PSN_WINDOW_BDPS = 8  # PSN window, in bandwidth-delay products, when the line rate is known


class RecoveryMode(StrEnum):
    """How a sender repairs loss."""

    SELECTIVE = "selective"  # resend only lost packets, SACK bitmaps honoured (MRC)
    GO_BACK_N = "go_back_n"  # the RoCE-like baseline: a loss resends everything from it on


def default_cc() -> CongestionControl:
    return Nscc()


@dataclass(frozen=True)
class EndpointConfig:
    """Tunables of one endpoint. Times are seconds on the caller's clock.

    Defaults assume the EV/CC modules' DEFAULT_BASE_RTT (1 ms, a BMv2 software fabric); use
    EndpointConfig.for_base_rtt to scale every timer (and the EV set and NSCC) to another fabric.
    """

    mtu: int = DEFAULT_MTU  # payload bytes per data packet (docs/wire-format.md §6)
    window: int = 4096  # PSNs: receiver window and sender's cap on unacknowledged PSNs
    rto_initial: float = 5 * DEFAULT_BASE_RTT  # retransmission timeout before any RTT sample
    rto_min: float = 2 * DEFAULT_BASE_RTT  # least RTO headroom above srtt (sender docstring)
    rto_max: float = 500 * DEFAULT_BASE_RTT
    reorder_threshold: int = 8  # lost once a packet sent this many packets later was acked...
    reorder_window: float = DEFAULT_BASE_RTT / 2  # ...and it has been out for srtt + this long
    port_status_retry: float = 4 * DEFAULT_BASE_RTT  # EP_REQ repeat interval until EP_RSP
    oor_backoff: float = DEFAULT_BASE_RTT  # pause after NACK(PSN_OOR_WINDOW) before resending
    # outstanding writes that see no new data acknowledged for this long (counted from the
    # oldest one's posting at the earliest) fail, and with them the QP (IBTA RC: retries
    # exhausted): a moving transfer never times out, a stuck one ends within this bound
    write_timeout: float = 60.0
    recovery: RecoveryMode = RecoveryMode.SELECTIVE  # a RecoveryMode or its value
    ev: EvConfig = field(default_factory=EvConfig)
    cc_factory: Callable[[], CongestionControl] = default_cc

    def __post_init__(self) -> None:
        if isinstance(self.mtu, bool) or not isinstance(self.mtu, int) or not 1 <= self.mtu <= 9000:
            raise ConfigError(f"mtu={self.mtu!r}: use an int in 1..9000 (default 1024)")
        if not isinstance(self.window, int) or not 1 <= self.window <= PSN_MOD // 4:
            raise ConfigError(
                f"window={self.window!r}: use an int in 1..{PSN_MOD // 4} PSNs so serial PSN "
                "arithmetic stays unambiguous (default 4096)"
            )
        if not isinstance(self.reorder_threshold, int) or self.reorder_threshold < 1:
            raise ConfigError(f"reorder_threshold={self.reorder_threshold!r}: use an int >= 1")
        for name in ("rto_initial", "rto_min", "rto_max", "reorder_window", "port_status_retry",
                     "oor_backoff", "write_timeout"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ConfigError(f"{name}={value!r}: must be a positive number of seconds")
        if self.rto_min > self.rto_max:
            raise ConfigError(f"rto_min={self.rto_min} exceeds rto_max={self.rto_max}: lower it")
        try:
            object.__setattr__(self, "recovery", RecoveryMode(self.recovery))
        except ValueError:
            raise ConfigError(f"recovery={self.recovery!r}: use one of "
                              f"{', '.join(RecoveryMode)}") from None
        if not isinstance(self.ev, EvConfig):
            raise ConfigError(f"ev={self.ev!r}: pass an EvConfig")
        if not callable(self.cc_factory):
            raise ConfigError("cc_factory must be a zero-argument callable returning a controller")

    @classmethod
    def for_base_rtt(cls, base_rtt: float, line_rate_bps: float | None = None, *,
                     cc_overrides: dict[str, object] | None = None,
                     **overrides: object) -> EndpointConfig:
        """Every timer as the same multiple of `base_rtt` as the defaults are of 1 ms. With
        `line_rate_bps` (what one connection can send at), the window starts at the path's
        bandwidth-delay product and may grow to 1.5 times it (NsccConfig.for_link), never
        below the defaults: a long path (--link-delay) is filled from the first RTT. The PSN
        window then spans PSN_WINDOW_BDPS of those products: a lost packet holds the
        cumulative ack for one or two RTTs (three or more when its resend is lost too), and
        a window of a few products would stop the sender there (docs/decisions.md, "PSN
        window"). `cc_overrides`: NsccConfig fields to set on top."""
        if isinstance(base_rtt, bool) or not isinstance(base_rtt, (int, float)) or base_rtt <= 0:
            raise ConfigError(f"base_rtt={base_rtt!r}: must be a positive number of seconds")
        mtu = overrides.get("mtu", DEFAULT_MTU)
        nscc = NsccConfig(mtu=mtu, base_rtt=base_rtt, min_cwnd=mtu)  # type: ignore[arg-type]
        values: dict[str, object] = {}
        if line_rate_bps is not None:
            path = NsccConfig.for_link(line_rate_bps, base_rtt, mtu=mtu)  # type: ignore[arg-type]
            nscc = dataclasses.replace(
                nscc, max_cwnd=max(nscc.max_cwnd, path.max_cwnd),
                initial_cwnd=max(nscc.initial_cwnd, path.initial_cwnd))
            bdp_packets = math.ceil(line_rate_bps / 8 * base_rtt / mtu)  # type: ignore[operator]
            values["window"] = min(PSN_MOD // 4, max(cls.window, PSN_WINDOW_BDPS * bdp_packets))
        if cc_overrides:
            nscc = dataclasses.replace(nscc, **cc_overrides)  # type: ignore[arg-type]
        values.update({
            "rto_initial": 5 * base_rtt,
            "rto_min": 2 * base_rtt,
            "rto_max": 500 * base_rtt,
            "reorder_window": base_rtt / 2,
            "port_status_retry": 4 * base_rtt,
            "oor_backoff": base_rtt,
            "ev": EvConfig.for_base_rtt(base_rtt),
            "cc_factory": functools.partial(Nscc, nscc),
        })
        values.update(overrides)
        return cls(**values)  # type: ignore[arg-type]
