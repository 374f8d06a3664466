"""The MRC switch program (p4src/mrc.p4) in Python: parser, ingress and egress.

Read p4src/include/{parser,ingress,egress}.p4 alongside: each step below mirrors one
there, in the same order, with the same drop reasons and counters. Table, action and
counter ids come from the installed P4Info through the names in p4rt/names.py.
The ECMP member choice is BMv2's (softswitch/ecmp.py), so both targets send every flow the
same way.
"""

from __future__ import annotations

import struct
from operator import itemgetter
from typing import NamedTuple

from p4rt import names as N
from softswitch.ecmp import crc16_arc, ecmp_key
from softswitch.store import DeviceState
from wire import DATA_OPCODES, trim_frame
from wire.layout import (
    BTH_LEN,
    DSCP_TRIMMED,
    DSCP_TRIMMED_LASTHOP,
    ECN_CE,
    ECT_CODES,
    ETH_DST,
    ETH_LEN,
    ETH_SRC,
    ETH_TYPE,
    ETH_TYPE_IPV6,
    FLOW_LABEL_MASK,
    HIGH_PRIORITY_DSCPS,
    INNER,
    INNER_NEXT_HEADER,
    IPPROTO_IPV6,
    IPPROTO_TCP,
    IPPROTO_UDP,
    IPV6_ADDR_LEN,
    IPV6_LEN,
    MAC_LEN,
    METH_LEN,
    MIN_HOP_LIMIT,
    OUTER,
    OUTER_DST,
    OUTER_HOP_LIMIT,
    OUTER_SRC,
    RETH_LEN,
    ROCE_UDP_PORT,
    TC_SHIFT,
    TCP_LEN,
    TRIMMABLE_DSCPS,
    TRIMMED_FRAME_LEN,
    UDP_LEN,
    USID_LEN,
    USID_MATCH,
    USID_MATCH_LEN,
)

DROP_PORT = 511  # v1model: egress_spec 511 drops the packet

_WORD = struct.Struct("!I")
_OUTER = struct.Struct("!IHBB")  # ver/tc/flow, payload len, next header, hop limit
_PORTS = struct.Struct("!HH")
assert ETH_SRC == ETH_DST + MAC_LEN  # one slice rewrites both MACs
_ETH_TYPE_HI, _ETH_TYPE_LO = ETH_TYPE_IPV6 >> 8, ETH_TYPE_IPV6 & 0xFF
_DATA_HEADERS = BTH_LEN + METH_LEN + RETH_LEN  # after UDP: what a data opcode must carry
_HIGH, _DATA = N.PRIORITY_HIGH, N.PRIORITY_DATA
_L4_AFTER_INNER = INNER + IPV6_LEN
_DST_END = OUTER_DST + IPV6_ADDR_LEN
_SRC_END = OUTER_SRC + IPV6_ADDR_LEN
_USID_END = USID_MATCH + USID_MATCH_LEN
_SHIFT_FROM = _USID_END  # bytes after the active uSID move up by one uSID
_SHIFT_TO = _USID_END - USID_LEN
USID_BITS = 8 * USID_LEN
_USID_MASK = (1 << USID_BITS) - 1


ROUTE_CACHE_SIZE = 4096  # decisions kept per pipeline; a full cache starts over (hostile input)
# The outer destination as two 64-bit halves: the high one (block + active uSID + next uSID)
# is all the uSID path reads, and keys its cache.
_DST = struct.Struct("!QQ")
assert _DST.size == IPV6_ADDR_LEN and USID_MATCH == OUTER_DST
assert USID_MATCH_LEN + USID_LEN == 8
# One read of every field the parser extracts from an Ethernet / IPv6 / IPv6 / UDP frame:
# EtherType; outer word, payload length, next header, hop limit; destination halves; inner
# version byte and next header; UDP ports; BTH opcode.
_HEAD = struct.Struct(
    f"!{ETH_TYPE}xHIHBB{OUTER_DST - OUTER - 8}xQQB{INNER_NEXT_HEADER - INNER - 1}xB"
    f"{_L4_AFTER_INNER - INNER_NEXT_HEADER - 1}xHH{UDP_LEN - 4}xB")
assert OUTER == ETH_TYPE + 2 and INNER == _DST_END and _HEAD.size == _L4_AFTER_INNER + UDP_LEN + 1
_HEAD_MIN = _L4_AFTER_INNER + UDP_LEN + _DATA_HEADERS  # no length check can fail from here
# The shift rewrites the uSIDs from the active one on: the next uSID, the low half, zeros.
_SHIFTED = struct.Struct("!HQH")
assert _SHIFT_TO + _SHIFTED.size == _DST_END and _SHIFT_FROM == OUTER_DST + 8 - USID_LEN
_NO_ROUTE = (None, False, None, None)  # my_usid miss: the LPM path, per frame
_NO_TRIM = (1 << N.QDEPTH_BITS) - 1
_MISS = object()


class NextHop(NamedTuple):
    """Everything forward() needs after routing, resolved once per action and cached: the
    egress port, the MAC rewrite (out[mac_from:mac_to] = macs, b"" for none) and the egress
    port's port_config_table entry with its parameters."""

    port: int
    mac_from: int
    mac_to: int
    macs: bytes
    cfg: object | None  # the port_config_table entry (direct counter), or None
    configured: bool  # a set_port_config entry: its thresholds apply
    host_facing: int
    ecn_enabled: int
    trim_threshold: int
    ecn_threshold: int
    least: int  # the lower threshold: below it neither applies


def param_getter(idx: object, action: str, *params: str) -> itemgetter:
    """Reads an action's parameters by name from the values an entry holds in P4Info order,
    so a reordering of the P4 action's parameters cannot be misread."""
    order = [name for name, _ in idx.action(action).params.values()]  # type: ignore[attr-defined]
    return itemgetter(*(order.index(p) for p in params))


class Pipeline:
    """Per-packet behaviour of one switch, bound to the ids of one installed P4Info.

    Table lookups are cached: the uSID path's decision (entries hit, shift, next hop, port
    configuration) by the 8 bytes it reads (block, active and next uSID), the LPM hit by
    destination, the next hop and port configuration by the resolved action. The caches
    are dropped whenever the device state's `generation` moves, which every Write does, so
    a frame processed after a Write returned sees the new tables. Direct counters, drop,
    trim and ECN counters and the queue depth register are still read and written per
    frame; the cached entries are the same objects the tables hold."""

    def __init__(self, state: DeviceState) -> None:
        idx = state.index
        self.state = state
        self.my_usid = state.tables[idx.id_of(N.MY_USID_TABLE)]
        self.usid_fwd = state.tables[idx.id_of(N.USID_FWD_TABLE)]
        self.routing = state.tables[idx.id_of(N.ROUTING_V6_TABLE)]
        self.port_config = state.tables[idx.id_of(N.PORT_CONFIG_TABLE)]
        self.shift_usid = idx.id_of(N.SHIFT_USID)
        self.set_next_hop = idx.id_of(N.SET_NEXT_HOP)
        self.set_port_config = idx.id_of(N.SET_PORT_CONFIG)
        self._next_hop_params = param_getter(idx, N.SET_NEXT_HOP, N.PARAM_PORT, N.PARAM_DMAC)
        self._port_config_params = param_getter(
            idx, N.SET_PORT_CONFIG, N.PARAM_HOST_FACING, N.PARAM_ECN_ENABLED,
            N.PARAM_TRIM_THRESHOLD, N.PARAM_ECN_THRESHOLD, N.PARAM_SMAC)
        profile = idx.id_of(N.ECMP_SELECTOR)
        self.members = state.members[profile]
        self.groups = state.groups[profile]
        self.drops = state.counters[idx.id_of(N.DROP_COUNTER)]
        self.trims = state.counters[idx.id_of(N.TRIM_COUNTER)]
        self.ecn_marks = state.counters[idx.id_of(N.ECN_MARK_COUNTER)]
        self.qdepth = state.registers[idx.id_of(N.QUEUE_DEPTH_REGISTER)]
        self.empty_group = 0  # a hit on a group with no members: dropped, not a P4 drop reason
        self._generation = -1  # of the state the caches below were filled from
        self._routes: dict[int, tuple] = {}  # uSID key -> (my_usid entry, shift, hop, next hop)
        self._lpm: dict[int, object] = {}  # outer destination -> routing_v6 entry or _MISS
        self._next_hops: dict[tuple, NextHop] = {}  # resolved action -> next hop

    def drop_stats(self) -> dict[str, int]:
        out = {name: self.drops[i][0] for name, i in N.DROP_REASONS.items()}
        out["EMPTY_ECMP_GROUP"] = self.empty_group
        return out

    def _drop(self, reason: int, n: int) -> None:
        """Count a drop (packets and bytes: BMv2 counts both in every counter, whatever its
        type, and reads both back; n is the frame's length as received)."""
        cell = self.drops[reason]
        cell[0] += 1
        cell[1] += n

    def ingress(self, frame: bytes, in_port: int) -> tuple[int, int, bytes] | None:
        """(egress port, priority, frame) for a forwarded frame; None when dropped."""
        result = self.forward(bytearray(frame), in_port)
        if result is None:
            return None
        return result[0], result[1], bytes(result[2])

    def forward(self, out: bytearray, in_port: int) -> tuple[int, int, bytearray] | None:
        """ingress() on a frame the caller gives up: rewritten in place and returned. The
        steps are the P4 program's blocks in its order: parser and validity checks
        (_headers), the uSID tables or routing_v6 (_route), then the port's configuration
        with trimming and ECN (_leave_by)."""
        n = len(out)
        headers = self._headers(out, n)
        if headers is None:
            return None
        word, next_hdr, hop_limit, sport, dport, reth, key, low = headers
        next_hop = self._route(out, n, word, next_hdr, sport, dport, key, low)
        if next_hop is None:
            return None
        return self._leave_by(out, n, next_hop, word, hop_limit, next_hdr, reth)

    def _headers(self, out: bytearray, n: int) -> tuple | None:
        """parser.p4 and ingress.p4's validity checks: (word, next header, hop limit, L4
        ports, RETH present, uSID key, low 64 bits of the destination), or None when dropped
        (counted). A frame long enough for every header the parser may extract (Ethernet,
        outer and inner IPv6, UDP: what the data path carries) is parsed with one struct
        read; any other goes through _parse, step by step. Both reach the same decisions,
        counters and drop reasons."""
        if n < _HEAD_MIN:
            return self._parse(out, n)
        eth_type, word, payload_len, next_hdr, hop_limit, key, low, inner, l4_proto, sport, \
            dport, opcode = _HEAD.unpack_from(out)
        if eth_type != ETH_TYPE_IPV6 or next_hdr != IPPROTO_IPV6 or l4_proto != IPPROTO_UDP:
            return self._parse(out, n)
        if word >> 28 != 6 or inner >> 4 != 6 or n < INNER + payload_len:
            return self._drop(N.DROP_MALFORMED, n)
        if hop_limit < MIN_HOP_LIMIT:
            return self._drop(N.DROP_HOP_LIMIT, n)
        reth = dport == ROCE_UDP_PORT and opcode in DATA_OPCODES
        return word, next_hdr, hop_limit, sport, dport, reth, key, low

    def _route(self, out: bytearray, n: int, word: int, next_hdr: int, sport: int, dport: int,
               key: int, low: int) -> NextHop | None:
        """my_usid_table, then usid_fwd_table (shifting the uSIDs when the entry says so);
        a destination not ours goes to routing_v6_table. The next hop, or None when dropped
        (counted)."""
        generation = self.state.generation
        if generation != self._generation:
            self._clear_caches(generation)
        route = self._routes.get(key)
        if route is None:
            route = self._usid_route(key)
        entry, shift, hop, next_hop = route
        if entry is None:
            return self._lpm_route(out, n, word, next_hdr, sport, dport, key << 64 | low)
        entry.packets += 1
        entry.bytes += n
        if hop is None:
            return self._drop(N.DROP_UNKNOWN_USID, n)
        if shift:  # the uSIDs after the active one move up by one; zeros come in last
            _SHIFTED.pack_into(out, _SHIFT_TO, key & _USID_MASK, low, 0)
        hop.packets += 1
        hop.bytes += n
        return next_hop

    def _leave_by(self, out: bytearray, n: int, next_hop: NextHop, word: int, hop_limit: int,
                  next_hdr: int, reth: bool) -> tuple[int, int, bytearray] | None:
        """The next hop's and port's MACs, the hop limit, port_config_table and, past its
        thresholds, trimming or ECN: (egress port, priority, frame), or None for DROP_PORT."""
        port, mac_from, mac_to, macs, cfg, configured, _, _, _, _, least = next_hop
        if macs:
            out[mac_from:mac_to] = macs
        out[OUTER_HOP_LIMIT] = hop_limit - 1
        if cfg is not None:
            cfg.packets += 1
            cfg.bytes += n
        tc = (word >> TC_SHIFT) & 0xFF
        high = tc >> 2 in HIGH_PRIORITY_DSCPS
        if configured:  # the thresholds apply (below the lower of the two, neither does)
            depth = self.qdepth[port] if port < len(self.qdepth) else 0
            if depth >= least:
                high = self._trim_or_mark(out, n, next_hop, depth, word, tc,
                                          reth and next_hdr == IPPROTO_IPV6) or high
        if port == DROP_PORT:
            return None
        return port, (_HIGH if high else _DATA), out

    def _trim_or_mark(self, out: bytearray, n: int, next_hop: NextHop, depth: int, word: int,
                      tc: int, data: bool) -> bool:
        """ingress.p4's congestion step at queue depth `depth`: trim a trimmable MRC data
        frame (it leaves at high priority: True), else mark an ECN-capable one CE."""
        port = next_hop.port
        dscp, ecn = tc >> 2, tc & 3
        if (depth >= next_hop.trim_threshold and data and dscp in TRIMMABLE_DSCPS
                and n > TRIMMED_FRAME_LEN):
            trim_frame(out)
            self._set_tc(out, word, DSCP_TRIMMED_LASTHOP if next_hop.host_facing else DSCP_TRIMMED,
                         ecn)
            self.trims[port][0] += 1
            self.trims[port][1] += n
            return True
        if (depth >= next_hop.ecn_threshold and dscp not in HIGH_PRIORITY_DSCPS
                and next_hop.ecn_enabled and not next_hop.host_facing and ecn in ECT_CODES):
            self._set_tc(out, word, dscp, ECN_CE)
            self.ecn_marks[port][0] += 1
            self.ecn_marks[port][1] += n
        return False

    def _parse(self, out: bytearray, n: int) -> tuple | None:
        """parser.p4 and the first if-chain of ingress.p4, header by header, for the frames
        forward's single read does not cover: (word, next header, hop limit, ports, RETH
        present, uSID key, low 64 bits of the destination), or None when dropped (counted).
        A frame ending inside a header is a parser error."""
        if n < ETH_LEN:
            return self._drop(N.DROP_MALFORMED, n)
        if out[ETH_TYPE] != _ETH_TYPE_HI or out[ETH_TYPE + 1] != _ETH_TYPE_LO:
            return self._drop(N.DROP_NOT_IPV6, n)
        if n < INNER:
            return self._drop(N.DROP_MALFORMED, n)
        word, payload_len, next_hdr, hop_limit = _OUTER.unpack_from(out, OUTER)
        inner_ok = True
        l4 = INNER
        if next_hdr == IPPROTO_IPV6:
            if n < _L4_AFTER_INNER:
                return self._drop(N.DROP_MALFORMED, n)
            inner_ok = out[INNER] >> 4 == 6
            l4_proto = out[INNER_NEXT_HEADER]
            l4 = _L4_AFTER_INNER
        else:
            l4_proto = next_hdr
        sport = dport = 0
        reth = False
        if l4_proto == IPPROTO_UDP:
            if n < l4 + UDP_LEN:
                return self._drop(N.DROP_MALFORMED, n)
            sport, dport = _PORTS.unpack_from(out, l4)
            if dport == ROCE_UDP_PORT:
                bth = l4 + UDP_LEN
                if n < bth + BTH_LEN:
                    return self._drop(N.DROP_MALFORMED, n)
                if out[bth] in DATA_OPCODES:
                    if n < bth + _DATA_HEADERS:
                        return self._drop(N.DROP_MALFORMED, n)
                    reth = True
        elif l4_proto == IPPROTO_TCP:
            if n < l4 + TCP_LEN:
                return self._drop(N.DROP_MALFORMED, n)
            sport, dport = _PORTS.unpack_from(out, l4)
        # ---- ingress validity checks (ingress.p4 apply, first if-chain)
        if word >> 28 != 6 or not inner_ok or n < INNER + payload_len:
            return self._drop(N.DROP_MALFORMED, n)
        if hop_limit < MIN_HOP_LIMIT:
            return self._drop(N.DROP_HOP_LIMIT, n)
        return (word, next_hdr, hop_limit, sport, dport, reth) + _DST.unpack_from(out, OUTER_DST)

    def _clear_caches(self, generation: int) -> None:
        """A Write moved the state's generation: every cached lookup may be stale."""
        self._routes.clear()
        self._lpm.clear()
        self._next_hops.clear()
        self._generation = generation

    def _lpm_route(self, out: bytearray, n: int, word: int, next_hdr: int, sport: int,
                   dport: int, dst: int) -> tuple | None:
        """routing_v6 (not one of my uSIDs): the next hop, or None when dropped (counted)."""
        hop = self._lpm.get(dst)
        if hop is None:
            hop = self._lpm_lookup(dst)
        if hop is _MISS:
            return self._drop(N.DROP_NO_ROUTE, n)
        hop.packets += 1
        hop.bytes += n
        action = self._select(hop.action, out, word, next_hdr, sport, dport)
        if action is None:
            self.empty_group += 1
            return None
        next_hop = self._next_hops.get(action)
        if next_hop is None:
            next_hop = self._next_hops[action] = self._next_hop(action)
        return next_hop

    def _usid_route(self, key: int) -> tuple:
        """The cached part of the uSID path for one key (see forward)."""
        entry = self.my_usid.exact.get((key >> USID_BITS,))
        if entry is None:
            route = _NO_ROUTE
        else:
            shift = entry.action[0] == self.shift_usid
            if shift:  # the shifted match: block, then the next uSID
                prefix = (key >> USID_BITS) & ~_USID_MASK | (key & _USID_MASK)
            else:
                prefix = key >> USID_BITS
            hop = self.usid_fwd.exact.get((prefix,))
            route = (entry, shift, hop, None if hop is None else self._next_hop(hop.action))
        if len(self._routes) >= ROUTE_CACHE_SIZE:
            self._routes.clear()
        self._routes[key] = route
        return route

    def _lpm_lookup(self, dst: int) -> object:
        hop = self.routing.lookup((dst,))
        if hop is None:
            hop = _MISS
        if len(self._lpm) >= ROUTE_CACHE_SIZE:
            self._lpm.clear()
            self._next_hops.clear()
        self._lpm[dst] = hop
        return hop

    def _next_hop(self, action: tuple) -> NextHop:
        port, dmac = 0, b""
        if action[0] == self.set_next_hop:
            port, mac = self._next_hop_params(action[1])
            dmac = mac.to_bytes(MAC_LEN, "big")
        cfg = self.port_config.exact.get((port,))
        if cfg is None or cfg.action[0] != self.set_port_config:
            return NextHop(port, ETH_DST, ETH_DST + len(dmac), dmac, cfg, False, 0, 0, _NO_TRIM,
                           _NO_TRIM, _NO_TRIM)
        host_facing, ecn_enabled, trim_threshold, ecn_threshold, smac = \
            self._port_config_params(cfg.action[1])
        macs = dmac + smac.to_bytes(MAC_LEN, "big")  # ETH_SRC follows ETH_DST
        return NextHop(port, ETH_SRC + MAC_LEN - len(macs), ETH_SRC + MAC_LEN, macs, cfg, True,
                       host_facing, ecn_enabled, trim_threshold, ecn_threshold,
                       min(trim_threshold, ecn_threshold))

    @staticmethod
    def _set_tc(out: bytearray, word: int, dscp: int, ecn: int) -> None:
        word = (word & ~(0xFF << TC_SHIFT)) | ((dscp << 2 | ecn) << TC_SHIFT)
        out[OUTER:OUTER + 4] = _WORD.pack(word)

    def _select(self, action: tuple, frame: bytearray, word: int, next_hdr: int, sport: int,
                dport: int) -> tuple | None:
        """Resolve a selector-table action: member directly, group by the flow hash."""
        kind, ref = action
        if kind == "member":
            return self.members.get(ref)
        group = self.groups.get(ref)
        if group is None or not group.slots:
            return None
        key = ecmp_key(bytes(frame[OUTER_DST:_DST_END]), bytes(frame[OUTER_SRC:_SRC_END]),
                       word & FLOW_LABEL_MASK, next_hdr, sport, dport)
        return self.members.get(group.slots[crc16_arc(key) % len(group.slots)])

    def egress(self, port: int, priority: int, enq_qdepth: int, deq_qdepth: int) -> None:
        """egress.p4: a data packet leaving the data queue records the depth it leaves behind
        (deq_qdepth), for the next ingress decisions; high-priority packets saw their own
        (short) queue and record nothing."""
        if priority == _DATA and port < len(self.qdepth):
            self.qdepth[port] = deq_qdepth if deq_qdepth < _NO_TRIM else _NO_TRIM
