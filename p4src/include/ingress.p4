/* Ingress: validity checks, hop limit, uSID shift + static uSID forwarding, baseline LPM +
 * ECMP, per-port configuration, trimming, ECN marking and queue selection. */
#ifndef MRC_INGRESS_P4
#define MRC_INGRESS_P4

#include "headers.p4"
#include "registers.p4"

control IngressPipeImpl(inout parsed_headers_t hdr,
                        inout local_metadata_t local_metadata,
                        inout standard_metadata_t standard_metadata) {

    direct_counter(CounterType.packets_and_bytes) my_usid_counter;
    direct_counter(CounterType.packets_and_bytes) usid_fwd_counter;
    direct_counter(CounterType.packets_and_bytes) routing_v6_counter;
    direct_counter(CounterType.packets_and_bytes) port_config_counter;
    counter(DROP_REASON_COUNT, CounterType.packets) drop_counter;
    counter(PORT_COUNT, CounterType.packets) trim_counter;
    counter(PORT_COUNT, CounterType.packets) ecn_mark_counter;
    action_selector(HashAlgorithm.crc16, ECMP_SELECTOR_SIZE, ECMP_HASH_BITS) ecmp_selector;

    /* F3216 uN: keep the 32-bit block, move the rest left by one 16-bit uSID, zero fill. */
    action shift_usid() {
        // BEGIN exercise 1 shift
        hdr.outer_ipv6.dst_addr[95:0] = hdr.outer_ipv6.dst_addr[79:0] ++ 16w0;
        // END exercise 1 shift
    }

    action set_next_hop(port_num_t port, mac_addr_t dmac) {
        standard_metadata.egress_spec = port;
        hdr.ethernet.dst_addr = dmac;
    }

    action set_port_config(bit<1> host_facing, bit<1> ecn_enabled, qdepth_t trim_threshold,
                           qdepth_t ecn_threshold, mac_addr_t smac) {
        local_metadata.port_configured = true;
        local_metadata.host_facing = host_facing;
        local_metadata.ecn_enabled = ecn_enabled;
        local_metadata.trim_threshold = trim_threshold;
        local_metadata.ecn_threshold = ecn_threshold;
        hdr.ethernet.src_addr = smac;
    }

    /* Exact on block + this switch's uSID (DA[127:80]). Written once by the controller. */
    table my_usid_table {
        key = {
            local_metadata.usid_prefix: exact @name("usid_prefix");
        }
        actions = {
            shift_usid;
            @defaultonly NoAction;
        }
        const default_action = NoAction();
        counters = my_usid_counter;
        size = MY_USID_TABLE_SIZE;
    }

    /* Exact on the shifted DA[127:80] -> port and next-hop MAC. A miss drops (UNKNOWN_USID). */
    table usid_fwd_table {
        key = {
            local_metadata.usid_prefix: exact @name("usid_prefix");
        }
        actions = {
            set_next_hop;
            @defaultonly NoAction;
        }
        const default_action = NoAction();
        counters = usid_fwd_counter;
        size = USID_FWD_TABLE_SIZE;
    }

    /* Baseline IPv6: LPM on the outer destination, ECMP over the 5-tuple and flow label. */
    table routing_v6_table {
        key = {
            hdr.outer_ipv6.dst_addr: lpm @name("dst_addr");
            hdr.outer_ipv6.dst_addr: selector;
            hdr.outer_ipv6.src_addr: selector;
            hdr.outer_ipv6.flow_label: selector;
            hdr.outer_ipv6.next_hdr: selector;
            local_metadata.l4_src_port: selector;
            local_metadata.l4_dst_port: selector;
        }
        actions = {
            set_next_hop;
            @defaultonly NoAction;
        }
        const default_action = NoAction();
        implementation = ecmp_selector;
        counters = routing_v6_counter;
        size = ROUTING_V6_TABLE_SIZE;
    }

    /* Per egress port: host-facing or fabric, ECN on/off, thresholds (packets), source MAC. */
    table port_config_table {
        key = {
            standard_metadata.egress_spec: exact @name("egress_port");
        }
        actions = {
            set_port_config;
            @defaultonly NoAction;
        }
        const default_action = NoAction();
        counters = port_config_counter;
        size = PORT_COUNT;
    }

    apply {
        if (standard_metadata.parser_error != error.NoError) {
            local_metadata.drop = true;
            local_metadata.drop_reason = DROP_MALFORMED;
        } else if (!hdr.outer_ipv6.isValid()) {
            local_metadata.drop = true;
            local_metadata.drop_reason = DROP_NOT_IPV6;
        } else if (hdr.outer_ipv6.version != IP_VERSION_6
                   || (hdr.inner_ipv6.isValid() && hdr.inner_ipv6.version != IP_VERSION_6)
                   || standard_metadata.packet_length
                      < ETH_LEN + IPV6_LEN + (bit<32>)hdr.outer_ipv6.payload_len) {
            local_metadata.drop = true;
            local_metadata.drop_reason = DROP_MALFORMED;
        } else if (hdr.outer_ipv6.hop_limit < MIN_HOP_LIMIT) {
            local_metadata.drop = true;
            local_metadata.drop_reason = DROP_HOP_LIMIT;
        } else {
            // BEGIN exercise 1 usid-forwarding
            local_metadata.usid_prefix = hdr.outer_ipv6.dst_addr[127:80];
            if (my_usid_table.apply().hit) {
                local_metadata.usid_prefix = hdr.outer_ipv6.dst_addr[127:80];
                if (!usid_fwd_table.apply().hit) {
                    local_metadata.drop = true;
                    local_metadata.drop_reason = DROP_UNKNOWN_USID;
                }
            } else if (!routing_v6_table.apply().hit) {
                local_metadata.drop = true;
                local_metadata.drop_reason = DROP_NO_ROUTE;
            }
            // END exercise 1 usid-forwarding
        }

        if (local_metadata.drop) {
            drop_counter.count(local_metadata.drop_reason);
            mark_to_drop(standard_metadata);
        } else {
            hdr.outer_ipv6.hop_limit = hdr.outer_ipv6.hop_limit - 1;
            port_config_table.apply();
            queue_depth_register.read(local_metadata.queue_depth,
                                      (bit<32>)standard_metadata.egress_spec);

            bool high_priority = hdr.outer_ipv6.dscp == DSCP_CONTROL
                                 || hdr.outer_ipv6.dscp == DSCP_TRIMMED
                                 || hdr.outer_ipv6.dscp == DSCP_TRIMMED_LASTHOP;
            bool trimmable = hdr.inner_ipv6.isValid() && hdr.reth.isValid()
                             && (hdr.outer_ipv6.dscp == DSCP_TRIMMABLE
                                 || hdr.outer_ipv6.dscp == DSCP_TRIMMABLE_RETX);

            bool trimmed = false;
            bool ce_marked = false;
            // BEGIN exercise 2 trim
            if (local_metadata.port_configured && trimmable
                    && standard_metadata.packet_length > TRIMMED_FRAME_LEN
                    && local_metadata.queue_depth >= local_metadata.trim_threshold) {
                /* Cut to Ethernet..RETH and fix every length the cut changes. */
                truncate(TRIMMED_FRAME_LEN);
                hdr.outer_ipv6.payload_len = TRIMMED_OUTER_PAYLOAD_LEN;
                hdr.inner_ipv6.payload_len = TRIMMED_INNER_PAYLOAD_LEN;
                hdr.udp.len = TRIMMED_UDP_LEN;
                if (local_metadata.host_facing == 1) {
                    hdr.outer_ipv6.dscp = DSCP_TRIMMED_LASTHOP;
                } else {
                    hdr.outer_ipv6.dscp = DSCP_TRIMMED;
                }
                trimmed = true;
            }
            // END exercise 2 trim
            // BEGIN exercise 2 ecn
            if (!trimmed && !high_priority && local_metadata.port_configured
                    && local_metadata.ecn_enabled == 1 && local_metadata.host_facing == 0
                    && (hdr.outer_ipv6.ecn == ECN_ECT0 || hdr.outer_ipv6.ecn == ECN_ECT1)
                    && local_metadata.queue_depth >= local_metadata.ecn_threshold) {
                hdr.outer_ipv6.ecn = ECN_CE;
                ce_marked = true;
            }
            // END exercise 2 ecn
            if (trimmed) {
                trim_counter.count((bit<32>)standard_metadata.egress_spec);
            }
            if (ce_marked) {
                ecn_mark_counter.count((bit<32>)standard_metadata.egress_spec);
            }

            // BEGIN exercise 2 priority
            if (high_priority || trimmed) {
                standard_metadata.priority = PRIORITY_HIGH;
            } else {
                standard_metadata.priority = PRIORITY_DATA;
            }
            // END exercise 2 priority
        }
    }
}

#endif
