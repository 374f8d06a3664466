"""The software pipeline in-process: p4src semantics, the golden corpus, hostile input."""

from __future__ import annotations

import random

import pytest

import wire as W
from fabric.topology import Fabric, shift_usid, usid_prefix
from p4rt import corpus, program
from p4rt import names as N
from p4rt.corpus import case_updates
from softswitch.pipeline import Pipeline
from softswitch.queues import PortQueues
from softswitch.store import DeviceState
from tests.switch.p4rt_support import CODEC, IDX, usid_entries

FABRIC = Fabric()
T0, SPINE = FABRIC.t0(0, 0), FABRIC.t1(0, 0)
UPLINK = FABRIC.uplink_port(0)
NEXT_MAC = 0x020000000201
SMAC = 0x020000000100


def _mac(value: int) -> str:
    return ":".join(f"{b:02x}" for b in value.to_bytes(6, "big"))


def make_pipeline(trim: int = 8, ecn_threshold: int = 4, host_facing: bool = False):
    state = DeviceState(IDX)
    ups = usid_entries(usid_prefix(T0.usid), {usid_prefix(SPINE.usid): (UPLINK, NEXT_MAC)})
    ups += CODEC.inserts([program.port_config(UPLINK, host_facing=host_facing, ecn_enabled=True,
                                              trim_threshold=trim, ecn_threshold=ecn_threshold,
                                              smac=SMAC)])
    assert state.write(ups) == [None] * len(ups)
    return Pipeline(state), state


def data_frame(dscp: int = W.DSCP_TRIMMABLE, ecn: int = W.ECN_ECT0, hop_limit: int = 64,
               payload: int = 1024, opcode: int = W.OP_WRITE_ONLY) -> bytes:
    path = FABRIC.paths(0, 2, 0)[0]
    env = W.Envelope(path.src.mac, T0.mac, path.src.address, path.address, path.src.address,
                     path.dst.address, 0x12345, dscp, ecn, hop_limit)
    imm = 0xC0FFEE if opcode in W.IMM_OPCODES else None
    pkt = W.DataPacket(W.Bth(opcode, 0x100, 7), W.Meth(1), W.Reth(0x1000, 9, payload),
                       b"\xab" * payload, imm)
    return W.encode_frame(env, W.encode_packet(pkt))


def test_usid_shift_forwards_and_rewrites():
    p, state = make_pipeline()
    port, prio, out = p.ingress(data_frame(), 1)
    env, payload = W.decode_frame(out)
    path = FABRIC.paths(0, 2, 0)[0]
    assert port == UPLINK and prio == N.PRIORITY_DATA
    assert int(env.outer_dst) == shift_usid(int(path.address))
    assert env.hop_limit == 63 and env.dst_mac == _mac(NEXT_MAC) and env.src_mac == _mac(SMAC)
    assert len(out) == len(data_frame()) and W.decode_packet(payload).payload == b"\xab" * 1024
    my = state.tables[state.index.id_of(N.MY_USID_TABLE)]
    assert [(e.packets, e.bytes) for e in my.entries.values()] == [(1, len(out))]


@pytest.mark.parametrize(("frame", "reason"), [
    (data_frame(hop_limit=1), N.DROP_HOP_LIMIT),
    (data_frame(hop_limit=0), N.DROP_HOP_LIMIT),
    (b"\x00" * 13, N.DROP_MALFORMED),
    (b"\x00" * 12 + b"\x08\x00" + b"\x45" * 40, N.DROP_NOT_IPV6),
    (data_frame()[:60], N.DROP_MALFORMED),
    (data_frame()[:120], N.DROP_MALFORMED),  # ends inside RETH
    (data_frame()[:500], N.DROP_MALFORMED),  # shorter than the payload length says
])
def test_drops_are_counted(frame, reason):
    p, _ = make_pipeline()
    assert p.ingress(frame, 1) is None
    assert p.drops[reason][0] == 1 and sum(c[0] for c in p.drops) == 1


def test_unknown_usid_and_no_route():
    p, _ = make_pipeline()
    frame = bytearray(data_frame())
    frame[44:46] = b"\x0f\xff"  # next uSID has no usid_fwd entry
    assert p.ingress(bytes(frame), 1) is None and p.drops[N.DROP_UNKNOWN_USID][0] == 1
    frame[40:42] = b"\x0f\xff"  # not this switch's uSID, and no LPM route
    assert p.ingress(bytes(frame), 1) is None and p.drops[N.DROP_NO_ROUTE][0] == 1


@pytest.mark.parametrize(("host_facing", "dscp"), [(False, W.DSCP_TRIMMED),
                                                   (True, W.DSCP_TRIMMED_LASTHOP)])
def test_trim_at_threshold(host_facing, dscp):
    p, _ = make_pipeline(trim=8, host_facing=host_facing)
    p.qdepth[UPLINK] = 7
    assert len(p.ingress(data_frame(), 1)[2]) == len(data_frame())
    p.qdepth[UPLINK] = 8
    port, prio, out = p.ingress(data_frame(opcode=W.OP_WRITE_ONLY_IMM), 1)
    assert len(out) == W.TRIMMED_FRAME_LEN and prio == N.PRIORITY_HIGH
    assert out[18:20] == (80).to_bytes(2, "big") and out[58:60] == (40).to_bytes(2, "big")
    assert out[98:100] == (40).to_bytes(2, "big")
    env, payload = W.decode_frame(out)
    assert env.dscp == dscp and env.ecn == W.ECN_ECT0
    assert W.decode_packet(payload).trimmed
    assert p.trims[UPLINK][0] == 1


def test_control_and_baseline_are_never_trimmed():
    p, _ = make_pipeline(trim=0)
    port, prio, out = p.ingress(data_frame(dscp=W.DSCP_CONTROL), 1)
    assert prio == N.PRIORITY_HIGH and len(out) == len(data_frame())
    port, prio, out = p.ingress(data_frame(dscp=W.DSCP_NO_TRIM), 1)
    assert prio == N.PRIORITY_DATA and len(out) == len(data_frame())
    short = data_frame(payload=0)
    assert len(p.ingress(short, 1)[2]) == len(short) == W.TRIMMED_FRAME_LEN


@pytest.mark.parametrize(("ecn", "host_facing", "depth", "expect"), [
    (W.ECN_ECT0, False, 4, W.ECN_CE), (W.ECN_ECT1, False, 5, W.ECN_CE),
    (W.ECN_ECT0, False, 3, W.ECN_ECT0), (W.ECN_NOT_ECT, False, 6, W.ECN_NOT_ECT),
    (W.ECN_ECT0, True, 6, W.ECN_ECT0),
])
def test_ecn_marking(ecn, host_facing, depth, expect):
    p, _ = make_pipeline(trim=100, ecn_threshold=4, host_facing=host_facing)
    p.qdepth[UPLINK] = depth
    env, _ = W.decode_frame(p.ingress(data_frame(ecn=ecn), 1)[2])
    assert env.ecn == expect
    assert p.ecn_marks[UPLINK][0] == (1 if expect == W.ECN_CE and ecn != expect else 0)


def test_ecmp_is_deterministic_per_flow_and_spreads():
    p, state = make_pipeline()
    ups = CODEC.inserts([program.ecmp_member(m, m + 1, 0x0200000002F0 + m) for m in (1, 2, 3)]
                        + [program.ecmp_group(7, [1, 2, 3]),
                           program.route(0xFD << 120, 8, group=7)])
    assert state.write(ups) == [None] * len(ups)
    ports = set()
    for flow in range(64):
        frame = bytearray(data_frame())
        frame[38:54] = (0xFD00 << 112 | flow).to_bytes(16, "big")
        first = p.ingress(bytes(frame), 1)
        assert first is not None and p.ingress(bytes(frame), 1)[0] == first[0]
        ports.add(first[0])
    assert ports == {2, 3, 4}


def test_egress_writes_the_data_depth_left_behind():
    p, _ = make_pipeline()
    q = PortQueues(2)
    for i in range(3):
        assert q.enqueue(0, b"x", None, 0.0) == i
    _, _, prio, enq, deq = q.dequeue(0.0)
    p.egress(UPLINK, prio, enq, deq)
    assert (prio, enq, deq, p.qdepth[UPLINK]) == (0, 0, 2, 2)
    q.dequeue(0.0)
    _, _, prio, enq, deq = q.dequeue(0.0)
    p.egress(UPLINK, prio, enq, deq)
    assert (enq, p.qdepth[UPLINK]) == (2, 0)  # the last one out leaves an empty queue


def test_depth_is_per_priority_queue_and_only_data_writes_the_register():
    """BMv2 1.15.1: queue depths count the packet's own priority queue. A high-priority
    packet leaving ahead of a standing data queue must not reset the data queue's depth."""
    p, _ = make_pipeline()
    q = PortQueues(2)
    for i in range(5):
        assert q.enqueue(0, b"data", None, 0.0) == i
    assert q.enqueue(1, b"sack", None, 0.0) == 0  # own queue empty, not 5
    _, _, prio, enq, deq = q.dequeue(0.0)
    assert (prio, enq, deq) == (1, 0, 0)
    p.qdepth[UPLINK] = 4
    p.egress(UPLINK, prio, enq, deq)
    assert p.qdepth[UPLINK] == 4  # the high-priority departure left it alone
    _, _, prio, enq, deq = q.dequeue(0.0)
    p.egress(UPLINK, prio, enq, deq)
    assert (prio, enq, deq, p.qdepth[UPLINK]) == (0, 0, 4, 4)


def test_trimming_ends_when_the_data_queue_drains():
    """When every arriving data packet is trimmed, no data joins the data queue; the last
    data packet to leave must leave a depth below the threshold, or trimming never stops."""
    p, _ = make_pipeline(trim=2)
    q = PortQueues(2)
    for _ in range(3):
        q.enqueue(0, b"data", None, 0.0)
    trimmed = p.ingress(data_frame(), 1)  # the register says 0: not trimmed
    assert trimmed is not None and trimmed[1] == N.PRIORITY_DATA
    _, _, prio, enq, deq = q.dequeue(0.0)
    p.egress(UPLINK, prio, enq, deq)  # 2 left behind: at the threshold
    out = p.ingress(data_frame(), 1)
    assert out is not None and out[1] == N.PRIORITY_HIGH and len(out[2]) == W.TRIMMED_FRAME_LEN
    while (item := q.dequeue(0.0)) is not None:  # drain: only trimmed traffic arrives
        p.egress(UPLINK, *item[2:])
    assert p.qdepth[UPLINK] == 0
    out = p.ingress(data_frame(), 1)
    assert out is not None and out[1] == N.PRIORITY_DATA and len(out[2]) > W.TRIMMED_FRAME_LEN


def test_fuzz_never_raises_and_counts():
    p, _ = make_pipeline()
    rng = random.Random(4)
    base = data_frame()
    for _ in range(3000):
        kind = rng.randrange(3)
        if kind == 0:
            frame = bytes(rng.randrange(256) for _ in range(rng.randrange(200)))
        elif kind == 1:
            frame = base[:rng.randrange(len(base))]
        else:
            frame = bytearray(base)
            for _ in range(rng.randrange(1, 8)):
                frame[rng.randrange(len(frame))] = rng.randrange(256)
            frame = bytes(frame)
        result = p.ingress(frame, rng.randrange(512))
        assert result is None or (0 <= result[0] < 511 and len(result[2]) <= len(frame))
    assert sum(c[0] for c in p.drops) > 1000


CASES = corpus.load_cases() if corpus.CASES_PATH.exists() else []
CORPUS_MISSING = (f"the committed golden corpus {corpus.CASES_PATH} is missing or empty: restore "
                  "it from git or regenerate it with `.venv/bin/python -m tests.golden.generate`")


def golden_cases() -> list[corpus.Case]:
    """The committed golden corpus; a test that needs it fails, not skips, without it."""
    assert corpus.CASES_PATH.exists() and CASES, CORPUS_MISSING
    return CASES


# without the corpus there is one case, None, that fails (an empty parameter set would skip)
@pytest.mark.parametrize("case", CASES or [None],
                         ids=[c.name for c in CASES] or ["corpus-missing"])
def test_golden_corpus(case):
    golden_cases()  # the None case: the corpus is missing, and this says so
    idx = IDX
    state = DeviceState(idx)
    ups = case_updates(CODEC, case)
    assert state.write(ups) == [None] * len(ups)
    p = Pipeline(state)
    for pre in case.prelude:  # each leaves through its port's queue, egress included
        forwarded = p.ingress(pre.frame, pre.port)
        if forwarded is not None:
            queues = PortQueues(N.PRIORITY_QUEUES)
            queues.enqueue(forwarded[1], forwarded[2], None, 0.0)
            _, _, prio, enq, deq = queues.dequeue(0.0)
            p.egress(forwarded[0], prio, enq, deq)
    before = {name: [c[0] for c in state.counters[idx.id_of(name)]]
              for name in (N.DROP_COUNTER, N.TRIM_COUNTER, N.ECN_MARK_COUNTER)}
    result = p.ingress(case.frame, case.ingress_port)
    if case.drop_reason is not None:
        assert result is None
        assert p.drops[N.DROP_REASONS[case.drop_reason]][0] == 1
    else:
        assert result is not None
        got = (result[0], result[2])
        expected = [(o.port, o.frame) for o in case.outputs]
        if case.one_of:
            assert got in expected
        else:
            assert [got] == expected
    for name, cells in case.counters.items():
        now = state.counters[idx.id_of(name)]
        for index, delta in cells.items():
            assert now[index][0] - before[name][index] == delta, (name, index)
