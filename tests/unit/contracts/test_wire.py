"""Golden-byte tests for wire, written field by field from docs/wire-format.md.

The vectors (GOLDEN_PACKETS, GOLDEN_TRIMMED_FRAME) are shared with test_layers.py and
test_wire_malformed.py so the codec and the scapy layers are held to the same bytes.
"""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest
from scapy.contrib.roce import BTH as ScapyBTH

import wire
from tests.unit.golden_packets import GOLDEN_PACKETS, GOLDEN_TRIMMED_FRAME, IDS, TRIMMED_ENV
from wire import (
    OP_WRITE_ONLY,
    BadField,
    Bth,
    DataPacket,
    Meth,
    Reth,
    decode_frame,
    decode_packet,
    encode_frame,
    encode_packet,
    ev_from_fields,
    ev_to_fields,
    psn_add,
    psn_diff,
)


@pytest.mark.parametrize(("name", "pkt", "raw"), GOLDEN_PACKETS, ids=IDS)
def test_golden_encode_decode(name: str, pkt: wire.Packet, raw: bytes) -> None:
    assert encode_packet(pkt) == raw
    assert decode_packet(raw) == pkt


def test_golden_lengths_match_constants() -> None:
    by_name = {name: raw for name, _, raw in GOLDEN_PACKETS}
    assert len(by_name["sack"]) == wire.BTH_LEN + wire.SACK_LEN + wire.CC_STATE_LEN
    assert len(by_name["nack"]) == wire.BTH_LEN + wire.NACK_LEN
    assert len(by_name["probe"]) == wire.BTH_LEN + wire.PROBE_LEN
    assert len(by_name["ep_req"]) == wire.BTH_LEN + wire.PORT_STATUS_LEN
    assert len(by_name["write_middle_trimmed"]) == wire.BTH_LEN + wire.METH_LEN + wire.RETH_LEN


def test_trimmed_flags() -> None:
    trimmed = {name: decode_packet(raw).trimmed for name, _, raw in GOLDEN_PACKETS[:4]}
    assert trimmed == {"write_only": False, "write_last_imm_rtx": False,
                       "write_middle_trimmed": True, "write_only_imm_trimmed": True}


def test_golden_trimmed_frame() -> None:
    assert len(GOLDEN_TRIMMED_FRAME) == wire.TRIMMED_FRAME_LEN == wire.DATA_HEADERS_LEN == 134
    udp_payload = GOLDEN_PACKETS[2][2]
    assert encode_frame(TRIMMED_ENV, udp_payload) == GOLDEN_TRIMMED_FRAME
    env, payload = decode_frame(GOLDEN_TRIMMED_FRAME)
    assert env == TRIMMED_ENV
    assert payload == udp_payload
    assert decode_packet(payload).trimmed


def test_frame_inner_tc_is_not_checked() -> None:
    """A switch rewrites only the outer DSCP, so the inner TC may differ (e.g. TRIMMABLE)."""
    frame = bytearray(GOLDEN_TRIMMED_FRAME)
    frame[54:56] = bytes.fromhex("6120")  # inner TC 0x12 = DSCP 4 << 2 | ECT0
    assert decode_frame(bytes(frame))[0] == TRIMMED_ENV


@pytest.mark.parametrize(("name", "pkt", "raw"), GOLDEN_PACKETS, ids=IDS)
@pytest.mark.parametrize("padding", [0, 1, 46])
def test_full_frame_round_trip(name: str, pkt: wire.Packet, raw: bytes, padding: int) -> None:
    frame = encode_frame(TRIMMED_ENV, encode_packet(pkt))
    assert len(frame) == wire.FRAME_HEADERS_LEN + len(raw)
    env, payload = decode_frame(frame + b"\x00" * padding)
    assert env == TRIMMED_ENV
    assert decode_packet(payload) == pkt


def test_full_data_frame_length() -> None:
    pkt = DataPacket(Bth(OP_WRITE_ONLY, 0x100, 0), Meth(0), Reth(0, 0, 1024), bytes(1024))
    frame = encode_frame(TRIMMED_ENV, encode_packet(pkt))
    assert len(frame) == 1158 == wire.layout.FULL_DATA_FRAME_LEN


def _scapy_bth(b: Bth) -> bytes:
    """The 12 BTH bytes scapy builds (its ICRC trailer, which MRC omits, is stripped)."""
    layer = ScapyBTH(opcode=b.opcode, solicited=int(b.se), migreq=int(b.migreq), padcount=b.pad,
                     version=b.tver, pkey=b.pkey, dqpn=b.dest_qp, ackreq=int(b.ack_req),
                     resv7=0x40 if b.rtx else 0, psn=b.psn, icrc=0)
    return bytes(layer)[: wire.BTH_LEN]


@pytest.mark.parametrize(("name", "pkt", "raw"), GOLDEN_PACKETS, ids=IDS)
def test_bth_matches_scapy_roce(name: str, pkt: wire.Packet, raw: bytes) -> None:
    assert _scapy_bth(pkt.bth) == raw[: wire.BTH_LEN]


def test_bth_matches_scapy_roce_random() -> None:
    rng = random.Random(7)
    for _ in range(200):
        b = Bth(opcode=rng.choice(sorted(wire.DATA_OPCODES)), dest_qp=rng.getrandbits(24),
                psn=rng.getrandbits(24), ack_req=rng.random() < 0.5, rtx=rng.random() < 0.5,
                se=rng.random() < 0.5, migreq=rng.random() < 0.5, pad=rng.getrandbits(2),
                tver=rng.getrandbits(4), pkey=rng.getrandbits(16))
        pkt = DataPacket(b, Meth(0), Reth(0, 0, 0), b"")
        raw = encode_packet(pkt)
        assert raw[: wire.BTH_LEN] == _scapy_bth(b)
        assert decode_packet(raw).bth == b


@pytest.mark.parametrize("ev", [0, 1, 0xFFFF, 0x10000, 0xF0000, 0x12345678, 0xFFFFFFFF])
def test_ev_split_join(ev: int) -> None:
    sport, flow_label = ev_to_fields(ev)
    assert 0 <= sport <= 0xFFFF and 0 <= flow_label <= 0xFFFFF
    assert sport == ev >> 16 and flow_label == ev & 0xFFFFF
    assert ev_from_fields(sport, flow_label) == ev


def test_ev_split_join_random() -> None:
    rng = random.Random(1)
    for _ in range(1000):
        ev = rng.getrandbits(32)
        assert ev_from_fields(*ev_to_fields(ev)) == ev


def test_ev_overlap_mismatch() -> None:
    with pytest.raises(BadField, match="19:16"):
        ev_from_fields(0x0001, 0x20000)
    with pytest.raises(BadField):
        ev_from_fields(0xFFFF, 0x0FFFF)
    for bad in (-1, 1 << 32):
        with pytest.raises(BadField, match="ev"):
            ev_to_fields(bad)


def test_psn_arithmetic_wraps() -> None:
    assert psn_add(0xFFFFFF, 1) == 0
    assert psn_add(0, -1) == 0xFFFFFF
    assert psn_add(0xFFFFF0, 0x20) == 0x10
    assert psn_diff(0, 0xFFFFFF) == 1
    assert psn_diff(0xFFFFFF, 0) == -1
    assert psn_diff(5, 5) == 0
    assert psn_diff(0x7FFFFF, 0) == 0x7FFFFF
    assert psn_diff(0x800000, 0) == -0x800000
    rng = random.Random(3)
    for _ in range(1000):
        a, d = rng.getrandbits(24), rng.randrange(-0x800000, 0x800000)
        b = psn_add(a, d)
        assert psn_diff(b, a) == d
        if d != -0x800000:
            assert psn_diff(a, b) == -d


def test_codec_does_not_import_scapy() -> None:
    """The per-packet codec must stay light; scapy is only for layers.py."""
    code = "import sys, wire; print('scapy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).parents[3],
                         capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "False"
