"""Registered memory regions and checked placement of incoming RDMA WRITE payloads.

Rkeys and the first region's address come from the endpoint's random source (secrets unless a
seed was given), so a peer can write only where it was told to (RFC 5042 section 5: steering
tags must not be predictable).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from host_agent.core.errors import LocalProtocolError, RemoteProtocolError

VA_BASE = 0x1_0000_0000  # lowest first address; nonzero so va=0 is always invalid
VA_ALIGN = 4096
VA_SPREAD_PAGES = 1 << 32  # the first region starts at a random page above VA_BASE
RKEY_BITS = 32


class RkeyViolation(RemoteProtocolError):
    """The peer wrote with an rkey that names no registered region."""


class BoundsViolation(RemoteProtocolError):
    """The peer wrote outside the region its rkey names."""


@dataclass(frozen=True)
class MemoryRegion:
    va: int
    rkey: int
    length: int
    buffer: bytearray


class MemoryTable:
    """All regions of one endpoint, keyed by rkey; addresses never overlap or get reused."""

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng
        self._regions: dict[int, MemoryRegion] = {}
        self._next_va = VA_BASE + rng.randrange(VA_SPREAD_PAGES) * VA_ALIGN

    def register(self, length: int) -> MemoryRegion:
        if not isinstance(length, int) or length <= 0:
            raise LocalProtocolError(f"memory region length must be a positive int, got {length!r}")
        rkey = self._rng.randrange(1, 1 << RKEY_BITS)
        while rkey in self._regions:
            rkey = self._rng.randrange(1, 1 << RKEY_BITS)
        region = MemoryRegion(va=self._next_va, rkey=rkey, length=length, buffer=bytearray(length))
        self._regions[rkey] = region
        self._next_va += -(-length // VA_ALIGN) * VA_ALIGN + VA_ALIGN  # guard page between regions
        return region

    def deregister(self, rkey: int) -> None:
        if self._regions.pop(rkey, None) is None:
            raise LocalProtocolError(f"no memory region with rkey {rkey:#x}")

    def check(self, rkey: int, va: int, length: int) -> MemoryRegion:
        """Return the region a (rkey, va, length) write lands in, or raise why it may not."""
        region = self._regions.get(rkey)
        if region is None:
            raise RkeyViolation(f"unknown rkey {rkey:#x}")
        if va < region.va or va + length > region.va + region.length:
            raise BoundsViolation(
                f"[{va:#x}, +{length}) outside region [{region.va:#x}, +{region.length})"
            )
        return region

    def place(self, rkey: int, va: int, data: bytes) -> None:
        n = len(data)
        region = self._regions.get(rkey)
        if region is None or va < region.va or va + n > region.va + region.length:
            region = self.check(rkey, va, n)  # raises why not
        offset = va - region.va
        region.buffer[offset : offset + n] = data
