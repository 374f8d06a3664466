/* Egress: each data packet leaving the data queue records how many data packets it left
 * behind (deq_qdepth), for the next ingress decisions on that port (see registers.p4).
 * - Only data packets write: BMv2 1.15.1 reports queue depths for the packet's own
 *   priority queue, so a trimmed header or SACK leaving the high-priority queue would
 *   write ~0 and hide a standing data queue from the next trim decision.
 * - deq_qdepth, not enq_qdepth: when everything arriving is trimmed, no new data joins the
 *   data queue, so the last data packet to leave writes the final value. With enq_qdepth
 *   that is the (high) depth it found when it arrived and every later data packet would be
 *   trimmed forever; deq_qdepth is the depth it leaves behind, 0 when the queue emptied. */
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
                                       standard_metadata.deq_qdepth);
        }
    }
}

#endif
