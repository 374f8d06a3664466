/* Parser: Ethernet, outer IPv6, optional inner IPv6, TCP or UDP, and for UDP 4791 the BTH
 * plus METH and RETH on data opcodes. Anything the parser does not know stays payload and
 * is still forwarded on its outer IPv6 header. A frame that ends inside a header it must
 * extract sets standard_metadata.parser_error; ingress counts and drops it as MALFORMED. */
#ifndef MRC_PARSER_P4
#define MRC_PARSER_P4

#include "headers.p4"

parser ParserImpl(packet_in packet,
                  out parsed_headers_t hdr,
                  inout local_metadata_t local_metadata,
                  inout standard_metadata_t standard_metadata) {

    state start {
        transition parse_ethernet;
    }

    state parse_ethernet {
        packet.extract(hdr.ethernet);
        transition select(hdr.ethernet.ether_type) {
            ETH_TYPE_IPV6: parse_outer_ipv6;
            default: accept;
        }
    }

    state parse_outer_ipv6 {
        packet.extract(hdr.outer_ipv6);
        transition select(hdr.outer_ipv6.next_hdr) {
            IPPROTO_IPV6: parse_inner_ipv6;
            IPPROTO_UDP: parse_udp;
            IPPROTO_TCP: parse_tcp;
            default: accept;
        }
    }

    state parse_inner_ipv6 {
        packet.extract(hdr.inner_ipv6);
        transition select(hdr.inner_ipv6.next_hdr) {
            IPPROTO_UDP: parse_udp;
            IPPROTO_TCP: parse_tcp;
            default: accept;
        }
    }

    state parse_tcp {
        packet.extract(hdr.tcp);
        local_metadata.l4_src_port = hdr.tcp.src_port;
        local_metadata.l4_dst_port = hdr.tcp.dst_port;
        transition accept;
    }

    state parse_udp {
        packet.extract(hdr.udp);
        local_metadata.l4_src_port = hdr.udp.src_port;
        local_metadata.l4_dst_port = hdr.udp.dst_port;
        transition select(hdr.udp.dst_port) {
            ROCE_UDP_PORT: parse_bth;
            default: accept;
        }
    }

    state parse_bth {
        packet.extract(hdr.bth);
        transition select(hdr.bth.opcode) {
            OP_WRITE_FIRST: parse_meth;
            OP_WRITE_MIDDLE: parse_meth;
            OP_WRITE_LAST: parse_meth;
            OP_WRITE_LAST_IMM: parse_meth;
            OP_WRITE_ONLY: parse_meth;
            OP_WRITE_ONLY_IMM: parse_meth;
            default: accept;
        }
    }

    state parse_meth {
        packet.extract(hdr.meth);
        transition parse_reth;
    }

    state parse_reth {
        packet.extract(hdr.reth);
        transition accept;
    }
}

/* No checksums to verify: IPv6 has none and the MRC UDP checksum is 0 (wire-format 1.3). */
control VerifyChecksumImpl(inout parsed_headers_t hdr,
                           inout local_metadata_t local_metadata) {
    apply { }
}

#endif
