/* Headers and metadata (docs/wire-format.md sections 1-2). */
#ifndef MRC_HEADERS_P4
#define MRC_HEADERS_P4

#include "defines.p4"

header ethernet_t {
    mac_addr_t dst_addr;
    mac_addr_t src_addr;
    bit<16>    ether_type;
}

/* Traffic class split into DSCP and ECN so the program can rewrite each. */
header ipv6_t {
    bit<4>      version;
    bit<6>      dscp;
    bit<2>      ecn;
    bit<20>     flow_label;
    bit<16>     payload_len;
    bit<8>      next_hdr;
    bit<8>      hop_limit;
    ipv6_addr_t src_addr;
    ipv6_addr_t dst_addr;
}

header udp_t {
    bit<16> src_port;
    bit<16> dst_port;
    bit<16> len;
    bit<16> checksum;
}

/* Fixed 20-byte TCP header; options stay in the payload. Only the ports are used. */
header tcp_t {
    bit<16> src_port;
    bit<16> dst_port;
    bit<32> seq_no;
    bit<32> ack_no;
    bit<4>  data_offset;
    bit<4>  res;
    bit<8>  flags;
    bit<16> window;
    bit<16> checksum;
    bit<16> urgent_ptr;
}

/* InfiniBand BTH, IBTA field order (SE before M). */
header bth_t {
    bit<8>  opcode;
    bit<1>  se;
    bit<1>  migreq;
    bit<2>  pad;
    bit<4>  tver;
    bit<16> pkey;
    bit<8>  rsvd0;
    bit<24> dest_qp;
    bit<1>  ack_req;
    bit<1>  rtx;
    bit<6>  rsvd1;
    bit<24> psn;
}

header meth_t {
    bit<16> rq_msn;
    bit<16> msn;
}

header reth_t {
    bit<64> va;
    bit<32> rkey;
    bit<32> dma_len;
}

struct parsed_headers_t {
    ethernet_t ethernet;
    ipv6_t     outer_ipv6;
    ipv6_t     inner_ipv6;
    tcp_t      tcp;
    udp_t      udp;
    bth_t      bth;
    meth_t     meth;
    reth_t     reth;
}

struct local_metadata_t {
    bit<48>  usid_prefix;      /* DA[127:80], the key of my_usid_table and usid_fwd_table */
    bit<16>  l4_src_port;      /* ECMP hash inputs */
    bit<16>  l4_dst_port;
    bool     drop;
    bit<32>  drop_reason;      /* drop_counter index */
    bool     port_configured;  /* port_config_table hit for the egress port */
    bit<1>   host_facing;
    bit<1>   ecn_enabled;
    qdepth_t trim_threshold;
    qdepth_t ecn_threshold;
    qdepth_t queue_depth;      /* queue_depth_register[egress port] read in ingress */
}

#endif
