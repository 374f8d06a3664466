"""Scapy layers for the MRC headers of docs/wire-format.md, for tests, pcaps and debugging.

The codec (wire) is what runs per packet; these layers are a second,
declarative reading of the same spec, and tests hold both to the same bytes.
Field names equal the codec dataclass field names so the two can be compared
field by field.

scapy.contrib.roce.BTH has the same 12-byte layout as MrcBTH (our RTX flag is
the top bit of its `resv7`), but it expects a 4-byte ICRC trailer, which MRC
omits. Importing this module therefore unbinds it from UDP/4791 and binds
MrcBTH there instead, whatever the import order.
"""

from __future__ import annotations

from scapy.contrib import roce
from scapy.fields import (
    BitEnumField,
    BitField,
    ByteEnumField,
    ByteField,
    IntField,
    ShortField,
    SignedShortField,
    ThreeBytesField,
    X3BytesField,
    XByteField,
    XIntField,
    XLongField,
    XShortField,
)
from scapy.layers.inet import UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether
from scapy.packet import Packet, bind_bottom_up, bind_layers, bind_top_down, split_layers

import wire
from wire import (
    DATA_OPCODES,
    DEFAULT_HOP_LIMIT,
    EXT_CC_STATE,
    EXT_NACK,
    EXT_PORT_STATUS,
    EXT_PROBE,
    EXT_SACK,
    IMM_OPCODES,
    M_NONE,
    OP_EP_REQ,
    OP_EP_RSP,
    OP_NACK,
    OP_PROBE,
    OP_SACK,
    OP_WRITE_ONLY,
    ROCE_UDP_PORT,
    Envelope,
    ev_to_fields,
)

OPCODE_NAMES = {getattr(wire, n): n[3:] for n in dir(wire) if n.startswith("OP_")}
NACK_REASON_NAMES = {
    getattr(wire, n): n[5:]
    for n in ("NACK_TRIMMED", "NACK_TRIMMED_LASTHOP", "NACK_NO_BITMAP", "NACK_PSN_OOR_WINDOW",
              "NACK_RKEY_VIOLATION", "NACK_BOUNDS_VIOLATION")
}
M_NAMES = {getattr(wire, n): n[2:] for n in ("M_NONE", "M_SKIP_ONCE", "M_ALWAYS_SKIP")}


class MrcBTH(Packet):
    """IBTA base transport header without ICRC; `rtx` is the top bit of IBTA's reserved 7."""

    name = "MRC BTH"
    fields_desc = [
        ByteEnumField("opcode", OP_WRITE_ONLY, OPCODE_NAMES),
        BitField("se", 0, 1),
        BitField("migreq", 1, 1),
        BitField("pad", 0, 2),
        BitField("tver", 0, 4),
        XShortField("pkey", 0xFFFF),
        XByteField("resv8", 0),
        X3BytesField("dest_qp", 0),
        BitField("ack_req", 0, 1),
        BitField("rtx", 0, 1),
        BitField("resv6", 0, 6),
        ThreeBytesField("psn", 0),
    ]


class MrcMETH(Packet):
    name = "MRC METH"
    fields_desc = [ShortField("rq_msn", 0), ShortField("msn", 0)]


class MrcRETH(Packet):
    """Per-packet placement: va and dma_len describe this packet's payload."""

    name = "MRC RETH"
    fields_desc = [XLongField("va", 0), XIntField("rkey", 0), IntField("dma_len", 0)]

    def guess_payload_class(self, payload: bytes) -> type[Packet]:
        """ImmDt follows only on IMM opcodes, which only the BTH two layers down knows."""
        layer = self.underlayer
        while layer is not None and not isinstance(layer, MrcBTH):
            layer = layer.underlayer
        if layer is not None and layer.opcode in IMM_OPCODES:
            return MrcImmDt
        return super().guess_payload_class(payload)


class MrcImmDt(Packet):
    name = "MRC ImmDt"
    fields_desc = [XIntField("imm", 0)]


class MrcSack(Packet):
    name = "MRC SACK ext"
    fields_desc = [
        BitField("ext_type", EXT_SACK, 4),
        BitField("next_ext", EXT_CC_STATE, 5),
        BitEnumField("m", M_NONE, 2, M_NAMES),
        BitField("resv3", 0, 3),
        BitField("probe_resp", 0, 1),
        BitField("resv1", 0, 1),
        SignedShortField("ack_psn_offset", 0),
        XIntField("entropy", 0),
        XShortField("spdcid", 0),
        XShortField("dpdcid", 0),
        XByteField("resv8", 0),
        ThreeBytesField("cack_psn", 0),
        BitField("cc_type", 1, 4),
        BitField("cc_flags", 0, 4),
        ByteField("mpr", 0),
        ShortField("sack_offset", 0),
        XLongField("sack_bitmap", 0),
    ]


class MrcCcState(Packet):
    name = "MRC CC_STATE ext"
    fields_desc = [
        ShortField("tx_ts", 0),
        BitField("resv1", 0, 1),
        BitField("ooo_count", 0, 15),
        BitField("restore", 0, 1),
        BitField("rcv_cwnd_pen", 0, 7),
        ThreeBytesField("rcvd_bytes", 0),
    ]


class MrcNack(Packet):
    name = "MRC NACK ext"
    fields_desc = [
        BitField("ext_type", EXT_NACK, 4),
        BitField("next_ext", 0, 5),
        BitEnumField("m", M_NONE, 2, M_NAMES),
        BitField("resv5", 0, 5),
        ByteEnumField("reason", wire.NACK_TRIMMED, NACK_REASON_NAMES),
        XByteField("resv8", 0),
        XIntField("entropy", 0),
        XShortField("spdcid", 0),
        XShortField("dpdcid", 0),
        XByteField("resv8b", 0),
        ThreeBytesField("nack_psn", 0),
        XByteField("resv8c", 0),
        ThreeBytesField("cack_psn", 0),
    ]


class MrcProbe(Packet):
    name = "MRC PROBE ext"
    fields_desc = [
        BitField("ext_type", EXT_PROBE, 4),
        BitField("next_ext", 0, 5),
        BitField("resv7", 0, 7),
        XShortField("resv16", 0),
        XIntField("entropy", 0),
    ]


class MrcPortStatus(Packet):
    name = "MRC PORT_STATUS ext"
    fields_desc = [
        BitField("ext_type", EXT_PORT_STATUS, 4),
        BitField("next_ext", 0, 5),
        BitField("resv7", 0, 7),
        ShortField("seq", 0),
        XIntField("port_mask", 0),
    ]


split_layers(UDP, roce.BTH, dport=ROCE_UDP_PORT)
bind_layers(UDP, MrcBTH, dport=ROCE_UDP_PORT)
for _op in sorted(DATA_OPCODES):
    bind_bottom_up(MrcBTH, MrcMETH, opcode=_op)
bind_top_down(MrcBTH, MrcMETH, opcode=OP_WRITE_ONLY)
bind_layers(MrcMETH, MrcRETH)
bind_layers(MrcBTH, MrcSack, opcode=OP_SACK)
bind_layers(MrcSack, MrcCcState, next_ext=EXT_CC_STATE)
bind_layers(MrcBTH, MrcNack, opcode=OP_NACK)
bind_layers(MrcBTH, MrcProbe, opcode=OP_PROBE)
bind_bottom_up(MrcBTH, MrcPortStatus, opcode=OP_EP_RSP)
bind_layers(MrcBTH, MrcPortStatus, opcode=OP_EP_REQ)


def mrc_frame(env: Envelope, transport: Packet) -> Packet:
    """Wrap BTH-and-up layers in Ethernet / outer IPv6 / inner IPv6 / UDP as the codec does."""
    sport, flow_label = ev_to_fields(env.ev)
    tc = env.dscp << 2 | env.ecn
    return (
        Ether(src=env.src_mac, dst=env.dst_mac)
        / IPv6(tc=tc, fl=flow_label, hlim=env.hop_limit, src=str(env.outer_src),
               dst=str(env.outer_dst))
        / IPv6(tc=tc, fl=0, hlim=DEFAULT_HOP_LIMIT, src=str(env.inner_src),
               dst=str(env.inner_dst))
        / UDP(sport=sport, dport=ROCE_UDP_PORT, chksum=0)
        / transport
    )
