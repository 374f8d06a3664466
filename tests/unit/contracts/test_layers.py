"""The scapy layers must build and dissect exactly the golden bytes the codec does."""

from __future__ import annotations

import dataclasses

import pytest
from scapy.contrib.roce import BTH as ScapyBTH
from scapy.layers.inet import UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether
from scapy.packet import Packet as ScapyPacket
from scapy.packet import Padding, Raw

import wire
from tests.unit.golden_packets import GOLDEN_PACKETS, GOLDEN_TRIMMED_FRAME, IDS, TRIMMED_ENV
from wire import (
    DSCP_TRIMMED,
    EXT_CC_STATE,
    EXT_NACK,
    EXT_PORT_STATUS,
    EXT_PROBE,
    EXT_SACK,
    OP_WRITE_ONLY,
    ROCE_UDP_PORT,
    encode_frame,
)
from wire.layers import (
    MrcBTH,
    MrcCcState,
    MrcImmDt,
    MrcMETH,
    MrcNack,
    MrcPortStatus,
    MrcProbe,
    MrcRETH,
    MrcSack,
    mrc_frame,
)

HEADER_LAYERS: dict[type, type[ScapyPacket]] = {
    wire.Bth: MrcBTH, wire.Meth: MrcMETH, wire.Reth: MrcRETH, wire.SackExt: MrcSack,
    wire.CcState: MrcCcState, wire.NackExt: MrcNack, wire.ProbeExt: MrcProbe,
    wire.PortStatusExt: MrcPortStatus,
}
EXT_TYPES = {MrcSack: (EXT_SACK, EXT_CC_STATE), MrcNack: (EXT_NACK, 0),
             MrcProbe: (EXT_PROBE, 0), MrcPortStatus: (EXT_PORT_STATUS, 0)}


def _headers(pkt: wire.Packet) -> list[object]:
    """The codec header dataclasses of a packet, in wire order."""
    return [getattr(pkt, f.name) for f in dataclasses.fields(pkt)
            if type(getattr(pkt, f.name)) in HEADER_LAYERS]


def _layer(hdr: object) -> ScapyPacket:
    """A scapy layer from a codec header; field names are shared by design."""
    values = {f.name: int(getattr(hdr, f.name)) for f in dataclasses.fields(hdr)}
    return HEADER_LAYERS[type(hdr)](**values)


def to_scapy(pkt: wire.Packet) -> ScapyPacket:
    layers = [_layer(hdr) for hdr in _headers(pkt)]
    if isinstance(pkt, wire.DataPacket):
        if pkt.imm is not None:
            layers.append(MrcImmDt(imm=pkt.imm))
        if pkt.payload:
            layers.append(Raw(pkt.payload))
    stack = layers[0]
    for layer in layers[1:]:
        stack = stack / layer
    return stack


def _assert_dissected(dissected: ScapyPacket, pkt: wire.Packet) -> None:
    for hdr in _headers(pkt):
        layer = dissected[HEADER_LAYERS[type(hdr)]]
        for f in dataclasses.fields(hdr):
            assert getattr(layer, f.name) == int(getattr(hdr, f.name)), f.name
        if type(layer) in EXT_TYPES:
            assert (layer.ext_type, layer.next_ext) == EXT_TYPES[type(layer)]
    if isinstance(pkt, wire.DataPacket):
        has_imm = MrcImmDt in dissected
        assert has_imm == (pkt.imm is not None)
        if has_imm:
            assert dissected[MrcImmDt].imm == pkt.imm
        tail = dissected[MrcImmDt if has_imm else MrcRETH].payload
        load = b"" if isinstance(tail, Padding) else bytes(getattr(tail, "load", b""))
        assert load == pkt.payload


@pytest.mark.parametrize(("name", "pkt", "raw"), GOLDEN_PACKETS, ids=IDS)
def test_layers_build_golden_bytes(name: str, pkt: wire.Packet, raw: bytes) -> None:
    assert bytes(to_scapy(pkt)) == raw


@pytest.mark.parametrize(("name", "pkt", "raw"), GOLDEN_PACKETS, ids=IDS)
def test_layers_dissect_golden_bytes(name: str, pkt: wire.Packet, raw: bytes) -> None:
    _assert_dissected(MrcBTH(raw), pkt)


@pytest.mark.parametrize(("name", "pkt", "raw"), GOLDEN_PACKETS, ids=IDS)
def test_udp_4791_dispatches_to_mrc_bth(name: str, pkt: wire.Packet, raw: bytes) -> None:
    """scapy.contrib.roce is imported here too; MrcBTH must still own UDP/4791."""
    dissected = UDP(bytes(UDP(sport=1, dport=ROCE_UDP_PORT, chksum=0) / Raw(raw)))
    assert isinstance(dissected.payload, MrcBTH)
    assert ScapyBTH not in dissected
    _assert_dissected(dissected, pkt)


@pytest.mark.parametrize(("name", "pkt", "raw"), GOLDEN_PACKETS, ids=IDS)
def test_full_frame_matches_codec(name: str, pkt: wire.Packet, raw: bytes) -> None:
    frame = encode_frame(TRIMMED_ENV, raw)
    assert bytes(mrc_frame(TRIMMED_ENV, to_scapy(pkt))) == frame
    _assert_dissected(Ether(frame), pkt)


def test_trimmed_frame_golden() -> None:
    trimmed = GOLDEN_PACKETS[2][1]
    frame = mrc_frame(TRIMMED_ENV, to_scapy(trimmed))
    assert bytes(frame) == GOLDEN_TRIMMED_FRAME
    dissected = Ether(GOLDEN_TRIMMED_FRAME)
    outer, inner = dissected[IPv6], dissected[IPv6].payload
    assert (outer.plen, inner.plen, dissected[UDP].len) == (80, 40, 40)
    assert outer.tc >> 2 == DSCP_TRIMMED
    assert outer.nh == wire.IPPROTO_IPV6 and inner.nh == wire.IPPROTO_UDP
    assert dissected[UDP].chksum == 0
    assert dissected[MrcRETH].dma_len == 1024 and not dissected[MrcRETH].payload


@pytest.mark.parametrize(("name", "pkt", "raw"), GOLDEN_PACKETS[:3], ids=IDS[:3])
def test_frame_padding_is_not_payload(name: str, pkt: wire.Packet, raw: bytes) -> None:
    dissected = Ether(encode_frame(TRIMMED_ENV, raw) + b"\xee" * 10)
    assert dissected[Padding].load == b"\xee" * 10
    _assert_dissected(dissected, pkt)


@pytest.mark.parametrize("rtx", [0, 1])
def test_rtx_is_top_bit_of_scapy_resv7(rtx: int) -> None:
    ours = MrcBTH(opcode=OP_WRITE_ONLY, dest_qp=0x123456, psn=0xABCDEF, ack_req=1, rtx=rtx, se=1,
                  pad=3, tver=0xF, pkey=0x1234)
    theirs = ScapyBTH(opcode=OP_WRITE_ONLY, dqpn=0x123456, psn=0xABCDEF, ackreq=1,
                      resv7=rtx << 6, solicited=1, migreq=1, padcount=3, version=0xF,
                      pkey=0x1234, icrc=0)
    assert bytes(ours) == bytes(theirs)[: wire.BTH_LEN]
    assert ScapyBTH(bytes(ours) + bytes(4)).resv7 == rtx << 6


def test_control_layers_set_opcode_when_stacked() -> None:
    for layer, opcode in ((MrcSack(), wire.OP_SACK), (MrcNack(), wire.OP_NACK),
                          (MrcProbe(), wire.OP_PROBE), (MrcPortStatus(), wire.OP_EP_REQ),
                          (MrcMETH(), OP_WRITE_ONLY)):
        assert MrcBTH(bytes(MrcBTH() / layer)).opcode == opcode
