"""In-place edits a switch makes to a frame (bytearray), reading only the bytes it needs.

Offsets follow docs/wire-format.md §1; sizes come from wire. Switches never
decode the whole frame: per-hop work must stay O(1), not O(bytes).
"""

from __future__ import annotations

from wire import (
    DATA_HEADERS_LEN,
    DSCP_TRIMMABLE,
    DSCP_TRIMMABLE_RETX,
    ECN_CE,
    ECN_ECT0,
    ECN_ECT1,
    ETH_LEN,
    IPV6_LEN,
    UDP_LEN,
)

# IPv6 header layout (RFC 8200): byte offsets inside one IPv6 header.
_IP6_PLEN = 4
_IP6_HLIM = 7
_IP6_DST = 24

OUTER = ETH_LEN
INNER = ETH_LEN + IPV6_LEN
UDP = ETH_LEN + 2 * IPV6_LEN
OUTER_DST = OUTER + _IP6_DST
OUTER_HLIM = OUTER + _IP6_HLIM

TRIMMABLE_DSCPS = frozenset({DSCP_TRIMMABLE, DSCP_TRIMMABLE_RETX})
ECT_CODES = frozenset({ECN_ECT0, ECN_ECT1})

# Lengths a trimmed frame carries (wire-format §5): everything after each header up to RETH.
TRIMMED_OUTER_PLEN = DATA_HEADERS_LEN - ETH_LEN - IPV6_LEN
TRIMMED_INNER_PLEN = TRIMMED_OUTER_PLEN - IPV6_LEN
TRIMMED_UDP_LEN = TRIMMED_INNER_PLEN
MIN_FRAME = UDP + UDP_LEN


def traffic_class(frame: bytearray) -> int:
    """Outer traffic class: the 8 bits after the 4-bit IP version."""
    return ((frame[OUTER] & 0x0F) << 4) | (frame[OUTER + 1] >> 4)


def set_traffic_class(frame: bytearray, tc: int) -> None:
    frame[OUTER] = (frame[OUTER] & 0xF0) | (tc >> 4)
    frame[OUTER + 1] = ((tc & 0x0F) << 4) | (frame[OUTER + 1] & 0x0F)


def dscp(frame: bytearray) -> int:
    return traffic_class(frame) >> 2


def ecn(frame: bytearray) -> int:
    return traffic_class(frame) & 0x3


def mark_ce(frame: bytearray) -> None:
    set_traffic_class(frame, (traffic_class(frame) & ~0x3) | ECN_CE)


def set_dscp(frame: bytearray, value: int) -> None:
    set_traffic_class(frame, (value << 2) | (traffic_class(frame) & 0x3))


def outer_dst(frame: bytearray) -> int:
    return int.from_bytes(frame[OUTER_DST:OUTER_DST + 16], "big")


def set_outer_dst(frame: bytearray, value: int) -> None:
    frame[OUTER_DST:OUTER_DST + 16] = value.to_bytes(16, "big")


def trim(frame: bytearray, new_dscp: int) -> bytearray:
    """Cut to the data headers and fix the three length fields (wire-format §5)."""
    out = frame[:DATA_HEADERS_LEN]
    out[OUTER + _IP6_PLEN:OUTER + _IP6_PLEN + 2] = TRIMMED_OUTER_PLEN.to_bytes(2, "big")
    out[INNER + _IP6_PLEN:INNER + _IP6_PLEN + 2] = TRIMMED_INNER_PLEN.to_bytes(2, "big")
    out[UDP + 4:UDP + 6] = TRIMMED_UDP_LEN.to_bytes(2, "big")
    set_dscp(out, new_dscp)
    return out
