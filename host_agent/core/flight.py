"""The packets a sender holds state for, in O(window): on the wire, awaiting a resend, or
acknowledged but not yet timed by their own SACK. One owner for these tables, so that a packet
enters and leaves them (sent, acknowledged, lost, forgotten) in one place, and the loss detector
hears of each unambiguous delivery from there."""

from __future__ import annotations

from collections import OrderedDict

from host_agent.core.recovery import LossDetector, OutPkt
from wire import psn_add, psn_diff

BITMAP_BITS = 64  # a SACK bitmap's width


class Flight:
    """`inflight` holds only packets on the wire (ordered by their latest transmission),
    `retx` only packets waiting to be resent, `untriggered` acknowledged packets whose own
    SACK has not arrived yet (bounded by the window). Loss detection is per path
    (recovery.LossDetector)."""

    def __init__(self, window: int, reorder_threshold: int) -> None:
        self._window = window
        self._reorder_threshold = reorder_threshold
        self.inflight: OrderedDict[int, OutPkt] = OrderedDict()
        self.retx: OrderedDict[int, OutPkt] = OrderedDict()
        self.untriggered: OrderedDict[int, OutPkt] = OrderedDict()  # acked, own SACK not seen
        self.bytes = 0  # of the packets in `inflight`
        self._tx_seq = 0
        self.loss = LossDetector(reorder_threshold)
        # bit i: PSN snd_una + i (sent) is known to be neither in flight nor awaiting a resend,
        # i.e. acknowledged: a SACK bitmap repeats such bits, and they need no second look
        self._sacked = 0
        self.newest_acked: OutPkt | None = None  # RACK sample candidate of the current SACK
        self.answer_plane: int | None = None  # plane the answer being applied came in on

    def __len__(self) -> int:
        return len(self.inflight) + len(self.retx) + len(self.untriggered)

    def tracked(self, psn: int) -> OutPkt | None:
        """The packet an answer for `psn` may be about: in flight, awaiting a resend, or
        acknowledged but not yet timed by its own SACK."""
        return self.inflight.get(psn) or self.retx.get(psn) or self.untriggered.get(psn)

    def sent(self, pkt: OutPkt) -> None:
        """`pkt` went on the wire (its EV, path and send time already set)."""
        pkt.tx_seq = self._tx_seq
        self._tx_seq += 1
        pkt.tx_count += 1
        pkt.in_flight = True
        self.inflight[pkt.psn] = pkt
        self.loss.sent(pkt)
        self.bytes += pkt.length

    def landed(self, pkt: OutPkt) -> None:
        """`pkt` left `inflight`: acknowledged, NACKed or declared lost."""
        pkt.in_flight = False
        self.bytes -= pkt.length
        self.loss.forget(pkt)

    def mark_lost(self, pkt: OutPkt) -> None:
        del self.inflight[pkt.psn]
        self.landed(pkt)
        self.retx[pkt.psn] = pkt

    def resend_in_order(self, lost: list[OutPkt], una: int) -> None:
        """Go-back-N: everything in flight from the lowest lost PSN on awaits a resend too, and
        the resends go in PSN order from `una` (snd_una)."""
        low = min(psn_diff(p.psn, una) for p in lost)
        for pkt in [p for p in self.inflight.values() if psn_diff(p.psn, una) > low]:
            self.mark_lost(pkt)
        order = sorted(self.retx.values(), key=lambda p: psn_diff(p.psn, una))
        self.retx = OrderedDict((p.psn, p) for p in order)

    def cumulative(self, una: int, advance: int, now: float) -> int:
        """Acknowledge the `advance` PSNs from `una` (snd_una, which the cumulative ack moves
        past them); the bytes acknowledged."""
        acked = 0
        inflight, retx = self.inflight, self.retx
        for i in range(advance):
            psn = psn_add(una, i)
            if psn in inflight or psn in retx:  # else acknowledged already: nothing to do
                acked += self.acknowledge(psn, now)
        self._sacked >>= advance
        return acked

    def sack_bitmap(self, base: int, bitmap: int, una: int, next_psn: int, now: float) -> int:
        """Acknowledge what bit i of a SACK bitmap (PSN base + i) newly says arrived; the bytes
        acknowledged. Only sent PSNs (below `next_psn`) at or above `una` (snd_una, the
        cumulative ack applied) that are not already known acknowledged (_sacked) are looked
        at, in PSN order."""
        shift = psn_diff(base, una)  # bit 0's PSN - snd_una
        sent = psn_diff(next_psn, una)
        if shift >= sent or shift <= -BITMAP_BITS or sent <= 0:
            return 0  # every bit names a PSN below snd_una (acknowledged) or not sent yet
        bits = bitmap << shift if shift >= 0 else bitmap >> -shift
        bits &= ~self._sacked & ((1 << sent) - 1)
        self._sacked |= bits  # after this, none of them is in flight or awaiting a resend
        acked = 0
        inflight, retx = self.inflight, self.retx
        while bits:
            low = bits & -bits
            psn = psn_add(una, low.bit_length() - 1)
            if psn in inflight or psn in retx:  # else acknowledged already: nothing to do
                acked += self.acknowledge(psn, now)
            bits ^= low
        return acked

    def acknowledge(self, psn: int, now: float) -> int:
        """Acknowledge `psn` (cumulatively or by a SACK bitmap bit); the bytes acknowledged."""
        pkt = self.inflight.pop(psn, None)
        if pkt is not None:
            pkt.in_flight = False  # landed, inlined
            self.bytes -= pkt.length
            self.loss.forget(pkt)
            if pkt.tx_count == 1:  # unambiguous: only one transmission could have arrived
                self.evidence(pkt, now)
                if self.newest_acked is None or pkt.tx_seq > self.newest_acked.tx_seq:
                    self.newest_acked = pkt
        else:
            pkt = self.retx.pop(psn, None)  # declared lost, yet it arrived
        if pkt is None:
            return 0
        self.untriggered[psn] = pkt  # until its own SACK times it
        if len(self.untriggered) > self._window:
            self.untriggered.popitem(last=False)
        return pkt.length

    def evidence(self, pkt: OutPkt, now: float) -> None:
        """`pkt`'s latest transmission arrived: evidence for loss detection on its path if the
        answer telling it came in on that path's plane (recovery module docstring)."""
        assert pkt.path is not None
        if self.answer_plane is None or self.answer_plane == pkt.path.plane:
            self.loss.delivered(pkt.path, pkt.tx_seq, now - pkt.sent_time, now)

    def clear(self) -> None:
        """Forget every packet: the QP failed, was flushed or resynchronised."""
        self.inflight.clear()
        self.retx.clear()
        self.untriggered.clear()
        self._sacked = 0
        self.newest_acked = None
        self.bytes = 0
        self.loss = LossDetector(self._reorder_threshold)
