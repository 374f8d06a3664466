"""Receiver half of a connection: PSN window, checked placement, SACK/NACK generation, completions.

State is O(window): `_bits` is an int whose bit i says PSN cack+i arrived (never wider than the
window), `_ends` maps the last PSN of each message seen above cack to its (msn, imm), `_lengths`
counts the bytes of messages not yet delivered. A SACK is generated for every accepted or duplicate
data packet (no coalescing: the sender's loss detection and NSCC both work per packet).

In order (`in_order`, the RoCE-like baseline's go-back-N QPs): as an IBTA RC responder, only
the expected PSN is placed; a packet above it is a sequence error, dropped unplaced and
answered (the sender reads an answer above its cumulative ack as RoCE's NAK), so everything
from a lost packet on must be resent, as a RoCE NIC must.

A refused packet (rkey/bounds) does not consume its PSN: it is answered with the refusal NACK
and forgotten, so a forged packet cannot use up a PSN of the legitimate stream (the genuine
packet at that PSN is still accepted). As in IBTA RC, a genuine refusal is fatal to the
sender's QP (Sender._fail), so nothing ever needs to skip that PSN (docs/security.md).
"""

from __future__ import annotations

from collections.abc import Callable

import wire
from host_agent.core.errors import RemoteProtocolError
from host_agent.core.events import Event, MessageReceived
from host_agent.core.memory import BoundsViolation, MemoryTable, RkeyViolation
from wire import psn_add, psn_diff

BITMAP_BITS = 64
_BITMAP_MASK = wire.fields.maximum(wire.fields.SACK, "sack_bitmap")
assert _BITMAP_MASK == (1 << BITMAP_BITS) - 1
_OFFSET_MIN = wire.fields.minimum(wire.fields.SACK, "ack_psn_offset")
_OFFSET_MAX = wire.fields.maximum(wire.fields.SACK, "ack_psn_offset")
_OOO_MAX = wire.fields.maximum(wire.fields.CC_STATE, "ooo_count")
_RCVD_MOD = wire.fields.maximum(wire.fields.CC_STATE, "rcvd_bytes") + 1
_TRIM_REASON = {
    wire.DSCP_TRIMMED: wire.NACK_TRIMMED,
    wire.DSCP_TRIMMED_LASTHOP: wire.NACK_TRIMMED_LASTHOP,
}
_NOT_LAST = (wire.OP_WRITE_FIRST, wire.OP_WRITE_MIDDLE)  # no message ends with these


class Receiver:
    def __init__(
        self,
        *,
        window: int,
        memory: MemoryTable,
        local_qpn: int,
        remote_qpn: int,
        expected_psn: int,
        stats: dict[str, int],
        emit: Callable[[Event], None],
        in_order: bool = False,
    ) -> None:
        self._window = window
        self._in_order = in_order
        self._memory = memory
        self._qpn = local_qpn
        self._remote_qpn = remote_qpn
        self._stats = stats
        self._emit = emit
        self.cack = expected_psn % wire.PSN_MOD
        self._bits = 0
        self._ends: dict[int, tuple[int, int | None]] = {}
        self._lengths: dict[int, int] = {}
        self._rcvd_bytes = 0

    def tracked_entries(self) -> int:
        return len(self._ends) + len(self._lengths)

    def on_data(self, fields: wire.DataFields, dscp: int, ecn: int, ev: int) -> bytes:
        """Accept one data packet (wire.decode_data_fields) that arrived with outer `dscp`,
        `ecn` and EV `ev`; return the SACK or NACK to send back, encoded."""
        opcode, _qp, psn, msn, va, rkey, dma_len, imm, payload = fields
        rel = psn_diff(psn, self.cack)
        if rel >= self._window:
            return self._nack(wire.NACK_PSN_OOR_WINDOW, psn, ev, ecn)
        if rel < 0 or self._bits >> rel & 1:
            self._stats["duplicates"] += 1
            return self._sack(psn, ev, ecn)
        if rel > 0 and self._in_order:
            self._stats["out_of_order_dropped"] += 1
            return self._sack(psn, ev, ecn)
        length = len(payload)
        if length < dma_len:
            reason = _TRIM_REASON.get(dscp)
            if reason is None:
                raise RemoteProtocolError(
                    f"PSN {psn}: payload {length} < dma_len {dma_len} "
                    f"but DSCP {dscp} is not a trimmed class"
                )
            self._stats["trims_received"] += 1
            return self._nack(reason, psn, ev, ecn)
        try:
            self._memory.place(rkey, va, payload)
        except RkeyViolation:
            self._stats["rkey_violations"] += 1
            return self._nack(wire.NACK_RKEY_VIOLATION, psn, ev, ecn)
        except BoundsViolation:
            self._stats["bounds_violations"] += 1
            return self._nack(wire.NACK_BOUNDS_VIOLATION, psn, ev, ecn)
        self._stats["rx_data_bytes"] += length
        lengths = self._lengths
        lengths[msn] = lengths.get(msn, 0) + length
        self._rcvd_bytes = (self._rcvd_bytes + length) % _RCVD_MOD
        self._bits |= 1 << rel
        if opcode not in _NOT_LAST:
            self._ends[psn] = (msn, imm)
        if rel == 0:  # bit 0 is always clear after _advance, so only PSN cack can advance it
            self._advance()
        return self._sack(psn, ev, ecn)

    def _advance(self) -> None:
        ones = (~self._bits & (self._bits + 1)).bit_length() - 1  # trailing one bits
        if ones <= 0:
            return
        start = self.cack
        self._bits >>= ones
        self.cack = psn_add(start, ones)
        if not self._ends:
            return
        for i in range(ones):
            end = self._ends.pop(psn_add(start, i), None)
            if end is not None:
                self._deliver(*end)

    def _deliver(self, msn: int, imm: int | None) -> None:
        length = self._lengths.pop(msn, 0)
        self._emit(MessageReceived(self._qpn, msn, length, imm))

    def _sack(self, psn: int, ev: int, ecn: int, *, probe: bool = False) -> bytes:
        # BEGIN exercise 4 sack
        cack = self.cack
        rel = psn_diff(psn, cack)
        offset = 1 if rel <= BITMAP_BITS else rel - (BITMAP_BITS - 1)  # keep the trigger visible
        bits = self._bits
        self._stats["sacks_sent"] += 1
        return wire.encode_sack_fields(
            self._remote_qpn, cack, cack,
            0 if probe else (rel if _OFFSET_MIN <= rel <= _OFFSET_MAX
                             else min(max(rel, _OFFSET_MIN), _OFFSET_MAX)),
            ev, offset, (bits >> offset) & _BITMAP_MASK,
            wire.M_SKIP_ONCE if ecn == wire.ECN_CE and not probe else wire.M_NONE, probe,
            self._qpn & 0xFFFF, self._remote_qpn & 0xFFFF, min(bits.bit_count(), _OOO_MAX),
            self._rcvd_bytes)
        # END exercise 4 sack

    def probe_reply(self, entropy: int, ecn: int) -> bytes:
        """Answer a PROBE of the EV `entropy`: a SACK with probe_resp=1 echoing it."""
        return self._sack(self.cack, entropy, ecn, probe=True)

    def _nack(self, reason: int, psn: int, ev: int, ecn: int) -> bytes:
        self._stats["nacks_sent"] += 1
        m = wire.M_SKIP_ONCE if ecn == wire.ECN_CE else wire.M_NONE
        return wire.encode_packet(wire.NackPacket(
            bth=wire.Bth(opcode=wire.OP_NACK, dest_qp=self._remote_qpn, psn=self.cack),
            nack=wire.NackExt(reason=reason, entropy=ev, nack_psn=psn, cack_psn=self.cack,
                              m=m, spdcid=self._qpn & 0xFFFF, dpdcid=self._remote_qpn & 0xFFFF),
        ))
