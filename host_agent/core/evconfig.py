"""EV-set parameters (kept apart from evs.py so that module stays about the set itself)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from host_agent.core.cc import DEFAULT_BASE_RTT


def _check_int(name: str, value: object, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"EvConfig.{name} must be an int >= {minimum}, got {value!r}")


def _check_time(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"EvConfig.{name} must be a time in seconds, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"EvConfig.{name} must be a finite time > 0 seconds, got {value!r}")


@dataclass(frozen=True)
class EvConfig:
    """EV-set parameters; times are seconds. Defaults assume DEFAULT_BASE_RTT (1 ms); use
    EvConfig.for_base_rtt to scale them to another fabric.

    skip_time: how long an ECN-marked or trimmed EV rests (4 base RTTs).
    probe_interval: probe period of an ASSUMED_BAD EV (10 base RTTs).
    probe_timeout: a probe unanswered this long failed (8 base RTTs).
    probe_successes_to_reinstate: consecutive probe replies that make an EV GOOD again.
    ev_min_active: floor of EVs sprayed on (see the module docstring), 1..evs_per_connection.
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
            raise ValueError(
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
