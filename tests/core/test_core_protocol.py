"""Receiver/sender protocol edges: placement checks, PSN window, malformed input, memory bounds."""

from __future__ import annotations

import random

import pytest

import wire
from host_agent.core import (
    ConfigError,
    Endpoint,
    EndpointConfig,
    FailReason,
    LocalProtocolError,
    MessageReceived,
    RxMeta,
    WriteCompleted,
    WriteFailed,
)
from tests.core.harness import BASE_RTT, QP_A, QP_B, Harness, pattern, small_config


def _data(psn: int, va: int, rkey: int, payload: bytes, *, msn: int = 0,
          opcode: int = wire.OP_WRITE_ONLY, dma_len: int | None = None) -> bytes:
    return wire.encode_packet(wire.DataPacket(
        bth=wire.Bth(opcode=opcode, dest_qp=QP_B, psn=psn), meth=wire.Meth(msn=msn),
        reth=wire.Reth(va=va, rkey=rkey, dma_len=len(payload) if dma_len is None else dma_len),
        payload=payload))


def _meta(ev: int = 5, dscp: int = wire.DSCP_TRIMMABLE, ecn: int = wire.ECN_ECT0) -> RxMeta:
    return RxMeta("A", 0, ev, dscp, ecn)


def _replies(ep: Endpoint) -> list:
    return [wire.decode_packet(tx.payload) for tx in ep.packets_to_send(now=0.0)]


def test_rkey_violation_is_nacked_never_written_and_fails_the_qp() -> None:
    """IBTA RC: a remote access error is fatal to the requester's QP. The refused write fails
    with the peer's reason, the writes behind it are flushed, nothing more is sent."""
    h = Harness()
    mr = h.b.register_memory(4096)
    neighbour = h.b.register_memory(4096)
    h.a.post_write(QP_A, b"\x11" * 100, mr.va, mr.rkey, imm=1, now=0.0)  # fine
    h.run(stop=lambda: h.of_type("A", WriteCompleted))
    h.a.post_write(QP_A, b"\xff" * 2000, mr.va, mr.rkey ^ 1, now=h.now)  # wrong rkey
    h.a.post_write(QP_A, b"\x22" * 100, mr.va + 2048, mr.rkey, now=h.now)  # behind it
    h.run(stop=lambda: len(h.of_type("A", (WriteCompleted, WriteFailed))) == 3)
    assert h.b.stats()["rkey_violations"] >= 1
    assert bytes(mr.buffer[:2048]) == b"\x11" * 100 + bytes(1948)  # the refused bytes: none
    assert b"\xff" not in mr.buffer and bytes(neighbour.buffer) == bytes(4096)
    assert h.of_type("A", (WriteCompleted, WriteFailed)) == [
        WriteCompleted(QP_A, 1), WriteFailed(QP_A, 2, FailReason.RKEY_VIOLATION),
        WriteFailed(QP_A, 3, FailReason.FLUSHED)]
    assert h.of_type("B", MessageReceived) == [MessageReceived(QP_B, 0, 100, 1)]
    assert h.a.stats()["qp_failures"] == 1
    h.sent.clear()
    h.run(until=h.now + 1.0)
    assert [tx for src, tx in h.sent if src == "A"] == []
    with pytest.raises(LocalProtocolError, match="RKEY_VIOLATION"):
        h.a.post_write(QP_A, b"x", mr.va, mr.rkey, now=h.now)


def test_bounds_violation_fails_the_write_that_ran_past_the_end() -> None:
    h = Harness()
    mr = h.b.register_memory(4096)
    h.a.post_write(QP_A, b"\xee" * 3000, mr.va + 2048, mr.rkey, now=0.0)  # runs past the end
    h.run(stop=lambda: h.of_type("A", (WriteCompleted, WriteFailed)))
    assert h.of_type("A", WriteFailed) == [WriteFailed(QP_A, 1, FailReason.BOUNDS_VIOLATION)]
    assert h.b.stats()["bounds_violations"] >= 1 and h.of_type("B", MessageReceived) == []
    assert bytes(mr.buffer[:2048]) == bytes(2048)  # nothing before the region's start either


def test_out_of_window_psn_is_nacked_with_cack() -> None:
    cfg = small_config(window=64)
    b = Endpoint(cfg, planes=1, seed=1)
    h = Harness(planes=1)  # only for its path list
    b.connect("A", QP_B, QP_A, h.paths("B"))
    mr = b.register_memory(1024)
    b.receive_packet(_data(64, mr.va, mr.rkey, b"x"), _meta(), now=0.0)
    (nack,) = _replies(b)
    assert isinstance(nack, wire.NackPacket)
    assert (nack.nack.reason, nack.nack.nack_psn, nack.nack.cack_psn) == (
        wire.NACK_PSN_OOR_WINDOW, 64, 0)
    assert nack.nack.entropy == 5 and bytes(mr.buffer[:1]) == b"\0"
    b.receive_packet(_data(63, mr.va, mr.rkey, b"y"), _meta(), now=0.0)
    (sack,) = _replies(b)
    assert isinstance(sack, wire.SackPacket) and sack.cc.ooo_count == 1
    assert wire.psn_add(sack.sack.cack_psn, sack.sack.ack_psn_offset) == 63
    bit = wire.psn_diff(63, wire.psn_add(sack.sack.cack_psn, sack.sack.sack_offset))
    assert sack.sack.sack_bitmap == 1 << bit


def test_sender_backs_off_after_oor_nack_then_resends() -> None:
    h = Harness(planes=1)
    mr = h.b.register_memory(1024)
    h.a.post_write(QP_A, b"z" * 10, mr.va, mr.rkey, now=0.0)
    (tx,) = h.a.packets_to_send(now=0.0)
    nack = wire.NackPacket(
        bth=wire.Bth(opcode=wire.OP_NACK, dest_qp=QP_A, psn=0),
        nack=wire.NackExt(reason=wire.NACK_PSN_OOR_WINDOW, entropy=tx.ev, nack_psn=0, cack_psn=0))
    h.a.receive_packet(wire.encode_packet(nack), RxMeta("B", 0, 1, wire.DSCP_CONTROL, 0), now=1e-6)
    assert h.a.packets_to_send(now=2e-6) == []
    backoff = h.a.config.oor_backoff
    assert h.a.get_timer() == pytest.approx(1e-6 + backoff)
    (again,) = h.a.packets_to_send(now=1e-6 + backoff)
    assert wire.decode_packet(again.payload).bth.rtx and again.dscp == wire.DSCP_TRIMMABLE_RETX


def test_trimmed_arrival_nack_echoes_ev_and_ce_gives_skip_once() -> None:
    h = Harness(planes=1)
    b = h.b
    mr = b.register_memory(4096)
    b.receive_packet(_data(0, mr.va, mr.rkey, b"", dma_len=1024), _meta(9, wire.DSCP_TRIMMED),
                     now=0.0)
    b.receive_packet(_data(0, mr.va, mr.rkey, b"", dma_len=1024),
                     _meta(10, wire.DSCP_TRIMMED_LASTHOP), now=0.0)
    b.receive_packet(_data(0, mr.va, mr.rkey, b"q" * 1024), _meta(11, ecn=wire.ECN_CE), now=0.0)
    n1, n2, sack = _replies(b)
    assert (n1.nack.reason, n1.nack.entropy) == (wire.NACK_TRIMMED, 9)
    assert (n2.nack.reason, n2.nack.entropy) == (wire.NACK_TRIMMED_LASTHOP, 10)
    assert (sack.sack.m, sack.sack.entropy, sack.sack.cack_psn) == (wire.M_SKIP_ONCE, 11, 1)
    assert b.stats()["trims_received"] == 2 and b.stats()["ecn_marks_received"] == 1


def test_duplicate_is_acknowledged_but_not_rewritten() -> None:
    h = Harness(planes=1)
    b = h.b
    mr = b.register_memory(16)
    b.receive_packet(_data(0, mr.va, mr.rkey, b"first"), _meta(), now=0.0)
    mr.buffer[0:5] = b"local"  # the application reused the buffer after completion
    b.receive_packet(_data(0, mr.va, mr.rkey, b"again"), _meta(), now=0.0)
    first, dup = _replies(b)
    assert bytes(mr.buffer[:5]) == b"local"
    assert dup.sack.cack_psn == 1 and dup.sack.ack_psn_offset == -1
    assert b.stats()["duplicates"] == 1
    assert [e for e in iter(b.next_event, None)] == [MessageReceived(QP_B, 0, 5, None)]


def test_probe_is_answered_with_probe_resp_sack() -> None:
    h = Harness(planes=1)
    probe = wire.ProbePacket(bth=wire.Bth(opcode=wire.OP_PROBE, dest_qp=QP_B, psn=3),
                             probe=wire.ProbeExt(entropy=0xBEEF))
    h.b.receive_packet(wire.encode_packet(probe), _meta(0xBEEF, wire.DSCP_CONTROL), now=0.0)
    (tx,) = h.b.packets_to_send(now=0.0)
    reply = wire.decode_packet(tx.payload)
    assert reply.sack.probe_resp and reply.sack.entropy == 0xBEEF
    assert tx.dscp == wire.DSCP_CONTROL and reply.bth.dest_qp == QP_A


def test_malformed_input_is_counted_and_dropped() -> None:
    h = Harness(planes=1)
    b = h.b
    mr = b.register_memory(64)
    good = _data(0, mr.va, mr.rkey, b"x" * 32)
    bad_inputs = [
        b"", b"\x00" * 5, b"\xff" * 40,  # truncated, unknown opcode
        good[:20],  # cut inside RETH
        good.replace(QP_B.to_bytes(3, "big"), (0x777).to_bytes(3, "big"), 1),  # unknown QPN
        _data(0, mr.va, mr.rkey, b"x" * 10, dma_len=20),  # short payload, not a trimmed DSCP
    ]
    for data in bad_inputs:
        b.receive_packet(data, _meta(), now=0.0)
    b.receive_packet(good, RxMeta("stranger", 0, 1, 4, 2), now=0.0)  # QP belongs to A
    sack_bad_ev = wire.SackPacket(
        bth=wire.Bth(opcode=wire.OP_SACK, dest_qp=QP_B, psn=0),
        sack=wire.SackExt(cack_psn=0, ack_psn_offset=0, entropy=0xDEAD0000, sack_offset=0,
                          sack_bitmap=0), cc=wire.CcState())
    sack_future = wire.SackPacket(
        bth=wire.Bth(opcode=wire.OP_SACK, dest_qp=QP_B, psn=0),
        sack=wire.SackExt(cack_psn=500, ack_psn_offset=0, entropy=min(b.ev_states(QP_B)),
                          sack_offset=0,
                          sack_bitmap=0), cc=wire.CcState())
    for pkt in (sack_bad_ev, sack_future):
        b.receive_packet(wire.encode_packet(pkt), _meta(1), now=0.0)
    s = b.stats()
    assert s["malformed"] == len(bad_inputs) + 2
    assert s["answers_refused"] == 1  # a SACK for a PSN never sent is not believed
    assert s["unknown_qpn"] == 1 and s["rx_packets"] == len(bad_inputs) + 3
    assert bytes(mr.buffer) == bytes(64) and b.packets_to_send(now=0.0) == []


def test_fuzzed_packets_never_raise() -> None:
    h = Harness(planes=2, seed=31)
    h.link.faults.jitter = BASE_RTT / 2
    mr = h.b.register_memory(100_000)
    h.a.post_write(QP_A, pattern(100_000), mr.va, mr.rkey, imm=3, now=0.0)
    h.run(stop=lambda: h.of_type("A", WriteCompleted))
    rng = random.Random(5)
    corpus = [(src, tx) for src, tx in h.sent]
    for _ in range(3000):
        src, tx = rng.choice(corpus)
        buf = bytearray(tx.payload)
        for _ in range(rng.randint(1, 4)):
            buf[rng.randrange(len(buf))] = rng.randrange(256)
        if rng.random() < 0.2:
            buf = buf[: rng.randrange(len(buf) + 1)]
        dst = h.b if src == "A" else h.a
        dst.receive_packet(bytes(buf), RxMeta(src, tx.plane, tx.ev, tx.dscp, tx.ecn), now=h.now)
        dst.packets_to_send(now=h.now)
        dst.handle_timer(now=h.now)
    assert h.a.stats()["malformed"] + h.b.stats()["malformed"] > 0


def test_in_flight_state_stays_bounded_over_long_transfer() -> None:
    window = 128
    h = Harness(planes=2, seed=32, config=small_config(window=window))
    h.link.faults.drop = 0.01
    h.link.faults.jitter = BASE_RTT / 2
    h.record = False
    mr = h.b.register_memory(1 << 20)
    rounds, size = 12, 1 << 20  # 12 MiB through a 128-PSN window
    peak = 0
    for i in range(rounds):
        h.a.post_write(QP_A, pattern(size, i), mr.va, mr.rkey, now=h.now)
        while len(h.of_type("A", WriteCompleted)) <= i:
            assert h.step()
            peak = max(peak, h.a.tracked_state() + h.b.tracked_state())
            sender = h.a.connection(QP_A).sender
            assert sender.outstanding_psns <= window
    assert bytes(mr.buffer) == pattern(size, rounds - 1)
    assert rounds * size // 1024 > 50 * window
    assert peak <= 3 * window + 4  # inflight + retx + receiver ends, never per-transfer history


def test_memory_region_api() -> None:
    ep = Endpoint(planes=1)
    a, b = ep.register_memory(100), ep.register_memory(5000)
    assert a.rkey != b.rkey and b.va >= a.va + a.length and len(b.buffer) == 5000
    ep.deregister_memory(a.rkey)
    with pytest.raises(LocalProtocolError):
        ep.deregister_memory(a.rkey)
    with pytest.raises(LocalProtocolError):
        ep.register_memory(0)


@pytest.mark.parametrize("kwargs", [
    {"mtu": 0}, {"window": 0}, {"window": 1 << 23}, {"reorder_threshold": 0},
    {"rto_min": 2.0, "rto_max": 1.0}, {"port_status_retry": -1.0}, {"cc_factory": 3},
])
def test_config_rejects_bad_values_with_a_message(kwargs: dict) -> None:
    with pytest.raises(ConfigError) as info:
        EndpointConfig(**kwargs)
    assert next(iter(kwargs)) in str(info.value) or "cc_factory" in str(info.value)


def test_api_misuse_raises_local_protocol_error() -> None:
    h = Harness(planes=1)
    with pytest.raises(LocalProtocolError):
        h.a.post_write(0x999, b"x", 0, 0, now=0.0)
    with pytest.raises(LocalProtocolError):
        h.a.connect("B", QP_A, QP_B, h.paths("A"))
    with pytest.raises(LocalProtocolError):
        h.a.connect("C", 0x1, 0x300, h.paths("A"))
    with pytest.raises(LocalProtocolError):
        h.a.set_plane_up(5, False, now=0.0)
    with pytest.raises(LocalProtocolError):
        h.a.post_write(QP_A, b"x", 0, 0, imm=1 << 32, now=0.0)


def test_stats_have_every_stat_key_and_are_json_able() -> None:
    import json

    h = Harness()
    mr = h.b.register_memory(5000)
    h.a.post_write(QP_A, pattern(5000), mr.va, mr.rkey, now=0.0)
    h.run(stop=lambda: h.of_type("A", WriteCompleted))
    s = h.a.stats()
    required = {"tx_packets", "rx_packets", "tx_data_packets", "tx_bytes", "retransmits",
                "timeouts", "nacks_sent", "nacks_received", "trims_received", "sacks_sent",
                "sacks_received", "probes_sent", "probe_replies", "ev_retired", "ev_reinstated",
                "ecn_marks_received", "malformed", "duplicates", "per_plane", "per_ev"}
    assert required <= set(s)
    json.dumps(s)
    assert s["tx_data_packets"] == 5 and set(s["per_plane"]) == {0, 1}
    assert h.b.stats()["rx_data_bytes"] == 5000 == h.b.counters()["rx_data_bytes"]
    per_ev = s["per_ev"][QP_A]
    assert sum(v["tx_packets"] for v in per_ev.values()) == 5
    assert all(v["state"] == "GOOD" for v in per_ev.values())
