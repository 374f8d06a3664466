"""BMv2's ECMP member choice, for the software switch and the simulator: CRC-16/ARC over the
selector fields bit-packed in key order, modulo the group's size, over the members in BMv2's
handle order (p4src/README.md, "ECMP")."""

from __future__ import annotations

import struct

# The selector's last fields bit-packed as BMv2's BufBuilder does: flow label (20 bits),
# next header (8), L4 source and destination ports (16 each), then 4 zero bits to a byte.
_FLOW_TAIL = struct.Struct("!Q")
_TAIL_PAD = 4


def _crc16_table() -> tuple[int, ...]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0xA001 if crc & 1 else crc >> 1
        table.append(crc)
    return tuple(table)


_CRC16 = _crc16_table()


def crc16_arc(data: bytes) -> int:
    """CRC-16/ARC (polynomial 0x8005 reflected, initial value 0, no final xor): what BMv2
    calls `crc16`."""
    crc = 0
    for byte in data:
        crc = (crc >> 8) ^ _CRC16[(crc ^ byte) & 0xFF]
    return crc


def ecmp_key(dst: bytes, src: bytes, flow_label: int, next_hdr: int, sport: int,
             dport: int) -> bytes:
    """The bytes BMv2 hashes for routing_v6_table's selector (outer DA, SA, flow label, next
    header, L4 ports, in the P4 key's order)."""
    tail = (flow_label << 40 | next_hdr << 32 | sport << 16 | dport) << _TAIL_PAD
    return dst + src + _FLOW_TAIL.pack(tail)
