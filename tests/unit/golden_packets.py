"""Golden packets: every header of docs/wire-format.md as hand-written bytes, field by field."""

from __future__ import annotations

from ipaddress import IPv6Address

import wire
from wire import (
    DSCP_TRIMMED,
    ECN_ECT0,
    M_ALWAYS_SKIP,
    M_SKIP_ONCE,
    NACK_TRIMMED,
    OP_EP_REQ,
    OP_EP_RSP,
    OP_NACK,
    OP_PROBE,
    OP_SACK,
    OP_WRITE_LAST_IMM,
    OP_WRITE_MIDDLE,
    OP_WRITE_ONLY,
    OP_WRITE_ONLY_IMM,
    QPN_ENDPOINT,
    Bth,
    CcState,
    DataPacket,
    Envelope,
    Meth,
    NackExt,
    NackPacket,
    PortStatusExt,
    PortStatusPacket,
    ProbeExt,
    ProbePacket,
    Reth,
    SackExt,
    SackPacket,
)


def h(*parts: str) -> bytes:
    """Join hex fragments (one per field) into bytes."""
    return bytes.fromhex("".join(parts))


# (name, packet, UDP payload bytes). Each hex fragment is one field (or bit-packed group).
GOLDEN_PACKETS: list[tuple[str, wire.Packet, bytes]] = [
    (
        "write_only",
        DataPacket(Bth(OP_WRITE_ONLY, dest_qp=0x000123, psn=0xABCDEF, ack_req=True),
                   Meth(msn=0x0102), Reth(va=0x1122334455667788, rkey=0xDEADBEEF, dma_len=8),
                   b"payload!"),
        h("ca",  # BTH opcode WRITE_ONLY
          "40",  # SE=0 M=1 pad=0 tver=0
          "ffff",  # pkey
          "00", "000123",  # rsvd, dest QP
          "80", "abcdef",  # A=1 RTX=0 rsvd=0, PSN
          "0000", "0102",  # METH rq_msn, msn
          "1122334455667788", "deadbeef", "00000008",  # RETH va, rkey, dma_len
          "7061796c6f616421"),  # payload "payload!"
    ),
    (
        "write_last_imm_rtx",
        DataPacket(Bth(OP_WRITE_LAST_IMM, dest_qp=0x000100, psn=0x000001, ack_req=True, rtx=True,
                       se=True),
                   Meth(msn=0xFFFF, rq_msn=0), Reth(va=0x10, rkey=0x01, dma_len=2), b"hi",
                   imm=0xCAFEF00D),
        h("c9",  # opcode WRITE_LAST_IMM
          "c0",  # SE=1 M=1 pad=0 tver=0
          "ffff", "00", "000100",  # pkey, rsvd, dest QP
          "c0", "000001",  # A=1 RTX=1 rsvd=0, PSN
          "0000", "ffff",  # rq_msn, msn
          "0000000000000010", "00000001", "00000002",  # va, rkey, dma_len
          "cafef00d",  # ImmDt
          "6869"),  # payload "hi"
    ),
    (
        "write_middle_trimmed",
        DataPacket(Bth(OP_WRITE_MIDDLE, dest_qp=0x000100, psn=0x000042),
                   Meth(msn=5), Reth(va=0x10000, rkey=7, dma_len=1024), b""),
        h("c7", "40", "ffff",  # opcode WRITE_MIDDLE, SE=0 M=1, pkey
          "00", "000100", "00", "000042",  # rsvd, dest QP, A=0 RTX=0, PSN
          "0000", "0005",  # rq_msn, msn
          "0000000000010000", "00000007", "00000400"),  # va, rkey, dma_len=1024; payload cut
    ),
    (
        "write_only_imm_trimmed",
        DataPacket(Bth(OP_WRITE_ONLY_IMM, dest_qp=0x000101, psn=0xFFFFFF, ack_req=True),
                   Meth(msn=1), Reth(va=0, rkey=0xFFFFFFFF, dma_len=0), b"", imm=None),
        h("cb", "40", "ffff",  # opcode WRITE_ONLY_IMM, SE=0 M=1, pkey
          "00", "000101", "80", "ffffff",  # rsvd, dest QP, A=1, PSN
          "0000", "0001",  # rq_msn, msn
          "0000000000000000", "ffffffff", "00000000"),  # va, rkey, dma_len; ImmDt cut
    ),
    (
        "sack",
        SackPacket(Bth(OP_SACK, dest_qp=0x000200, psn=0),
                   SackExt(cack_psn=0x123456, ack_psn_offset=-2, entropy=0x89ABCDEF,
                           sack_offset=3, sack_bitmap=0x8000000000000005, m=M_SKIP_ONCE,
                           probe_resp=True, spdcid=0x0100, dpdcid=0x0200),
                   CcState(ooo_count=0x7FFF, rcvd_bytes=0xABCDEF, tx_ts=0x0A0B, restore=True,
                           rcv_cwnd_pen=5)),
        h("dc", "40", "ffff", "00", "000200", "00", "000000",  # BTH opcode SACK, QP, PSN 0
          "11a2",  # type=1 next=3 M=1 rsvd=0 probe_resp=1 rsvd=0: 0001|00011|01|000|1|0
          "fffe",  # ack_psn_offset = -2
          "89abcdef",  # entropy
          "0100", "0200",  # spdcid, dpdcid
          "00", "123456",  # rsvd, cack_psn
          "10", "00", "0003",  # cc_type=1 cc_flags=0, mpr, sack_offset
          "8000000000000005",  # sack_bitmap
          "0a0b",  # CC_STATE tx_ts
          "7fff",  # rsvd=0 ooo_count
          "85", "abcdef"),  # restore=1 rcv_cwnd_pen=5, rcvd_bytes
    ),
    (
        "nack",
        NackPacket(Bth(OP_NACK, dest_qp=0x000101, psn=0x000010),
                   NackExt(reason=NACK_TRIMMED, entropy=0x12345678, nack_psn=0xFFFFFF,
                           cack_psn=0xFFFFF0, m=M_ALWAYS_SKIP, spdcid=0x0101, dpdcid=0x0202)),
        h("dd", "40", "ffff", "00", "000101", "00", "000010",  # BTH opcode NACK
          "2040",  # type=2 next=0 M=2 rsvd=0: 0010|00000|10|00000
          "01", "00",  # reason TRIMMED, rsvd
          "12345678",  # entropy
          "0101", "0202",  # spdcid, dpdcid
          "00", "ffffff",  # rsvd, nack_psn
          "00", "fffff0"),  # rsvd, cack_psn
    ),
    (
        "probe",
        ProbePacket(Bth(OP_PROBE, dest_qp=0x000100, psn=0x000007), ProbeExt(entropy=0xFFFFFFFF)),
        h("de", "40", "ffff", "00", "000100", "00", "000007",  # BTH opcode PROBE, probe seq 7
          "4000",  # type=4 next=0 rsvd=0
          "0000",  # rsvd
          "ffffffff"),  # entropy
    ),
    (
        "ep_req",
        PortStatusPacket(Bth(OP_EP_REQ, dest_qp=QPN_ENDPOINT, psn=3),
                         PortStatusExt(seq=0x0009, port_mask=0x0000000B)),
        h("d8", "40", "ffff", "00", "000002", "00", "000003",  # BTH opcode EP_REQ to QP 2
          "5000",  # type=5 next=0 rsvd=0
          "0009",  # seq
          "0000000b"),  # port_mask: planes 0, 1, 3 up
    ),
    (
        "ep_rsp",
        PortStatusPacket(Bth(OP_EP_RSP, dest_qp=QPN_ENDPOINT, psn=3),
                         PortStatusExt(seq=0xFFFF, port_mask=0x80000001)),
        h("d9", "40", "ffff", "00", "000002", "00", "000003",  # BTH opcode EP_RSP to QP 2
          "5000", "ffff", "80000001"),  # type=5, seq, port_mask
    ),
]

TRIMMED_ENV = Envelope(
    src_mac="02:00:00:01:0e:05", dst_mac="02:00:00:01:01:00",
    outer_src=IPv6Address("fd00:0:1:0::1"), outer_dst=IPv6Address("fcbb:bbbb:1100:1200:1101:e05::"),
    inner_src=IPv6Address("fd00:0:1:0::1"), inner_dst=IPv6Address("fd00:0:1:1::1"),
    ev=0x1234ABCD, dscp=DSCP_TRIMMED, ecn=ECN_ECT0, hop_limit=62,
)

GOLDEN_TRIMMED_FRAME = h(
    "020000010100", "020000010e05", "86dd",  # Ethernet dst, src, ethertype IPv6
    "6324abcd",  # outer: version 6, TC 0x32 (DSCP 12 << 2 | ECT0), flow label EV[19:0]=0x4abcd
    "0050", "29", "3e",  # payload length 80, next header 41, hop limit 62
    "fd000000000100000000000000000001",  # outer src fd00:0:1:0::1
    "fcbbbbbb1100120011010e0500000000",  # outer dst uSID carrier
    "63200000",  # inner: version 6, TC 0x32, flow label 0
    "0028", "11", "40",  # payload length 40, next header 17, hop limit 64
    "fd000000000100000000000000000001",  # inner src
    "fd000000000100010000000000000001",  # inner dst fd00:0:1:1::1
    "1234", "12b7", "0028", "0000",  # UDP sport EV[31:16], dport 4791, length 40, checksum 0
) + GOLDEN_PACKETS[2][2]  # BTH | METH | RETH of the trimmed WRITE_MIDDLE

IDS = [name for name, _, _ in GOLDEN_PACKETS]
