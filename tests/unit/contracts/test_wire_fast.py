"""The per-packet fast paths of the codec (the host agents' data, SACKs, probes and frames without
dataclasses) give exactly the bytes and the errors of encode_packet/decode_packet and
encode_frame/decode_frame, on the golden packets, on random fields and on malformed input."""

from __future__ import annotations

import random
from ipaddress import IPv6Address

import pytest

import wire
from tests.unit.golden_packets import GOLDEN_PACKETS, GOLDEN_TRIMMED_FRAME, IDS, TRIMMED_ENV
from wire import (
    DEFAULT_HOP_LIMIT,
    IMM_OPCODES,
    OP_PROBE,
    OP_SACK,
    Bth,
    CcState,
    DataPacket,
    Envelope,
    Meth,
    ProbeExt,
    ProbePacket,
    Reth,
    SackExt,
    SackPacket,
    WireError,
)

DATA = sorted(wire.DATA_OPCODES)


def _outcome(fn, *args):
    """What a call gives: its result, or the type and message of its WireError."""
    try:
        return fn(*args)
    except WireError as exc:
        return type(exc), str(exc)


def _data_fields(p: DataPacket) -> tuple:
    return (p.bth.opcode, p.bth.dest_qp, p.bth.psn, p.bth.ack_req, p.bth.rtx, p.meth.msn,
            p.reth.va, p.reth.rkey, p.reth.dma_len, p.imm, p.payload)


def _sack_fields(p: SackPacket) -> tuple:
    s, c = p.sack, p.cc
    return (p.bth.dest_qp, p.bth.psn, s.cack_psn, s.ack_psn_offset, s.entropy, s.sack_offset,
            s.sack_bitmap, s.m, s.probe_resp, s.spdcid, s.dpdcid, c.ooo_count, c.rcvd_bytes)


def _expected_decode(raw: bytes):
    pkt = _outcome(wire.decode_packet, raw)
    if isinstance(pkt, DataPacket):
        return (pkt.bth.opcode, pkt.bth.dest_qp, pkt.bth.psn, pkt.meth.msn, pkt.reth.va,
                pkt.reth.rkey, pkt.reth.dma_len, pkt.imm, pkt.payload)
    if isinstance(pkt, SackPacket):
        s = pkt.sack
        return (pkt.bth.dest_qp, s.cack_psn, s.ack_psn_offset, s.entropy, s.sack_offset,
                s.sack_bitmap, s.m, s.probe_resp)
    if isinstance(pkt, ProbePacket):
        return pkt.bth.dest_qp, pkt.probe.entropy
    return pkt


FAST_DECODERS = {OP_SACK: wire.decode_sack_fields, OP_PROBE: wire.decode_probe_fields,
                 **dict.fromkeys(DATA, wire.decode_data_fields)}


def _fast_decode(raw: bytes):
    return _outcome(FAST_DECODERS[raw[0]], raw)


def _default_fields(pkt: wire.Packet) -> bool:
    """Packets the fast encoders can express: default BTH flags and pkey, no CC extras."""
    b = pkt.bth
    if (b.se, b.migreq, b.pad, b.tver, b.pkey) != (False, True, 0, 0, 0xFFFF):
        return False
    if isinstance(pkt, DataPacket):
        return pkt.meth.rq_msn == 0
    if isinstance(pkt, ProbePacket):
        return not b.ack_req and not b.rtx
    if isinstance(pkt, SackPacket):
        return (not b.ack_req and not b.rtx and (pkt.sack.cc_type, pkt.sack.cc_flags,
                pkt.sack.mpr) == (1, 0, 0) and pkt.cc == CcState(pkt.cc.ooo_count,
                                                                   pkt.cc.rcvd_bytes))
    return False


@pytest.mark.parametrize(("name", "pkt", "raw"), GOLDEN_PACKETS, ids=IDS)
def test_golden_packets(name: str, pkt: wire.Packet, raw: bytes) -> None:
    if isinstance(pkt, DataPacket | SackPacket | ProbePacket):
        assert _fast_decode(raw) == _expected_decode(raw)
    if isinstance(pkt, ProbePacket) and _default_fields(pkt):
        assert wire.encode_probe_fields(pkt.bth.dest_qp, pkt.bth.psn, pkt.probe.entropy) == raw
    if isinstance(pkt, DataPacket) and _default_fields(pkt):
        assert wire.encode_data_fields(*_data_fields(pkt)) == raw
    if isinstance(pkt, SackPacket) and _default_fields(pkt):
        assert wire.encode_sack_fields(*_sack_fields(pkt)) == raw


def _random_data(rng: random.Random) -> DataPacket:
    op = rng.choice(DATA)
    payload = rng.randbytes(rng.randrange(0, 64))
    imm = rng.getrandbits(32) if op in IMM_OPCODES and payload else None
    return DataPacket(Bth(op, rng.getrandbits(24), rng.getrandbits(24), rng.random() < 0.5,
                          rng.random() < 0.5),
                      Meth(rng.getrandbits(16)),
                      Reth(rng.getrandbits(64), rng.getrandbits(32),
                           len(payload) + rng.choice([0, 0, 1, 1000])), payload, imm)


def _random_sack(rng: random.Random) -> SackPacket:
    return SackPacket(Bth(OP_SACK, rng.getrandbits(24), rng.getrandbits(24)),
                      SackExt(rng.getrandbits(24), rng.randrange(-0x8000, 0x8000),
                              rng.getrandbits(32), rng.getrandbits(16), rng.getrandbits(64),
                              rng.randrange(3), rng.random() < 0.5, rng.getrandbits(16),
                              rng.getrandbits(16)),
                      CcState(rng.getrandbits(15), rng.getrandbits(24)))


def _random_probe(rng: random.Random) -> ProbePacket:
    return ProbePacket(Bth(OP_PROBE, rng.getrandbits(24), rng.getrandbits(24)),
                       ProbeExt(rng.getrandbits(32)))


def test_random_packets_same_bytes_both_ways() -> None:
    rng = random.Random(11)
    for _ in range(2000):
        probe = _random_probe(rng)
        raw = wire.encode_packet(probe)
        assert wire.encode_probe_fields(probe.bth.dest_qp, probe.bth.psn,
                                        probe.probe.entropy) == raw
        assert _fast_decode(raw) == _expected_decode(raw)
        pkt = _random_data(rng)
        raw = wire.encode_packet(pkt)
        assert wire.encode_data_fields(*_data_fields(pkt)) == raw
        assert _fast_decode(raw) == _expected_decode(raw)
        sack = _random_sack(rng)
        raw = wire.encode_packet(sack)
        assert wire.encode_sack_fields(*_sack_fields(sack)) == raw
        assert _fast_decode(raw) == _expected_decode(raw)


def test_malformed_input_same_errors() -> None:
    rng = random.Random(12)
    for _ in range(3000):
        make = rng.choice([_random_data, _random_sack, _random_probe])
        raw = bytearray(wire.encode_packet(make(rng)))
        cut = rng.random()
        if cut < 0.3:
            raw = raw[:rng.randrange(len(raw) + 1)]
        elif cut < 0.5:
            raw += rng.randbytes(rng.randrange(1, 9))
        else:
            for _ in range(rng.randrange(1, 4)):
                raw[rng.randrange(len(raw))] = rng.getrandbits(8)
        raw = bytes(raw)
        if raw and raw[0] in FAST_DECODERS:
            assert _fast_decode(raw) == _expected_decode(raw), raw.hex()


def test_out_of_range_fields_same_errors() -> None:
    base = _data_fields(DataPacket(Bth(wire.OP_WRITE_ONLY, 1, 2), Meth(3), Reth(4, 5, 8),
                                   b"12345678"))
    for i, bad in [(1, 1 << 24), (2, -1), (5, 1 << 16), (6, 1 << 64), (7, -5), (8, 7),
                   (9, 3), (0, wire.OP_SACK)]:
        fields = list(base)
        fields[i] = bad
        args = fields
        slow = DataPacket(Bth(args[0], args[1], args[2], args[3], args[4]), Meth(args[5]),
                          Reth(args[6], args[7], args[8]), args[10], args[9])
        assert _outcome(wire.encode_data_fields, *args) == _outcome(wire.encode_packet, slow)
        assert isinstance(_outcome(wire.encode_data_fields, *args), tuple)
    sack = _sack_fields(_random_sack(random.Random(1)))
    for i, bad in [(0, 1 << 24), (3, 1 << 15), (4, -1), (5, 1 << 16), (7, 3), (11, 1 << 15),
                   (12, 1 << 24)]:
        fields = list(sack)
        fields[i] = bad
        assert isinstance(_outcome(wire.encode_sack_fields, *fields), tuple), i
    for args in [(1 << 24, 0, 0), (0, 1 << 24, 0), (0, 0, 1 << 32), (0, 0, -1)]:
        slow = ProbePacket(Bth(OP_PROBE, args[0], args[1]), ProbeExt(args[2]))
        assert (_outcome(wire.encode_probe_fields, *args) == _outcome(wire.encode_packet, slow)
                != wire.encode_packet(ProbePacket(Bth(OP_PROBE, 0, 0), ProbeExt(0))))


def _random_env(rng: random.Random) -> Envelope:
    def mac() -> str:
        return rng.randbytes(6).hex(":")

    def addr() -> IPv6Address:
        return IPv6Address(rng.getrandbits(128))

    return Envelope(mac(), mac(), addr(), addr(), addr(), addr(), rng.getrandbits(32),
                    rng.randrange(64), rng.randrange(4), DEFAULT_HOP_LIMIT)


def test_frames_same_bytes_both_ways() -> None:
    rng = random.Random(13)
    for _ in range(1000):
        env = _random_env(rng)
        payload = rng.randbytes(rng.randrange(0, 200))
        frame = wire.encode_frame(env, payload)
        parts = (wire.eth_header(env.src_mac, env.dst_mac),
                 wire.address_pair(env.outer_src, env.outer_dst),
                 wire.address_pair(env.inner_src, env.inner_dst))
        assert wire.encode_frame_parts(*parts, env.ev, env.dscp, env.ecn, payload) == frame
        assert wire.decode_frame_fields(frame + bytes(rng.randrange(3))) == (
            env.ev, env.dscp, env.ecn, env.inner_src.packed, payload)
    for ev, dscp, ecn in [(1 << 32, 0, 0), (-1, 0, 0), (0, 64, 0), (0, 0, 4)]:
        env = Envelope("02:00:00:00:00:01", "02:00:00:00:00:02", *[IPv6Address(1)] * 4, ev,
                       dscp, ecn)
        parts = (wire.eth_header(env.src_mac, env.dst_mac), bytes(32), bytes(32))
        assert (_outcome(wire.encode_frame_parts, *parts, ev, dscp, ecn, b"")
                == _outcome(wire.encode_frame, env, b""))


def test_golden_frame_and_malformed_frames_same_errors() -> None:
    env, payload = wire.decode_frame(GOLDEN_TRIMMED_FRAME)
    assert wire.decode_frame_fields(GOLDEN_TRIMMED_FRAME) == (
        TRIMMED_ENV.ev, TRIMMED_ENV.dscp, TRIMMED_ENV.ecn, TRIMMED_ENV.inner_src.packed, payload)
    rng = random.Random(14)
    for _ in range(3000):
        frame = bytearray(GOLDEN_TRIMMED_FRAME)
        if rng.random() < 0.3:
            frame = frame[:rng.randrange(len(frame))]
        else:
            for _ in range(rng.randrange(1, 3)):
                frame[rng.randrange(len(frame))] = rng.getrandbits(8)
        raw = bytes(frame)
        slow = _outcome(wire.decode_frame, raw)
        fast = _outcome(wire.decode_frame_fields, raw)
        if isinstance(slow, tuple) and isinstance(slow[0], Envelope):
            env, payload = slow
            slow = (env.ev, env.dscp, env.ecn, env.inner_src.packed, payload)
        assert fast == slow, raw.hex()
