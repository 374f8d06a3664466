"""What tshark running docs/wireshark/mrc.lua should show for a frame, from wire alone, and
tshark's field output read back: shared by the golden-packet test (tests/unit) and the fabric
capture test (tests/e2e)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from scapy.layers.l2 import Ether

import wire
from wire import dissector

COMMITTED = Path(__file__).resolve().parents[1] / "docs" / "wireshark" / "mrc.lua"
TSHARK_TIMEOUT_S = 60
Fields = dict[str, int | None]


def expected_fields(frame: bytes) -> Fields:
    """Each layer's fields as wire.layers decodes them (None: layer absent), and for data
    packets the EV and the trim verdict of the codec (DataPacket.trimmed or a trimmed DSCP)."""
    pkt = Ether(frame)
    out: Fields = {}
    for abbrev, layer in dissector.LAYERS:
        decoded = pkt.getlayer(layer)
        for f in dissector.layer_fields(abbrev, layer)[0]:
            out[f.abbrev] = None if decoded is None else int(getattr(decoded, f.name))
    env, udp_payload = wire.decode_frame(frame)
    decoded_packet = wire.decode_packet(udp_payload)
    if isinstance(decoded_packet, wire.DataPacket):
        out["mrc.ev"] = env.ev
        out["mrc.trimmed"] = int(decoded_packet.trimmed or env.dscp in wire.TRIMMED_DSCPS)
    else:
        out["mrc.ev"] = out["mrc.trimmed"] = None
    return out


def tshark_fields(script: Path, capture: Path, names: list[str]) -> dict[int, Fields]:
    """tshark's value of each field in `names`, per frame number (None: not shown)."""
    run = subprocess.run(
        ["tshark", "-X", f"lua_script:{script}", "-o", "udp.try_heuristic_first:TRUE",
         "-r", str(capture), "-T", "fields",
         "-E", "separator=|", "-E", "occurrence=f", "-e", "frame.number",
         *(a for n in names for a in ("-e", n))],
        capture_output=True, text=True, timeout=TSHARK_TIMEOUT_S, check=False)
    if run.returncode != 0:
        raise AssertionError(f"tshark failed: {run.stderr}")
    rows = {}
    for line in run.stdout.splitlines():
        number, *values = line.split("|")
        rows[int(number)] = dict(zip(names, map(_value, values), strict=True))
    return rows


def _value(text: str) -> int | None:
    if text == "":
        return None
    return int(text, 16) if text.startswith("0x") else int(text)
