/* Egress: record the depth the packet found when it joined its port's queues, for the next
 * ingress decisions on that port (see registers.p4). */
#ifndef MRC_EGRESS_P4
#define MRC_EGRESS_P4

#include "headers.p4"
#include "registers.p4"

control EgressPipeImpl(inout parsed_headers_t hdr,
                       inout local_metadata_t local_metadata,
                       inout standard_metadata_t standard_metadata) {
    apply {
        queue_depth_register.write((bit<32>)standard_metadata.egress_port,
                                   standard_metadata.enq_qdepth);
    }
}

#endif
