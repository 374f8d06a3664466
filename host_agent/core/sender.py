"""Sender half of a connection: segmentation, PSNs, in-flight tracking, SACK/NACK and loss recovery.

State is O(window): the packets it holds state for are in flight.Flight, the writes whose last
PSN is not yet acknowledged in writes.WriteQueue. Loss detection is per path
(recovery.LossDetector); the oldest in-flight packet also carries the RTO timer.

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

When a write completes and where write_timeout runs from: writes.WriteQueue. A refusal NACK
or an exhausted write_timeout fails the QP (_fail), as in IBTA RC.
"""

from __future__ import annotations

from collections.abc import Callable

import wire
from host_agent.core.cc import CongestionControl
from host_agent.core.config import EndpointConfig, RecoveryMode
from host_agent.core.errors import LocalProtocolError
from host_agent.core.events import Event, FailReason
from host_agent.core.evs import EvSet
from host_agent.core.evstate import EvEntry
from host_agent.core.flight import Flight
from host_agent.core.recovery import OutPkt, Write
from host_agent.core.rto import RtoEstimator
from host_agent.core.types import PathInfo, TxPacket
from host_agent.core.writes import WriteQueue
from wire import psn_add, psn_diff

_CHOOSE_TRIES = 4  # picks to find another path for a retransmission
_REORDER_SCALE_MAX = 8  # reorder_window multiplier cap after spurious retransmissions
_REORDER_DECAY_ACKS = 64  # clean acks between steps down of that multiplier
_NOT_LAST = (wire.OP_WRITE_FIRST, wire.OP_WRITE_MIDDLE)  # data opcodes without ack_req


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
        self.next_psn = initial_psn % wire.PSN_MOD
        self.snd_una = self.next_psn  # every PSN below this is acknowledged
        self._writes = WriteQueue(local_qpn, emit)
        self._flight = Flight(config.window, config.reorder_threshold)
        self.rto = RtoEstimator(config.rto_initial, config.rto_min, config.rto_max)
        self._hold_until = 0.0  # after NACK(PSN_OOR_WINDOW): send nothing before this
        self._progress_at = 0.0  # last forward progress: the RTO runs from here (docstring)
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
        self._writes.post(wr_id, data, remote_va, rkey, imm, now)

    @property
    def outstanding_psns(self) -> int:
        return psn_diff(self.next_psn, self.snd_una)

    def tracked_packets(self) -> int:
        """Packets the sender holds state for (memory-bound checks)."""
        return len(self._flight) + len(self._writes.sent)

    def idle(self) -> bool:
        return not (self._writes or self._flight.inflight or self._flight.retx)

    def poll(self, now: float, out: list[TxPacket]) -> None:
        """Append every data packet window, congestion control and EV availability allow now."""
        if self.error is not None:
            return
        if self._hold_until:
            if now < self._hold_until:
                return
            self._hold_until = 0.0
        flight = self._flight
        while flight.retx:
            pkt = next(iter(flight.retx.values()))
            if not self.cc.can_send(flight.bytes, pkt.length):
                return
            entry = self._choose_other(now, pkt)
            if entry is None:
                return
            del flight.retx[pkt.psn]
            out.append(self._transmit(pkt, entry, now))
        writes, window, mtu = self._writes, self._cfg.window, self._cfg.mtu
        pending, can_send, choose = writes.pending, self.cc.can_send, self._evs.choose
        while pending and psn_diff(self.next_psn, self.snd_una) < window:
            w = pending[0]
            length = min(mtu, len(w.data) - w.next_offset)
            if not can_send(flight.bytes, length):
                return
            entry = choose(now)
            if entry is None:
                return
            pkt = writes.cut(self.next_psn, length)
            self.next_psn = psn_add(self.next_psn, 1)
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
        self._flight.sent(pkt)
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
        pkt = self._flight.tracked(psn)
        return pkt if pkt is not None and ev in pkt.una_by_ev else None

    def on_sack(self, sack: wire.SackFields, now: float, *, probe_outstanding: bool = False,
                plane: int | None = None) -> bool:
        """Apply a SACK; False (and nothing changed) if it answers nothing we sent. A probe
        reply counts only if the EvSet had a probe outstanding on its EV.
        `plane`: the plane it came in on; only deliveries on that plane feed loss detection
        (recovery module docstring); None trusts it for every plane."""
        _qp, cack_psn, ack_psn_offset, entropy, sack_offset, sack_bitmap, m, probe_resp = sack
        rtt: float | None = None
        flight = self._flight
        flight.newest_acked = None
        flight.answer_plane = plane
        if self.error is not None:
            return self._refuse()
        answered: OutPkt | None = None
        if probe_resp:
            if not probe_outstanding:
                return self._refuse()
        else:
            trigger = psn_add(cack_psn, ack_psn_offset)
            # _answered, inlined
            answered = (flight.inflight.get(trigger) or flight.retx.get(trigger)
                        or flight.untriggered.get(trigger))
            if answered is None or entropy not in answered.una_by_ev:
                return self._refuse()
        if self._out_of_sync(cack_psn, answered, entropy):
            return True
        if answered is not None:  # not a probe reply
            rtt = self._trigger_rtt(answered, trigger, entropy, now)
        acked = self._cumulative(cack_psn, now)
        if sack_bitmap and not self._go_back:  # RoCE senders have no SACK
            acked += flight.sack_bitmap(cack_psn + sack_offset, sack_bitmap, self.snd_una,
                                        self.next_psn, now)
        if acked:
            self._progress_at = self._writes.acked_at = now
            self.rto.progress()
        if probe_resp:  # no RTT, EV or CC news; but its cumulative ack may end writes
            self._writes.complete(self.snd_una)
            return True
        if rtt is None and flight.newest_acked is not None:
            rtt = now - flight.newest_acked.sent_time
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
        self._writes.complete(self.snd_una)
        return True

    def _out_of_sync(self, cack: int, answered: OutPkt | None, ev: int) -> bool:
        """A believed answer from a receiver without this connection's state: the peer
        restarted or lost it. Its cumulative ack is beyond anything we sent, or older than
        our snd_una was when the answered transmission left (a receiver's cumulative ack
        never goes back, and that snd_una came from an earlier answer of this receiver).
        The answer was believed (it echoes an EV a tracked PSN was sent on), so it comes from
        the peer's path: the connection resynchronises to the PSN the peer expects
        (`_resync`) instead of retrying until write_timeout."""
        una_then = answered.una_by_ev[ev] if answered is not None else cack
        if psn_diff(cack, self.next_psn) > 0 or psn_diff(una_then, cack) > 0:
            self._resync(cack)
            return True
        return False

    def _resync(self, cack: int) -> None:
        """Every outstanding write fails at once with PEER_OUT_OF_SYNC (what landed went to
        state the peer no longer has, or is unknown), nothing of them is sent again, and the
        next write starts at the peer's expected PSN `cack`: the QP stays usable, so a
        restarted peer is reachable again without restarting this side (docs/security.md)."""
        self._writes.fail(FailReason.PEER_OUT_OF_SYNC)
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
        self._flight.answer_plane = plane
        reason = nack.reason
        answered = self._answered(nack.nack_psn, nack.entropy)
        if answered is None or self.error is not None:
            return self._refuse()
        if self._out_of_sync(nack.cack_psn, answered, nack.entropy):
            return True
        self._late_answer(answered, nack.entropy)  # e.g. a trimmed one, NACKed late
        pkt = self._flight.inflight.pop(nack.nack_psn, None)
        if pkt is not None:
            self._flight.landed(pkt)
        if reason in (wire.NACK_RKEY_VIOLATION, wire.NACK_BOUNDS_VIOLATION):
            # Refused and not consumed (receiver docstring). IBTA RC: a remote access error is
            # fatal to the QP; what the cumulative ack covers still completes first.
            self._cumulative(nack.cack_psn, now)
            self._writes.complete(self.snd_una)
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
            self._flight.retx[pkt.psn] = pkt
            self._flight.retx.move_to_end(pkt.psn, last=False)  # resend before anything else
            self._resend_from([pkt])
        if self._cumulative(nack.cack_psn, now):
            self._writes.acked_at = now
        self._writes.complete(self.snd_una)
        return True

    def _trigger_rtt(self, pkt: OutPkt, psn: int, ev: int, now: float) -> float | None:
        """RTT of the transmission of `pkt` (PSN `psn`, the Flight.tracked one) whose arrival
        triggered a SACK, told apart by the echoed EV (Karn's rule without discarding resent
        packets); it also counts as delivered for loss detection on its path. An answer to
        the transmission before a retransmission means that retransmission was spurious: the
        reordering allowance grows."""
        if pkt.expired_evs:
            self._late_answer(pkt, ev)
        if ev == pkt.ev and not pkt.expired_evs:  # no later answer is needed any more
            self._flight.untriggered.pop(psn, None)
        if pkt.ev == pkt.prev_ev:
            return None
        if ev == pkt.ev:
            # first transmissions count when acknowledged; go-back-N acknowledges only
            # cumulatively, so there an arrival above the cumulative ack is RoCE's
            # sequence-error NAK: evidence for loss detection, not an acknowledgement
            if pkt.tx_count > 1 or (self._go_back and pkt.in_flight):
                self._flight.evidence(pkt, now)
            return now - pkt.sent_time
        if ev == pkt.prev_ev:
            self._stats["spurious_retransmits"] += 1
            self._reorder_scale = min(self._reorder_scale + 1, _REORDER_SCALE_MAX)
            return now - pkt.prev_sent_time
        return None

    def _late_answer(self, pkt: OutPkt, ev: int) -> None:
        """A SACK or NACK answering a transmission the RTO had expired: it was late, not lost."""
        if pkt.expired_evs and ev in pkt.expired_evs:
            pkt.expired_evs.remove(ev)
            self._stats["spurious_timeouts"] += 1

    def _cumulative(self, cack: int, now: float) -> int:
        """Apply the cumulative ack `cack`; the bytes it newly acknowledged."""
        advance = psn_diff(cack, self.snd_una)
        if advance <= 0:
            return 0
        acked = self._flight.cumulative(self.snd_una, advance, now)
        self.snd_una = cack
        return acked

    def max_delivery_pauses(self) -> dict[PathInfo, float]:
        return self._flight.loss.max_pauses()

    # ---- loss ------------------------------------------------------------------------------

    def _detect_losses(self, now: float) -> None:
        window = self._cfg.reorder_window * self._reorder_scale
        lost, self._recheck, dark = self._flight.loss.detect(now, window, self.rto.current())
        for path in dark:
            self._evs.on_path_dark(path, now)
        for pkt in lost:
            self._flight.mark_lost(pkt)
            self._evs.on_loss(pkt.ev, now)
        if lost:
            self._resend_from(lost)
            self.cc.on_loss(now)

    def _resend_from(self, lost: list[OutPkt]) -> None:
        """Go-back-N only: everything in flight from the lowest lost PSN on is resent too, in
        PSN order (Flight.resend_in_order; no EV penalty for those: they were not lost)."""
        if self._go_back:
            self._flight.resend_in_order(lost, self.snd_una)

    def stalled_since(self) -> float | None:
        """Since when the outstanding writes have had no data acknowledged (WriteQueue); None
        when no write is outstanding."""
        return self._writes.stalled_since()

    def deadline(self) -> float | None:
        """The next time on_timer has work. While a write is pending there always is one: its
        write_timeout (liveness: every write ends in success or WriteFailed)."""
        stalled = self.stalled_since()
        if stalled is None:
            return None
        when = stalled + self._cfg.write_timeout  # the earliest of these (the list's min):
        if self._flight.inflight:
            oldest = next(iter(self._flight.inflight.values()))
            rto = max(oldest.sent_time, self._progress_at) + self.rto.current()
            if rto < when:
                when = rto
        if self._hold_until and self._flight.retx and self._hold_until < when:
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
        flight = self._flight
        while flight.inflight:
            pkt = next(iter(flight.inflight.values()))
            if pkt.sent_time + limit > now:
                break
            flight.mark_lost(pkt)
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
        self._writes.fail(reason, culprit or self._writes.oldest())
        self._forget_inflight()
        self._stats["qp_failures"] += 1

    def flush(self) -> None:
        """The QP is destroyed: every write not yet completed ends FLUSHED."""
        self._writes.fail(FailReason.FLUSHED)
        self._forget_inflight()

    def _forget_inflight(self) -> None:
        self._flight.clear()
        self._recheck = None

    def plane_down(self, plane: int) -> None:
        """Queue for resending what is in flight on a plane that just went away (no EV penalty)."""
        flight = self._flight
        for pkt in [p for p in flight.inflight.values() if p.path and p.path.plane == plane]:
            flight.mark_lost(pkt)
