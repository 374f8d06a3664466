"""Events the endpoint hands to its user through Endpoint.next_event() (frozen, h11 style)."""

from __future__ import annotations

import enum
from collections.abc import Hashable
from dataclasses import dataclass

import wire
from host_agent.core.types import EvState


class FailReason(enum.IntEnum):
    """Why a write failed: the peer's NACK code, or a local verdict (above the 8-bit codes)."""

    RKEY_VIOLATION = wire.NACK_RKEY_VIOLATION
    BOUNDS_VIOLATION = wire.NACK_BOUNDS_VIOLATION
    TIMEOUT = 0x100  # nothing acknowledged for EndpointConfig.write_timeout: the QP failed
    FLUSHED = 0x101  # queued behind a write that failed the same QP
    PEER_OUT_OF_SYNC = 0x102  # the peer answered from other state: it restarted (Sender)


@dataclass(frozen=True)
class WriteCompleted:
    """Sender: every byte of the write was acknowledged."""

    qpn: int
    wr_id: int


@dataclass(frozen=True)
class WriteFailed:
    """Sender: the peer refused the write, or it timed out and the QP failed (FailReason)."""

    qpn: int
    wr_id: int
    reason: int  # a FailReason


@dataclass(frozen=True)
class MessageReceived:
    """Receiver: the whole message was placed; emitted strictly in message order."""

    qpn: int
    msn: int
    length: int
    imm: int | None


@dataclass(frozen=True)
class EvStateChanged:
    qpn: int
    ev: int
    old: EvState
    new: EvState
    reason: str


@dataclass(frozen=True)
class PeerPlaneChanged:
    """The peer announced (PORT_STATUS) that its NIC port on `plane` went down or came back."""

    peer: Hashable
    plane: int
    up: bool


@dataclass(frozen=True)
class PlaneStateChanged:
    """Our own NIC port on `plane` changed state (set_plane_up)."""

    plane: int
    up: bool


Event = (
    WriteCompleted | WriteFailed | MessageReceived | EvStateChanged | PeerPlaneChanged
    | PlaneStateChanged
)
