"""Where every byte of an MRC frame sits, how long each header is, and the DSCP/ECN classes.

The single Python definition of docs/wire-format.md §1 (frame), §2 (header lengths) and §4-5
(DSCP classes, trimming). The codec, the software switch, the simulator and the agents
read offsets and lengths from here; p4src/include/defines.p4 repeats the values the P4
program needs and tests/switch/p4/test_p4_constants.py checks that the two agree. To change
what a trimmed packet keeps, change TRIMMED_FRAME_LEN here (and its P4 twin).
"""

from __future__ import annotations

# What `import wire` re-exports from this module.
__all__ = [
    "BTH", "BTH_LEN", "CC_STATE_LEN", "DATA_DSCPS", "DATA_HEADERS_LEN", "DEFAULT_HOP_LIMIT",
    "DSCP_CONTROL", "DSCP_NO_TRIM", "DSCP_TRIMMABLE", "DSCP_TRIMMABLE_RETX", "DSCP_TRIMMED",
    "DSCP_TRIMMED_LASTHOP", "ECN_CE", "ECN_ECT0", "ECN_ECT1", "ECN_NOT_ECT", "ECT_CODES",
    "ETH_DST", "ETH_LEN", "ETH_SRC", "ETH_TYPE", "ETH_TYPE_IPV6", "FLOW_LABEL_MASK",
    "FRAME_HEADERS_LEN", "HIGH_PRIORITY_DSCPS", "IMM_LEN", "INNER", "INNER_NEXT_HEADER",
    "INNER_PAYLOAD_LEN", "IP6_DST", "IP6_HOP_LIMIT", "IP6_NEXT_HEADER", "IP6_PAYLOAD_LEN",
    "IP6_SRC", "IPPROTO_IPV6", "IPPROTO_TCP", "IPPROTO_UDP", "IPV6_ADDR_LEN", "IPV6_LEN",
    "L4_PORTS", "MAC_LEN", "METH_LEN", "MIN_HOP_LIMIT", "NACK_LEN", "OUTER", "OUTER_DST",
    "OUTER_HOP_LIMIT", "OUTER_NEXT_HEADER", "OUTER_PAYLOAD_LEN", "OUTER_SRC",
    "PORT_STATUS_LEN", "PROBE_LEN", "RETH_LEN", "ROCE_UDP_PORT", "SACK_LEN", "TC_SHIFT",
    "TCP_LEN", "TRIMMABLE_DSCPS", "TRIMMED_DSCPS", "TRIMMED_FRAME_LEN",
    "TRIMMED_INNER_PAYLOAD_LEN", "TRIMMED_OUTER_PAYLOAD_LEN", "TRIMMED_UDP_LEN", "UDP",
    "UDP_LEN", "UDP_LENGTH", "UDP_LENGTH_FIELD", "USID_ACTIVE", "USID_BLOCK_LEN", "USID_LEN",
    "USID_MATCH", "USID_MATCH_LEN",
]

# ---- encapsulation: Ethernet / outer IPv6 (uSID carrier) / inner IPv6 / UDP ------------------
ETH_TYPE_IPV6 = 0x86DD
IPPROTO_TCP = 6
IPPROTO_UDP = 17
IPPROTO_IPV6 = 41
ROCE_UDP_PORT = 4791
DEFAULT_HOP_LIMIT = 64
MIN_HOP_LIMIT = 2  # a switch drops a frame arriving with hop limit 0 or 1 (§5)

ETH_LEN = 14
IPV6_LEN = 40
UDP_LEN = 8
TCP_LEN = 20
MAC_LEN = 6
IPV6_ADDR_LEN = 16
FRAME_HEADERS_LEN = ETH_LEN + 2 * IPV6_LEN + UDP_LEN  # 102: bytes before the UDP payload

# ---- byte offsets inside a frame --------------------------------------------------------------
ETH_DST = 0
ETH_SRC = ETH_DST + MAC_LEN
ETH_TYPE = ETH_SRC + MAC_LEN
OUTER = ETH_LEN  # outer IPv6 header; its first 32 bits are version, traffic class, flow label
INNER = OUTER + IPV6_LEN
UDP = INNER + IPV6_LEN
BTH = UDP + UDP_LEN
# offsets inside an IPv6 header (RFC 8200) and inside a UDP or TCP header
IP6_PAYLOAD_LEN = 4
IP6_NEXT_HEADER = 6
IP6_HOP_LIMIT = 7
IP6_SRC = 8
IP6_DST = 24
L4_PORTS = 0  # source then destination port, 16 bits each
UDP_LENGTH = 4

OUTER_PAYLOAD_LEN = OUTER + IP6_PAYLOAD_LEN
OUTER_NEXT_HEADER = OUTER + IP6_NEXT_HEADER
OUTER_HOP_LIMIT = OUTER + IP6_HOP_LIMIT
OUTER_SRC = OUTER + IP6_SRC
OUTER_DST = OUTER + IP6_DST  # the uSID carrier
INNER_PAYLOAD_LEN = INNER + IP6_PAYLOAD_LEN
INNER_NEXT_HEADER = INNER + IP6_NEXT_HEADER
UDP_LENGTH_FIELD = UDP + UDP_LENGTH
TC_SHIFT = 20  # traffic class bits inside the first 32-bit word of an IPv6 header
FLOW_LABEL_MASK = 0xFFFFF

# F3216 uSID carrier (§3): a 32-bit block, then 16-bit uSIDs; the switch matches block plus
# the active uSID and shifts the rest left by one uSID.
USID_BLOCK_LEN = 4
USID_LEN = 2
USID_MATCH = OUTER_DST  # block + active uSID: bytes [USID_MATCH, USID_MATCH + USID_MATCH_LEN)
USID_MATCH_LEN = USID_BLOCK_LEN + USID_LEN
USID_ACTIVE = OUTER_DST + USID_BLOCK_LEN

# ---- transport header lengths (§2) ------------------------------------------------------------
BTH_LEN = 12
METH_LEN = 4
RETH_LEN = 16
IMM_LEN = 4
SACK_LEN = 28
CC_STATE_LEN = 8
NACK_LEN = 20
PROBE_LEN = 8
PORT_STATUS_LEN = 8
DATA_HEADERS_LEN = FRAME_HEADERS_LEN + BTH_LEN + METH_LEN + RETH_LEN  # 134

# ---- defaults (§6) ----------------------------------------------------------------------------
DEFAULT_MTU = 1024  # payload bytes per data packet
FULL_DATA_FRAME_LEN = DATA_HEADERS_LEN + DEFAULT_MTU  # 1158: what a port rate counts in

# ---- trimming (§5): a trimmed frame keeps the data headers and fixes three lengths -------------
TRIMMED_FRAME_LEN = DATA_HEADERS_LEN
TRIMMED_OUTER_PAYLOAD_LEN = TRIMMED_FRAME_LEN - INNER
TRIMMED_INNER_PAYLOAD_LEN = TRIMMED_FRAME_LEN - UDP
TRIMMED_UDP_LEN = TRIMMED_INNER_PAYLOAD_LEN

# ---- DSCP and ECN (§4) ------------------------------------------------------------------------
DSCP_NO_TRIM = 0
DSCP_TRIMMABLE = 4
DSCP_TRIMMABLE_RETX = 8
DSCP_TRIMMED = 12
DSCP_TRIMMED_LASTHOP = 16
DSCP_CONTROL = 46
TRIMMABLE_DSCPS = frozenset({DSCP_TRIMMABLE, DSCP_TRIMMABLE_RETX})  # switches may cut these
TRIMMED_DSCPS = frozenset({DSCP_TRIMMED, DSCP_TRIMMED_LASTHOP})
HIGH_PRIORITY_DSCPS = frozenset({DSCP_CONTROL}) | TRIMMED_DSCPS  # strict-priority queue
DATA_DSCPS = TRIMMABLE_DSCPS | TRIMMED_DSCPS  # data packets, whole or cut

ECN_NOT_ECT = 0
ECN_ECT1 = 1
ECN_ECT0 = 2
ECN_CE = 3
ECT_CODES = frozenset({ECN_ECT0, ECN_ECT1})
