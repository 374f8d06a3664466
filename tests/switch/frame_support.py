"""MRC frames the live switch tests send into p0l0 (the differential test's switch): from h0
to h2 across spine 0, so p0l0 sends them on its uplink. Data of a chosen DSCP, a SACK, an
already-trimmed header, and the envelope for frames a test builds itself. Shared by
tests/switch/differential.py and the queue tests (test_p4_queues, test_p4_queue_depth,
test_p4_behaviour).
"""

from __future__ import annotations

import random

import wire as W
from tests.golden import generate as G
from tests.switch.difframes import SWITCH


def envelope_up(rng: random.Random, dscp: int) -> W.Envelope:
    """h0 across spine 0: p0l0 sends it on the uplink."""
    return W.Envelope(G.H0.mac, SWITCH.mac, G.H0.address, G.FABRIC.paths(0, 2, 0)[0].address,
                      G.H0.address, G.H2.address, rng.getrandbits(32), dscp, W.ECN_ECT0)


def flow_frame(dscp: int, rng: random.Random, payload: int = 512) -> bytes:
    pkt = W.DataPacket(W.Bth(W.OP_WRITE_MIDDLE, 0x100, rng.randrange(1 << 24)), W.Meth(1),
                       W.Reth(rng.getrandbits(64), 7, payload), bytes(payload))
    return W.encode_frame(envelope_up(rng, dscp), W.encode_packet(pkt))


def sack_frame(rng: random.Random) -> bytes:
    pkt = W.SackPacket(W.Bth(W.OP_SACK, 0x101, 0),
                       W.SackExt(cack_psn=rng.randrange(1 << 24), ack_psn_offset=1,
                                 entropy=rng.getrandbits(32), sack_offset=0, sack_bitmap=1),
                       W.CcState(ooo_count=0, rcvd_bytes=512))
    return W.encode_frame(envelope_up(rng, W.DSCP_CONTROL), W.encode_packet(pkt))


def trimmed_header(rng: random.Random) -> bytes:
    frame = bytearray(flow_frame(W.DSCP_TRIMMED, rng)[:W.TRIMMED_FRAME_LEN])
    frame[18:20] = (W.TRIMMED_FRAME_LEN - 54).to_bytes(2, "big")
    frame[58:60] = frame[98:100] = (W.TRIMMED_FRAME_LEN - 94).to_bytes(2, "big")
    return bytes(frame)
