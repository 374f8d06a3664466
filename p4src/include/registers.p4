/* State shared by ingress and egress. v1model shows queue depth (enq/deq_qdepth) only in egress,
 * while the trim and ECN decisions must be taken in ingress (before the packet is queued,
 * and where the priority is chosen). Egress records the data queue's depth here (egress.p4), indexed
 * by egress port; ingress reads the entry of the port it has chosen. Declared at top level
 * because it is used by two controls; its P4Info name therefore has no control prefix. */
#ifndef MRC_REGISTERS_P4
#define MRC_REGISTERS_P4

#include "defines.p4"

register<qdepth_t>(PORT_COUNT) queue_depth_register;

#endif
