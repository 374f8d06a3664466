"""Sender half of a connection: segmentation, PSNs, in-flight tracking, SACK/NACK and loss recovery.

In-flight state is O(window): `_inflight` holds only packets on the wire (ordered by their latest
transmission), `_retx` only packets waiting to be resent, `_sent` only writes whose last PSN is not
yet acknowledged, `_untriggered` acknowledged packets whose own SACK has not arrived yet (bounded
by the window). Loss detection is per path (recovery.LossDetector); the oldest in-flight packet
also carries the RTO timer.

RTO: srtt + max(4 rttvar, rto_min), as Linux adds its floor to srtt, run from the later of the
oldest packet's send time and the connection's last forward progress (a SACK acknowledging new
data, or a NACK answering for an in-flight packet; RFC 6298 5.3). Until the window in flight at
the first RTT sample is acknowledged, the RTO stays at least rto_initial. Why each rule:
docs/decisions.md, "Retransmission timeout".
A single lost packet among delivering ones is the per-path loss detector's job, well before.
A timeout whose timed-out transmission is answered after all (told by the echoed EV) is counted
in spurious_timeouts as well: that packet was late, not lost (e.g. the emulation host paused a
process for longer than the RTO's headroom).

RTT samples: each SACK yields one, from the transmission that triggered it (told apart from
earlier transmissions of the same PSN by the echoed EV), even when an earlier SACK already
acknowledged that PSN cumulatively or in its bitmap: dropping those late answers would keep
mostly the fast paths' samples and bias srtt low. A SACK whose trigger cannot be timed falls
back to the newest-sent unambiguous transmission it newly acknowledges (RACK).

A write completes once the cumulative ack passes its end: the receiver never consumes a PSN
it refused (Receiver docstring), so a cumulative ack is proof of placement. A refusal NACK or
an exhausted write_timeout fails the QP (_fail), as in IBTA RC. write_timeout runs from the
later of the oldest outstanding write's posting and the last acknowledgement of new data
(`_acked_at`), the way IBTA's retry count restarts on progress: a long write on a slow or
congested fabric keeps going while it moves, and a QP that moves nothing fails in bounded
time. A NACK is not progress here (a trim storm could NACK forever), only an ack is.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable

import wire
from host_agent.core.cc import CongestionControl
from host_agent.core.config import EndpointConfig, RecoveryMode
from host_agent.core.errors import LocalProtocolError
from host_agent.core.events import Event, FailReason, WriteCompleted, WriteFailed
from host_agent.core.evs import EvSet
from host_agent.core.evstate import EvEntry
from host_agent.core.recovery import LossDetector, OutPkt, Write
from host_agent.core.rto import RtoEstimator
from host_agent.core.types import PathInfo, TxPacket

MSN_MOD = 1 << 16
_CHOOSE_TRIES = 4  # picks to find another path for a retransmission
_REORDER_SCALE_MAX = 8  # reorder_window multiplier cap after spurious retransmissions
_REORDER_DECAY_ACKS = 64  # clean acks between steps down of that multiplier
_PSN_MASK = wire.PSN_MOD - 1
_PSN_HALF = wire.PSN_MOD >> 1
BITMAP_BITS = 64  # a SACK bitmap's width
_NOT_LAST = (wire.OP_WRITE_FIRST, wire.OP_WRITE_MIDDLE)  # data opcodes without ack_req


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


class Sender:
    def __init__(
        self,
        *,
        config: EndpointConfig,
        evs: EvSet,
        cc: CongestionControl,
        peer: object,
        local_qpn: int,
        remote_qpn: int,
        initial_psn: int,
        stats: dict[str, int],
        emit: Callable[[Event], None],
    ) -> None:
        self._cfg = config
        self._go_back = config.recovery is RecoveryMode.GO_BACK_N
        self._evs = evs
        self.cc = cc
        self._peer = peer
        self._qpn = local_qpn
        self._remote_qpn = remote_qpn
        self._stats = stats
        self._emit = emit
        self.next_psn = initial_psn % wire.PSN_MOD
        self.snd_una = self.next_psn  # every PSN below this is acknowledged
        self._msn = 0
        self._pending: deque[Write] = deque()  # not yet fully segmented
        self._sent: deque[Write] = deque()  # fully segmented, last PSN not yet acknowledged
        self._inflight: OrderedDict[int, OutPkt] = OrderedDict()
        self._retx: OrderedDict[int, OutPkt] = OrderedDict()
        self.inflight_bytes = 0
        self._tx_seq = 0
        self._loss = LossDetector(config.reorder_threshold)
        self._untriggered: OrderedDict[int, OutPkt] = OrderedDict()  # acked, own SACK not seen
        # bit i: PSN snd_una + i (sent) is known to be neither in flight nor awaiting a resend,
        # i.e. acknowledged: a SACK bitmap repeats such bits, and they need no second look
        self._sacked = 0
        self._newest_acked: OutPkt | None = None  # RACK sample candidate of the current SACK
        self._answer_plane: int | None = None  # plane the answer being applied came in on
        self.rto = RtoEstimator(config.rto_initial, config.rto_min, config.rto_max)
        self._hold_until = 0.0  # after NACK(PSN_OOR_WINDOW): send nothing before this
        self._progress_at = 0.0  # last forward progress: the RTO runs from here (docstring)
        self._acked_at = 0.0  # last acknowledgement of new data: write_timeout runs from here
        self._recheck: float | None = None  # when a reordered packet may be declared lost
        self._reorder_scale = 1  # grows on spurious retransmissions, decays on clean acks
        self._clean_acks = 0
        self.error: FailReason | None = None  # set when the QP failed: it sends nothing more

    # ---- posting and transmitting ----------------------------------------------------------

    def post(self, wr_id: int, data: bytes, remote_va: int, rkey: int, imm: int | None,
             now: float) -> None:
        if self.error is not None:
            raise LocalProtocolError(f"QP {self._qpn:#x} failed ({self.error.name}): no more "
                                     "writes on it; open a new connection")
        self._pending.append(Write(wr_id, bytes(data), remote_va, rkey, imm, self._msn, now))
        self._msn = (self._msn + 1) % MSN_MOD

    @property
    def outstanding_psns(self) -> int:
        return wire.psn_diff(self.next_psn, self.snd_una)

    def tracked_packets(self) -> int:
        """Packets the sender holds state for (memory-bound checks)."""
        return len(self._inflight) + len(self._retx) + len(self._sent) + len(self._untriggered)

    def idle(self) -> bool:
        return not (self._pending or self._sent or self._inflight or self._retx)

    def poll(self, now: float, out: list[TxPacket]) -> None:
        """Append every data packet window, congestion control and EV availability allow now."""
        if self.error is not None:
            return
        if self._hold_until:
            if now < self._hold_until:
                return
            self._hold_until = 0.0
        while self._retx:
            pkt = next(iter(self._retx.values()))
            if not self.cc.can_send(self.inflight_bytes, pkt.length):
                return
            entry = self._choose_other(now, pkt)
            if entry is None:
                return
            del self._retx[pkt.psn]
            out.append(self._transmit(pkt, entry, now))
        pending, window, mtu = self._pending, self._cfg.window, self._cfg.mtu
        can_send, choose = self.cc.can_send, self._evs.choose
        while pending and (((self.next_psn - self.snd_una + _PSN_HALF) & _PSN_MASK)
                           - _PSN_HALF) < window:  # outstanding_psns < window
            w = pending[0]
            size = len(w.data)
            length = min(mtu, size - w.next_offset)
            if not can_send(self.inflight_bytes, length):
                return
            entry = choose(now)
            if entry is None:
                return
            first = not w.started
            last = w.next_offset + length >= size
            pkt = OutPkt(self.next_psn, w, w.next_offset, length,
                         _OPCODES[first, last, w.imm is not None])
            w.started = True
            w.next_offset += length
            if last:
                w.last_psn = self.next_psn
                self._sent.append(pending.popleft())
            self.next_psn = (self.next_psn + 1) & _PSN_MASK
            out.append(self._transmit(pkt, entry, now))

    def _choose_other(self, now: float, pkt: OutPkt) -> EvEntry | None:
        """An EV for a retransmission: on another path than the lost transmission's if one
        comes up within a few picks, else at least another EV."""
        fallback: EvEntry | None = None
        for _ in range(_CHOOSE_TRIES):
            entry = self._evs.choose(now)
            if entry is None or entry.path != pkt.path:
                return entry
            if fallback is None and entry.ev != pkt.ev:
                fallback = entry
        return fallback or entry

    def _transmit(self, pkt: OutPkt, entry: EvEntry, now: float) -> TxPacket:
        retx = pkt.tx_count > 0
        if retx:
            pkt.prev_ev, pkt.prev_sent_time, pkt.prev_path = pkt.ev, pkt.sent_time, pkt.path
        if pkt.expired_evs and entry.ev in pkt.expired_evs:
            pkt.expired_evs.remove(entry.ev)  # its answer would be ambiguous: never spurious
        pkt.ev = entry.ev
        pkt.una_by_ev.setdefault(entry.ev, self.snd_una)
        pkt.path = entry.path
        pkt.sent_time = now
        pkt.tx_seq = self._tx_seq
        self._tx_seq += 1
        pkt.tx_count += 1
        pkt.in_flight = True
        self._inflight[pkt.psn] = pkt
        self._loss.sent(pkt)
        self.inflight_bytes += pkt.length
        w = pkt.write
        opcode = pkt.opcode
        if retx:
            self._stats["retransmits"] += 1
        payload = wire.encode_data_fields(
            opcode, self._remote_qpn, pkt.psn, opcode not in _NOT_LAST, retx, w.msn,
            w.remote_va + pkt.offset, w.rkey, pkt.length,
            w.imm if opcode in wire.IMM_OPCODES else None,
            w.data[pkt.offset : pkt.offset + pkt.length])
        path = entry.path
        return TxPacket(self._peer, path.plane, path.route, entry.ev,
                        wire.DSCP_TRIMMABLE_RETX if retx else wire.DSCP_TRIMMABLE,
                        wire.ECN_ECT0, payload)

    # ---- acknowledgements --------------------------------------------------------------------

    def _answered(self, psn: int, ev: int) -> OutPkt | None:
        """The packet a SACK/NACK naming `psn` and echoing `ev` answers, or None. An answer is
        believed only if it names a PSN we hold state for and echoes an EV one of that PSN's
        transmissions used (docs/security.md): a blind forger knows neither."""
        pkt = self._tracked(psn)
        return pkt if pkt is not None and ev in pkt.una_by_ev else None

    def on_sack(self, cack_psn: int, ack_psn_offset: int, entropy: int, sack_offset: int,
                sack_bitmap: int, m: int, probe_resp: bool, now: float, *,
                probe_outstanding: bool = False, plane: int | None = None) -> bool:
        """Apply a SACK (its SackExt fields); False (and nothing changed) if it answers nothing
        we sent. A probe reply counts only if the EvSet had a probe outstanding on its EV.
        `plane`: the plane it came in on; only deliveries on that plane feed loss detection
        (recovery module docstring); None trusts it for every plane."""
        rtt: float | None = None
        self._newest_acked = None
        self._answer_plane = plane
        if self.error is not None:
            return self._refuse()
        answered: OutPkt | None = None
        if probe_resp:
            if not probe_outstanding:
                return self._refuse()
        else:
            trigger = (cack_psn + ack_psn_offset) & _PSN_MASK
            # _answered, inlined
            answered = (self._inflight.get(trigger) or self._retx.get(trigger)
                        or self._untriggered.get(trigger))
            if answered is None or entropy not in answered.una_by_ev:
                return self._refuse()
        if self._out_of_sync(cack_psn, answered, entropy):
            return True
        if answered is not None:  # not a probe reply
            rtt = self._trigger_rtt(answered, trigger, entropy, now)
        acked = self._cumulative(cack_psn, now)
        if sack_bitmap and not self._go_back:  # RoCE senders have no SACK
            acked += self._sack_bitmap(cack_psn + sack_offset, sack_bitmap, now)
        if acked:
            self._progress_at = self._acked_at = now
            self.rto.progress()
        if probe_resp:  # no RTT, EV or CC news; but its cumulative ack may end writes
            self._complete_writes()
            return True
        if rtt is None and self._newest_acked is not None:
            rtt = now - self._newest_acked.sent_time
        if rtt is not None and rtt <= 0:
            rtt = None  # answered within the clock's resolution: no usable sample
        ecn = m != wire.M_NONE
        if rtt is not None:
            self.rto.sample(rtt, self.next_psn, self.snd_una)
        if ecn:
            self._evs.on_ecn(entropy, now)
        else:
            self._evs.on_delivered(entropy, now)
        if acked:
            self._clean_acks += 1
            if self._clean_acks >= _REORDER_DECAY_ACKS:
                self._clean_acks = 0
                self._reorder_scale = max(1, self._reorder_scale - 1)
        self.cc.on_ack(acked, rtt, ecn, now)
        self._detect_losses(now)
        self._complete_writes()
        return True

    def _sack_bitmap(self, base: int, bitmap: int, now: float) -> int:
        """Acknowledge what bit i of a SACK bitmap (PSN base + i) newly says arrived; the bytes
        acknowledged. Only sent PSNs at or above snd_una (the cumulative ack is applied) that
        are not already known acknowledged (_sacked) are looked at, in PSN order."""
        una = self.snd_una
        shift = ((base - una + _PSN_HALF) & _PSN_MASK) - _PSN_HALF  # bit 0's PSN - snd_una
        sent = ((self.next_psn - una + _PSN_HALF) & _PSN_MASK) - _PSN_HALF
        if shift >= sent or shift <= -BITMAP_BITS or sent <= 0:
            return 0  # every bit names a PSN below snd_una (acknowledged) or not sent yet
        bits = bitmap << shift if shift >= 0 else bitmap >> -shift
        bits &= ~self._sacked & ((1 << sent) - 1)
        self._sacked |= bits  # after this, none of them is in flight or awaiting a resend
        acked = 0
        inflight, retx = self._inflight, self._retx
        while bits:
            low = bits & -bits
            psn = (una + low.bit_length() - 1) & _PSN_MASK
            if psn in inflight or psn in retx:  # else acknowledged already: nothing to do
                acked += self._acknowledge(psn, now)
            bits ^= low
        return acked

    def _out_of_sync(self, cack: int, answered: OutPkt | None, ev: int) -> bool:
        """A believed answer from a receiver without this connection's state: the peer
        restarted or lost it. Its cumulative ack is beyond anything we sent, or older than
        our snd_una was when the answered transmission left (a receiver's cumulative ack
        never goes back, and that snd_una came from an earlier answer of this receiver).
        The answer was believed (it echoes an EV a tracked PSN was sent on), so it comes from
        the peer's path: the connection resynchronises to the PSN the peer expects
        (`_resync`) instead of retrying until write_timeout."""
        una_then = answered.una_by_ev[ev] if answered is not None else cack
        # wire.psn_diff(cack, next_psn) > 0 or wire.psn_diff(una_then, cack) > 0
        if (((cack - self.next_psn + _PSN_HALF) & _PSN_MASK) > _PSN_HALF
                or ((una_then - cack + _PSN_HALF) & _PSN_MASK) > _PSN_HALF):
            self._resync(cack)
            return True
        return False

    def _resync(self, cack: int) -> None:
        """Every outstanding write fails at once with PEER_OUT_OF_SYNC (what landed went to
        state the peer no longer has, or is unknown), nothing of them is sent again, and the
        next write starts at the peer's expected PSN `cack`: the QP stays usable, so a
        restarted peer is reachable again without restarting this side (docs/security.md)."""
        for w in [*self._sent, *self._pending]:
            self._emit(WriteFailed(self._qpn, w.wr_id, FailReason.PEER_OUT_OF_SYNC))
        self._sent.clear()
        self._pending.clear()
        self._forget_inflight()
        self.next_psn = self.snd_una = cack
        self._hold_until = 0.0
        self._stats["resyncs"] += 1

    def _refuse(self) -> bool:
        self._stats["answers_refused"] += 1
        return False

    def on_nack(self, nack: wire.NackExt, now: float, *, plane: int | None = None) -> bool:
        """Apply a NACK; False (and nothing changed) if it answers nothing we sent. `plane`:
        as for on_sack."""
        self._answer_plane = plane
        reason = nack.reason
        answered = self._answered(nack.nack_psn, nack.entropy)
        if answered is None or self.error is not None:
            return self._refuse()
        if self._out_of_sync(nack.cack_psn, answered, nack.entropy):
            return True
        self._late_answer(answered, nack.entropy)  # e.g. a trimmed one, NACKed late
        pkt = self._inflight.pop(nack.nack_psn, None)
        if pkt is not None:
            self._landed(pkt)
        if reason in (wire.NACK_RKEY_VIOLATION, wire.NACK_BOUNDS_VIOLATION):
            # Refused and not consumed (receiver docstring). IBTA RC: a remote access error is
            # fatal to the QP; what the cumulative ack covers still completes first.
            self._cumulative(nack.cack_psn, now)
            self._complete_writes()
            self._fail(FailReason(reason), culprit=answered.write)
            return True
        if pkt is not None:
            self._progress_at = now
            if reason == wire.NACK_TRIMMED:
                self._evs.on_nack_trimmed(nack.entropy, now)
            elif reason == wire.NACK_TRIMMED_LASTHOP:
                self._evs.on_nack_trimmed_lasthop(nack.entropy, now)
            elif reason == wire.NACK_PSN_OOR_WINDOW:
                self._hold_until = now + self._cfg.oor_backoff
            self.cc.on_nack(now)
            self._retx[pkt.psn] = pkt
            self._retx.move_to_end(pkt.psn, last=False)  # resend before anything else
            self._resend_from([pkt])
        if self._cumulative(nack.cack_psn, now):
            self._acked_at = now
        self._complete_writes()
        return True

    def _trigger_rtt(self, pkt: OutPkt, psn: int, ev: int, now: float) -> float | None:
        """RTT of the transmission of `pkt` (PSN `psn`, the _tracked one) whose arrival
        triggered a SACK, told apart by the echoed EV (Karn's rule without discarding resent
        packets); it also counts as delivered for loss detection on its path. An answer to
        the transmission before a retransmission means that retransmission was spurious: the
        reordering allowance grows."""
        if pkt.expired_evs:
            self._late_answer(pkt, ev)
        if ev == pkt.ev and not pkt.expired_evs:  # no later answer is needed any more
            self._untriggered.pop(psn, None)
        if pkt.ev == pkt.prev_ev:
            return None
        if ev == pkt.ev:
            # first transmissions count when acknowledged; go-back-N acknowledges only
            # cumulatively, so there an arrival above the cumulative ack is RoCE's
            # sequence-error NAK: evidence for loss detection, not an acknowledgement
            if pkt.tx_count > 1 or (self._go_back and pkt.in_flight):
                self._evidence(pkt, now)
            return now - pkt.sent_time
        if ev == pkt.prev_ev:
            self._stats["spurious_retransmits"] += 1
            self._reorder_scale = min(self._reorder_scale + 1, _REORDER_SCALE_MAX)
            return now - pkt.prev_sent_time
        return None

    def _tracked(self, psn: int) -> OutPkt | None:
        """The packet an answer for `psn` may be about: in flight, awaiting a resend, or
        acknowledged but not yet timed by its own SACK."""
        return self._inflight.get(psn) or self._retx.get(psn) or self._untriggered.get(psn)

    def _late_answer(self, pkt: OutPkt, ev: int) -> None:
        """A SACK or NACK answering a transmission the RTO had expired: it was late, not lost."""
        if pkt.expired_evs and ev in pkt.expired_evs:
            pkt.expired_evs.remove(ev)
            self._stats["spurious_timeouts"] += 1

    def _cumulative(self, cack: int, now: float) -> int:
        una = self.snd_una
        advance = ((cack - una + _PSN_HALF) & _PSN_MASK) - _PSN_HALF  # wire.psn_diff
        if advance <= 0:
            return 0
        acked = 0
        inflight, retx = self._inflight, self._retx
        for i in range(advance):
            psn = (una + i) & _PSN_MASK
            if psn in inflight or psn in retx:  # else acknowledged already: nothing to do
                acked += self._acknowledge(psn, now)
        self.snd_una = cack
        self._sacked >>= advance
        return acked

    def _acknowledge(self, psn: int, now: float) -> int:
        """Acknowledge `psn` (cumulatively or by a SACK bitmap bit)."""
        pkt = self._inflight.pop(psn, None)
        if pkt is not None:
            pkt.in_flight = False  # _landed, inlined
            self.inflight_bytes -= pkt.length
            self._loss.forget(pkt)
            if pkt.tx_count == 1:  # unambiguous: only one transmission could have arrived
                self._evidence(pkt, now)
                if self._newest_acked is None or pkt.tx_seq > self._newest_acked.tx_seq:
                    self._newest_acked = pkt
        else:
            pkt = self._retx.pop(psn, None)  # declared lost, yet it arrived
        if pkt is None:
            return 0
        self._untriggered[psn] = pkt  # until its own SACK times it
        if len(self._untriggered) > self._cfg.window:
            self._untriggered.popitem(last=False)
        return pkt.length

    def max_delivery_pauses(self) -> dict[PathInfo, float]:
        return self._loss.max_pauses()

    def _evidence(self, pkt: OutPkt, now: float) -> None:
        """`pkt`'s latest transmission arrived: evidence for loss detection on its path if the
        answer telling it came in on that path's plane (recovery module docstring)."""
        assert pkt.path is not None
        if self._answer_plane is None or self._answer_plane == pkt.path.plane:
            self._loss.delivered(pkt.path, pkt.tx_seq, now - pkt.sent_time, now)

    def _complete_writes(self) -> None:
        sent = self._sent
        while sent:
            w = sent[0]
            assert w.last_psn is not None
            if ((self.snd_una - w.last_psn + _PSN_HALF) & _PSN_MASK) <= _PSN_HALF:  # diff <= 0
                return
            sent.popleft()
            self._emit(WriteCompleted(self._qpn, w.wr_id))

    # ---- loss ------------------------------------------------------------------------------

    def _detect_losses(self, now: float) -> None:
        window = self._cfg.reorder_window * self._reorder_scale
        lost, self._recheck, dark = self._loss.detect(now, window, self.rto.current())
        for path in dark:
            self._evs.on_path_dark(path, now)
        for pkt in lost:
            self._mark_lost(pkt)
            self._evs.on_loss(pkt.ev, now)
        if lost:
            self._resend_from(lost)
            self.cc.on_loss(now)

    def _resend_from(self, lost: list[OutPkt]) -> None:
        """Go-back-N only: everything in flight from the lowest lost PSN on is resent too, in
        PSN order (no EV penalty for those: they were not lost)."""
        if not self._go_back:
            return
        low = min(wire.psn_diff(p.psn, self.snd_una) for p in lost)
        for pkt in [p for p in self._inflight.values()
                    if wire.psn_diff(p.psn, self.snd_una) > low]:
            self._mark_lost(pkt)
        order = sorted(self._retx.values(), key=lambda p: wire.psn_diff(p.psn, self.snd_una))
        self._retx = OrderedDict((p.psn, p) for p in order)

    def _mark_lost(self, pkt: OutPkt) -> None:
        del self._inflight[pkt.psn]
        self._landed(pkt)
        self._retx[pkt.psn] = pkt

    def _landed(self, pkt: OutPkt) -> None:
        """`pkt` left `_inflight`: acknowledged, NACKed or declared lost."""
        pkt.in_flight = False
        self.inflight_bytes -= pkt.length
        self._loss.forget(pkt)

    def stalled_since(self) -> float | None:
        """Since when the outstanding writes have had no data acknowledged (module docstring);
        None when no write is outstanding."""
        oldest = self._sent[0] if self._sent else self._pending[0] if self._pending else None
        if oldest is None:
            return None
        return oldest.posted_at if oldest.posted_at > self._acked_at else self._acked_at

    def deadline(self) -> float | None:
        """The next time on_timer has work. While a write is pending there always is one: its
        write_timeout (liveness: every write ends in success or WriteFailed)."""
        stalled = self.stalled_since()
        if stalled is None:
            return None
        when = stalled + self._cfg.write_timeout  # the earliest of these (the list's min):
        if self._inflight:
            oldest = next(iter(self._inflight.values()))
            rto = max(oldest.sent_time, self._progress_at) + self.rto.current()
            if rto < when:
                when = rto
        if self._hold_until and self._retx and self._hold_until < when:
            when = self._hold_until
        if self._recheck is not None and self._recheck < when:
            when = self._recheck
        return when

    def on_timer(self, now: float) -> None:
        stalled = self.stalled_since()
        if stalled is not None and now >= stalled + self._cfg.write_timeout:
            self._fail(FailReason.TIMEOUT)
            return
        if self._recheck is not None and now >= self._recheck:
            self._detect_losses(now)
        limit = self.rto.current()
        if self._progress_at + limit > now:
            return  # progress within the last RTO: nothing has timed out (module docstring)
        expired: list[OutPkt] = []
        while self._inflight:
            pkt = next(iter(self._inflight.values()))
            if pkt.sent_time + limit > now:
                break
            self._mark_lost(pkt)
            self._evs.on_loss(pkt.ev, now)
            pkt.expired_evs = [*(pkt.expired_evs or ()), pkt.ev]
            expired.append(pkt)
        if expired:
            self._resend_from(expired)
            self._stats["timeouts"] += len(expired)
            self.rto.back_off()
            self.cc.on_timeout(now)

    def _fail(self, reason: FailReason, culprit: Write | None = None) -> None:
        """The QP failed (IBTA RC: retries exhausted, or a remote access error): the culprit
        write (default: the oldest) fails with `reason`, every other pending one is flushed,
        and nothing is sent or believed on this QP again."""
        self.error = reason
        writes = [*self._sent, *self._pending]
        culprit = culprit or (writes[0] if writes else None)
        for w in writes:
            self._emit(WriteFailed(self._qpn, w.wr_id,
                                   reason if w is culprit else FailReason.FLUSHED))
        self._sent.clear()
        self._pending.clear()
        self._forget_inflight()
        self._stats["qp_failures"] += 1

    def flush(self) -> None:
        """The QP is destroyed: every write not yet completed ends FLUSHED."""
        for w in [*self._sent, *self._pending]:
            self._emit(WriteFailed(self._qpn, w.wr_id, FailReason.FLUSHED))
        self._sent.clear()
        self._pending.clear()
        self._forget_inflight()

    def _forget_inflight(self) -> None:
        self._inflight.clear()
        self._retx.clear()
        self._untriggered.clear()
        self._sacked = 0
        self._newest_acked = None
        self.inflight_bytes = 0
        self._loss = LossDetector(self._cfg.reorder_threshold)
        self._recheck = None

    def plane_down(self, plane: int) -> None:
        """Queue for resending what is in flight on a plane that just went away (no EV penalty)."""
        for pkt in [p for p in self._inflight.values() if p.path and p.path.plane == plane]:
            self._mark_lost(pkt)
