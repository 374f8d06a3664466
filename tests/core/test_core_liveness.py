"""Liveness under random interleavings of valid and forged traffic (a property test over seeds).

After every step of the harness: an endpoint with a write pending has a timer armed. At the end:
every write ended in WriteCompleted or WriteFailed, no later than write_timeout after the QP last
moved (data acknowledged, or the write posted), and every completed write's bytes are in the
receiver's memory. Then the write timeout's own rules, one scenario each: a write that keeps
moving outlives it, a trim storm (NACKs only) and a stall after progress do not.
"""

from __future__ import annotations

import random

import pytest

import wire
from host_agent.core import (
    FailReason,
    LocalProtocolError,
    RxMeta,
    WriteCompleted,
    WriteFailed,
)
from tests.core.harness import BASE_RTT, QP_A, QP_B, Harness, pattern, small_config

WRITE_TIMEOUT = 3000 * BASE_RTT
SEEDS = range(40)


def _forgery(rng: random.Random, dest_qp: int, evs: list[int]) -> tuple[bytes, RxMeta]:
    """A random packet from a blind forger: right QPN and PSN range, guessed EVs and keys
    (`evs`: values it may try, never the target's own)."""
    ev = rng.choice([rng.getrandbits(32), rng.randrange(1, 200), *evs[:1]])
    psn = rng.randrange(0, 64)
    kind = rng.randrange(6)
    if kind == 0:
        pkt: wire.Packet = wire.SackPacket(
            bth=wire.Bth(opcode=wire.OP_SACK, dest_qp=dest_qp, psn=psn),
            sack=wire.SackExt(cack_psn=psn, ack_psn_offset=rng.randrange(-8, 8), entropy=ev,
                              sack_offset=1, sack_bitmap=rng.getrandbits(64),
                              probe_resp=rng.random() < 0.3), cc=wire.CcState())
    elif kind == 1:
        pkt = wire.NackPacket(
            bth=wire.Bth(opcode=wire.OP_NACK, dest_qp=dest_qp, psn=psn),
            nack=wire.NackExt(reason=rng.choice([wire.NACK_PSN_OOR_WINDOW, wire.NACK_TRIMMED,
                                                 wire.NACK_RKEY_VIOLATION]),
                              entropy=ev, nack_psn=psn, cack_psn=psn))
    elif kind == 2:
        payload = rng.randbytes(rng.randrange(0, 300))
        pkt = wire.DataPacket(
            bth=wire.Bth(opcode=wire.OP_WRITE_ONLY, dest_qp=dest_qp, psn=psn, ack_req=True),
            meth=wire.Meth(msn=rng.randrange(4)),
            reth=wire.Reth(va=rng.getrandbits(40), rkey=rng.getrandbits(32),
                           dma_len=len(payload)), payload=payload)
    elif kind == 3:
        pkt = wire.ProbePacket(bth=wire.Bth(opcode=wire.OP_PROBE, dest_qp=dest_qp, psn=psn),
                               probe=wire.ProbeExt(entropy=ev))
    elif kind == 4:
        pkt = wire.PortStatusPacket(
            bth=wire.Bth(opcode=rng.choice([wire.OP_EP_REQ, wire.OP_EP_RSP]),
                         dest_qp=wire.QPN_ENDPOINT, psn=psn),
            status=wire.PortStatusExt(seq=rng.randrange(1 << 16), port_mask=rng.getrandbits(2)))
    else:
        return rng.randbytes(rng.randrange(1, 80)), RxMeta("B", 0, ev, wire.DSCP_CONTROL, 0)
    dscp = wire.DSCP_TRIMMABLE if kind == 2 else wire.DSCP_CONTROL
    return wire.encode_packet(pkt), RxMeta("B" if dest_qp == QP_A else "A",
                                           rng.randrange(2), ev, dscp, wire.ECN_NOT_ECT)


@pytest.mark.parametrize("seed", SEEDS)
def test_every_write_ends_and_a_timer_is_armed_while_one_is_pending(seed: int) -> None:
    rng = random.Random(seed)
    h = Harness(seed=seed, config=small_config(write_timeout=WRITE_TIMEOUT))
    f = h.link.faults
    f.drop, f.dup, f.jitter = rng.choice([0, 0.01, 0.1]), rng.choice([0, 0.05]), 2 * BASE_RTT
    f.trim = rng.choice([0, 0.05])
    mr = h.b.register_memory(64 * 1024)
    posted: dict[int, tuple[float, int, bytes]] = {}  # wr_id -> (posted at, offset, data)
    offset = 0
    for step in range(4000):
        if rng.random() < 0.01 and offset < 48 * 1024:
            data = pattern(rng.randrange(1, 8 * 1024), seed * 100 + step)
            try:
                wr_id = h.a.post_write(QP_A, data, mr.va + offset, mr.rkey, now=h.now)
            except LocalProtocolError:
                assert h.a.connection(QP_A).sender.error is not None  # the QP failed before
            else:
                posted[wr_id] = (h.now, offset, data)
                offset += len(data)
        if rng.random() < 0.05:  # a blind forgery (EVs guessed, or the other side's)
            target, qpn, other = rng.choice([(h.a, QP_A, h.b), (h.b, QP_B, h.a)])
            packet, meta = _forgery(rng, qpn, sorted(other.ev_states(QP_A + QP_B - qpn)))
            target.receive_packet(packet, meta, now=h.now)
            h.flush()
        if rng.random() < 0.02 and h.sent:  # a replay of a genuine packet seen earlier
            src, tx = rng.choice(h.sent[-200:])
            dst = h.a if src == "B" else h.b
            dst.receive_packet(tx.payload, RxMeta(src, tx.plane, tx.ev, tx.dscp, tx.ecn),
                               now=h.now)
            h.flush()
        if rng.random() < 0.002:  # a blackout of every path for a while
            h.link.dead_planes = {("B", 0), ("B", 1)} if not h.link.dead_planes else set()
        ended = {e.wr_id for e in h.of_type("A", (WriteCompleted, WriteFailed))}
        pending = set(posted) - ended
        if pending:
            assert h.a.get_timer() is not None, f"step {step}: write pending, no timer"
            stalled = h.a.connection(QP_A).sender.stalled_since()
            assert stalled is not None
            assert min(posted[w][0] for w in pending) <= stalled <= h.now
            assert h.now <= stalled + WRITE_TIMEOUT + BASE_RTT, f"step {step}: writes late"
        if not h.step():
            assert not set(posted) - ended, f"step {step}: idle with writes pending"
            h.now += BASE_RTT  # nothing to do: let time pass until the next post
    h.link.dead_planes = set()
    h.run(until=h.now + 2 * WRITE_TIMEOUT)
    ends = {e.wr_id: e for e in h.of_type("A", (WriteCompleted, WriteFailed))}
    assert set(ends) == set(posted)
    assert len(posted) >= 5 or h.a.connection(QP_A).sender.error is FailReason.TIMEOUT
    assert h.a.stats()["answers_refused"] + h.a.stats()["malformed"] > 0  # forgeries arrived
    for wr_id, event in ends.items():
        at, off, data = posted[wr_id]
        if isinstance(event, WriteCompleted):
            assert bytes(mr.buffer[off:off + len(data)]) == data, f"write {wr_id} corrupted"
        else:
            assert event.reason in (FailReason.TIMEOUT, FailReason.FLUSHED), event


def test_a_write_to_a_silent_peer_fails_in_time_and_the_qp_stops_sending() -> None:
    """Before: the sender kept transmitting to a dead peer after the caller gave up, and a
    write could stay pending with no timer at all."""
    h = Harness(seed=2, config=small_config(write_timeout=WRITE_TIMEOUT))
    mr = h.b.register_memory(8192)
    h.link.dead_planes = {("B", 0), ("B", 1)}
    h.a.post_write(QP_A, pattern(4096), mr.va, mr.rkey, now=0.0)
    h.a.post_write(QP_A, pattern(4096, 1), mr.va + 4096, mr.rkey, now=0.0)
    h.run(until=2 * WRITE_TIMEOUT)
    assert h.of_type("A", WriteFailed) == [WriteFailed(QP_A, 1, FailReason.TIMEOUT),
                                            WriteFailed(QP_A, 2, FailReason.FLUSHED)]
    sent_after = [tx for src, tx in h.sent if src == "A"]
    h.sent.clear()
    h.run(until=10 * WRITE_TIMEOUT)
    assert [tx for src, tx in h.sent if src == "A"] == [] and sent_after
    assert h.a.get_timer() is None
    with pytest.raises(LocalProtocolError, match="failed"):
        h.a.post_write(QP_A, b"x", mr.va, mr.rkey, now=h.now)


def _ended_at(h: Harness) -> dict[int, tuple[float, object]]:
    return {e.wr_id: (t, e) for t, e in h.timeline("A") if isinstance(e, (WriteCompleted,
                                                                           WriteFailed))}


def test_a_write_that_keeps_moving_outlives_the_write_timeout() -> None:
    """Before: the timeout ran from posting, so a write longer than it failed mid-transfer
    (the 7->1 incast at 60 packets/s needs about the default 60 s)."""
    timeout = 20 * BASE_RTT
    h = Harness(seed=3, config=small_config(write_timeout=timeout))
    for plane in range(h.planes):  # a slow last hop: 64 packets take about 64 base RTTs
        h.link.bottleneck[("B", plane)] = 2 * BASE_RTT
    mr = h.b.register_memory(64 * 1024)
    data = pattern(64 * 1024, 7)
    h.a.post_write(QP_A, data, mr.va, mr.rkey, now=0.0)
    h.run(until=1000 * BASE_RTT)
    assert h.of_type("A", WriteFailed) == []
    (done,) = h.of_type("A", WriteCompleted)
    assert _ended_at(h)[done.wr_id][0] > 3 * timeout  # it did outlive the timeout
    assert bytes(mr.buffer) == data


def test_a_trim_storm_is_no_progress_and_fails_in_time() -> None:
    """Every data packet trimmed: NACKs keep coming, nothing is ever acknowledged."""
    timeout = 50 * BASE_RTT
    h = Harness(seed=4, config=small_config(write_timeout=timeout))
    h.link.faults.trim = 1.0
    mr = h.b.register_memory(8192)
    h.a.post_write(QP_A, pattern(8192), mr.va, mr.rkey, now=0.0)
    h.run(until=4 * timeout)
    assert h.a.stats()["nacks_received"] > 20
    ((at, failed),) = _ended_at(h).values()
    assert failed == WriteFailed(QP_A, 1, FailReason.TIMEOUT)
    assert timeout <= at <= timeout + BASE_RTT


def test_a_stall_after_progress_fails_one_timeout_after_the_last_ack() -> None:
    timeout = 50 * BASE_RTT
    h = Harness(seed=5, config=small_config(write_timeout=timeout))
    mr = h.b.register_memory(256 * 1024)
    h.a.post_write(QP_A, pattern(256 * 1024), mr.va, mr.rkey, now=0.0)
    for plane in range(h.planes):  # a slow last hop: the write takes about 256 base RTTs
        h.link.bottleneck[("B", plane)] = 2 * BASE_RTT
    cut = 30 * BASE_RTT  # well into the write; from here on no answer leaves the peer
    h.link.filter = lambda src, tx: not (src == "B" and h.now >= cut)
    h.run(until=cut)
    assert 0 < h.b.stats()["rx_data_bytes"] < 256 * 1024  # it moved, and is not done
    h.run(until=cut + 4 * timeout)
    ((at, failed),) = _ended_at(h).values()
    assert failed == WriteFailed(QP_A, 1, FailReason.TIMEOUT)
    # one timeout after the last answer arrived (within half an RTT of the cut), not after
    # posting (that would have been at `timeout`, before the cut)
    assert cut + timeout - BASE_RTT <= at <= cut + timeout + BASE_RTT
