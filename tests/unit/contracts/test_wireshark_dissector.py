"""The Wireshark dissector (wire.dissector): the committed Lua file is the generator's output,
its headers have the lengths of wire.layout, and tshark running it decodes every golden packet
of docs/wire-format.md field for field as wire.layers does from the same bytes, with the EV
and the trim verdict of the codec. Needs Debian's tshark for the last part (the testbed's
setup installs it)."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest
from scapy.layers.l2 import Ether
from scapy.utils import wrpcap

import wire
from tests.dissector_check import COMMITTED, expected_fields, tshark_fields
from tests.unit.golden_packets import GOLDEN_PACKETS, GOLDEN_TRIMMED_FRAME, TRIMMED_ENV
from wire import dissector
from wire.layout import (
    BTH_LEN,
    CC_STATE_LEN,
    IMM_LEN,
    METH_LEN,
    NACK_LEN,
    PORT_STATUS_LEN,
    PROBE_LEN,
    RETH_LEN,
    SACK_LEN,
)

LENGTHS = {"bth": BTH_LEN, "meth": METH_LEN, "reth": RETH_LEN, "imm": IMM_LEN, "sack": SACK_LEN,
           "cc": CC_STATE_LEN, "nack": NACK_LEN, "probe": PROBE_LEN,
           "port_status": PORT_STATUS_LEN}


def test_the_committed_dissector_is_the_generators_output() -> None:
    assert COMMITTED.read_text() == dissector.lua_source(), (
        "regenerate it: python -m wire.dissector --out docs/wireshark/mrc.lua")


def test_every_header_has_the_length_of_the_wire_format() -> None:
    assert {a: dissector.layer_fields(a, layer)[1] for a, layer in dissector.LAYERS} == LENGTHS


def _frames() -> list[bytes]:
    """Every golden packet in a frame (data ones trimmable), the golden trimmed frame, and the
    data opcodes the golden packets lack, encoded by the codec."""
    env = dataclasses.replace(TRIMMED_ENV, dscp=wire.DSCP_TRIMMABLE)
    more = [wire.DataPacket(wire.Bth(op, dest_qp=0x000102, psn=5 + i), wire.Meth(msn=2),
                            wire.Reth(va=0x1000 * i, rkey=0xABCD, dma_len=8), b"12345678")
            for i, op in enumerate((wire.OP_WRITE_FIRST, wire.OP_WRITE_LAST))]
    return ([wire.encode_frame(env, raw) for _, _, raw in GOLDEN_PACKETS]
            + [GOLDEN_TRIMMED_FRAME]
            + [wire.encode_frame(env, wire.encode_packet(p)) for p in more])


@pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark is not installed "
                    "(apt install tshark; sudo ./testbed setup installs it)")
def test_tshark_decodes_every_opcode_as_wire_does(tmp_path: Path) -> None:
    frames = _frames()
    assert {Ether(f).getlayer(dissector.LAYERS[0][1]).opcode for f in frames} == (
        set(wire.DATA_OPCODES)
        | {wire.OP_SACK, wire.OP_NACK, wire.OP_PROBE, wire.OP_EP_REQ, wire.OP_EP_RSP})
    script = tmp_path / "mrc.lua"
    script.write_text(dissector.lua_source())
    capture = tmp_path / "golden.pcap"
    wrpcap(str(capture), [Ether(f) for f in frames])
    names = list(expected_fields(frames[0]))
    shown = tshark_fields(script, capture, names)
    assert len(shown) == len(frames)
    for number, frame in enumerate(frames, start=1):
        assert shown[number] == expected_fields(frame), f"frame {number}"


# Entropy source ports that other dissectors own (DNS, NTP, NetBIOS, SNMP, syslog): UDP offers
# the lower port first, so without the heuristic these packets showed as those protocols (a
# fabric capture in CI had one, measured: 94 of the 4,790 ports below 4791 are taken).
OWNED_PORTS = (53, 123, 137, 161, 514)


@pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark is not installed")
def test_an_ev_whose_source_port_another_dissector_owns_still_decodes_as_mrc(
        tmp_path: Path) -> None:
    from scapy.layers.dns import DNS, DNSQR
    from scapy.layers.inet6 import UDP, IPv6

    _, _, raw = GOLDEN_PACKETS[0]
    frames = [wire.encode_frame(dataclasses.replace(TRIMMED_ENV, ev=port << 16), raw)
              for port in OWNED_PORTS]
    assert {Ether(f)["UDP"].sport for f in frames} == set(OWNED_PORTS)
    dns = Ether() / IPv6() / UDP(sport=4791, dport=53) / DNS(qd=DNSQR(qname="example.org"))
    capture = tmp_path / "owned.pcap"
    wrpcap(str(capture), [Ether(f) for f in frames] + [dns])
    names = list(expected_fields(frames[0]))
    shown = tshark_fields(COMMITTED, capture, names)
    for number, frame in enumerate(frames, start=1):
        assert shown[number] == expected_fields(frame), f"source port {OWNED_PORTS[number - 1]}"
    # the heuristic claims only packets to 4791: a DNS query from port 4791 stays DNS
    assert all(v is None for v in shown[len(frames) + 1].values())
