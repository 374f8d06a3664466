"""Forged and replayed traffic against the core (docs/security.md): a blind forger who knows
the fabric's conventions (QPNs, PSN range, peer addresses) but not the connection's secrets
cannot complete, fail or stall a write."""

from __future__ import annotations

import pytest

import wire
from host_agent.core import (
    Endpoint,
    FailReason,
    MessageReceived,
    PathInfo,
    RxMeta,
    WriteCompleted,
    WriteFailed,
)
from tests.core.harness import BASE_RTT, QP_A, QP_B, Harness, pattern, small_config

# What the EVs of a connection were before they carried a secret tag: 1..N, N = 16 + 2*2*2.
GUESSABLE_EVS = range(1, 25)


def _forged_sack(cack: int, ev: int, *, offset: int = -1, bitmap: int = 0,
                 probe: bool = False) -> bytes:
    return wire.encode_packet(wire.SackPacket(
        bth=wire.Bth(opcode=wire.OP_SACK, dest_qp=QP_A, psn=cack),
        sack=wire.SackExt(cack_psn=cack, ack_psn_offset=0 if probe else offset, entropy=ev,
                          sack_offset=1, sack_bitmap=bitmap, probe_resp=probe),
        cc=wire.CcState()))


def _forged_nack(reason: int, psn: int, cack: int, ev: int) -> bytes:
    return wire.encode_packet(wire.NackPacket(
        bth=wire.Bth(opcode=wire.OP_NACK, dest_qp=QP_A, psn=cack),
        nack=wire.NackExt(reason=reason, entropy=ev, nack_psn=psn, cack_psn=cack)))


def _from_b(ev: int, plane: int = 0) -> RxMeta:
    return RxMeta("B", plane, ev, wire.DSCP_CONTROL, wire.ECN_NOT_ECT)


def _stall_b(h: Harness) -> None:
    """B's NICs are down: nothing A sends arrives, so only forgeries could answer it."""
    h.link.dead_planes |= {("B", p) for p in range(h.planes)}


def test_forged_sacks_never_complete_a_write() -> None:
    """Before: 2 forged SACKs naming the write's PSNs completed a 16 KiB write that never
    arrived. Now every guess is refused; the data arrives later and completes the write."""
    h = Harness(seed=3)
    mr = h.b.register_memory(16 * 1024)
    data = pattern(16 * 1024, 3)
    h.a.post_write(QP_A, data, mr.va, mr.rkey, now=0.0)
    _stall_b(h)
    h.run(until=5e-6)
    next_psn = h.a.connection(QP_A).sender.next_psn
    assert next_psn == 16
    now = h.now + 1e-6
    for ev in GUESSABLE_EVS:
        h.a.receive_packet(_forged_sack(next_psn, ev, bitmap=0xFFFF), _from_b(ev), now=now)
        h.a.receive_packet(_forged_sack(next_psn, ev, probe=True), _from_b(ev), now=now)
        for psn in range(next_psn):
            h.a.receive_packet(_forged_sack(psn + 1, ev), _from_b(ev), now=now)
    h.flush()
    assert h.of_type("A", WriteCompleted) == []
    assert h.a.connection(QP_A).sender.snd_una == 0
    assert h.a.stats()["answers_refused"] + h.a.stats()["malformed"] == \
        len(GUESSABLE_EVS) * (2 + next_psn)
    h.link.dead_planes.clear()
    h.run(until=1.0, stop=lambda: bool(h.of_type("A", WriteCompleted)))
    assert h.of_type("A", WriteCompleted) == [WriteCompleted(QP_A, 1)]
    assert bytes(mr.buffer) == data


def test_an_answer_must_echo_the_ev_its_psn_was_sent_on() -> None:
    """Even an EV of the connection (an on-path observer saw one) acknowledges only the
    PSNs that were sent on it."""
    h = Harness(seed=4)
    mr = h.b.register_memory(4096)
    h.a.post_write(QP_A, pattern(2048, 4), mr.va, mr.rkey, now=0.0)
    first, second = h.a.packets_to_send(now=0.0)
    assert first.ev != second.ev
    h.a.receive_packet(_forged_sack(2, second.ev, offset=-2), _from_b(second.ev), now=1e-6)
    assert h.a.connection(QP_A).sender.snd_una == 0
    h.a.receive_packet(_forged_sack(2, first.ev, offset=-2), _from_b(first.ev), now=1e-6)
    assert h.a.connection(QP_A).sender.snd_una == 2


def test_forged_nack_out_of_window_neither_holds_nor_stalls_the_sender() -> None:
    h = Harness(seed=5)
    mr = h.b.register_memory(64 * 1024)
    data = pattern(64 * 1024, 5)
    h.a.post_write(QP_A, data, mr.va, mr.rkey, now=0.0)
    h.flush()
    for ev in GUESSABLE_EVS:
        for psn in range(8):
            h.a.receive_packet(_forged_nack(wire.NACK_PSN_OOR_WINDOW, psn, 0, ev), _from_b(ev),
                               now=h.now)
            h.a.receive_packet(_forged_nack(wire.NACK_RKEY_VIOLATION, psn, 0, ev),
                               _from_b(ev), now=h.now)
        assert h.a.get_timer() is not None  # a write is pending: a timer is armed
    h.run(until=1.0, stop=lambda: bool(h.of_type("A", WriteCompleted)))
    assert h.of_type("A", WriteCompleted) == [WriteCompleted(QP_A, 1)]
    assert bytes(mr.buffer) == data and h.a.stats()["retransmits"] == 0


def test_port_status_cannot_claim_the_plane_it_arrived_on_is_down() -> None:
    """Before: one spoofed PORT_STATUS with mask 0 from the peer's address stopped every data
    packet for good. A packet that arrived on plane p proves the peer's port p is up."""
    h = Harness(seed=6)
    mr = h.b.register_memory(32 * 1024)
    forged = wire.encode_packet(wire.PortStatusPacket(
        bth=wire.Bth(opcode=wire.OP_EP_REQ, dest_qp=wire.QPN_ENDPOINT, psn=40_000),
        status=wire.PortStatusExt(seq=40_000, port_mask=0)))
    h.a.receive_packet(forged, _from_b(7, plane=1), now=0.0)
    assert h.a.peer_planes_up("B") == {1}
    data = pattern(32 * 1024, 6)
    h.a.post_write(QP_A, data, mr.va, mr.rkey, now=0.0)
    h.run(until=1.0, stop=lambda: bool(h.of_type("A", WriteCompleted)))
    assert h.of_type("A", WriteCompleted) == [WriteCompleted(QP_A, 1)]
    assert bytes(mr.buffer) == data


def test_a_sack_in_the_same_instant_is_no_rtt_sample_and_never_raises() -> None:
    """Before: an RTT of exactly 0 raised ValueError out of receive_packet."""
    h = Harness(seed=7)
    mr = h.b.register_memory(1024)
    h.a.post_write(QP_A, b"z" * 1000, mr.va, mr.rkey, now=0.0)
    (tx,) = h.a.packets_to_send(now=0.0)
    h.b.receive_packet(tx.payload, RxMeta("A", tx.plane, tx.ev, tx.dscp, tx.ecn), now=0.0)
    (sack,) = h.b.packets_to_send(now=0.0)
    h.a.receive_packet(sack.payload, RxMeta("B", sack.plane, sack.ev, sack.dscp, sack.ecn),
                       now=0.0)
    assert h.a.next_event() == WriteCompleted(QP_A, 1)
    assert h.a.connection(QP_A).sender.rto.srtt is None
    assert h.b.next_event() == MessageReceived(QP_B, 0, 1000, None)


def test_keys_and_tags_are_unpredictable_unless_seeded() -> None:
    """Before: the seed defaulted to the host index, so a rogue host computed every agent's
    first rkey offline, and the first region always started at 0x1_0000_0000."""
    fresh = [Endpoint(planes=1) for _ in range(8)]
    regions = [ep.register_memory(4096) for ep in fresh]
    assert len({r.rkey for r in regions}) == 8 and len({r.va for r in regions}) == 8
    seeded = [Endpoint(planes=1, seed=11).register_memory(4096) for _ in range(2)]
    assert seeded[0].rkey == seeded[1].rkey and seeded[0].va == seeded[1].va
    for ep in fresh[:2]:
        ep.connect("peer", 0x100, 0x100, [PathInfo(0, "route")])
    tags = {min(ep.ev_states(0x100)) >> 12 for ep in fresh[:2]}
    assert len(tags) == 2


@pytest.mark.parametrize("seed", range(3))
def test_replayed_answers_of_an_earlier_write_do_not_complete_a_later_one(seed: int) -> None:
    """SACKs recorded during write 1 and replayed while write 2 is stalled change nothing."""
    h = Harness(seed=20 + seed)
    mr = h.b.register_memory(8192)
    h.a.post_write(QP_A, pattern(4096, seed), mr.va, mr.rkey, now=0.0)
    h.run(until=1.0, stop=lambda: bool(h.of_type("A", WriteCompleted)))
    recorded = [(tx, RxMeta("B", tx.plane, tx.ev, tx.dscp, tx.ecn))
                for src, tx in h.sent if src == "B"]
    assert recorded
    _stall_b(h)
    h.a.post_write(QP_A, pattern(4096, seed + 1), mr.va + 4096, mr.rkey, now=h.now)
    h.run(until=h.now + 5e-6)
    for tx, meta in recorded:
        h.a.receive_packet(tx.payload, meta, now=h.now)
    h.flush()
    assert h.of_type("A", WriteCompleted) == [WriteCompleted(QP_A, 1)]
    h.link.dead_planes.clear()
    h.run(until=1.0, stop=lambda: len(h.of_type("A", WriteCompleted)) == 2)
    assert bytes(mr.buffer[4096:]) == pattern(4096, seed + 1)


def _forged_data(psn: int, rkey: int, va: int, payload: bytes) -> bytes:
    return wire.encode_packet(wire.DataPacket(
        bth=wire.Bth(opcode=wire.OP_WRITE_ONLY, dest_qp=QP_B, psn=psn, ack_req=True),
        meth=wire.Meth(msn=0), reth=wire.Reth(va=va, rkey=rkey, dma_len=len(payload)),
        payload=payload))


@pytest.mark.parametrize("forged_psns", [1, 40])
def test_refused_forgeries_do_not_use_up_the_legitimate_psns(forged_psns: int) -> None:
    """Before: one forged wrong-rkey packet at the next PSN used it up, and the legitimate
    write failed with NACK 0x20; forging more PSNs than the write had hung the sender. Now a
    refusal consumes nothing and its NACK (echoing the forger's EV) is not believed."""
    h = Harness(seed=8)
    mr = h.b.register_memory(16 * 1024)
    for psn in range(forged_psns):
        for rkey, va in ((mr.rkey ^ 0x5A5A, mr.va), (mr.rkey, mr.va + 64 * 1024)):
            h.b.receive_packet(_forged_data(psn, rkey, va, b"evil" * 64),
                               RxMeta("A", 0, 3, wire.DSCP_TRIMMABLE, wire.ECN_ECT0), now=0.0)
    assert h.b.stats()["rkey_violations"] == h.b.stats()["bounds_violations"] == forged_psns
    data = pattern(16 * 1024, 8)
    h.a.post_write(QP_A, data, mr.va, mr.rkey, now=0.0)
    h.run(until=1.0, stop=lambda: bool(h.of_type("A", (WriteCompleted, WriteFailed))))
    assert h.of_type("A", (WriteCompleted, WriteFailed)) == [WriteCompleted(QP_A, 1)]
    assert bytes(mr.buffer) == data
    assert h.of_type("B", MessageReceived) == [MessageReceived(QP_B, 0, len(data), None)]


def _restart(h: Harness, name: str, seed: int) -> None:
    """The endpoint `name` lost all state (its agent was killed and started again)."""
    peer, lq, rq = ("B", QP_A, QP_B) if name == "A" else ("A", QP_B, QP_A)
    fresh = Endpoint(small_config(), planes=h.planes, name=name, seed=seed)
    fresh.connect(peer, lq, rq, h.paths(name))
    h.eps[name] = fresh


def test_a_restarted_receiver_fails_the_senders_writes_at_once_then_resyncs() -> None:
    """Before: the writes to a restarted peer ran until the agent's timeout while the sender
    kept transmitting, and the QP never worked again. Its NACK(out of window) carries a
    cumulative ack from other state: the outstanding writes fail at once, nothing of them is
    sent again, and the next write starts at the PSN the restarted peer expects."""
    h = Harness(seed=9)
    mr = h.b.register_memory(64 * 1024)
    h.a.post_write(QP_A, pattern(32 * 1024, 9), mr.va, mr.rkey, now=0.0)
    h.run(until=1.0, stop=lambda: bool(h.of_type("A", WriteCompleted)))
    _restart(h, "B", 99)
    region = h.b.register_memory(64 * 1024)
    start = h.now
    h.a.post_write(QP_A, pattern(8192, 10), region.va, region.rkey, now=h.now)
    h.a.post_write(QP_A, pattern(8192, 11), region.va, region.rkey, now=h.now)
    h.run(until=h.now + 1.0, stop=lambda: len(h.of_type("A", WriteFailed)) == 2)
    assert h.of_type("A", WriteFailed) == [WriteFailed(QP_A, 2, FailReason.PEER_OUT_OF_SYNC),
                                            WriteFailed(QP_A, 3, FailReason.PEER_OUT_OF_SYNC)]
    assert h.now - start < 20 * BASE_RTT  # at once, not after write_timeout
    assert h.a.stats()["resyncs"] == 1
    h.sent.clear()
    h.run(until=h.now + 0.1)
    assert [tx for src, tx in h.sent if src == "A" and tx.dscp != wire.DSCP_CONTROL] == []
    data = pattern(16 * 1024, 12)
    h.a.post_write(QP_A, data, region.va, region.rkey, now=h.now)
    h.run(until=h.now + 1.0, stop=lambda: h.of_type("A", WriteCompleted)[-1].wr_id == 4)
    assert h.of_type("A", WriteCompleted)[-1].wr_id == 4
    assert bytes(region.buffer[:len(data)]) == data


def test_a_restarted_sender_resyncs_to_the_psn_its_peer_expects() -> None:
    h = Harness(seed=10)
    mr = h.a.register_memory(64 * 1024)
    h.b.post_write(QP_B, pattern(32 * 1024, 1), mr.va, mr.rkey, now=0.0)
    h.run(until=1.0, stop=lambda: bool(h.of_type("B", WriteCompleted)))
    _restart(h, "B", 98)
    h.b.post_write(QP_B, pattern(1024, 2), mr.va, mr.rkey, now=h.now)
    h.run(until=h.now + 1.0, stop=lambda: bool(h.of_type("B", WriteFailed)))
    assert h.of_type("B", WriteFailed) == [WriteFailed(QP_B, 1, FailReason.PEER_OUT_OF_SYNC)]
    assert h.eps["B"].connection(QP_B).sender.error is None
    data = pattern(4096, 3)
    h.b.post_write(QP_B, data, mr.va, mr.rkey, now=h.now)
    h.run(until=h.now + 1.0, stop=lambda: h.of_type("B", WriteCompleted)[-1].wr_id == 2)
    assert [e.wr_id for e in h.of_type("B", WriteCompleted)] == [1, 2]
    assert bytes(mr.buffer[:len(data)]) == data


def test_port_status_off_the_peers_evs_is_refused_once_the_peer_is_known() -> None:
    """Before: a spoofed PORT_STATUS took any of the peer's planes out of use. Once an answer
    has shown the peer's EV tag, only a PORT_STATUS on one of the peer's EVs is believed."""
    h = Harness(planes=4, seed=12)
    mr = h.b.register_memory(64 * 1024)
    h.a.post_write(QP_A, pattern(16 * 1024, 12), mr.va, mr.rkey, now=0.0)
    h.run(until=1.0, stop=lambda: bool(h.of_type("A", WriteCompleted)))
    forged = wire.encode_packet(wire.PortStatusPacket(
        bth=wire.Bth(opcode=wire.OP_EP_REQ, dest_qp=wire.QPN_ENDPOINT, psn=100),
        status=wire.PortStatusExt(seq=100, port_mask=0b0001)))
    for ev in (*GUESSABLE_EVS, min(h.a.ev_states(QP_A))):  # guesses, and A's own EVs
        h.a.receive_packet(forged, _from_b(ev, plane=0), now=h.now)
    assert h.a.peer_planes_up("B") == {0, 1, 2, 3}
    assert h.a.stats()["port_status_refused"] == len(GUESSABLE_EVS) + 1
    h.link.dead_planes = {("B", 3)}
    h.b.set_plane_up(3, False, now=h.now)  # the real peer's announcement is believed
    h.run(until=h.now + 0.01, stop=lambda: h.a.peer_planes_up("B") == {0, 1, 2})
    assert h.a.peer_planes_up("B") == {0, 1, 2}
