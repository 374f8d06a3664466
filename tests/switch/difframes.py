"""The differential test's frames (tests/switch/differential.py): every kind of Ethernet
frame a veth can deliver to a switch port, seeded.

What a veth delivers, and so what the generator covers:
- any frame of 14 bytes (a packet socket refuses less: dev_validate_header) up to the MTU
  plus the Ethernet header, 1,514 bytes, or 1,518 with an 802.1Q tag (is_skb_forwardable;
  a packet socket allows the 4 bytes more for 802.1Q only); a tagged frame needs 20 bytes
  (the receiving kernel frees a shorter one: skb_vlan_untag);
  frames under 60 bytes arrive unpadded;
- any destination and source MAC: unicast to anyone, multicast, broadcast (a veth does not
  filter; the switch's sockets take everything);
- any ethertype: IPv6 (what the program parses), IPv4, ARP, LLDP, MPLS, an 802.3 length
  field below 0x0600, and VLAN tags: 802.1Q, 802.1ad, a priority tag (VID 0), two tags.
  The receiving kernel strips the outer tag of a tagged frame before any packet socket
  sees it, and libpcap (BMv2's capture) puts it back; softswitch.tagged does the same;
- the frames the fabric carries (MRC data of every opcode and length, SACK/NACK/probe/
  port-status, already-trimmed headers, baseline TCP/UDP), those mutated (truncations,
  wrong lengths and versions, hop limits 0/1/2, unknown or exhausted uSIDs, foreign
  ethertypes, bit flips), and random bytes.
With a queue-depth register preset on some frames, around the trim and ECN thresholds.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from ipaddress import IPv6Address

import wire as W
from fabric.topology import shift_usid, usid_address
from tests.golden import generate as G

PORTS = (1, 2, 3, 4)  # p0l0: hosts h0 and h1 on 1 and 2, spines on 3 and 4
SWITCH = G.T0A
DEPTHS = (0, G.ECN_THRESHOLD - 1, G.ECN_THRESHOLD, G.TRIM_THRESHOLD - 1, G.TRIM_THRESHOLD, 500)
ETH_HEADER, VLAN_TAG = 14, 4
MIN_FRAME, MAX_FRAME = ETH_HEADER, 1500 + ETH_HEADER  # what a veth with MTU 1500 delivers
MIN_TAGGED = ETH_HEADER + VLAN_TAG + 2  # shorter tagged frames: freed by skb_vlan_untag
MAX_PAYLOAD = 1500 - 134 - 4  # the largest data payload a 1500-byte MTU carries (ImmDt)
CUTS = (14, 20, 53, 54, 60, 93, 94, 101, 102, 113, 114, 133, 134)  # header boundaries, +-1
TPIDS = (b"\x81\x00", b"\x88\xa8")  # 802.1Q, 802.1ad: the ones the kernel strips
FOREIGN_TYPES = (b"\x08\x00", b"\x08\x06", b"\x88\xcc", b"\x88\x47", b"\x91\x00",
                 b"\x88\xb5", b"\x86\xdc", b"\x00\x2e", b"\x05\xdc", b"\x00\x00")
MACS = (bytes(6), b"\xff" * 6, bytes.fromhex("333300000001"), bytes.fromhex("0180c200000e"))

def _destinations(rng: random.Random) -> IPv6Address:
    """An outer destination as p0l0 sees it: routable uSID paths, unknown or exhausted
    uSID lists, or a plain IPv6 address (baseline routing)."""
    f = G.FABRIC
    arriving = f.paths(2, 0, 0)[rng.randrange(2)].address  # h2 -> h0, after T0B and spine
    choices = [f.paths(0, 2, 0)[0].address, f.paths(0, 2, 0)[1].address,
               f.paths(0, 1, 0)[0].address,
               IPv6Address(shift_usid(shift_usid(int(arriving)))),
               usid_address([SWITCH.usid, rng.randrange(1 << 16)]),
               usid_address([rng.randrange(1 << 16)]), usid_address([SWITCH.usid]),
               f.nic(1, 0).address, f.nic(2, 0).address, IPv6Address(rng.getrandbits(128))]
    return rng.choice(choices)


def _envelope(rng: random.Random, dscp: int) -> W.Envelope:
    hop = rng.choice((64, 64, 64, 3, 2, 1, 0, rng.randrange(256)))
    return W.Envelope(G.H0.mac, SWITCH.mac, G.H0.address, _destinations(rng), G.H0.address,
                      G.H2.address, rng.getrandbits(32), dscp, rng.randrange(4), hop)


def data_frame(rng: random.Random) -> bytes:
    op = rng.choice(sorted(W.DATA_OPCODES))
    n = rng.choice((0, 1, 16, 64, 256, 1024, rng.randrange(MAX_PAYLOAD + 1)))
    imm = rng.getrandbits(32) if op in W.IMM_OPCODES else None
    pkt = W.DataPacket(W.Bth(op, dest_qp=rng.randrange(1 << 24), psn=rng.randrange(1 << 24)),
                       W.Meth(msn=rng.randrange(1 << 16)),
                       W.Reth(va=rng.getrandbits(64), rkey=rng.getrandbits(32), dma_len=n),
                       bytes(rng.getrandbits(8) for _ in range(n)), imm)
    dscp = rng.choice((W.DSCP_TRIMMABLE, W.DSCP_TRIMMABLE, W.DSCP_TRIMMABLE_RETX,
                       W.DSCP_NO_TRIM, rng.randrange(64)))
    return W.encode_frame(_envelope(rng, dscp), W.encode_packet(pkt))


def control_frame(rng: random.Random) -> bytes:
    bth = W.Bth(W.OP_SACK, dest_qp=rng.randrange(1 << 24), psn=rng.randrange(1 << 24))
    kind = rng.randrange(4)
    if kind == 0:
        pkt: W.Packet = W.SackPacket(bth, W.SackExt(cack_psn=rng.randrange(1 << 24),
                                                    ack_psn_offset=rng.randrange(-100, 100),
                                                    entropy=rng.getrandbits(32), sack_offset=0,
                                                    sack_bitmap=rng.getrandbits(64)),
                                     W.CcState(ooo_count=3, rcvd_bytes=4096))
    elif kind == 1:
        pkt = W.NackPacket(W.Bth(W.OP_NACK, bth.dest_qp, bth.psn),
                           W.NackExt(rng.choice((W.NACK_TRIMMED, W.NACK_PSN_OOR_WINDOW)),
                                     rng.getrandbits(32), nack_psn=rng.randrange(1 << 24),
                                     cack_psn=rng.randrange(1 << 24)))
    elif kind == 2:
        pkt = W.ProbePacket(W.Bth(W.OP_PROBE, bth.dest_qp, bth.psn),
                            W.ProbeExt(rng.getrandbits(32)))
    else:
        pkt = W.PortStatusPacket(W.Bth(rng.choice((W.OP_EP_REQ, W.OP_EP_RSP)), 0x2, bth.psn),
                                 W.PortStatusExt(rng.randrange(1 << 16), rng.randrange(16)))
    return W.encode_frame(_envelope(rng, W.DSCP_CONTROL), W.encode_packet(pkt))


def trimmed_frame(rng: random.Random) -> bytes:
    frame = bytearray(data_frame(rng)[:W.TRIMMED_FRAME_LEN])
    dscp = rng.choice((W.DSCP_TRIMMED, W.DSCP_TRIMMED_LASTHOP))
    frame[14:16] = ((6 << 12) | (dscp << 6) | (frame[15] & 0x3F) | 0).to_bytes(2, "big")
    frame[18:20] = (W.TRIMMED_FRAME_LEN - 54).to_bytes(2, "big")
    frame[58:60] = (W.TRIMMED_FRAME_LEN - 94).to_bytes(2, "big")
    frame[98:100] = (W.TRIMMED_FRAME_LEN - 94).to_bytes(2, "big")
    return bytes(frame)


def baseline_frame(rng: random.Random) -> bytes:
    dst = rng.choice((G.FABRIC.nic(1, 0).address, G.FABRIC.nic(2, 0).address,
                      G.FABRIC.nic(3, 0).address, IPv6Address("fd00:0:7::1")))
    frame = bytearray(G.baseline_frame(dst, tcp=rng.random() < 0.5,
                                       hop_limit=rng.choice((64, 2, 1))))
    frame[14:18] = ((6 << 28) | (rng.randrange(256) << 20) | rng.getrandbits(20)).to_bytes(4, "big")
    frame[54:58] = rng.getrandbits(32).to_bytes(4, "big")  # L4 ports: spread the ECMP hash
    return bytes(frame)


def mutate(rng: random.Random, frame: bytes) -> tuple[str, bytes]:
    f = bytearray(frame)
    kind = rng.choice(("truncate", "outer_len", "inner_len", "version", "hop", "ethertype",
                       "next_header", "udp_port", "flip"))
    if kind == "truncate":
        cut = rng.choice([c + d for c in CUTS for d in (-1, 0, 1)] + [rng.randrange(14, len(f))])
        f = f[:max(14, min(cut, len(f)))]
    elif kind in ("outer_len", "inner_len"):
        at = 18 if kind == "outer_len" else 58
        if len(f) >= at + 2:
            value = int.from_bytes(f[at:at + 2], "big") + rng.choice((-9, -1, 1, 7, 3000))
            f[at:at + 2] = (value % 65536).to_bytes(2, "big")
    elif kind == "version":
        at = rng.choice((14, 54))
        if len(f) > at:
            f[at] = (rng.choice((0, 4, 7, 15)) << 4) | (f[at] & 0x0F)
    elif kind == "hop" and len(f) > 21:
        f[21] = rng.choice((0, 1, 2))
    elif kind == "ethertype":
        f[12:14] = rng.choice((b"\x08\x00", b"\x81\x00", b"\x88\xb5"))
    elif kind == "next_header" and len(f) > 20:
        f[20] = rng.choice((6, 17, 41, 59, 43, rng.randrange(256)))
    elif kind == "udp_port" and len(f) > 97:
        f[96:98] = rng.choice((4790, 4792, 0, 53)).to_bytes(2, "big")
    elif kind == "flip":
        at = rng.randrange(len(f))
        f[at] ^= 1 << rng.randrange(8)
    return f"mutated_{kind}", bytes(f)


def _mac(rng: random.Random) -> bytes:
    return rng.choice(MACS) if rng.random() < 0.5 else rng.getrandbits(48).to_bytes(6, "big")


def random_frame(rng: random.Random) -> bytes:
    """Random bytes behind an ethertype, any length a veth delivers."""
    size = rng.choice((0, 1, 46, rng.randrange(300), rng.randrange(MAX_FRAME - ETH_HEADER + 1),
                       MAX_FRAME - ETH_HEADER))
    ethertype = rng.choice((b"\x86\xdd", b"\x86\xdd", b"\x08\x00", bytes(2),
                            rng.getrandbits(16).to_bytes(2, "big")))
    return _mac(rng) + _mac(rng) + ethertype + rng.randbytes(size)


def vlan_frame(rng: random.Random) -> bytes:
    """A fabric frame (or random bytes) with one or two VLAN tags after the MACs: 802.1Q or
    802.1ad, a priority tag (VID 0) among them. A packet socket sends 4 bytes over the
    untagged maximum only when the outer tag is 802.1Q (af_packet's
    packet_extra_vlan_len_allowed), so only those frames may be that long."""
    inner = rng.choice((data_frame, control_frame, trimmed_frame, baseline_frame,
                        random_frame))(rng)
    tags = 2 if rng.random() < 0.25 else 1
    outer = rng.choice(TPIDS)
    longest = MAX_FRAME + (VLAN_TAG if outer == TPIDS[0] else 0)
    inner = inner[:longest - tags * VLAN_TAG]
    tag = b""
    for i in range(tags):
        tci = rng.choice((0, rng.randrange(1, 4095), rng.randrange(1 << 16)))
        tag += (TPIDS[0] if i else outer) + tci.to_bytes(2, "big")
    frame = inner[:12] + tag + inner[12:]
    return frame + bytes(max(0, MIN_TAGGED - len(frame)))


def deliverable(frame: bytes) -> bytes:
    """A frame whose ethertype is a tag the kernel strips is padded to MIN_TAGGED: shorter,
    the receiving kernel frees it (skb_vlan_untag cannot pull the tag and the next type)."""
    if frame[12:14] in TPIDS and len(frame) < MIN_TAGGED:
        return frame + bytes(MIN_TAGGED - len(frame))
    return frame


def foreign_frame(rng: random.Random) -> bytes:
    """Not IPv6: IPv4, ARP, LLDP, MPLS, an old QinQ TPID (0x9100, which the kernel leaves
    in place), IPv6 over PPP... and 802.3 length fields, with a body of any length."""
    body = rng.randbytes(rng.choice((0, 28, 46, rng.randrange(MAX_FRAME - ETH_HEADER + 1))))
    return _mac(rng) + _mac(rng) + rng.choice(FOREIGN_TYPES) + body


MAKERS = {"data": data_frame, "control": control_frame, "trimmed": trimmed_frame,
          "baseline": baseline_frame}
OTHER_MAKERS = {"random": random_frame, "vlan": vlan_frame, "foreign": foreign_frame}


@dataclass(frozen=True)
class Probe:
    category: str
    port: int
    frame: bytes
    preset: tuple[int, int] | None = None  # (egress port, depth) written before the frame


def generate(seed: int, count: int) -> list[Probe]:
    """`count` probes from `seed`: a fabric frame (mutated in about 4 of 10), or one of the
    other kinds above (1 in 5)."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        roll = rng.random()
        if roll < 0.2:
            category = rng.choice(sorted(OTHER_MAKERS))
            frame = OTHER_MAKERS[category](rng)
        else:
            category = rng.choice(sorted(MAKERS))
            frame = MAKERS[category](rng)
            if roll < 0.55:
                category, frame = mutate(rng, frame)
        preset = (rng.choice(PORTS), rng.choice(DEPTHS)) if rng.random() < 0.35 else None
        out.append(Probe(category, rng.choice(PORTS), deliverable(frame), preset))
    return out
