"""Frame half of the MRC wire codec: errors, encapsulation constants, Envelope, EV.

Import everything from `wire`, which re-exports these names; this
module exists only to keep each file short and has no dependency on the
transport-header half.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from functools import lru_cache
from ipaddress import IPv6Address

from wire.errors import PacketError
from wire.layout import (
    DEFAULT_HOP_LIMIT,
    ETH_LEN,
    ETH_TYPE_IPV6,
    FRAME_HEADERS_LEN,
    INNER_PAYLOAD_LEN,
    IPPROTO_IPV6,
    IPPROTO_UDP,
    IPV6_LEN,
    OUTER_PAYLOAD_LEN,
    ROCE_UDP_PORT,
    TRIMMED_FRAME_LEN,
    TRIMMED_INNER_PAYLOAD_LEN,
    TRIMMED_OUTER_PAYLOAD_LEN,
    TRIMMED_UDP_LEN,
    UDP_LEN,
    UDP_LENGTH_FIELD,
)

# What `import wire` re-exports from this module.
__all__ = [
    "BadField", "Envelope", "TruncatedPacket", "UnknownOpcode", "WireError", "address_pair",
    "decode_frame", "decode_frame_fields", "encode_frame", "encode_frame_parts", "eth_header",
    "ev_from_fields", "ev_to_fields", "trim_frame",
]


class WireError(PacketError, ValueError):
    """Base of every codec error: the packet is malformed and must be counted and dropped."""


class TruncatedPacket(WireError):
    """The bytes end before the headers or lengths they declare."""


class UnknownOpcode(WireError):
    """A BTH opcode the testbed defines no layout for."""


class BadField(WireError):
    """A field holds a value the spec forbids, or length fields disagree."""


def check_bits(name: str, value: int, bits: int) -> None:
    """Reject a value that does not fit an unsigned field, naming the field."""
    if not 0 <= value < (1 << bits):
        raise BadField(f"{name}={value!r} does not fit in {bits} unsigned bits")


@dataclass(frozen=True, slots=True)
class Envelope:
    """Everything outside the UDP payload; dscp/ecn/hop_limit are the outer header's."""

    src_mac: str
    dst_mac: str
    outer_src: IPv6Address
    outer_dst: IPv6Address
    inner_src: IPv6Address
    inner_dst: IPv6Address
    ev: int
    dscp: int
    ecn: int
    hop_limit: int = DEFAULT_HOP_LIMIT


_S_FRAME = struct.Struct("!6s6sH" "IHBB16s16s" "IHBB16s16s" "HHHH")
_IPV6_VERSION_WORD = 6 << 28
_MAX_UDP_PAYLOAD = 0xFFFF - IPV6_LEN - UDP_LEN  # outer payload length is 16 bits


def ev_to_fields(ev: int) -> tuple[int, int]:
    """Split an EV into (UDP source port, outer flow label); bits 19:16 go in both."""
    check_bits("ev", ev, 32)
    return ev >> 16, ev & 0xFFFFF


def ev_from_fields(udp_sport: int, flow_label: int) -> int:
    """Join an EV, rejecting packets whose doubly-carried bits 19:16 disagree."""
    check_bits("udp_sport", udp_sport, 16)
    check_bits("flow_label", flow_label, 20)
    if (flow_label >> 16) != (udp_sport & 0xF):
        raise BadField(
            f"EV bits 19:16 disagree: flow label has {flow_label >> 16:#x}, "
            f"UDP source port has {udp_sport & 0xF:#x}"
        )
    return udp_sport << 16 | (flow_label & 0xFFFF)


@lru_cache(maxsize=4096)
def _mac_bytes(mac: str) -> bytes:
    try:
        raw = bytes.fromhex(mac.replace(":", ""))
    except (ValueError, AttributeError) as exc:
        raise BadField(f"MAC address {mac!r} is not hex octets") from exc
    if len(raw) != 6:
        raise BadField(f"MAC address {mac!r} is not 6 octets")
    return raw


def _addr_bytes(name: str, addr: IPv6Address) -> bytes:
    if not isinstance(addr, IPv6Address):
        raise BadField(f"{name}={addr!r} is not an ipaddress.IPv6Address")
    return addr.packed


def encode_frame(env: Envelope, udp_payload: bytes) -> bytes:
    """Wrap a UDP payload in Ethernet / outer IPv6 / inner IPv6 / UDP (checksum 0)."""
    if len(udp_payload) > _MAX_UDP_PAYLOAD:
        raise BadField(f"UDP payload of {len(udp_payload)} bytes exceeds {_MAX_UDP_PAYLOAD}")
    sport, flow_label = ev_to_fields(env.ev)
    check_bits("dscp", env.dscp, 6)
    check_bits("ecn", env.ecn, 2)
    check_bits("hop_limit", env.hop_limit, 8)
    tc_bits = (env.dscp << 2 | env.ecn) << 20
    udp_len = UDP_LEN + len(udp_payload)
    return _S_FRAME.pack(
        _mac_bytes(env.dst_mac), _mac_bytes(env.src_mac), ETH_TYPE_IPV6,
        _IPV6_VERSION_WORD | tc_bits | flow_label, IPV6_LEN + udp_len, IPPROTO_IPV6,
        env.hop_limit, _addr_bytes("outer_src", env.outer_src),
        _addr_bytes("outer_dst", env.outer_dst),
        _IPV6_VERSION_WORD | tc_bits, udp_len, IPPROTO_UDP, DEFAULT_HOP_LIMIT,
        _addr_bytes("inner_src", env.inner_src), _addr_bytes("inner_dst", env.inner_dst),
        sport, ROCE_UDP_PORT, udp_len, 0,
    ) + udp_payload


# ---- per-packet fast paths (host agents): the same bytes and checks, no Envelope objects ----
# A frame is built from three constant parts the sender computes once per plane, route and
# peer (eth_header, address_pair) and the fields that change per packet.
_S_FRAME_PARTS = struct.Struct("!14sIHBB32sIHBB32sHHHH")


def eth_header(src_mac: str, dst_mac: str) -> bytes:
    """The 14 Ethernet bytes of every frame from `src_mac` to `dst_mac` (IPv6 ethertype)."""
    return _mac_bytes(dst_mac) + _mac_bytes(src_mac) + ETH_TYPE_IPV6.to_bytes(2, "big")


def address_pair(src: IPv6Address, dst: IPv6Address) -> bytes:
    """An IPv6 header's source and destination addresses, packed (32 bytes)."""
    return _addr_bytes("src", src) + _addr_bytes("dst", dst)


def encode_frame_parts(eth: bytes, outer: bytes, inner: bytes, ev: int, dscp: int, ecn: int,
                       udp_payload: bytes) -> bytes:
    """encode_frame(Envelope(..., ev, dscp, ecn), udp_payload) with the constant parts given
    as eth_header(src_mac, dst_mac), address_pair(outer_src, outer_dst) and
    address_pair(inner_src, inner_dst) (only those: struct would pad or cut other lengths);
    the hop limit is DEFAULT_HOP_LIMIT. Same bytes, same BadFields."""
    n = len(udp_payload)
    if n > _MAX_UDP_PAYLOAD or not 0 <= ev <= 0xFFFFFFFF or not 0 <= dscp < 64 or not 0 <= ecn < 4:
        if n > _MAX_UDP_PAYLOAD:
            raise BadField(f"UDP payload of {n} bytes exceeds {_MAX_UDP_PAYLOAD}")
        check_bits("ev", ev, 32)
        check_bits("dscp", dscp, 6)
        check_bits("ecn", ecn, 2)
    tc_bits = (dscp << 2 | ecn) << 20
    udp_len = UDP_LEN + n
    return _S_FRAME_PARTS.pack(
        eth, _IPV6_VERSION_WORD | tc_bits | (ev & 0xFFFFF), IPV6_LEN + udp_len, IPPROTO_IPV6,
        DEFAULT_HOP_LIMIT, outer, _IPV6_VERSION_WORD | tc_bits, udp_len, IPPROTO_UDP,
        DEFAULT_HOP_LIMIT, inner, ev >> 16, ROCE_UDP_PORT, udp_len, 0,
    ) + udp_payload


def decode_frame_fields(frame: bytes) -> tuple[int, int, int, bytes, bytes]:
    """decode_frame without the Envelope: (ev, dscp, ecn, inner source address as 16 packed
    bytes, UDP payload), after the same checks (the same WireErrors). The payload is a slice
    of `frame`: a copy for bytes, a view for a memoryview (no copy of a received frame)."""
    if len(frame) >= FRAME_HEADERS_LEN:
        f = _S_FRAME.unpack_from(frame)
        ow0, oplen, sport = f[3], f[4], f[15]
        end = ETH_LEN + IPV6_LEN + oplen
        if (f[2] == ETH_TYPE_IPV6 and ow0 >> 28 == 6 and f[9] >> 28 == 6
                and f[5] == IPPROTO_IPV6 and f[11] == IPPROTO_UDP and f[16] == ROCE_UDP_PORT
                and UDP_LEN <= f[17] == f[10] and oplen == IPV6_LEN + f[10]
                and len(frame) >= end and (ow0 >> 16 & 0xF) == (sport & 0xF)):
            tc = ow0 >> 20 & 0xFF
            return (sport << 16 | (ow0 & 0xFFFF), tc >> 2, tc & 3, f[13],
                    frame[FRAME_HEADERS_LEN:end])
    f, end = _unpack_checked(frame)  # something is wrong: raise what decode_frame raises
    ev_from_fields(f[15], f[3] & 0xFFFFF)
    raise AssertionError("unreachable: the frame failed a check _unpack_checked repeats")


def decode_frame(frame: bytes) -> tuple[Envelope, bytes]:
    """Parse the encapsulation and return it with the UDP payload; trailing padding is ignored."""
    (dmac, smac, _etype, ow0, _oplen, _onh, ohl, osrc, odst,
     _iw0, _iplen, _inh, _ihl, isrc, idst, sport, _dport, _ulen, _csum), end = \
        _unpack_checked(frame)
    ev = ev_from_fields(sport, ow0 & 0xFFFFF)
    tc = ow0 >> 20 & 0xFF
    env = Envelope(
        smac.hex(":"), dmac.hex(":"), IPv6Address(osrc), IPv6Address(odst),
        IPv6Address(isrc), IPv6Address(idst), ev, tc >> 2, tc & 3, ohl,
    )
    return env, bytes(frame[FRAME_HEADERS_LEN:end])


def _unpack_checked(frame: bytes) -> tuple[tuple, int]:
    """The frame's header fields and the end of its payload, or the WireError saying why not."""
    if len(frame) < FRAME_HEADERS_LEN:
        raise TruncatedPacket(f"frame of {len(frame)} bytes, headers need {FRAME_HEADERS_LEN}")
    fields = _S_FRAME.unpack_from(frame)
    (_dmac, _smac, etype, ow0, oplen, onh, _ohl, _osrc, _odst,
     iw0, iplen, inh, _ihl, _isrc, _idst, _sport, dport, ulen, _csum) = fields
    if etype != ETH_TYPE_IPV6:
        raise BadField(f"ethertype {etype:#06x}, expected {ETH_TYPE_IPV6:#06x}")
    if ow0 >> 28 != 6 or iw0 >> 28 != 6:
        raise BadField(f"IP versions {ow0 >> 28}/{iw0 >> 28}, expected 6/6")
    if onh != IPPROTO_IPV6:
        raise BadField(f"outer next header {onh}, expected {IPPROTO_IPV6}")
    if inh != IPPROTO_UDP:
        raise BadField(f"inner next header {inh}, expected {IPPROTO_UDP}")
    if dport != ROCE_UDP_PORT:
        raise BadField(f"UDP destination port {dport}, expected {ROCE_UDP_PORT}")
    if ulen < UDP_LEN or iplen != ulen or oplen != IPV6_LEN + iplen:
        raise BadField(f"inconsistent lengths: outer {oplen}, inner {iplen}, UDP {ulen}")
    end = ETH_LEN + IPV6_LEN + oplen
    if len(frame) < end:
        raise TruncatedPacket(f"frame of {len(frame)} bytes, its lengths declare {end}")
    return fields, end




def trim_frame(frame: bytearray) -> None:
    """Cut a data frame to its headers and fix the outer, inner and UDP lengths (§5), in place;
    the DSCP is the caller's to set (it depends on the port)."""
    del frame[TRIMMED_FRAME_LEN:]
    frame[OUTER_PAYLOAD_LEN:OUTER_PAYLOAD_LEN + 2] = TRIMMED_OUTER_PAYLOAD_LEN.to_bytes(2, "big")
    frame[INNER_PAYLOAD_LEN:INNER_PAYLOAD_LEN + 2] = TRIMMED_INNER_PAYLOAD_LEN.to_bytes(2, "big")
    frame[UDP_LENGTH_FIELD:UDP_LENGTH_FIELD + 2] = TRIMMED_UDP_LEN.to_bytes(2, "big")
