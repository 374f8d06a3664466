"""A sender's writes from posting to their end: cutting them into data packets, completing them
on the cumulative ack, failing them, and the clock write_timeout runs on. Kept apart from the
packets in flight (flight.py), which only carry pieces of these writes."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import wire
from host_agent.core.events import Event, FailReason, WriteCompleted, WriteFailed
from host_agent.core.recovery import OutPkt, Write
from wire import psn_diff

MSN_MOD = 1 << 16


def _opcode(first: bool, last: bool, imm: bool) -> int:
    if first and last:
        return wire.OP_WRITE_ONLY_IMM if imm else wire.OP_WRITE_ONLY
    if first:
        return wire.OP_WRITE_FIRST
    if last:
        return wire.OP_WRITE_LAST_IMM if imm else wire.OP_WRITE_LAST
    return wire.OP_WRITE_MIDDLE


_OPCODES = {(f, la, i): _opcode(f, la, i) for f in (False, True) for la in (False, True)
            for i in (False, True)}


class WriteQueue:
    """Writes not yet fully cut into packets (`pending`), then until the cumulative ack passes
    their last PSN (`sent`). A write completes once it does: the receiver never consumes a PSN
    it refused (Receiver docstring), so a cumulative ack is proof of placement.
    write_timeout runs from the later of the oldest outstanding write's posting and the last
    acknowledgement of new data (`acked_at`), the way IBTA's retry count restarts on progress:
    a long write on a slow or congested fabric keeps going while it moves, and a QP that moves
    nothing fails in bounded time. A NACK is not progress here (a trim storm could NACK
    forever), only an ack is."""

    def __init__(self, qpn: int, emit: Callable[[Event], None]) -> None:
        self._qpn = qpn
        self._emit = emit
        self._msn = 0
        self.pending: deque[Write] = deque()  # not yet fully segmented
        self.sent: deque[Write] = deque()  # fully segmented, last PSN not yet acknowledged
        self.acked_at = 0.0  # last acknowledgement of new data: write_timeout runs from here

    def __bool__(self) -> bool:
        """Some write has not ended yet."""
        return bool(self.pending or self.sent)

    def post(self, wr_id: int, data: bytes, remote_va: int, rkey: int, imm: int | None,
             now: float) -> None:
        self.pending.append(Write(wr_id, bytes(data), remote_va, rkey, imm, self._msn, now))
        self._msn = (self._msn + 1) % MSN_MOD

    def cut(self, psn: int, length: int) -> OutPkt:
        """The oldest pending write's next `length` bytes as the packet with PSN `psn`; with
        its last packet the write moves to `sent`."""
        w = self.pending[0]
        last = w.next_offset + length >= len(w.data)
        pkt = OutPkt(psn, w, w.next_offset, length,
                     _OPCODES[not w.started, last, w.imm is not None])
        w.started = True
        w.next_offset += length
        if last:
            w.last_psn = psn
            self.sent.append(self.pending.popleft())
        return pkt

    def complete(self, snd_una: int) -> None:
        """WriteCompleted for every write whose last PSN the cumulative ack `snd_una` passed."""
        sent = self.sent
        while sent:
            w = sent[0]
            assert w.last_psn is not None
            if psn_diff(snd_una, w.last_psn) <= 0:
                return
            sent.popleft()
            self._emit(WriteCompleted(self._qpn, w.wr_id))

    def oldest(self) -> Write | None:
        return self.sent[0] if self.sent else self.pending[0] if self.pending else None

    def stalled_since(self) -> float | None:
        """Since when the outstanding writes have had no data acknowledged (class docstring);
        None when no write is outstanding."""
        oldest = self.oldest()
        if oldest is None:
            return None
        return oldest.posted_at if oldest.posted_at > self.acked_at else self.acked_at

    def fail(self, reason: FailReason, culprit: Write | None = None) -> None:
        """Every outstanding write ends in WriteFailed, oldest first: with `reason`, or, given
        a `culprit`, that one with `reason` and the others FLUSHED."""
        for w in [*self.sent, *self.pending]:
            flushed = culprit is not None and w is not culprit
            self._emit(WriteFailed(self._qpn, w.wr_id, FailReason.FLUSHED if flushed else reason))
        self.sent.clear()
        self.pending.clear()
