"""Write tests/golden/cases.json: the golden packet corpus for every MRC data plane.

Run: .venv/bin/python -m tests.golden.generate   (tests/switch/p4/test_p4_corpus.py checks the
committed JSON equals a fresh run). Input frames come from the codec (wire) and
scapy; each expected frame is the input with exactly the edits docs/wire-format.md
prescribes, applied field by field with scapy, so the corpus states the spec, not any
switch's implementation. Table entries are derived from fabric.topology.
"""

from __future__ import annotations

import json
from ipaddress import IPv6Address
from typing import Any

from scapy.layers.inet import TCP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import ARP, Dot1AD, Dot1Q, Ether

import wire as w
from fabric.topology import Fabric, Switch, shift_usid, usid_address, usid_prefix
from p4rt import names as n
from p4rt.corpus import CASES_PATH, FORMAT_VERSION

FABRIC = Fabric(planes=2, t0_per_plane=2, t1_per_plane=2, hosts_per_t0=2)
TRIM_THRESHOLD = 20  # packets
ECN_THRESHOLD = 10  # packets
BELOW_ECN, ECN_DEPTH, TRIM_DEPTH = 5, 15, 25
EV = 0x9ABC_5DEF
T0A, T0B, SPINE = FABRIC.t0(0, 0), FABRIC.t0(0, 1), FABRIC.t1(0, 0)
SPINE1 = FABRIC.t1(0, 1)
H0, H1, H2 = FABRIC.nic(0, 0), FABRIC.nic(1, 0), FABRIC.nic(2, 0)  # H0, H1 on T0A; H2 on T0B
CROSS = FABRIC.paths(0, 2, 0)[0].address  # h0 -> p0l0 -> p0s0 -> p0l1 -> h2
UP = FABRIC.uplink_port(0)  # T0A port towards SPINE


def _hex(value: int) -> str:
    return f"0x{value:x}"


def _act(action: str, **params: int) -> dict[str, Any]:
    return {"action": action, "params": {k: _hex(v) for k, v in params.items()}}


def _mac(mac: str) -> int:
    return int(mac.replace(":", ""), 16)


def _hop(port: int, mac: str) -> dict[str, Any]:
    return _act(n.SET_NEXT_HOP, **{n.PARAM_PORT: port, n.PARAM_DMAC: _mac(mac)})


def _neighbours(sw: Switch) -> list[tuple[int, int, str]]:
    """(uSID, port, MAC) of everything one hop from the switch."""
    if sw.role == FABRIC.t0(sw.plane, 0).role:
        out = [(FABRIC.t1(sw.plane, j).usid, FABRIC.uplink_port(j), FABRIC.t1(sw.plane, j).mac)
               for j in range(FABRIC.t1_per_plane)]
        nics = [FABRIC.nic(h, sw.plane) for h in range(FABRIC.hosts)]
        return out + [(x.usid, FABRIC.host_port(x.local), x.mac) for x in nics if x.t0 == sw.index]
    return [(FABRIC.t0(sw.plane, t).usid, FABRIC.downlink_port(t), FABRIC.t0(sw.plane, t).mac)
            for t in range(FABRIC.t0_per_plane)]


def switch_entries(sw: Switch) -> list[dict[str, Any]]:
    """Every entry the switch holds: uSID tables, baseline routes and port configuration."""
    entries = [{"table": n.MY_USID_TABLE, "match": {n.USID_PREFIX: _hex(usid_prefix(sw.usid))},
                "action": _act(n.SHIFT_USID)}]
    for u, port, mac in _neighbours(sw):
        entries.append({"table": n.USID_FWD_TABLE, "match": {n.USID_PREFIX: _hex(usid_prefix(u))},
                        "action": _hop(port, mac)})
        host_facing = sw.role != SPINE.role and port <= FABRIC.hosts_per_t0
        entries.append({"table": n.PORT_CONFIG_TABLE, "match": {n.EGRESS_PORT: _hex(port)},
                        "action": _act(n.SET_PORT_CONFIG, **{
                            n.PARAM_HOST_FACING: int(host_facing),
                            n.PARAM_ECN_ENABLED: int(not host_facing),
                            n.PARAM_TRIM_THRESHOLD: TRIM_THRESHOLD,
                            n.PARAM_ECN_THRESHOLD: ECN_THRESHOLD,
                            n.PARAM_SMAC: _mac(sw.mac)})})
    entries += _routes(sw)
    return entries


def _route(prefix: str, length: int, group: list[dict[str, Any]]) -> dict[str, Any]:
    return {"table": n.ROUTING_V6_TABLE,
            "match": {n.DST_ADDR: {"value": _hex(int(IPv6Address(prefix))), "prefix_len": length}},
            "group": group}


def _routes(sw: Switch) -> list[dict[str, Any]]:
    """Baseline: /128 per local NIC, /64 per remote T0 subnet over all spines (ECMP)."""
    p = sw.plane
    if sw.role == SPINE.role:
        return [_route(f"fd00:0:{p:x}:{t:x}::", 64,
                       [_hop(FABRIC.downlink_port(t), FABRIC.t0(p, t).mac)])
                for t in range(FABRIC.t0_per_plane)]
    spines = [_hop(FABRIC.uplink_port(j), FABRIC.t1(p, j).mac) for j in range(FABRIC.t1_per_plane)]
    out = []
    for h in range(FABRIC.hosts):
        nic = FABRIC.nic(h, p)
        if nic.t0 == sw.index:
            out.append(_route(str(nic.address), 128, [_hop(FABRIC.host_port(nic.local), nic.mac)]))
    out += [_route(f"fd00:0:{p:x}:{t:x}::", 64, spines)
            for t in range(FABRIC.t0_per_plane) if t != sw.index]
    return out


# ---- input frames -----------------------------------------------------------------------

def data_frame(dst: IPv6Address, dscp: int = w.DSCP_TRIMMABLE, ecn: int = w.ECN_ECT0,
               hop_limit: int = 64, opcode: int = w.OP_WRITE_ONLY, payload_len: int = 1024,
               src_mac: str = H0.mac, dst_mac: str = T0A.mac) -> bytes:
    payload = bytes(i & 0xFF for i in range(payload_len))
    imm = 0xCAFEF00D if opcode in w.IMM_OPCODES else None
    pkt = w.DataPacket(w.Bth(opcode, dest_qp=0x100, psn=0x123456, ack_req=True),
                       w.Meth(msn=3), w.Reth(va=0x7F00_0000_1000, rkey=0x42, dma_len=payload_len),
                       payload, imm)
    env = w.Envelope(src_mac, dst_mac, H0.address, dst, H0.address, H2.address, EV, dscp, ecn,
                     hop_limit)
    return w.encode_frame(env, w.encode_packet(pkt))


def sack_frame(dst: IPv6Address, ecn: int = w.ECN_ECT0) -> bytes:
    pkt = w.SackPacket(w.Bth(w.OP_SACK, dest_qp=0x101, psn=0),
                       w.SackExt(cack_psn=0x123400, ack_psn_offset=5, entropy=EV,
                                 sack_offset=0, sack_bitmap=0xFF),
                       w.CcState(ooo_count=3, rcvd_bytes=4096))
    env = w.Envelope(H0.mac, T0A.mac, H0.address, dst, H0.address, H2.address, EV,
                     w.DSCP_CONTROL, ecn)
    return w.encode_frame(env, w.encode_packet(pkt))


def nack_frame(dst: IPv6Address) -> bytes:
    pkt = w.NackPacket(w.Bth(w.OP_NACK, dest_qp=0x101, psn=0),
                       w.NackExt(w.NACK_TRIMMED, EV, nack_psn=0x123456, cack_psn=0x123400))
    env = w.Envelope(H0.mac, T0A.mac, H0.address, dst, H0.address, H2.address, EV,
                     w.DSCP_CONTROL, w.ECN_ECT0)
    return w.encode_frame(env, w.encode_packet(pkt))


def baseline_frame(dst: IPv6Address, tcp: bool = False, hop_limit: int = 64) -> bytes:
    l4 = TCP(sport=40000, dport=5201, flags="A") if tcp else UDP(sport=40000, dport=9000)
    pkt = (Ether(src=H0.mac, dst=T0A.mac) /
           IPv6(src=str(H0.address), dst=str(dst), hlim=hop_limit, tc=w.ECN_ECT0, fl=0x12345) /
           l4 / bytes(200))
    return bytes(pkt)


# ---- expected frames: the input plus the edits the spec prescribes ----------------------

def edited(frame: bytes, sw: Switch, dmac: str, shift: bool = False, dscp: int | None = None,
           ecn: int | None = None) -> bytes:
    """Hop limit - 1, MACs rewritten, optional uSID shift and outer DSCP/ECN change."""
    pkt = Ether(frame)
    outer = pkt[IPv6]
    pkt.src, pkt.dst = sw.mac, dmac
    outer.hlim -= 1
    if shift:
        outer.dst = str(IPv6Address(shift_usid(int(IPv6Address(outer.dst)))))
    if dscp is not None:
        outer.tc = dscp << 2 | (outer.tc & 3)
    if ecn is not None:
        outer.tc = (outer.tc & ~3) | ecn
    out = bytes(pkt)
    if len(out) != len(frame):
        raise AssertionError(f"editing changed the frame length {len(frame)} -> {len(out)}")
    return out


def trimmed(frame: bytes, sw: Switch, dmac: str, dscp: int, shift: bool = True) -> bytes:
    """Cut to Ethernet..RETH, lengths 80/40/40, DSCP TRIMMED or TRIMMED_LASTHOP."""
    pkt = Ether(edited(frame, sw, dmac, shift=shift, dscp=dscp)[:w.TRIMMED_FRAME_LEN])
    outer = pkt[IPv6]
    outer.plen = w.TRIMMED_FRAME_LEN - w.ETH_LEN - w.IPV6_LEN
    outer.payload.plen = w.TRIMMED_FRAME_LEN - w.ETH_LEN - 2 * w.IPV6_LEN
    pkt[UDP].len = outer.payload.plen
    out = bytes(pkt)
    if len(out) != w.TRIMMED_FRAME_LEN:
        raise AssertionError(f"trimmed frame has {len(out)} bytes")
    return out


# ---- cases ------------------------------------------------------------------------------

def case(name: str, description: str, sw: Switch, port: int, frame: bytes, expect: dict,
         depth: dict[int, int] | None = None) -> dict[str, Any]:
    return {"name": name, "description": description, "switch": sw.name, "ingress_port": port,
            "frame": frame.hex(), "entries": switch_entries(sw),
            "registers": {n.QUEUE_DEPTH_REGISTER: {str(k): v for k, v in (depth or {}).items()}},
            "expect": expect}


def out(port: int, frame: bytes, **counters: dict[int, int]) -> dict[str, Any]:
    expect: dict[str, Any] = {"outputs": [{"port": port, "frame": frame.hex()}]}
    if counters:
        expect["counters"] = {getattr(n, k): {str(i): v for i, v in c.items()}
                              for k, c in counters.items()}
    return expect


def drop(reason: str) -> dict[str, Any]:
    return {"drop": reason, "counters": {n.DROP_COUNTER: {str(n.DROP_REASONS[reason]): 1}}}


def usid_cases() -> list[dict[str, Any]]:
    mid = IPv6Address(shift_usid(int(CROSS)))  # as the spine receives it
    last = IPv6Address(shift_usid(int(mid)))  # as the destination T0 receives it
    same_t0 = FABRIC.paths(0, 1, 0)[0].address
    f_up, f_mid = data_frame(CROSS), data_frame(mid, src_mac=T0A.mac, dst_mac=SPINE.mac)
    f_last = data_frame(last, src_mac=SPINE.mac, dst_mac=T0B.mac)
    f_same = data_frame(same_t0)
    t0b_up = FABRIC.uplink_port(0)
    return [
        case("usid_shift_t0_up", "T0 matches its uSID, shifts, forwards to the spine", T0A,
             FABRIC.host_port(0), f_up, out(UP, edited(f_up, T0A, SPINE.mac, shift=True))),
        case("usid_shift_t1", "spine shifts and forwards down to the destination T0", SPINE,
             FABRIC.downlink_port(0), f_mid,
             out(FABRIC.downlink_port(1), edited(f_mid, SPINE, T0B.mac, shift=True))),
        case("usid_last_hop_to_host", "destination T0 shifts to the host uSID, sends to the NIC",
             T0B, t0b_up, f_last,
             out(FABRIC.host_port(H2.local), edited(f_last, T0B, H2.mac, shift=True))),
        case("usid_same_t0", "same-T0 path: T0 uSID then host uSID", T0A, FABRIC.host_port(0),
             f_same, out(FABRIC.host_port(1), edited(f_same, T0A, H1.mac, shift=True))),
        case("usid_unknown_next", "next uSID has no usid_fwd entry", T0A, FABRIC.host_port(0),
             data_frame(usid_address([T0A.usid, 0x0299, H2.usid])), drop("UNKNOWN_USID")),
        case("usid_list_exhausted", "switch uSID is the last one: shifted prefix is block:0000",
             T0A, FABRIC.host_port(0), data_frame(usid_address([T0A.usid])),
             drop("UNKNOWN_USID")),
        case("hop_limit_1", "arrives with hop limit 1: dropped", T0A, FABRIC.host_port(0),
             data_frame(CROSS, hop_limit=1), drop("HOP_LIMIT")),
        case("hop_limit_0", "arrives with hop limit 0: dropped", T0A, FABRIC.host_port(0),
             data_frame(CROSS, hop_limit=0), drop("HOP_LIMIT")),
        case("hop_limit_2", "arrives with hop limit 2: forwarded with 1", T0A,
             FABRIC.host_port(0), data_frame(CROSS, hop_limit=2),
             out(UP, edited(data_frame(CROSS, hop_limit=2), T0A, SPINE.mac, shift=True))),
    ]


def queue_cases() -> list[dict[str, Any]]:
    """Trimming, ECN and priority, with the egress queue depth preset in the register."""
    up = FABRIC.host_port(0)
    f = data_frame(CROSS)
    retx = data_frame(CROSS, dscp=w.DSCP_TRIMMABLE_RETX)
    imm = data_frame(CROSS, opcode=w.OP_WRITE_ONLY_IMM)
    last = IPv6Address(shift_usid(shift_usid(int(CROSS))))
    f_last = data_frame(last, src_mac=SPINE.mac, dst_mac=T0B.mac)
    host = FABRIC.host_port(H2.local)
    tiny = data_frame(CROSS, payload_len=0)
    ect1, not_ect = data_frame(CROSS, ecn=w.ECN_ECT1), data_frame(CROSS, ecn=w.ECN_NOT_ECT)
    sack, nack = sack_frame(CROSS), nack_frame(CROSS)
    mid = IPv6Address(shift_usid(int(CROSS)))
    pre_trimmed = trimmed(data_frame(mid, src_mac=T0A.mac, dst_mac=SPINE.mac), T0A, SPINE.mac,
                          w.DSCP_TRIMMED, shift=False)
    other_udp = _non_roce(data_frame(CROSS))
    return [
        case("queue_empty_no_change", "below both thresholds: forwarded unchanged", T0A, up, f,
             out(UP, edited(f, T0A, SPINE.mac, shift=True)), {UP: BELOW_ECN}),
        case("trim_fabric_port", "data at trim threshold on a fabric port: 134 bytes, DSCP 12",
             T0A, up, f, out(UP, trimmed(f, T0A, SPINE.mac, w.DSCP_TRIMMED),
                             TRIM_COUNTER={UP: 1}), {UP: TRIM_DEPTH}),
        case("trim_exact_threshold", "depth equal to the trim threshold trims", T0A, up, f,
             out(UP, trimmed(f, T0A, SPINE.mac, w.DSCP_TRIMMED), TRIM_COUNTER={UP: 1}),
             {UP: TRIM_THRESHOLD}),
        case("trim_retransmission", "DSCP TRIMMABLE_RETX is trimmed too", T0A, up, retx,
             out(UP, trimmed(retx, T0A, SPINE.mac, w.DSCP_TRIMMED)), {UP: TRIM_DEPTH}),
        case("trim_cuts_immdt", "WRITE_ONLY_IMM: the ImmDt is cut with the payload", T0A, up,
             imm, out(UP, trimmed(imm, T0A, SPINE.mac, w.DSCP_TRIMMED)), {UP: TRIM_DEPTH}),
        case("trim_last_hop", "trimmed at a host-facing port: DSCP TRIMMED_LASTHOP", T0B,
             FABRIC.uplink_port(0), f_last,
             out(host, trimmed(f_last, T0B, H2.mac, w.DSCP_TRIMMED_LASTHOP),
                 TRIM_COUNTER={host: 1}), {host: TRIM_DEPTH}),
        case("no_trim_134_bytes", "a 134-byte data frame is never trimmed (but CE-marked)",
             T0A, up, tiny, out(UP, edited(tiny, T0A, SPINE.mac, shift=True, ecn=w.ECN_CE)),
             {UP: TRIM_DEPTH}),
        case("trimmed_not_retrimmed", "an already trimmed header passes a congested spine",
             SPINE, FABRIC.downlink_port(0), pre_trimmed,
             out(FABRIC.downlink_port(1), edited(pre_trimmed, SPINE, T0B.mac, shift=True)),
             {FABRIC.downlink_port(1): TRIM_DEPTH}),
        case("control_sack_not_trimmed", "SACK (DSCP CONTROL) is never trimmed nor marked", T0A,
             up, sack, out(UP, edited(sack, T0A, SPINE.mac, shift=True)), {UP: TRIM_DEPTH}),
        case("control_nack_not_trimmed", "NACK (DSCP CONTROL) is never trimmed", T0A, up, nack,
             out(UP, edited(nack, T0A, SPINE.mac, shift=True)), {UP: TRIM_DEPTH}),
        case("non_roce_udp_not_trimmed", "DSCP 4 but not UDP 4791: not trimmed, CE-marked",
             T0A, up, other_udp,
             out(UP, edited(other_udp, T0A, SPINE.mac, shift=True, ecn=w.ECN_CE)),
             {UP: TRIM_DEPTH}),
        case("ecn_fabric_port", "ECT(0) between ECN and trim thresholds: CE on a fabric port",
             T0A, up, f, out(UP, edited(f, T0A, SPINE.mac, shift=True, ecn=w.ECN_CE),
                             ECN_MARK_COUNTER={UP: 1}), {UP: ECN_DEPTH}),
        case("ecn_ect1", "ECT(1) is marked as well", T0A, up, ect1,
             out(UP, edited(ect1, T0A, SPINE.mac, shift=True, ecn=w.ECN_CE)), {UP: ECN_DEPTH}),
        case("ecn_not_ect", "Not-ECT is never marked", T0A, up, not_ect,
             out(UP, edited(not_ect, T0A, SPINE.mac, shift=True)), {UP: ECN_DEPTH}),
        case("ecn_not_on_host_port", "no ECN marking on the last hop to the host", T0B,
             FABRIC.uplink_port(0), f_last,
             out(host, edited(f_last, T0B, H2.mac, shift=True)), {host: ECN_DEPTH}),
        case("ecn_control_not_marked", "control packets are not on the data queue: no CE", T0A,
             up, sack, out(UP, edited(sack, T0A, SPINE.mac, shift=True)), {UP: ECN_DEPTH}),
    ]


def _non_roce(frame: bytes) -> bytes:
    """The same MRC frame with UDP destination port 9000: opaque UDP to the switch."""
    pkt = Ether(frame)
    pkt[UDP].dport = 9000
    return bytes(pkt)


def crc16_arc(data: bytes) -> int:
    """CRC-16/ARC bit by bit (reflected 0x8005, initial 0, no final xor): BMv2's `crc16`,
    written apart from the software switch's table-driven one so each checks the other."""
    crc = 0
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0xA001 if crc & 1 else crc >> 1
    return crc


def ecmp_member(frame: bytes, members: int) -> int:
    """Which of a group's members (in the order they were added) BMv2 sends a plain IPv6
    TCP/UDP frame to: crc16 over routing_v6_table's selector fields (outer DA, SA, flow
    label, next header, L4 ports) bit-packed in key order, 316 bits padded to 40 bytes,
    modulo the group's size (p4src/README.md, "ECMP")."""
    pkt = Ether(frame)
    ip, l4 = pkt[IPv6], pkt[IPv6].payload
    value = int(IPv6Address(ip.dst)) << 128 | int(IPv6Address(ip.src))
    for field, bits in ((ip.fl, 20), (ip.nh, 8), (l4.sport, 16), (l4.dport, 16)):
        value = value << bits | field
    return crc16_arc((value << 4).to_bytes(40, "big")) % members


def _with_ports(frame: bytes, sport: int) -> bytes:
    pkt = Ether(frame)
    pkt[IPv6].payload.sport = sport
    del pkt[IPv6].payload.chksum
    return bytes(pkt)


def ecmp_member_cases() -> list[dict[str, Any]]:
    """Flows to a remote subnet, each sent to exactly the spine BMv2's hash picks: two UDP
    and two TCP flows per spine, by source port (the software switch hashed with CRC-32
    until issue 33; the corpus then only said "one of the spines")."""
    up, spines = FABRIC.host_port(0), FABRIC.t1_per_plane
    cases, found = [], {}
    for tcp in (False, True):
        sport = 40000
        while any(found.get((tcp, j), 0) < 2 for j in range(spines)):
            frame = _with_ports(baseline_frame(H2.address, tcp=tcp), sport)
            j = ecmp_member(frame, spines)
            sport += 1
            if found.get((tcp, j), 0) >= 2:
                continue
            found[tcp, j] = found.get((tcp, j), 0) + 1
            kind = "tcp" if tcp else "udp"
            cases.append(case(
                f"baseline_ecmp_{kind}_sport_{sport - 1}", f"{kind.upper()} source port "
                f"{sport - 1}: BMv2's crc16 picks spine {j}", T0A, up, frame,
                out(FABRIC.uplink_port(j), edited(frame, T0A, FABRIC.t1(0, j).mac))))
    return cases


def vlan_cases() -> list[dict[str, Any]]:
    """Tagged frames are not IPv6 to the parser, whatever they carry. A veth's receiving
    kernel strips the outer tag before a packet socket sees it; BMv2's libpcap capture and
    the software switch (softswitch.tagged) put it back, so both drop these."""
    up = FABRIC.host_port(0)
    f = Ether(data_frame(CROSS))
    inner = f.payload
    base = Ether(src=f.src, dst=f.dst)
    return [
        case("vlan_dot1q_mrc_data", "a valid MRC data frame behind an 802.1Q tag", T0A, up,
             bytes(base / Dot1Q(vlan=5, prio=3) / inner), drop("NOT_IPV6")),
        case("vlan_priority_tag", "802.1Q with VID 0 (a priority tag) around MRC data", T0A,
             up, bytes(base / Dot1Q(vlan=0, prio=5) / inner), drop("NOT_IPV6")),
        case("vlan_qinq_mrc_data", "802.1ad outer and 802.1Q inner tags around MRC data", T0A,
             up, bytes(base / Dot1AD(vlan=7) / Dot1Q(vlan=9) / inner), drop("NOT_IPV6")),
        case("vlan_dot1q_baseline", "a baseline UDP frame behind an 802.1Q tag", T0A, up,
             bytes(Ether(src=H0.mac, dst=T0A.mac) / Dot1Q(vlan=12) /
                   Ether(baseline_frame(H2.address)).payload), drop("NOT_IPV6")),
    ]


def baseline_cases() -> list[dict[str, Any]]:
    """Plain IPv6 routed by LPM; remote subnets spread over the spines by ECMP."""
    udp = baseline_frame(H2.address)
    tcp = baseline_frame(H2.address, tcp=True)
    local = baseline_frame(H1.address)
    members = [{"port": FABRIC.uplink_port(j),
                "frame": edited(udp, T0A, FABRIC.t1(0, j).mac).hex()}
               for j in range(FABRIC.t1_per_plane)]
    tcp_members = [{"port": FABRIC.uplink_port(j),
                    "frame": edited(tcp, T0A, FABRIC.t1(0, j).mac).hex()}
                   for j in range(FABRIC.t1_per_plane)]
    up = FABRIC.host_port(0)
    return [
        case("baseline_ecmp_udp", "UDP to a remote T0 subnet: one of the spine uplinks", T0A,
             up, udp, {"one_of": members}),
        case("baseline_ecmp_tcp", "TCP to a remote T0 subnet: one of the spine uplinks", T0A,
             up, tcp, {"one_of": tcp_members}),
        case("baseline_local_host", "/128 route to a NIC on the same T0", T0A, up, local,
             out(FABRIC.host_port(H1.local), edited(local, T0A, H1.mac))),
        case("baseline_spine_down", "spine routes a T0 subnet down", SPINE1,
             FABRIC.downlink_port(0), baseline_frame(H2.address),
             out(FABRIC.downlink_port(1), edited(baseline_frame(H2.address), SPINE1, T0B.mac))),
        case("baseline_no_route", "no LPM match: dropped", T0A, up,
             baseline_frame(IPv6Address("fd00:99::1")), drop("NO_ROUTE")),
        case("baseline_hop_limit_1", "hop limit applies to baseline traffic too", T0A, up,
             baseline_frame(H2.address, hop_limit=1), drop("HOP_LIMIT")),
    ]


def malformed_cases() -> list[dict[str, Any]]:
    up = FABRIC.host_port(0)
    f = data_frame(CROSS)
    arp = bytes(Ether(src=H0.mac, dst="ff:ff:ff:ff:ff:ff") / ARP(pdst="10.0.0.1"))
    return [
        case("not_ipv6_arp", "ARP is not forwarded by an IPv6 fabric", T0A, up, arp,
             drop("NOT_IPV6")),
        case("malformed_short_bth", "UDP 4791 payload ends inside the BTH", T0A, up,
             _cut_consistently(f, w.FRAME_HEADERS_LEN + 6), drop("MALFORMED")),
        case("malformed_short_reth", "data opcode, payload ends inside the RETH", T0A, up,
             _cut_consistently(f, w.FRAME_HEADERS_LEN + w.BTH_LEN + w.METH_LEN + 8),
             drop("MALFORMED")),
        case("malformed_short_inner_ipv6", "next header 41 but the frame ends inside it", T0A,
             up, _cut_consistently(f, w.ETH_LEN + w.IPV6_LEN + 20), drop("MALFORMED")),
        case("malformed_payload_length", "outer payload length beyond the frame end", T0A, up,
             _declare_longer(f, 100), drop("MALFORMED")),
        case("malformed_outer_version", "ethertype IPv6 but version 4", T0A, up,
             f[:w.ETH_LEN] + bytes([0x40 | f[w.ETH_LEN] & 0x0F]) + f[w.ETH_LEN + 1:],
             drop("MALFORMED")),
        case("malformed_inner_version", "inner header version 5", T0A, up,
             _inner_version(f, 5), drop("MALFORMED")),
    ]


def _cut_consistently(frame: bytes, length: int) -> bytes:
    """Cut the frame and make the outer payload length agree, so only the parser objects."""
    cut = bytearray(frame[:length])
    cut[w.ETH_LEN + 4:w.ETH_LEN + 6] = (length - w.ETH_LEN - w.IPV6_LEN).to_bytes(2, "big")
    return bytes(cut)


def _declare_longer(frame: bytes, extra: int) -> bytes:
    """Outer payload length claims `extra` bytes more than the frame holds."""
    declared = len(frame) - w.ETH_LEN - w.IPV6_LEN + extra
    return frame[:w.ETH_LEN + 4] + declared.to_bytes(2, "big") + frame[w.ETH_LEN + 6:]


def sequence_cases() -> list[dict[str, Any]]:
    """Queue state set up by earlier frames (`prelude`), each of which has left the switch
    before the next is sent. High-priority packets leave their own (empty) queue, so they
    must not overwrite the data queue's depth in the register: against an egress that writes
    every packet's enq_qdepth, the `trim_after_*` data frames are not trimmed. A data packet
    that leaves the data queue empty must write that depth: against an egress that never
    writes (or writes only from high priority), `no_trim_after_data_queue_drained` is."""
    host = FABRIC.host_port(0)
    f = data_frame(CROSS)
    header = trimmed(data_frame(CROSS), T0A, SPINE.mac, w.DSCP_TRIMMED, shift=False)
    expect = out(UP, trimmed(f, T0A, SPINE.mac, w.DSCP_TRIMMED), TRIM_COUNTER={UP: 1})
    untrimmable = data_frame(CROSS, dscp=w.DSCP_NO_TRIM)
    preludes = {
        "trim_after_sack_departure": [sack_frame(CROSS)],
        "trim_after_header_departure": [header],
        "trim_after_trimmed_departure": [f],
        "trim_after_many_departures": [sack_frame(CROSS), f, nack_frame(CROSS), header],
        "no_trim_after_data_queue_drained": [untrimmable],
    }
    cases = [
        case("trim_after_sack_departure", "a SACK leaves the port first (high priority): the "
             "data behind it still sees the data queue's depth and is trimmed", T0A, host, f,
             expect, {UP: TRIM_DEPTH}),
        case("trim_after_header_departure", "a trimmed header leaves the port first: the data "
             "behind it is still trimmed", T0A, host, f, expect, {UP: TRIM_DEPTH}),
        case("trim_after_trimmed_departure", "a data frame is trimmed and leaves as a header "
             "(high priority): the next data frame is trimmed too", T0A, host, f, expect,
             {UP: TRIM_DEPTH}),
        case("trim_after_many_departures", "SACK, trimmed data, NACK and a trimmed header "
             "leave in turn: none of them resets the data queue's depth", T0A, host, f, expect,
             {UP: TRIM_DEPTH}),
        case("no_trim_after_data_queue_drained", "an untrimmable data frame leaves the data "
             "queue empty and writes depth 0: the next data frame is neither trimmed nor "
             "marked", T0A, host, f,
             out(UP, edited(f, T0A, SPINE.mac, shift=True), TRIM_COUNTER={UP: 0},
                 ECN_MARK_COUNTER={UP: 0}), {UP: TRIM_DEPTH}),
    ]
    for c in cases:
        c["prelude"] = [{"port": host, "frame": frame.hex()} for frame in preludes[c["name"]]]
    return cases


def _inner_version(frame: bytes, version: int) -> bytes:
    at = w.ETH_LEN + w.IPV6_LEN
    return frame[:at] + bytes([version << 4 | frame[at] & 0x0F]) + frame[at + 1:]


def build() -> dict[str, Any]:
    cases = (usid_cases() + queue_cases() + sequence_cases() + baseline_cases()
             + ecmp_member_cases() + malformed_cases() + vlan_cases())
    return {"format_version": FORMAT_VERSION,
            "generator": "python -m tests.golden.generate",
            "fabric": {"planes": FABRIC.planes, "t0_per_plane": FABRIC.t0_per_plane,
                       "t1_per_plane": FABRIC.t1_per_plane,
                       "hosts_per_t0": FABRIC.hosts_per_t0},
            "cases": cases}


def render() -> str:
    return json.dumps(build(), indent=1) + "\n"


if __name__ == "__main__":
    CASES_PATH.write_text(render())
    print(f"wrote {CASES_PATH}")
