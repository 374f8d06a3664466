/* Egress: record the depth a data packet found when it joined its port's data queue, for
 * the next ingress decisions on that port (see registers.p4). BMv2 1.15.1 reports
 * enq_qdepth for the packet's own priority queue: a trimmed header or SACK leaving the
 * high-priority queue saw that (nearly empty) queue, so letting it write the register
 * would hide a standing data queue from the next trim decision. */
#ifndef MRC_EGRESS_P4
#define MRC_EGRESS_P4

#include "headers.p4"
#include "registers.p4"

control EgressPipeImpl(inout parsed_headers_t hdr,
                       inout local_metadata_t local_metadata,
                       inout standard_metadata_t standard_metadata) {
    apply {
        if (standard_metadata.priority == PRIORITY_DATA) {
            queue_depth_register.write((bit<32>)standard_metadata.egress_port,
                                       standard_metadata.enq_qdepth);
        }
    }
}

#endif
