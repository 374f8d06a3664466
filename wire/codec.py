"""MRC wire codec: the one definition of every layout in docs/wire-format.md.

Import every wire name from `wire`, which re-exports this module, the packet values it
encodes (wire.packets) and the frame half (wire.frame). Pure `struct`, no scapy: the endpoint,
simulator and soft switch run it per packet, so each header run is packed by one precompiled
Struct, and decoders turn every malformed input into a WireError subclass (never IndexError or
struct.error) so callers can count and drop it.

Choices the spec leaves open, made here: reserved bits are written as zero and
ignored on receipt; the inner IPv6 flow label is 0 and its traffic class and
hop limit are not checked on receipt (switches rewrite only the outer header);
a trimmed WRITE_*_IMM packet has lost its ImmDt, so it decodes with imm=None.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import NamedTuple

from wire import fields as F
from wire.fields import check_fields, maximum, minimum, struct_format
from wire.frame import (
    BadField,
    TruncatedPacket,
    UnknownOpcode,
)
from wire.layout import (
    BTH_LEN,
    IMM_LEN,
    METH_LEN,
    RETH_LEN,
)
from wire.packets import (
    DATA_OPCODES,
    EXT_CC_STATE,
    EXT_NACK,
    EXT_PORT_STATUS,
    EXT_PROBE,
    EXT_SACK,
    IMM_OPCODES,
    M_ALWAYS_SKIP,
    M_NONE,
    OP_EP_REQ,
    OP_EP_RSP,
    OP_NACK,
    OP_PROBE,
    OP_SACK,
    OP_WRITE_ONLY,
    PSN_MAX,
    PSN_MOD,
    QPN_ENDPOINT,
    Bth,
    CcState,
    DataPacket,
    Meth,
    NackExt,
    NackPacket,
    Packet,
    PortStatusExt,
    PortStatusPacket,
    ProbeExt,
    ProbePacket,
    Reth,
    SackExt,
    SackPacket,
)

# What `import wire` re-exports from this module.
__all__ = [
    "DataFields", "SackFields", "decode_data_fields", "decode_packet", "decode_probe_fields",
    "decode_sack_fields", "encode_data_fields", "encode_packet", "encode_probe_fields",
    "encode_sack_fields", "psn_add", "psn_diff",
]

_PSN_MASK = PSN_MAX
_PSN_HALF = PSN_MOD >> 1


def _check_m(m: int) -> None:
    if not M_NONE <= m <= M_ALWAYS_SKIP:
        raise BadField(f"m={m!r} is not an EV advice value (0..2)")


# One Struct per packet type covering BTH and everything after it up to the payload, from
# the field tables (wire.fields).
_S_DATA = struct.Struct("!" + struct_format(F.BTH, F.METH, F.RETH))
_S_IMM = struct.Struct("!" + struct_format(F.IMMDT))
_S_SACK = struct.Struct("!" + struct_format(F.BTH, F.SACK, F.CC_STATE))
_S_NACK = struct.Struct("!" + struct_format(F.BTH, F.NACK))
_S_PROBE = struct.Struct("!" + struct_format(F.BTH, F.PROBE))
_S_PORT_STATUS = struct.Struct("!" + struct_format(F.BTH, F.PORT_STATUS))
_DATA_MIN = BTH_LEN + METH_LEN + RETH_LEN
# The fast paths' bounds (the dataclass encoders check every field through check_fields).
_QP_MAX = maximum(F.BTH, "dest_qp")
_MSN_MAX = maximum(F.METH, "msn")
_VA_MAX, _RKEY_MAX = maximum(F.RETH, "va"), maximum(F.RETH, "rkey")
_DMA_MAX, _IMM_MAX = maximum(F.RETH, "dma_len"), maximum(F.IMMDT, "imm")
_APO_MIN, _APO_MAX = minimum(F.SACK, "ack_psn_offset"), maximum(F.SACK, "ack_psn_offset")
_ENTROPY_MAX, _SOFF_MAX = maximum(F.SACK, "entropy"), maximum(F.SACK, "sack_offset")
_BITMAP_MAX, _PDCID_MAX = maximum(F.SACK, "sack_bitmap"), maximum(F.SACK, "spdcid")
_OOO_MAX, _RCVD_MAX = maximum(F.CC_STATE, "ooo_count"), maximum(F.CC_STATE, "rcvd_bytes")
_PEN_MAX = maximum(F.CC_STATE, "rcv_cwnd_pen")
_EXT_SET_BY_CODEC = frozenset({"ext_type", "next_ext", "m"})  # m: _check_m names its values


def _bth_fields(b: Bth, expected: frozenset[int] | int) -> tuple[int, int, int, int, int]:
    """Validate a Bth for the packet type carrying it and return its five struct words."""
    ok = b.opcode in expected if isinstance(expected, frozenset) else b.opcode == expected
    if not ok:
        raise BadField(f"bth.opcode=0x{b.opcode:02X} does not match the packet type")
    check_fields("bth", b, F.BTH, frozenset({"opcode"}))
    flags = bool(b.se) << 7 | bool(b.migreq) << 6 | b.pad << 4 | b.tver
    return b.opcode, flags, b.pkey, b.dest_qp, bool(b.ack_req) << 31 | bool(b.rtx) << 30 | b.psn


def _bth_from(op: int, flags: int, pkey: int, qp_word: int, psn_word: int) -> Bth:
    return Bth(
        op, qp_word & _QP_MAX, psn_word & _PSN_MASK, bool(psn_word >> 31),
        bool(psn_word >> 30 & 1), bool(flags >> 7), bool(flags >> 6 & 1),
        flags >> 4 & 3, flags & 0xF, pkey,
    )


def _ext_word(ext_type: int, nxt: int, m: int = M_NONE, probe_resp: bool = False) -> int:
    return ext_type << 12 | nxt << 7 | m << 5 | bool(probe_resp) << 1


def _expect_ext(word: int, ext_type: int, nxt: int) -> None:
    if word >> 12 != ext_type or word >> 7 & 0x1F != nxt:
        raise BadField(
            f"extension type/next {word >> 12}/{word >> 7 & 0x1F}, expected {ext_type}/{nxt}"
        )


def _encode_data(p: DataPacket) -> bytes:
    meth, reth, payload = p.meth, p.reth, p.payload
    check_fields("meth", meth, F.METH)
    check_fields("reth", reth, F.RETH)
    if len(payload) > reth.dma_len:
        raise BadField(f"payload of {len(payload)} bytes exceeds reth.dma_len={reth.dma_len}")
    hdr = _S_DATA.pack(
        *_bth_fields(p.bth, DATA_OPCODES), meth.rq_msn, meth.msn, reth.va, reth.rkey, reth.dma_len
    )
    if p.bth.opcode in IMM_OPCODES:
        if p.imm is None:
            if payload:
                raise BadField("imm is required on an IMM opcode unless the packet is trimmed")
            return hdr
        check_fields("", p, F.IMMDT)  # the packet's imm: "imm=... does not fit ..."
        return hdr + _S_IMM.pack(p.imm) + payload
    if p.imm is not None:
        raise BadField(f"imm set on opcode 0x{p.bth.opcode:02X}, which carries no ImmDt")
    return hdr + payload


def _encode_sack(p: SackPacket) -> bytes:
    s, c = p.sack, p.cc
    _check_m(s.m)
    check_fields("sack", s, F.SACK, _EXT_SET_BY_CODEC)
    check_fields("cc", c, F.CC_STATE)
    return _S_SACK.pack(
        *_bth_fields(p.bth, OP_SACK),
        _ext_word(EXT_SACK, EXT_CC_STATE, s.m, s.probe_resp), s.ack_psn_offset, s.entropy,
        s.spdcid, s.dpdcid, s.cack_psn, s.cc_type << 4 | s.cc_flags, s.mpr, s.sack_offset,
        s.sack_bitmap,
        c.tx_ts, c.ooo_count, bool(c.restore) << 31 | c.rcv_cwnd_pen << 24 | c.rcvd_bytes,
    )


def _encode_nack(p: NackPacket) -> bytes:
    n = p.nack
    _check_m(n.m)
    check_fields("nack", n, F.NACK, _EXT_SET_BY_CODEC)
    return _S_NACK.pack(
        *_bth_fields(p.bth, OP_NACK), _ext_word(EXT_NACK, 0, n.m), n.reason, 0, n.entropy,
        n.spdcid, n.dpdcid, n.nack_psn, n.cack_psn,
    )


def _encode_probe(p: ProbePacket) -> bytes:
    check_fields("probe", p.probe, F.PROBE)
    return _S_PROBE.pack(*_bth_fields(p.bth, OP_PROBE), _ext_word(EXT_PROBE, 0), 0,
                         p.probe.entropy)


_EP_OPCODES = frozenset({OP_EP_REQ, OP_EP_RSP})


def _encode_port_status(p: PortStatusPacket) -> bytes:
    st = p.status
    if p.bth.dest_qp != QPN_ENDPOINT:
        raise BadField(f"bth.dest_qp={p.bth.dest_qp:#x}: port status goes to QP {QPN_ENDPOINT:#x}")
    check_fields("status", st, F.PORT_STATUS)
    return _S_PORT_STATUS.pack(*_bth_fields(p.bth, _EP_OPCODES), _ext_word(EXT_PORT_STATUS, 0),
                               st.seq, st.port_mask)


_ENCODERS: dict[type, Callable[..., bytes]] = {
    DataPacket: _encode_data,
    SackPacket: _encode_sack,
    NackPacket: _encode_nack,
    ProbePacket: _encode_probe,
    PortStatusPacket: _encode_port_status,
}


def encode_packet(pkt: Packet) -> bytes:
    """Serialize a packet to the UDP payload bytes; out-of-range fields raise BadField."""
    enc = _ENCODERS.get(type(pkt))
    if enc is None:
        raise TypeError(f"not a wire packet: {type(pkt).__name__}")
    return enc(pkt)


def _decode_data(data: bytes) -> DataPacket:
    n = len(data)
    if n < _DATA_MIN:
        raise TruncatedPacket(f"data packet of {n} bytes, headers need {_DATA_MIN}")
    op, fl, pkey, qpw, psnw, rq_msn, msn, va, rkey, dma_len = _S_DATA.unpack_from(data)
    off, imm = _DATA_MIN, None
    if op in IMM_OPCODES and n > _DATA_MIN:  # exactly _DATA_MIN: trimmed, ImmDt cut
        if n < _DATA_MIN + IMM_LEN:
            raise TruncatedPacket(f"data packet of {n} bytes ends inside ImmDt")
        imm = _S_IMM.unpack_from(data, _DATA_MIN)[0]
        off += IMM_LEN
    payload = bytes(data[off:])
    if len(payload) > dma_len:
        raise BadField(f"payload of {len(payload)} bytes exceeds reth.dma_len={dma_len}")
    return DataPacket(_bth_from(op, fl, pkey, qpw, psnw), Meth(msn, rq_msn),
                      Reth(va, rkey, dma_len), payload, imm)


def _decode_sack(f: tuple) -> SackPacket:
    (w0, apo, ent, spd, dpd, cackw, cc_byte, mpr, soff, bitmap, tx_ts, ooo, ccw) = f[5:]
    _expect_ext(w0, EXT_SACK, EXT_CC_STATE)
    m = w0 >> 5 & 3
    _check_m(m)
    sack = SackExt(cackw & _PSN_MASK, apo, ent, soff, bitmap, m, bool(w0 >> 1 & 1), spd, dpd,
                   cc_byte >> 4, cc_byte & 0xF, mpr)
    cc = CcState(ooo & _OOO_MAX, ccw & _RCVD_MAX, tx_ts, bool(ccw >> 31), ccw >> 24 & _PEN_MAX)
    return SackPacket(_bth_from(*f[:5]), sack, cc)


def _decode_nack(f: tuple) -> NackPacket:
    w0, reason, _rsvd, ent, spd, dpd, npsn, cack = f[5:]
    _expect_ext(w0, EXT_NACK, 0)
    m = w0 >> 5 & 3
    _check_m(m)
    nack = NackExt(reason, ent, npsn & _PSN_MASK, cack & _PSN_MASK, m, spd, dpd)
    return NackPacket(_bth_from(*f[:5]), nack)


def _decode_probe(f: tuple) -> ProbePacket:
    _expect_ext(f[5], EXT_PROBE, 0)
    return ProbePacket(_bth_from(*f[:5]), ProbeExt(f[7]))


def _decode_port_status(f: tuple) -> PortStatusPacket:
    _expect_ext(f[5], EXT_PORT_STATUS, 0)
    bth = _bth_from(*f[:5])
    if bth.dest_qp != QPN_ENDPOINT:
        raise BadField(f"port status to QP {bth.dest_qp:#x}, expected {QPN_ENDPOINT:#x}")
    return PortStatusPacket(bth, PortStatusExt(f[6], f[7]))


_CONTROL_DECODERS: dict[int, tuple[struct.Struct, Callable[[tuple], Packet]]] = {
    OP_SACK: (_S_SACK, _decode_sack),
    OP_NACK: (_S_NACK, _decode_nack),
    OP_PROBE: (_S_PROBE, _decode_probe),
    OP_EP_REQ: (_S_PORT_STATUS, _decode_port_status),
    OP_EP_RSP: (_S_PORT_STATUS, _decode_port_status),
}


def decode_packet(data: bytes) -> Packet:
    """Parse a UDP payload; a data payload shorter than reth.dma_len is a trimmed packet."""
    if len(data) < BTH_LEN:
        raise TruncatedPacket(f"{len(data)} bytes cannot hold a {BTH_LEN}-byte BTH")
    op = data[0]
    if op in DATA_OPCODES:
        return _decode_data(data)
    entry = _CONTROL_DECODERS.get(op)
    if entry is None:
        raise UnknownOpcode(f"BTH opcode 0x{op:02X} has no layout in the testbed")
    st, dec = entry
    if len(data) != st.size:
        cls = TruncatedPacket if len(data) < st.size else BadField
        raise cls(f"opcode 0x{op:02X} packet of {len(data)} bytes, expected {st.size}")
    return dec(st.unpack_from(data))


# ---------------------------------------------------------------- per-packet fast paths


class DataFields(NamedTuple):
    """decode_data_fields: a data packet's fields the receiver reads (wire.fields: BTH, METH,
    RETH, ImmDt); `payload` is a slice of the decoded buffer."""

    opcode: int
    dest_qp: int
    psn: int
    msn: int
    va: int
    rkey: int
    dma_len: int
    imm: int | None
    payload: bytes


class SackFields(NamedTuple):
    """decode_sack_fields: a SACK's fields the sender reads (wire.fields: BTH, SACK)."""

    dest_qp: int
    cack_psn: int
    ack_psn_offset: int
    entropy: int
    sack_offset: int
    sack_bitmap: int
    m: int
    probe_resp: bool


# The host agents' data and SACK traffic without the dataclasses: the same bytes as
# encode_packet/decode_packet and the same WireErrors (an argument out of range falls back to
# the dataclass encoder, which names the field). BTH fields not named are their defaults.

_DATA_FLAGS = _bth_fields(Bth(OP_WRITE_ONLY, 0, 0), DATA_OPCODES)[1]  # se=0 migreq=1 pad/tver=0
_SACK_EXT_BASE = _ext_word(EXT_SACK, EXT_CC_STATE)
_SACK_CC_BYTE = SackExt(0, 0, 0, 0, 0).cc_type << 4


def encode_data_fields(opcode: int, dest_qp: int, psn: int, ack_req: bool, rtx: bool, msn: int,
                       va: int, rkey: int, dma_len: int, imm: int | None,
                       payload: bytes) -> bytes:
    """encode_packet(DataPacket(Bth(opcode, dest_qp, psn, ack_req, rtx), Meth(msn),
    Reth(va, rkey, dma_len), payload, imm))."""
    if (0 <= dest_qp <= _QP_MAX and 0 <= psn <= PSN_MAX and 0 <= msn <= _MSN_MAX
            and 0 <= va <= _VA_MAX and 0 <= rkey <= _RKEY_MAX
            and len(payload) <= dma_len <= _DMA_MAX and opcode in DATA_OPCODES):
        if imm is None:
            if opcode not in IMM_OPCODES:
                return _S_DATA.pack(opcode, _DATA_FLAGS, 0xFFFF, dest_qp,
                                    (ack_req and 0x80000000) | (rtx and 0x40000000) | psn,
                                    0, msn, va, rkey, dma_len) + payload
        elif opcode in IMM_OPCODES and 0 <= imm <= _IMM_MAX:
            return _S_DATA.pack(opcode, _DATA_FLAGS, 0xFFFF, dest_qp,
                                (ack_req and 0x80000000) | (rtx and 0x40000000) | psn,
                                0, msn, va, rkey, dma_len) + _S_IMM.pack(imm) + payload
    return _encode_data(DataPacket(Bth(opcode, dest_qp, psn, bool(ack_req), bool(rtx)),
                                   Meth(msn), Reth(va, rkey, dma_len), payload, imm))


def encode_sack_fields(dest_qp: int, psn: int, cack_psn: int, ack_psn_offset: int, entropy: int,
                       sack_offset: int, sack_bitmap: int, m: int, probe_resp: bool,
                       spdcid: int, dpdcid: int, ooo_count: int, rcvd_bytes: int) -> bytes:
    """encode_packet(SackPacket(Bth(OP_SACK, dest_qp, psn), SackExt(cack_psn, ack_psn_offset,
    entropy, sack_offset, sack_bitmap, m, probe_resp, spdcid, dpdcid),
    CcState(ooo_count, rcvd_bytes)))."""
    if (0 <= dest_qp <= _QP_MAX and 0 <= psn <= PSN_MAX and 0 <= cack_psn <= PSN_MAX
            and _APO_MIN <= ack_psn_offset <= _APO_MAX and 0 <= entropy <= _ENTROPY_MAX
            and 0 <= sack_offset <= _SOFF_MAX and 0 <= sack_bitmap <= _BITMAP_MAX
            and M_NONE <= m <= M_ALWAYS_SKIP and 0 <= spdcid <= _PDCID_MAX
            and 0 <= dpdcid <= _PDCID_MAX and 0 <= ooo_count <= _OOO_MAX
            and 0 <= rcvd_bytes <= _RCVD_MAX):
        return _S_SACK.pack(OP_SACK, _DATA_FLAGS, 0xFFFF, dest_qp, psn,
                            _SACK_EXT_BASE | m << 5 | (probe_resp and 2), ack_psn_offset,
                            entropy, spdcid, dpdcid, cack_psn, _SACK_CC_BYTE, 0, sack_offset,
                            sack_bitmap, 0, ooo_count, rcvd_bytes)
    return _encode_sack(SackPacket(
        Bth(OP_SACK, dest_qp, psn),
        SackExt(cack_psn, ack_psn_offset, entropy, sack_offset, sack_bitmap, m,
                bool(probe_resp), spdcid, dpdcid),
        CcState(ooo_count, rcvd_bytes)))


def decode_data_fields(data: bytes) -> DataFields:
    """decode_packet of a data packet as DataFields; the caller has seen a data opcode in
    data[0]. The payload is a slice of `data` (a view of a memoryview: placed without another
    copy)."""
    n = len(data)
    if n < _DATA_MIN:
        if n < BTH_LEN:
            raise TruncatedPacket(f"{n} bytes cannot hold a {BTH_LEN}-byte BTH")
        raise TruncatedPacket(f"data packet of {n} bytes, headers need {_DATA_MIN}")
    op, _fl, _pkey, qpw, psnw, _rq_msn, msn, va, rkey, dma_len = _S_DATA.unpack_from(data)
    off, imm = _DATA_MIN, None
    if op in IMM_OPCODES and n > _DATA_MIN:  # exactly _DATA_MIN: trimmed, ImmDt cut
        if n < _DATA_MIN + IMM_LEN:
            raise TruncatedPacket(f"data packet of {n} bytes ends inside ImmDt")
        imm = _S_IMM.unpack_from(data, _DATA_MIN)[0]
        off += IMM_LEN
    if n - off > dma_len:
        raise BadField(f"payload of {n - off} bytes exceeds reth.dma_len={dma_len}")
    return DataFields(op, qpw & _QP_MAX, psnw & _PSN_MASK, msn, va, rkey, dma_len, imm,
                      data[off:])


def decode_sack_fields(data: bytes) -> SackFields:
    """decode_packet of a SACK as SackFields; the caller has seen OP_SACK in data[0]."""
    if len(data) != _S_SACK.size:
        if len(data) < BTH_LEN:
            raise TruncatedPacket(f"{len(data)} bytes cannot hold a {BTH_LEN}-byte BTH")
        cls = TruncatedPacket if len(data) < _S_SACK.size else BadField
        raise cls(f"opcode 0x{OP_SACK:02X} packet of {len(data)} bytes, expected {_S_SACK.size}")
    (_op, _fl, _pkey, qpw, _psnw, w0, apo, ent, _spd, _dpd, cackw, _cc, _mpr, soff, bitmap,
     _ts, _ooo, _ccw) = _S_SACK.unpack_from(data)
    _expect_ext(w0, EXT_SACK, EXT_CC_STATE)
    m = w0 >> 5 & 3
    _check_m(m)
    return SackFields(qpw & _QP_MAX, cackw & _PSN_MASK, apo, ent, soff, bitmap, m,
                      bool(w0 >> 1 & 1))


_PROBE_EXT = _ext_word(EXT_PROBE, 0)


def encode_probe_fields(dest_qp: int, psn: int, entropy: int) -> bytes:
    """encode_packet(ProbePacket(Bth(OP_PROBE, dest_qp, psn), ProbeExt(entropy)))."""
    if 0 <= dest_qp <= _QP_MAX and 0 <= psn <= PSN_MAX and 0 <= entropy <= _ENTROPY_MAX:
        return _S_PROBE.pack(OP_PROBE, _DATA_FLAGS, 0xFFFF, dest_qp, psn, _PROBE_EXT, 0, entropy)
    return _encode_probe(ProbePacket(Bth(OP_PROBE, dest_qp, psn), ProbeExt(entropy)))


def decode_probe_fields(data: bytes) -> tuple[int, int]:
    """decode_packet of a PROBE as (dest_qp, entropy); the caller has seen OP_PROBE in
    data[0]."""
    if len(data) != _S_PROBE.size:
        if len(data) < BTH_LEN:
            raise TruncatedPacket(f"{len(data)} bytes cannot hold a {BTH_LEN}-byte BTH")
        cls = TruncatedPacket if len(data) < _S_PROBE.size else BadField
        raise cls(f"opcode 0x{OP_PROBE:02X} packet of {len(data)} bytes, expected "
                  f"{_S_PROBE.size}")
    _op, _fl, _pkey, qpw, _psnw, w0, _rsvd, entropy = _S_PROBE.unpack_from(data)
    _expect_ext(w0, EXT_PROBE, 0)
    return qpw & _QP_MAX, entropy


# ---------------------------------------------------------------- PSN serial arithmetic


def psn_add(a: int, b: int) -> int:
    """a + b in the 24-bit PSN space (b may be negative)."""
    return (a + b) & _PSN_MASK


def psn_diff(a: int, b: int) -> int:
    """Signed distance a - b in 24-bit serial arithmetic, in -2^23..2^23-1."""
    return ((a - b + _PSN_HALF) & _PSN_MASK) - _PSN_HALF
