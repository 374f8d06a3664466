"""mrc_capture on a running fabric, decoded by tshark with docs/wireshark/mrc.lua: every MRC
frame of the capture shows the fields wire decodes from the same bytes (tests/unit/
test_wireshark_dissector.py holds the golden packets of every opcode to the same rule)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.e2e.support import skip_reason
from tests.support import require_bmv2

pytest.importorskip("mininet.net", reason="Mininet is not importable (apt install mininet)")

from scapy.layers.l2 import Ether  # noqa: E402
from scapy.utils import rdpcap  # noqa: E402

import wire  # noqa: E402
from emulation.network import MrcNetwork, NetworkConfig  # noqa: E402
from fabric.topology import Fabric  # noqa: E402
from tests.dissector_check import COMMITTED, expected_fields, tshark_fields  # noqa: E402

pytestmark = [pytest.mark.root, pytest.mark.timeout(240),
              pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or ""),
              pytest.mark.skipif(shutil.which("tshark") is None,
                                 reason="tshark is not installed (apt install tshark)")]

FABRIC = Fabric(planes=2, t0_per_plane=2, t1_per_plane=2, hosts_per_t0=1)
CAPTURE_S = 3.0
WRITE_BYTES = 300_000


def _is_mrc(frame: bytes) -> bool:
    try:
        wire.decode_packet(wire.decode_frame(frame)[1])
    except wire.WireError:
        return False
    return True


@pytest.mark.parametrize("target", ["soft", pytest.param("bmv2", marks=pytest.mark.bmv2)])
def test_a_capture_of_a_fabric_link_decodes_as_wire_does(target: str, tmp_path: Path) -> None:
    if target == "bmv2":
        require_bmv2()
    path = tmp_path / "h0-p0l0.pcap"
    config = NetworkConfig(fabric=FABRIC, target=target, port_rate_pps=500)
    with MrcNetwork(config, log=lambda *_: None) as net:
        net.start()
        transfer = net.start_transfer(0, FABRIC.hosts - 1, WRITE_BYTES)
        frames = net.capture("h0", "p0l0", CAPTURE_S, path)
        assert transfer.wait()["ok"]
    captured = [bytes(p) for p in rdpcap(str(path))]
    assert frames == len(captured) > 0
    mrc = [f for f in captured if _is_mrc(f)]
    opcodes = {Ether(f)[wire.layers.MrcBTH].opcode for f in mrc}
    assert wire.OP_SACK in opcodes and opcodes & wire.DATA_OPCODES, opcodes
    names = list(expected_fields(mrc[0]))
    shown = tshark_fields(COMMITTED, path, names)
    checked = 0
    for number, frame in enumerate(captured, start=1):
        if _is_mrc(frame):
            assert shown[number] == expected_fields(frame), f"frame {number}"
            checked += 1
    assert checked == len(mrc)
    print(f"{target}: {len(captured)} frames, {checked} MRC, opcodes "
          f"{sorted(hex(o) for o in opcodes)}")
