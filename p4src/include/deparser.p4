/* Deparser: emit in wire order; invalid headers are skipped. No checksum to compute (IPv6
 * has none, the MRC UDP checksum is 0, baseline TCP/UDP checksums do not cover the fields
 * this program changes: hop limit, DSCP, ECN and MACs). */
#ifndef MRC_DEPARSER_P4
#define MRC_DEPARSER_P4

#include "headers.p4"

control ComputeChecksumImpl(inout parsed_headers_t hdr,
                            inout local_metadata_t local_metadata) {
    apply { }
}

control DeparserImpl(packet_out packet, in parsed_headers_t hdr) {
    apply {
        packet.emit(hdr.ethernet);
        packet.emit(hdr.outer_ipv6);
        packet.emit(hdr.inner_ipv6);
        packet.emit(hdr.tcp);
        packet.emit(hdr.udp);
        packet.emit(hdr.bth);
        packet.emit(hdr.meth);
        packet.emit(hdr.reth);
    }
}

#endif
