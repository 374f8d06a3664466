"""P4Info names of the MRC switch program (p4src/mrc.p4), one definition each.

The controller, the software data plane and the tests refer to tables, match
fields, actions, parameters, counters and registers only through these
constants, so a rename in the P4 program is a one-line change here (and a test,
tests/switch/p4/test_p4_p4info.py, fails until the committed P4Info agrees).
"""

from __future__ import annotations

# ---- tables -------------------------------------------------------------------------------
MY_USID_TABLE = "IngressPipeImpl.my_usid_table"
USID_FWD_TABLE = "IngressPipeImpl.usid_fwd_table"
ROUTING_V6_TABLE = "IngressPipeImpl.routing_v6_table"
PORT_CONFIG_TABLE = "IngressPipeImpl.port_config_table"

# ---- match fields (per table) -------------------------------------------------------------
USID_PREFIX = "usid_prefix"  # my_usid_table and usid_fwd_table: exact, 48 bits (DA[127:80])
DST_ADDR = "dst_addr"  # routing_v6_table: lpm, 128 bits (outer IPv6 destination)
EGRESS_PORT = "egress_port"  # port_config_table: exact, 9 bits

USID_PREFIX_BITS = 48
DST_ADDR_BITS = 128
PORT_BITS = 9

# ---- actions and their parameters ---------------------------------------------------------
NO_ACTION = "NoAction"
SHIFT_USID = "IngressPipeImpl.shift_usid"  # no parameters
SET_NEXT_HOP = "IngressPipeImpl.set_next_hop"
SET_PORT_CONFIG = "IngressPipeImpl.set_port_config"

PARAM_PORT = "port"  # set_next_hop, 9 bits
PARAM_DMAC = "dmac"  # set_next_hop, 48 bits
PARAM_HOST_FACING = "host_facing"  # set_port_config, 1 bit
PARAM_ECN_ENABLED = "ecn_enabled"  # set_port_config, 1 bit
PARAM_TRIM_THRESHOLD = "trim_threshold"  # set_port_config, 19 bits (packets)
PARAM_ECN_THRESHOLD = "ecn_threshold"  # set_port_config, 19 bits (packets)
PARAM_SMAC = "smac"  # set_port_config, 48 bits

MAC_BITS = 48
FLAG_BITS = 1
QDEPTH_BITS = 19  # width of standard_metadata.enq_qdepth on v1model

# Parameter name -> bitwidth, in P4 declaration order (= P4Runtime param ids 1, 2, ...).
ACTION_PARAMS: dict[str, tuple[tuple[str, int], ...]] = {
    NO_ACTION: (),
    SHIFT_USID: (),
    SET_NEXT_HOP: ((PARAM_PORT, PORT_BITS), (PARAM_DMAC, MAC_BITS)),
    SET_PORT_CONFIG: (
        (PARAM_HOST_FACING, FLAG_BITS),
        (PARAM_ECN_ENABLED, FLAG_BITS),
        (PARAM_TRIM_THRESHOLD, QDEPTH_BITS),
        (PARAM_ECN_THRESHOLD, QDEPTH_BITS),
        (PARAM_SMAC, MAC_BITS),
    ),
}

# ---- table sizes --------------------------------------------------------------------------
MY_USID_TABLE_SIZE = 64
USID_FWD_TABLE_SIZE = 1024
ROUTING_V6_TABLE_SIZE = 1024

# ---- action profile (ECMP) ----------------------------------------------------------------
ECMP_SELECTOR = "IngressPipeImpl.ecmp_selector"
ECMP_SELECTOR_SIZE = 4096  # summed weights of a T0's groups: T0s x spines (2,016 at hosts-1024)
ECMP_HASH_BITS = 16  # crc16 over the 5-tuple and flow label

# ---- counters -----------------------------------------------------------------------------
MY_USID_COUNTER = "IngressPipeImpl.my_usid_counter"  # direct, on my_usid_table
USID_FWD_COUNTER = "IngressPipeImpl.usid_fwd_counter"  # direct, on usid_fwd_table
ROUTING_V6_COUNTER = "IngressPipeImpl.routing_v6_counter"  # direct, on routing_v6_table
PORT_CONFIG_COUNTER = "IngressPipeImpl.port_config_counter"  # direct, on port_config_table
DIRECT_COUNTERS: dict[str, str] = {
    MY_USID_COUNTER: MY_USID_TABLE,
    USID_FWD_COUNTER: USID_FWD_TABLE,
    ROUTING_V6_COUNTER: ROUTING_V6_TABLE,
    PORT_CONFIG_COUNTER: PORT_CONFIG_TABLE,
}

DROP_COUNTER = "IngressPipeImpl.drop_counter"  # indexed by drop reason (below), packets
TRIM_COUNTER = "IngressPipeImpl.trim_counter"  # indexed by egress port, packets trimmed
ECN_MARK_COUNTER = "IngressPipeImpl.ecn_mark_counter"  # indexed by egress port, CE marks

# ---- registers ----------------------------------------------------------------------------
# Global (declared outside any control), so it has no control prefix. Indexed by port,
# value = deq_qdepth of the port's data queue (packets left behind by the last data packet to
# leave), written in egress by data-queue packets only, read in ingress.
QUEUE_DEPTH_REGISTER = "queue_depth_register"

# Ports 0..511 (v1model PortId is 9 bits): size of the per-port counters and register.
PORT_COUNT = 512

# ---- drop reasons (drop_counter indices) --------------------------------------------------
DROP_UNKNOWN_USID = 0  # my_usid hit, but usid_fwd has no entry for the next uSID
DROP_HOP_LIMIT = 1  # outer hop limit 0 or 1 on arrival
DROP_MALFORMED = 2  # parser error or inconsistent IPv6 header (see p4src/README.md)
DROP_NO_ROUTE = 3  # not my uSID and routing_v6 LPM miss
DROP_NOT_IPV6 = 4  # Ethernet type is not IPv6
DROP_REASON_COUNT = 5

DROP_REASONS: dict[str, int] = {
    "UNKNOWN_USID": DROP_UNKNOWN_USID,
    "HOP_LIMIT": DROP_HOP_LIMIT,
    "MALFORMED": DROP_MALFORMED,
    "NO_ROUTE": DROP_NO_ROUTE,
    "NOT_IPV6": DROP_NOT_IPV6,
}

# ---- queues -------------------------------------------------------------------------------
# simple_switch must run with --priority-queues PRIORITY_QUEUES: the program sets
# standard_metadata.priority to PRIORITY_HIGH (control and trimmed packets) or PRIORITY_DATA;
# a priority >= the number of queues is dropped by simple_switch.
PRIORITY_QUEUES = 2
PRIORITY_DATA = 0
PRIORITY_HIGH = 1
