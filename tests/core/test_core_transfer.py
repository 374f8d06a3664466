"""Byte-for-byte transfers through the core under clean and faulty two-endpoint conditions."""

from __future__ import annotations

import pytest

import wire
from host_agent.core import MessageReceived, RxMeta, WriteCompleted
from tests.core.harness import BASE_RTT, QP_A, QP_B, Harness, pattern, small_config


def transfer(h: Harness, sizes: list[int], *, imm: bool = False, until: float = 1.0) -> list:
    """Post one write per size into one region of B; run until all complete; return regions."""
    total = sum(sizes)
    mr = h.b.register_memory(max(total, 1))
    datas, wr_ids, off = [], [], 0
    for i, n in enumerate(sizes):
        data = pattern(n, seed=i + 7)
        datas.append((off, data))
        wr_ids.append(h.a.post_write(QP_A, data, mr.va + off, mr.rkey,
                                     imm=(0xABC00000 + i) if imm else None, now=h.now))
        off += n
    h.run(until=until, stop=lambda: len(h.of_type("A", WriteCompleted)) == len(sizes))
    assert [e.wr_id for e in h.of_type("A", WriteCompleted)] == wr_ids
    for off, data in datas:
        assert bytes(mr.buffer[off : off + len(data)]) == data
    got = h.of_type("B", MessageReceived)
    assert [e.msn for e in got] == list(range(len(sizes)))
    assert [e.length for e in got] == sizes
    if imm:
        assert [e.imm for e in got] == [0xABC00000 + i for i in range(len(sizes))]
    return got


@pytest.mark.parametrize("size", [1, 1023, 1024, 1025, 4 * 1024, 3 * 1024 + 7, 64 * 1024])
def test_single_write_sizes_clean(size: int) -> None:
    h = Harness()
    transfer(h, [size])
    s = h.a.stats()
    assert s["tx_data_packets"] == -(-size // 1024)
    assert s["retransmits"] == 0 and s["timeouts"] == 0
    assert h.b.stats()["sacks_sent"] == s["tx_data_packets"]


def test_multi_megabyte_write_clean() -> None:
    h = Harness(planes=4, spines=2)
    transfer(h, [3 * 1024 * 1024 + 123])
    per_plane = h.a.stats()["per_plane"]
    assert all(per_plane[p]["tx_packets"] > 0 for p in range(4))


def test_zero_length_write_with_immediate() -> None:
    h = Harness()
    mr = h.b.register_memory(16)
    h.a.post_write(QP_A, b"", mr.va, mr.rkey, imm=7, now=0.0)
    h.run(stop=lambda: h.of_type("A", WriteCompleted))
    assert h.of_type("B", MessageReceived) == [MessageReceived(QP_B, 0, 0, 7)]


def test_immediate_completions_in_message_order_under_reordering() -> None:
    h = Harness(seed=3)
    h.link.faults.jitter = 4 * BASE_RTT
    transfer(h, [5000, 1, 1024, 7000, 300, 2048] * 3, imm=True)


def test_psn_wraparound() -> None:
    start = wire.PSN_MOD - 40
    h = Harness(psn_a=start)
    transfer(h, [100 * 1024, 10, 5000], imm=True)
    assert h.a.connection(QP_A).sender.next_psn == (start + 100 + 1 + 5) % wire.PSN_MOD
    assert h.b.connection(QP_B).receiver.cack == h.a.connection(QP_A).sender.next_psn


def test_reordering_and_duplicates() -> None:
    h = Harness(seed=5)
    h.link.faults.jitter = BASE_RTT / 2
    h.link.faults.dup = 0.1
    transfer(h, [200 * 1024 + 5, 4096])
    assert h.b.stats()["duplicates"] > 0


def test_random_loss_recovers_every_byte() -> None:
    h = Harness(seed=11, planes=2, spines=4)
    h.link.faults.drop = 0.02
    h.link.faults.jitter = BASE_RTT
    transfer(h, [300 * 1024, 777, 50 * 1024], imm=True, until=5.0)
    s = h.a.stats()
    assert s["retransmits"] > 0
    assert s["ev_retired"] > 0  # untrimmed loss retires the EV it happened on


def test_trimmed_packets_are_nacked_and_retransmitted() -> None:
    h = Harness(seed=2)
    h.link.faults.trim = 0.05
    transfer(h, [256 * 1024])
    a, b = h.a.stats(), h.b.stats()
    assert b["trims_received"] > 0
    assert b["nacks_sent"] == b["trims_received"] == a["nacks_received"]
    assert a["retransmits"] >= b["trims_received"]
    assert a["timeouts"] == 0
    states = h.a.connection(QP_A).evs.counters
    assert states["nack_trimmed"] == b["trims_received"]


def test_lasthop_trims_do_not_penalise_evs() -> None:
    h = Harness(seed=4)
    h.link.faults.trim_lasthop = 0.05
    transfer(h, [128 * 1024])
    counters = h.a.connection(QP_A).evs.counters
    assert counters["nack_trimmed_lasthop"] > 0
    assert counters["skips"] == 0 and h.a.stats()["ev_retired"] == 0


def test_retransmissions_use_retx_dscp_and_rtx_flag() -> None:
    h = Harness(seed=9)
    h.link.faults.trim = 0.1
    transfer(h, [64 * 1024])
    data = [(tx, wire.decode_packet(tx.payload)) for src, tx in h.sent
            if src == "A" and tx.dscp != wire.DSCP_CONTROL]
    retx = [(tx, p) for tx, p in data if p.bth.rtx]
    assert retx and all(tx.dscp == wire.DSCP_TRIMMABLE_RETX for tx, _ in retx)
    assert all(tx.dscp == wire.DSCP_TRIMMABLE for tx, p in data if not p.bth.rtx)
    assert all(tx.ecn == wire.ECN_ECT0 for tx, _ in data)


def test_ce_marks_become_skip_once_and_skip_evs() -> None:
    h = Harness(seed=6)
    h.link.faults.ce = 0.05
    transfer(h, [128 * 1024])
    assert h.b.stats()["ecn_marks_received"] > 0
    assert h.a.connection(QP_A).evs.counters["ecn"] == h.b.stats()["ecn_marks_received"]


def test_every_packet_has_per_packet_reth_and_meth() -> None:
    h = Harness()
    mr = h.b.register_memory(5000)
    h.a.post_write(QP_A, pattern(3000), mr.va + 100, mr.rkey, imm=9, now=0.0)
    h.run(stop=lambda: h.of_type("A", WriteCompleted))
    pkts = [wire.decode_packet(tx.payload) for src, tx in h.sent if src == "A"]
    assert [p.bth.opcode for p in pkts] == [wire.OP_WRITE_FIRST, wire.OP_WRITE_MIDDLE,
                                            wire.OP_WRITE_LAST_IMM]
    assert [(p.reth.va - mr.va, p.reth.dma_len) for p in pkts] == [(100, 1024), (1124, 1024),
                                                                   (2148, 952)]
    assert [p.bth.ack_req for p in pkts] == [False, False, True]
    assert [p.imm for p in pkts] == [None, None, 9]
    assert {p.meth.msn for p in pkts} == {0}


def test_bidirectional_writes() -> None:
    h = Harness(seed=8)
    h.link.faults.jitter = BASE_RTT
    mr_a, mr_b = h.a.register_memory(50_000), h.b.register_memory(60_000)
    da, db = pattern(60_000, 1), pattern(50_000, 2)
    h.a.post_write(QP_A, da, mr_b.va, mr_b.rkey, now=0.0)
    h.b.post_write(QP_B, db, mr_a.va, mr_a.rkey, now=0.0)
    h.run(stop=lambda: h.of_type("A", WriteCompleted) and h.of_type("B", WriteCompleted))
    assert bytes(mr_b.buffer) == da and bytes(mr_a.buffer) == db


def test_small_mtu_config() -> None:
    h = Harness(config=small_config(mtu=256))
    transfer(h, [10_000])
    assert h.a.stats()["tx_data_packets"] == -(-10_000 // 256)


def _resend_once(h: Harness) -> tuple:
    """Send one packet at t=0, NACK it (trimmed) at t=1us, resend at t=2us; return both txs."""
    mr = h.b.register_memory(64)
    h.a.post_write(QP_A, b"r" * 64, mr.va, mr.rkey, now=0.0)
    (first,) = h.a.packets_to_send(now=0.0)
    nack = wire.NackPacket(bth=wire.Bth(opcode=wire.OP_NACK, dest_qp=QP_A, psn=0),
                           nack=wire.NackExt(reason=wire.NACK_TRIMMED, entropy=first.ev,
                                             nack_psn=0, cack_psn=0))
    h.a.receive_packet(wire.encode_packet(nack), RxMeta("B", 0, 1, wire.DSCP_CONTROL, 0), now=1e-6)
    (second,) = h.a.packets_to_send(now=2e-6)
    assert second.ev != first.ev
    return first, second


def _sack_for(ev: int) -> bytes:
    return wire.encode_packet(wire.SackPacket(
        bth=wire.Bth(opcode=wire.OP_SACK, dest_qp=QP_A, psn=1),
        sack=wire.SackExt(cack_psn=1, ack_psn_offset=-1, entropy=ev, sack_offset=1,
                          sack_bitmap=0), cc=wire.CcState()))


@pytest.mark.parametrize("answer", ["first", "second"])
def test_echoed_ev_times_the_right_transmission(answer: str) -> None:
    h = Harness(planes=1)
    first, second = _resend_once(h)
    ev = first.ev if answer == "first" else second.ev
    h.a.receive_packet(_sack_for(ev), RxMeta("B", 0, 1, wire.DSCP_CONTROL, 0), now=10e-6)
    sender = h.a.connection(QP_A).sender
    assert sender.rto.srtt == pytest.approx(10e-6 if answer == "first" else 8e-6)
    assert h.a.stats()["spurious_retransmits"] == (1 if answer == "first" else 0)
    h.flush()
    assert h.of_type("A", WriteCompleted) == [WriteCompleted(QP_A, 1)]
