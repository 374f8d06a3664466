/* Constants of the MRC switch program. Every value matches docs/wire-format.md and is checked
 * against wire/codec.py, fabric/topology.py and p4rt/names.py by
 * tests/switch/test_p4_constants.py, which parses the `const` lines below: keep one per line. */
#ifndef MRC_DEFINES_P4
#define MRC_DEFINES_P4

typedef bit<48>  mac_addr_t;
typedef bit<128> ipv6_addr_t;
typedef bit<9>   port_num_t;
typedef bit<19>  qdepth_t;

/* Encapsulation (wire-format.md section 1). */
const bit<16> ETH_TYPE_IPV6 = 0x86DD;
const bit<8>  IPPROTO_TCP = 6;
const bit<8>  IPPROTO_UDP = 17;
const bit<8>  IPPROTO_IPV6 = 41;
const bit<16> ROCE_UDP_PORT = 4791;
const bit<4>  IP_VERSION_6 = 6;

/* BTH opcodes (section 2.1); data opcodes carry METH and RETH. */
const bit<8> OP_WRITE_FIRST = 0xC6;
const bit<8> OP_WRITE_MIDDLE = 0xC7;
const bit<8> OP_WRITE_LAST = 0xC8;
const bit<8> OP_WRITE_LAST_IMM = 0xC9;
const bit<8> OP_WRITE_ONLY = 0xCA;
const bit<8> OP_WRITE_ONLY_IMM = 0xCB;

/* DSCP classes and ECN codepoints (section 4). */
const bit<6> DSCP_NO_TRIM = 0;
const bit<6> DSCP_TRIMMABLE = 4;
const bit<6> DSCP_TRIMMABLE_RETX = 8;
const bit<6> DSCP_TRIMMED = 12;
const bit<6> DSCP_TRIMMED_LASTHOP = 16;
const bit<6> DSCP_CONTROL = 46;
const bit<2> ECN_NOT_ECT = 0;
const bit<2> ECN_ECT1 = 1;
const bit<2> ECN_ECT0 = 2;
const bit<2> ECN_CE = 3;

/* Header lengths in bytes and the trimmed frame (section 5). */
const bit<32> ETH_LEN = 14;
const bit<32> IPV6_LEN = 40;
const bit<32> UDP_LEN = 8;
const bit<32> BTH_LEN = 12;
const bit<32> METH_LEN = 4;
const bit<32> RETH_LEN = 16;
const bit<32> TRIMMED_FRAME_LEN = 134;
const bit<16> TRIMMED_OUTER_PAYLOAD_LEN = 80;
const bit<16> TRIMMED_INNER_PAYLOAD_LEN = 40;
const bit<16> TRIMMED_UDP_LEN = 40;

/* Hop limit (section 5): a packet arriving with less than this is dropped. */
const bit<8> MIN_HOP_LIMIT = 2;

/* SRv6 uSID F3216 (section 3): 32-bit block, 16-bit uSIDs. */
const bit<32> USID_BLOCK = 0xFCBBBBBB;

/* Queues: run simple_switch with --priority-queues PRIORITY_QUEUES. */
const bit<3> PRIORITY_DATA = 0;
const bit<3> PRIORITY_HIGH = 1;
const bit<32> PRIORITY_QUEUES = 2;

/* drop_counter indices (p4rt/names.py DROP_*). */
const bit<32> DROP_UNKNOWN_USID = 0;
const bit<32> DROP_HOP_LIMIT = 1;
const bit<32> DROP_MALFORMED = 2;
const bit<32> DROP_NO_ROUTE = 3;
const bit<32> DROP_NOT_IPV6 = 4;
const bit<32> DROP_REASON_COUNT = 5;

/* Sizes of counters, register, tables and the ECMP selector. */
const bit<32> PORT_COUNT = 512;
const bit<32> ECMP_SELECTOR_SIZE = 4096;  /* summed member weights: 63 remote T0s x 32 spines at hosts-1024 */
const bit<32> ECMP_HASH_BITS = 16;
const bit<32> MY_USID_TABLE_SIZE = 64;
const bit<32> USID_FWD_TABLE_SIZE = 1024;
const bit<32> ROUTING_V6_TABLE_SIZE = 1024;

#endif
