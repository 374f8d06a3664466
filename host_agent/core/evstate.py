"""One entropy value's life: its states, the triggers that move it, its pools and parameters.

The state machine is data (TRANSITIONS, h11 style): a (state, trigger) pair that is not in the
table is illegal and raises LocalProtocolError in EvSet. Pools say whether an EV is sprayed on;
EvSet (evs.py) owns the set and the rules that move EVs between pools.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from host_agent.core.cc import DEFAULT_BASE_RTT
from host_agent.core.errors import ConfigError
from host_agent.core.types import EvState, PathInfo, StrEnum


class EvTrigger(StrEnum):
    """What happened to an EV; also the `reason` of EvStateChanged."""

    ECN = "ecn"  # CE echo or SACK M=SKIP_ONCE
    NACK_TRIMMED = "nack_trimmed"  # a packet on it was trimmed inside the fabric
    LOSS = "loss"  # timeout or untrimmed loss
    PATH_DARK = "path_dark"  # the loss detector found its whole path dead
    SKIP_EXPIRED = "skip_expired"
    PROBE_SUCCESS_ENOUGH = "probe_success_enough"
    DENY = "deny"  # management
    ALLOW = "allow"  # management


class Pool(StrEnum):
    ACTIVE = "active"  # sprayed on
    BACKUP = "backup"  # standby, replaces a retired active EV of its plane
    OUT = "out"  # ASSUMED_BAD or DENIED


G, S, B, D = EvState.GOOD, EvState.SKIP, EvState.ASSUMED_BAD, EvState.DENIED
T = EvTrigger

# BEGIN exercise 5 transitions
TRANSITIONS: dict[tuple[EvState, EvTrigger], EvState] = {
    (G, T.ECN): S, (G, T.NACK_TRIMMED): S, (G, T.LOSS): B, (G, T.PATH_DARK): B, (G, T.DENY): D,
    # SKIP: more congestion restarts the skip time
    (S, T.ECN): S, (S, T.NACK_TRIMMED): S, (S, T.SKIP_EXPIRED): G, (S, T.LOSS): B,
    (S, T.PATH_DARK): B, (S, T.DENY): D,
    # ASSUMED_BAD: ECN/trims are late news of packets sent before the failure; a further loss
    # restarts the probe run; only probes bring it back
    (B, T.ECN): B, (B, T.NACK_TRIMMED): B, (B, T.LOSS): B, (B, T.PROBE_SUCCESS_ENOUGH): G,
    (B, T.DENY): D,
    # DENIED: feedback on packets still in flight is ignored; only management lets it go
    (D, T.ECN): D, (D, T.NACK_TRIMMED): D, (D, T.LOSS): D, (D, T.ALLOW): G,
}  # fmt: skip
# END exercise 5 transitions


def _new_counters() -> dict[str, int]:
    return dict.fromkeys(
        ("chosen", "delivered", "ecn", "nack_trimmed", "nack_trimmed_lasthop", "losses",
         "retired", "probes_sent", "probe_replies", "probe_timeouts"), 0)  # fmt: skip


@dataclass(eq=False)
class EvEntry:
    """One EV. Callers read it; only EvSet changes it."""

    ev: int
    path: PathInfo
    state: EvState = EvState.GOOD
    pool: Pool = Pool.ACTIVE
    counters: dict[str, int] = field(default_factory=_new_counters)
    skip_until: float | None = None
    failed_at: float | None = None  # last loss seen on this EV
    next_probe_at: float | None = None
    probe_sent_at: float | None = None  # set while a probe is outstanding
    probe_successes: int = 0
    usable: bool = field(default=False, repr=False)  # GOOD, active, plane usable (cached)
    in_ring: bool = field(default=False, repr=False)


def _check_int(name: str, value: object, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"EvConfig.{name} must be an int >= {minimum}, got {value!r}")


def _check_time(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"EvConfig.{name} must be a time in seconds, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(f"EvConfig.{name} must be a finite time > 0 seconds, got {value!r}")


@dataclass(frozen=True)
class EvConfig:
    """EV-set parameters; times are seconds. Defaults assume DEFAULT_BASE_RTT (1 ms); use
    EvConfig.for_base_rtt to scale them to another fabric.

    skip_time: how long an ECN-marked or trimmed EV rests (4 base RTTs).
    probe_interval: probe period of an ASSUMED_BAD EV (10 base RTTs).
    probe_timeout: a probe unanswered this long failed (8 base RTTs).
    probe_successes_to_reinstate: consecutive probe replies that make an EV GOOD again.
    ev_min_active: floor of EVs sprayed on (evs.py docstring, "Floor"), 1..evs_per_connection.
    """

    evs_per_connection: int = 128
    backups_per_plane: int = 8
    skip_time: float = 4 * DEFAULT_BASE_RTT
    probe_interval: float = 10 * DEFAULT_BASE_RTT
    probe_timeout: float = 8 * DEFAULT_BASE_RTT
    probe_successes_to_reinstate: int = 3
    ev_min_active: int = 8

    def __post_init__(self) -> None:
        _check_int("evs_per_connection", self.evs_per_connection, 1)
        _check_int("backups_per_plane", self.backups_per_plane, 0)
        _check_int("probe_successes_to_reinstate", self.probe_successes_to_reinstate, 1)
        _check_int("ev_min_active", self.ev_min_active, 1)
        for name in ("skip_time", "probe_interval", "probe_timeout"):
            _check_time(name, getattr(self, name))
        if self.ev_min_active > self.evs_per_connection:
            raise ConfigError(
                f"EvConfig.ev_min_active ({self.ev_min_active}) must not exceed "
                f"evs_per_connection ({self.evs_per_connection})"
            )

    @classmethod
    def for_base_rtt(cls, base_rtt: float, **overrides: object) -> EvConfig:
        """Timers scaled to a fabric's base RTT (same multiples as the defaults)."""
        _check_time("base_rtt", base_rtt)
        values: dict[str, object] = {
            "skip_time": 4 * base_rtt,
            "probe_interval": 10 * base_rtt,
            "probe_timeout": 8 * base_rtt,
        }
        values.update(overrides)
        return cls(**values)  # type: ignore[arg-type]
