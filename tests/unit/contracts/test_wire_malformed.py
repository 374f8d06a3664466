"""Malformed input must raise a typed WireError subclass; out-of-range fields must not encode."""

from __future__ import annotations

import dataclasses
import random
from ipaddress import IPv6Address

import pytest

import wire
from tests.unit.golden_packets import GOLDEN_PACKETS, GOLDEN_TRIMMED_FRAME, IDS, TRIMMED_ENV
from wire import (
    IMM_OPCODES,
    OP_ACK,
    OP_EP_REQ,
    OP_SACK,
    OP_WRITE_FIRST,
    OP_WRITE_ONLY,
    BadField,
    Bth,
    DataPacket,
    Meth,
    Reth,
    TruncatedPacket,
    UnknownOpcode,
    WireError,
    decode_frame,
    decode_packet,
    encode_frame,
    encode_packet,
)

DATA_MIN = wire.BTH_LEN + wire.METH_LEN + wire.RETH_LEN


def _truncations(raw: bytes, opcode: int) -> range:
    """Prefix lengths that must be TruncatedPacket (a shorter data payload is just trimmed)."""
    if opcode in wire.DATA_OPCODES:
        return range(DATA_MIN)
    return range(len(raw))


@pytest.mark.parametrize(("name", "pkt", "raw"), GOLDEN_PACKETS, ids=IDS)
def test_every_packet_truncation(name: str, pkt: wire.Packet, raw: bytes) -> None:
    for n in _truncations(raw, pkt.bth.opcode):
        with pytest.raises(TruncatedPacket):
            decode_packet(raw[:n])


def test_imm_truncated_inside_immdt() -> None:
    raw = GOLDEN_PACKETS[1][2]
    assert raw[0] in IMM_OPCODES
    for n in range(DATA_MIN + 1, DATA_MIN + wire.IMM_LEN):
        with pytest.raises(TruncatedPacket):
            decode_packet(raw[:n])


def test_data_payload_cut_decodes_as_trimmed() -> None:
    raw = GOLDEN_PACKETS[0][2]
    for n in range(DATA_MIN, len(raw)):
        pkt = decode_packet(raw[:n])
        assert isinstance(pkt, DataPacket) and pkt.trimmed and len(pkt.payload) == n - DATA_MIN


@pytest.mark.parametrize(("name", "pkt", "raw"), GOLDEN_PACKETS, ids=IDS)
def test_every_frame_truncation(name: str, pkt: wire.Packet, raw: bytes) -> None:
    frame = encode_frame(TRIMMED_ENV, raw)
    for n in range(len(frame)):
        with pytest.raises(TruncatedPacket):
            decode_frame(frame[:n])


@pytest.mark.parametrize("opcode", [0x00, 0x04, 0x64, OP_ACK, 0xDF, 0xFF])
def test_unknown_opcode(opcode: int) -> None:
    raw = bytes([opcode]) + GOLDEN_PACKETS[4][2][1:]
    with pytest.raises(UnknownOpcode):
        decode_packet(raw)


def _patched(offset: int, value: bytes) -> bytes:
    frame = bytearray(GOLDEN_TRIMMED_FRAME)
    frame[offset:offset + len(value)] = value
    return bytes(frame)


@pytest.mark.parametrize(
    ("offset", "value", "what"),
    [
        (12, b"\x08\x00", "ethertype"),
        (14, b"\x43", "IP version"),  # outer version 4
        (54, b"\x73", "IP version"),  # inner version 7
        (20, b"\x11", "outer next header"),  # UDP directly, no inner IPv6
        (60, b"\x06", "inner next header"),  # TCP
        (96, b"\x12\xb8", "destination port"),  # 4792
        (18, b"\x00\x51", "lengths"),  # outer payload length 81 != 40 + 40
        (58, b"\x00\x29", "lengths"),  # inner payload length 41 != UDP length
        (98, b"\x00\x07", "lengths"),  # UDP length below its own header
        (15, b"\x2b", "19:16"),  # flow label bits 19:16 = 0xb, sport low nibble = 4
    ],
)
def test_bad_frame_fields(offset: int, value: bytes, what: str) -> None:
    with pytest.raises(BadField, match=what):
        decode_frame(_patched(offset, value))


def test_frame_shorter_than_declared_is_truncated() -> None:
    frame = bytearray(_patched(18, b"\x00\x58"))  # outer payload length 88
    frame[58:60] = b"\x00\x30"  # inner 48
    frame[98:100] = b"\x00\x30"  # UDP 48: 8 bytes more than the frame holds
    with pytest.raises(TruncatedPacket, match="declare"):
        decode_frame(bytes(frame))


def test_payload_longer_than_dma_len() -> None:
    raw = GOLDEN_PACKETS[0][2] + b"x"
    with pytest.raises(BadField, match="dma_len"):
        decode_packet(raw)
    pkt = DataPacket(Bth(OP_WRITE_ONLY, 0x100, 0), Meth(0), Reth(0, 0, 3), b"four")
    with pytest.raises(BadField, match="dma_len"):
        encode_packet(pkt)


@pytest.mark.parametrize(("name", "pkt", "raw"), GOLDEN_PACKETS[4:], ids=IDS[4:])
def test_control_trailing_bytes(name: str, pkt: wire.Packet, raw: bytes) -> None:
    with pytest.raises(BadField):
        decode_packet(raw + b"\x00")


@pytest.mark.parametrize(
    ("index", "offset", "value", "what"),
    [
        (4, 12, b"\x21\xa2", "type/next"),  # SACK carrying type 2
        (4, 12, b"\x10\x22", "type/next"),  # SACK with next 0 (no CC_STATE)
        (4, 12, b"\x11\xe2", "m=3"),  # SACK M=3 is undefined
        (5, 12, b"\x20\x60", "m=3"),  # NACK M=3
        (5, 12, b"\x40\x00", "type/next"),  # NACK carrying PROBE type
        (6, 12, b"\x50\x00", "type/next"),  # PROBE carrying PORT_STATUS type
        (7, 12, b"\x40\x00", "type/next"),  # EP_REQ carrying PROBE type
        (7, 5, b"\x00\x00\x03", "QP"),  # EP_REQ to QP 3
    ],
)
def test_bad_extension_fields(index: int, offset: int, value: bytes, what: str) -> None:
    raw = bytearray(GOLDEN_PACKETS[index][2])
    raw[offset:offset + len(value)] = value
    with pytest.raises(BadField, match=what):
        decode_packet(bytes(raw))


def _bth_with(**changes: int) -> DataPacket:
    return DataPacket(dataclasses.replace(Bth(OP_WRITE_FIRST, 0x100, 0), **changes),
                      Meth(0), Reth(0, 0, 0), b"")


@pytest.mark.parametrize(
    ("pkt", "field"),
    [
        (_bth_with(psn=1 << 24), "bth.psn"),
        (_bth_with(psn=-1), "bth.psn"),
        (_bth_with(dest_qp=1 << 24), "bth.dest_qp"),
        (_bth_with(pad=4), "bth.pad"),
        (_bth_with(tver=16), "bth.tver"),
        (_bth_with(pkey=1 << 16), "bth.pkey"),
        (_bth_with(opcode=OP_SACK), "bth.opcode"),
        (DataPacket(Bth(OP_WRITE_ONLY, 1, 0), Meth(1 << 16), Reth(0, 0, 0), b""), "meth.msn"),
        (DataPacket(Bth(OP_WRITE_ONLY, 1, 0), Meth(0), Reth(1 << 64, 0, 0), b""), "reth.va"),
        (DataPacket(Bth(OP_WRITE_ONLY, 1, 0), Meth(0), Reth(0, 0, 0), b"", imm=1), "imm"),
        (DataPacket(Bth(0xCB, 1, 0), Meth(0), Reth(0, 0, 1), b"x"), "imm"),
        (dataclasses.replace(GOLDEN_PACKETS[4][1], sack=dataclasses.replace(
            GOLDEN_PACKETS[4][1].sack, ack_psn_offset=0x8000)), "ack_psn_offset"),
        (dataclasses.replace(GOLDEN_PACKETS[4][1], cc=dataclasses.replace(
            GOLDEN_PACKETS[4][1].cc, ooo_count=0x8000)), "cc.ooo_count"),
        (dataclasses.replace(GOLDEN_PACKETS[4][1], sack=dataclasses.replace(
            GOLDEN_PACKETS[4][1].sack, m=3)), "m=3"),
        (dataclasses.replace(GOLDEN_PACKETS[5][1], nack=dataclasses.replace(
            GOLDEN_PACKETS[5][1].nack, nack_psn=1 << 24)), "nack.nack_psn"),
        (dataclasses.replace(GOLDEN_PACKETS[7][1], bth=Bth(OP_EP_REQ, 3, 0)), "dest_qp"),
        (dataclasses.replace(GOLDEN_PACKETS[7][1], bth=Bth(OP_SACK, 2, 0)), "bth.opcode"),
    ],
)
def test_encode_out_of_range(pkt: wire.Packet, field: str) -> None:
    with pytest.raises(BadField, match=field):
        encode_packet(pkt)


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"dscp": 64}, "dscp"),
        ({"ecn": 4}, "ecn"),
        ({"hop_limit": 256}, "hop_limit"),
        ({"ev": 1 << 32}, "ev"),
        ({"src_mac": "02:00:00:01:0e"}, "MAC"),
        ({"dst_mac": "zz:00:00:01:0e:05"}, "MAC"),
        ({"outer_dst": "fcbb:bbbb::"}, "outer_dst"),
        ({"inner_src": IPv6Address("::1").packed}, "inner_src"),
    ],
)
def test_encode_frame_out_of_range(changes: dict, field: str) -> None:
    env = dataclasses.replace(TRIMMED_ENV, **changes)
    with pytest.raises(BadField, match=field):
        encode_frame(env, b"")


def test_encode_rejects_non_packets() -> None:
    with pytest.raises(TypeError):
        encode_packet(Meth(0))  # type: ignore[arg-type]


def _parses(data: bytes, as_frame: bool) -> bool:
    """True if the bytes decode; False on a WireError (anything else fails the test)."""
    try:
        decode_packet(decode_frame(data)[1] if as_frame else data)
    except WireError:
        return False
    return True


def test_fuzz_only_wire_errors() -> None:
    rng = random.Random(20240502)
    seeds = [encode_frame(TRIMMED_ENV, raw) for _, _, raw in GOLDEN_PACKETS]
    seeds += [raw for _, _, raw in GOLDEN_PACKETS]
    parsed = 0
    for i in range(3000):
        if i % 3 == 0:
            data = rng.randbytes(rng.randrange(0, 200))
        else:  # mutate a valid frame or payload: flip bytes, cut or extend it
            data = bytearray(rng.choice(seeds))
            for _ in range(rng.randrange(1, 4)):
                if data:
                    data[rng.randrange(len(data))] = rng.getrandbits(8)
            if rng.random() < 0.3:
                data = data[: rng.randrange(len(data) + 1)] + rng.randbytes(rng.randrange(8))
            data = bytes(data)
        parsed += _parses(data, as_frame=True) + _parses(data, as_frame=False)
    assert 0 < parsed < 6000  # both outcomes were exercised
