/* MRC switch for BMv2 simple_switch_grpc (v1model): SRv6 uSID (F3216 uN) forwarding with
 * static tables, payload trimming, ECN marking and a baseline IPv6 LPM + ECMP path.
 * Behaviour: docs/wire-format.md sections 3-5; design notes: p4src/README.md.
 * P4Info names are mirrored in p4rt/names.py. */
#include <core.p4>
#include <v1model.p4>

#include "include/defines.p4"
#include "include/headers.p4"
#include "include/parser.p4"
#include "include/registers.p4"
#include "include/ingress.p4"
#include "include/egress.p4"
#include "include/deparser.p4"

V1Switch(ParserImpl(),
         VerifyChecksumImpl(),
         IngressPipeImpl(),
         EgressPipeImpl(),
         ComputeChecksumImpl(),
         DeparserImpl()) main;
