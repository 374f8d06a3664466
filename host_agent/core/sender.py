"""Sender half of a connection: segmentation, PSNs, in-flight tracking, SACK/NACK and loss recovery.

In-flight state is O(window): `_inflight` holds only packets on the wire (ordered by their latest
transmission), `_retx` only packets waiting to be resent, `_sent` only writes whose last PSN is not
yet acknowledged. Nothing is kept for acknowledged packets.

Loss detection (RACK-like, in transmission order rather than PSN order so retransmissions are
handled the same way as first transmissions): every transmission gets a sequence number; a packet
is lost once (1) a packet transmitted `reorder_threshold` or more transmissions after it has been
acknowledged (cumulatively or by the SACK bitmap) -- for first transmissions exactly "a PSN at
least reorder_threshold higher was SACKed" -- and (2) it has been out for
srtt + max(reorder_window, 2 rttvar).
Condition (2) keeps per-packet spraying, which reorders a burst across paths of different delay,
from declaring losses (and retiring EVs) spuriously; when (1) holds but (2) does not yet, a
recheck timer is armed. The oldest in-flight packet also carries the RTO timer.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass

from host_agent import wire
from host_agent.core.cc import CongestionControl
from host_agent.core.config import EndpointConfig
from host_agent.core.errors import RemoteProtocolError
from host_agent.core.events import Event, WriteCompleted, WriteFailed
from host_agent.core.evs import EvEntry, EvSet
from host_agent.core.types import TxPacket

MSN_MOD = 1 << 16
_CHOOSE_TRIES = 3  # attempts to find a different EV for a retransmission
_REORDER_SCALE_MAX = 8  # reorder_window multiplier cap after spurious retransmissions
_REORDER_DECAY_ACKS = 64  # clean acks between steps down of that multiplier
_RTT_MAX_DECAY = 0.999  # per RTT sample: the remembered maximum halves in ~700 samples
_RTO_MAX_MARGIN = 1.5  # RTO >= this x the remembered maximum RTT


@dataclass
class _Write:
    wr_id: int
    data: bytes
    remote_va: int
    rkey: int
    imm: int | None
    msn: int
    next_offset: int = 0
    started: bool = False
    last_psn: int | None = None
    failed_reason: int | None = None


@dataclass
class _OutPkt:
    psn: int
    write: _Write
    offset: int
    length: int
    opcode: int
    ev: int = 0
    plane: int = 0
    sent_time: float = 0.0
    tx_seq: int = 0
    tx_count: int = 0
    prev_ev: int | None = None  # EV and send time of the transmission before the latest one
    prev_sent_time: float = 0.0


def _opcode(first: bool, last: bool, imm: bool) -> int:
    if first and last:
        return wire.OP_WRITE_ONLY_IMM if imm else wire.OP_WRITE_ONLY
    if first:
        return wire.OP_WRITE_FIRST
    if last:
        return wire.OP_WRITE_LAST_IMM if imm else wire.OP_WRITE_LAST
    return wire.OP_WRITE_MIDDLE


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
        self._pending: deque[_Write] = deque()  # not yet fully segmented
        self._sent: deque[_Write] = deque()  # fully segmented, last PSN not yet acknowledged
        self._inflight: OrderedDict[int, _OutPkt] = OrderedDict()
        self._retx: OrderedDict[int, _OutPkt] = OrderedDict()
        self.inflight_bytes = 0
        self._tx_seq = 0
        self._delivered_seq = -1  # highest transmission sequence number acknowledged
        self.srtt: float | None = None
        self._rtt_max = 0.0
        self._rttvar = 0.0
        self.rto = config.rto_initial
        self._backoff = 1
        self._hold_until = 0.0  # after NACK(PSN_OOR_WINDOW): send nothing before this
        self._recheck: float | None = None  # when a reordered packet may be declared lost
        self._reorder_scale = 1  # grows on spurious retransmissions, decays on clean acks
        self._clean_acks = 0

    # ---- posting and transmitting ----------------------------------------------------------

    def post(self, wr_id: int, data: bytes, remote_va: int, rkey: int, imm: int | None) -> None:
        self._pending.append(_Write(wr_id, bytes(data), remote_va, rkey, imm, self._msn))
        self._msn = (self._msn + 1) % MSN_MOD

    @property
    def outstanding_psns(self) -> int:
        return wire.psn_diff(self.next_psn, self.snd_una)

    def tracked_packets(self) -> int:
        """Packets the sender holds state for (memory-bound checks)."""
        return len(self._inflight) + len(self._retx) + len(self._sent)

    def idle(self) -> bool:
        return not (self._pending or self._sent or self._inflight or self._retx)

    def poll(self, now: float, out: list[TxPacket]) -> None:
        """Append every data packet window, congestion control and EV availability allow now."""
        if self._hold_until:
            if now < self._hold_until:
                return
            self._hold_until = 0.0
        while self._retx:
            pkt = next(iter(self._retx.values()))
            if not self.cc.can_send(self.inflight_bytes, pkt.length):
                return
            entry = self._choose_other(now, pkt.ev)
            if entry is None:
                return
            del self._retx[pkt.psn]
            out.append(self._transmit(pkt, entry, now))
        while self._pending and self.outstanding_psns < self._cfg.window:
            w = self._pending[0]
            length = min(self._cfg.mtu, len(w.data) - w.next_offset)
            if not self.cc.can_send(self.inflight_bytes, length):
                return
            entry = self._evs.choose(now)
            if entry is None:
                return
            first = not w.started
            last = w.next_offset + length >= len(w.data)
            pkt = _OutPkt(self.next_psn, w, w.next_offset, length,
                          _opcode(first, last, w.imm is not None))
            w.started = True
            w.next_offset += length
            if last:
                w.last_psn = self.next_psn
                self._sent.append(self._pending.popleft())
            self.next_psn = wire.psn_add(self.next_psn, 1)
            out.append(self._transmit(pkt, entry, now))

    def _choose_other(self, now: float, avoid: int) -> EvEntry | None:
        entry = self._evs.choose(now)
        for _ in range(_CHOOSE_TRIES):
            if entry is None or entry.ev != avoid:
                break
            entry = self._evs.choose(now)
        return entry

    def _transmit(self, pkt: _OutPkt, entry: EvEntry, now: float) -> TxPacket:
        retx = pkt.tx_count > 0
        if retx:
            pkt.prev_ev, pkt.prev_sent_time = pkt.ev, pkt.sent_time
        pkt.ev = entry.ev
        pkt.plane = entry.path.plane
        pkt.sent_time = now
        pkt.tx_seq = self._tx_seq
        self._tx_seq += 1
        pkt.tx_count += 1
        self._inflight[pkt.psn] = pkt
        self.inflight_bytes += pkt.length
        w = pkt.write
        imm = w.imm if pkt.opcode in wire.IMM_OPCODES else None
        last = pkt.opcode not in (wire.OP_WRITE_FIRST, wire.OP_WRITE_MIDDLE)
        data = wire.DataPacket(
            bth=wire.Bth(opcode=pkt.opcode, dest_qp=self._remote_qpn, psn=pkt.psn,
                         ack_req=last, rtx=retx),
            meth=wire.Meth(msn=w.msn),
            reth=wire.Reth(va=w.remote_va + pkt.offset, rkey=w.rkey, dma_len=pkt.length),
            payload=w.data[pkt.offset : pkt.offset + pkt.length],
            imm=imm,
        )
        if retx:
            self._stats["retransmits"] += 1
        dscp = wire.DSCP_TRIMMABLE_RETX if retx else wire.DSCP_TRIMMABLE
        return TxPacket(self._peer, entry.path.plane, entry.path.route, entry.ev, dscp,
                        wire.ECN_ECT0, wire.encode_packet(data))

    # ---- acknowledgements --------------------------------------------------------------------

    def on_sack(self, sack: wire.SackExt, now: float) -> None:
        acked = 0
        rtt: float | None = None
        if not sack.probe_resp:
            rtt = self._rtt_of(wire.psn_add(sack.cack_psn, sack.ack_psn_offset), sack.entropy, now)
        acked += self._cumulative(sack.cack_psn)
        base = wire.psn_add(sack.cack_psn, sack.sack_offset)
        bits = sack.sack_bitmap
        while bits:
            low = bits & -bits
            acked += self._acknowledge(wire.psn_add(base, low.bit_length() - 1))
            bits ^= low
        if sack.probe_resp:
            return
        ecn = sack.m != wire.M_NONE
        if rtt is not None:
            self._rtt_sample(rtt)
        if ecn:
            self._evs.on_ecn(sack.entropy, now)
        else:
            self._evs.on_delivered(sack.entropy, now)
        if acked:
            self._backoff = 1
            self._clean_acks += 1
            if self._clean_acks >= _REORDER_DECAY_ACKS:
                self._clean_acks = 0
                self._reorder_scale = max(1, self._reorder_scale - 1)
        self.cc.on_ack(acked, rtt, ecn, now)
        self._detect_losses(now)
        self._complete_writes()

    def on_nack(self, nack: wire.NackExt, now: float) -> None:
        reason = nack.reason
        pkt = self._inflight.pop(nack.nack_psn, None)
        if pkt is not None:
            self.inflight_bytes -= pkt.length
        if reason in (wire.NACK_RKEY_VIOLATION, wire.NACK_BOUNDS_VIOLATION):
            # The receiver consumed the PSN without writing it: fail the write, never resend.
            # Known race: if a SACK whose cumulative ack passes the write's end overtakes this
            # NACK, the write was already reported complete.
            stale = self._retx.pop(nack.nack_psn, None)
            target = pkt or stale
            if target is not None:
                target.write.failed_reason = reason
        elif pkt is not None:
            if reason == wire.NACK_TRIMMED:
                self._evs.on_nack_trimmed(nack.entropy, now)
            elif reason == wire.NACK_TRIMMED_LASTHOP:
                self._evs.on_nack_trimmed_lasthop(nack.entropy, now)
            elif reason == wire.NACK_PSN_OOR_WINDOW:
                self._hold_until = now + self._cfg.oor_backoff
            self.cc.on_nack(now)
            self._retx[pkt.psn] = pkt
            self._retx.move_to_end(pkt.psn, last=False)  # resend before anything else
        self._cumulative(nack.cack_psn)
        self._complete_writes()

    def _rtt_of(self, psn: int, ev: int, now: float) -> float | None:
        """RTT of the transmission a SACK answers, told apart by the echoed EV (Karn's rule
        without discarding resent packets, whose absence would bias srtt towards fast paths).
        An answer to the transmission before a retransmission means that retransmission was
        spurious: the reordering allowance grows."""
        pkt = self._inflight.get(psn) or self._retx.get(psn)
        if pkt is None or pkt.ev == pkt.prev_ev:
            return None
        if ev == pkt.ev:
            return now - pkt.sent_time
        if ev == pkt.prev_ev:
            self._stats["spurious_retransmits"] += 1
            self._reorder_scale = min(self._reorder_scale + 1, _REORDER_SCALE_MAX)
            return now - pkt.prev_sent_time
        return None

    def _cumulative(self, cack: int) -> int:
        advance = wire.psn_diff(cack, self.snd_una)
        if advance <= 0:
            return 0
        if wire.psn_diff(cack, self.next_psn) > 0:
            raise RemoteProtocolError(f"cumulative ack {cack} beyond next PSN {self.next_psn}")
        acked = 0
        for i in range(advance):
            acked += self._acknowledge(wire.psn_add(self.snd_una, i))
        self.snd_una = cack
        return acked

    def _acknowledge(self, psn: int) -> int:
        pkt = self._inflight.pop(psn, None)
        if pkt is not None:
            self.inflight_bytes -= pkt.length
            self._delivered_seq = max(self._delivered_seq, pkt.tx_seq)
            return pkt.length
        pkt = self._retx.pop(psn, None)  # declared lost, yet it arrived
        return pkt.length if pkt is not None else 0

    def _complete_writes(self) -> None:
        while self._sent:
            w = self._sent[0]
            assert w.last_psn is not None
            if wire.psn_diff(self.snd_una, w.last_psn) <= 0:
                return
            self._sent.popleft()
            if w.failed_reason is None:
                self._emit(WriteCompleted(self._qpn, w.wr_id))
            else:
                self._emit(WriteFailed(self._qpn, w.wr_id, w.failed_reason))

    def _rtt_sample(self, rtt: float) -> None:
        """RFC 6298 smoothing, RTO = srtt + 4 rttvar, but never below a slowly decaying maximum
        RTT sample (x RTO_MAX_MARGIN): sprayed packets see every path's queue, and a timeout
        shorter than the slowest path's RTT would retire EVs that are merely congested.
        Clamped to [rto_min, rto_max]."""
        if self.srtt is None:
            self.srtt, self._rttvar = rtt, rtt / 2
        else:
            self._rttvar = 0.75 * self._rttvar + 0.25 * abs(self.srtt - rtt)
            self.srtt = 0.875 * self.srtt + 0.125 * rtt
        self._rtt_max = max(rtt, self._rtt_max * _RTT_MAX_DECAY)
        rto = max(self.srtt + 4 * self._rttvar, _RTO_MAX_MARGIN * self._rtt_max)
        self.rto = min(max(rto, self._cfg.rto_min), self._cfg.rto_max)

    # ---- loss ------------------------------------------------------------------------------

    def _detect_losses(self, now: float) -> None:
        limit = self._delivered_seq - self._cfg.reorder_threshold
        patience = self._reorder_patience()
        self._recheck = None
        lost = False
        while self._inflight:
            pkt = next(iter(self._inflight.values()))
            if pkt.tx_seq > limit:
                break
            if now < pkt.sent_time + patience:
                self._recheck = pkt.sent_time + patience
                break
            self._mark_lost(pkt)
            self._evs.on_loss(pkt.ev, now)
            lost = True
        if lost:
            self.cc.on_loss(now)

    def _reorder_patience(self) -> float:
        """How long a packet may be out before reordering no longer explains its absence:
        srtt plus the larger of 2 rttvar (paths of different queueing) and reorder_window
        (scaled up after spurious retransmissions, back down as clean acks accumulate), and at
        least the remembered maximum RTT sample."""
        window = self._cfg.reorder_window * self._reorder_scale
        if self.srtt is None:
            return self.rto + window
        return max(self.srtt + max(window, 2 * self._rttvar), self._rtt_max)

    def _mark_lost(self, pkt: _OutPkt) -> None:
        del self._inflight[pkt.psn]
        self.inflight_bytes -= pkt.length
        self._retx[pkt.psn] = pkt

    def deadline(self) -> float | None:
        times = []
        if self._inflight:
            oldest = next(iter(self._inflight.values()))
            times.append(oldest.sent_time + self._rto_now())
        if self._hold_until and self._retx:
            times.append(self._hold_until)
        if self._recheck is not None:
            times.append(self._recheck)
        return min(times) if times else None

    def _rto_now(self) -> float:
        return min(self.rto * self._backoff, self._cfg.rto_max)

    def on_timer(self, now: float) -> None:
        if self._recheck is not None and now >= self._recheck:
            self._detect_losses(now)
        limit = self._rto_now()
        expired = 0
        while self._inflight:
            pkt = next(iter(self._inflight.values()))
            if pkt.sent_time + limit > now:
                break
            self._mark_lost(pkt)
            self._evs.on_loss(pkt.ev, now)
            expired += 1
        if expired:
            self._stats["timeouts"] += expired
            self._backoff = min(self._backoff * 2, 64)
            self.cc.on_timeout(now)

    def plane_down(self, plane: int) -> None:
        """Queue for resending what is in flight on a plane that just went away (no EV penalty)."""
        for pkt in [p for p in self._inflight.values() if p.plane == plane]:
            self._mark_lost(pkt)
