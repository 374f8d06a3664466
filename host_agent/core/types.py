"""Values that cross the boundary between the sans-IO core and its I/O layer."""

from __future__ import annotations

import enum
from collections.abc import Hashable
from dataclasses import dataclass
from typing import NamedTuple


class StrEnum(str, enum.Enum):
    """enum.StrEnum for Python 3.10 (the stdlib class is 3.11+; the Vagrant VM runs Ubuntu
    22.04's 3.10): members are str, and str() and format() give the value, as with the
    stdlib class. Used on every version, so behaviour does not depend on the interpreter."""

    def __str__(self) -> str:
        return str.__str__(self)

    def __format__(self, format_spec: str) -> str:
        return str.__format__(self, format_spec)


class EvState(enum.Enum):
    GOOD = "good"
    SKIP = "skip"  # internal: congestion seen on this EV, rest it for a while
    ASSUMED_BAD = "assumed_bad"  # loss seen: retired, probed in the background
    DENIED = "denied"  # set and cleared only by management


@dataclass(frozen=True)
class PathInfo:
    """A source route as the core sees it; `route` is the I/O layer's handle (the uSID carrier).

    Paths key per-packet dicts (loss detection), so the hash is computed once."""

    plane: int
    route: Hashable

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.plane, self.route)))

    def __hash__(self) -> int:
        return self._hash  # type: ignore[attr-defined,no-any-return]


class TxPacket(NamedTuple):
    """A UDP payload the I/O layer must wrap in outer/inner IPv6 and send on `plane` via `route`.

    A NamedTuple (immutable, compared by value) rather than a frozen dataclass: one is built
    for every packet, and a tuple is built several times faster."""

    peer: Hashable
    plane: int
    route: Hashable
    ev: int
    dscp: int
    ecn: int
    payload: bytes


class RxMeta(NamedTuple):
    """What the I/O layer learned from the headers around a received UDP payload (a
    NamedTuple for the same reason as TxPacket)."""

    peer: Hashable
    plane: int
    ev: int
    dscp: int
    ecn: int
