"""The software switch's per-frame shortcuts keep the behaviour of the plain path: cached
table lookups follow every Write, the cache stays bounded, and a frame that leaves an
idle port at once is accounted as if it had been queued and dequeued."""

from __future__ import annotations

import random

from p4.v1 import p4runtime_pb2

import wire as W
from fabric.topology import Fabric, usid_prefix
from p4rt import names as N
from p4rt import program
from softswitch.pipeline import ROUTE_CACHE_SIZE, Pipeline
from softswitch.queues import PortQueues
from softswitch.store import DeviceState
from tests.switch.p4rt_support import CODEC, IDX

FABRIC = Fabric()
T0, SPINE = FABRIC.t0(0, 0), FABRIC.t1(0, 0)
MY, NEXT = usid_prefix(T0.usid), usid_prefix(SPINE.usid)
SMAC = 0x020000000100


def data_frame() -> bytes:
    """A trimmable data frame from a host of T0 (0, 0) across spine (0, 0)."""
    path = FABRIC.paths(0, 2, 0)[0]
    env = W.Envelope(path.src.mac, T0.mac, path.src.address, path.address, path.src.address,
                     path.dst.address, 0x12345, W.DSCP_TRIMMABLE, W.ECN_ECT0)
    pkt = W.DataPacket(W.Bth(W.OP_WRITE_ONLY, 0x100, 7), W.Meth(1), W.Reth(0x1000, 9, 1024),
                       b"\xab" * 1024)
    return W.encode_frame(env, W.encode_packet(pkt))


def _config(port: int, smac: int, trim: int = 100) -> object:
    return program.port_config(port, host_facing=False, ecn_enabled=True, trim_threshold=trim,
                               ecn_threshold=100, smac=smac)


def _write(state: DeviceState, kind: str, *entities) -> None:
    ups = [CODEC.update(kind, e) for e in entities]
    assert state.write(ups) == [None] * len(ups)


def _mac(frame: bytes, offset: int) -> int:
    return int.from_bytes(frame[offset:offset + 6], "big")


def test_cached_lookups_follow_every_write():
    state = DeviceState(IDX)
    _write(state, "INSERT", program.my_usid(MY), program.usid_fwd(NEXT, 2, 0xA2),
           _config(2, SMAC), _config(3, SMAC + 1))
    p = Pipeline(state)
    frame = data_frame()
    port, _, out = p.ingress(frame, 1)
    assert (port, _mac(out, 0), _mac(out, 6)) == (2, 0xA2, SMAC)
    _write(state, "MODIFY", program.usid_fwd(NEXT, 3, 0xA3))
    port, _, out = p.ingress(frame, 1)
    assert (port, _mac(out, 0), _mac(out, 6)) == (3, 0xA3, SMAC + 1)
    _write(state, "MODIFY", _config(3, SMAC + 7, trim=0))  # now every data frame is trimmed
    port, prio, out = p.ingress(frame, 1)
    assert (_mac(out, 6), prio, len(out)) == (SMAC + 7, N.PRIORITY_HIGH, W.TRIMMED_FRAME_LEN)
    _write(state, "DELETE", program.usid_fwd(NEXT, 3, 0xA3))
    assert p.ingress(frame, 1) is None and p.drops[N.DROP_UNKNOWN_USID][0] == 1
    _write(state, "DELETE", program.my_usid(MY))  # not my uSID any more: the LPM path
    assert p.ingress(frame, 1) is None and p.drops[N.DROP_NO_ROUTE][0] == 1
    _write(state, "INSERT", program.ecmp_member(1, 2, 0xB2), program.route(MY << 80, 48, member=1))
    port, _, out = p.ingress(frame, 1)
    assert (port, _mac(out, 0)) == (2, 0xB2) and out[38:54] == frame[38:54]  # no shift
    _write(state, "MODIFY", program.ecmp_member(1, 3, 0xB3))
    port, _, out = p.ingress(frame, 1)
    assert (port, _mac(out, 0), _mac(out, 6)) == (3, 0xB3, SMAC + 7)
    _write(state, "INSERT", program.my_usid(MY), program.usid_fwd(NEXT, 2, 0xA2))
    assert p.ingress(frame, 1)[0] == 2
    # a direct counter write reaches the entry the cache holds: counting goes on from it
    counter = p4runtime_pb2.Update(type=p4runtime_pb2.Update.MODIFY)
    cell = counter.entity.direct_counter_entry
    cell.table_entry.CopyFrom(CODEC.encode(program.usid_fwd(NEXT, 2, 0xA2)).table_entry)
    cell.data.packet_count = 100
    assert state.write([counter]) == [None]
    p.ingress(frame, 1)
    (entry,) = state.tables[IDX.id_of(N.USID_FWD_TABLE)].entries.values()
    assert entry.packets == 101


def test_route_cache_is_bounded_and_still_right():
    state = DeviceState(IDX)
    _write(state, "INSERT", program.my_usid(MY), program.usid_fwd(NEXT, 2, 0xA2), _config(2, SMAC))
    p = Pipeline(state)
    frame = bytearray(data_frame())
    for usid in range(ROUTE_CACHE_SIZE + 100):  # hostile: a new next uSID every frame
        frame[44:46] = usid.to_bytes(2, "big")
        p.ingress(bytes(frame), 1)
        assert len(p._routes) <= ROUTE_CACHE_SIZE
    assert p.ingress(data_frame(), 1)[0] == 2


def test_pass_through_is_enqueue_then_dequeue():
    """Random arrivals on two copies of the same queues: one lets a packet through an idle
    port whenever pass_through allows it, the other always queues and dequeues."""
    rng = random.Random(7)
    for rate in (0.0, 100.0, 1000.0):
        fast, plain = PortQueues(2), PortQueues(2)
        for q in (fast, plain):
            q.set_rate(rate)
            q.set_depth(4, 0)
        now = 0.0
        for _ in range(2000):
            now += rng.expovariate(800.0)
            prio = rng.randrange(2)
            if not fast.occupancy and fast.pass_through(prio, now):
                got = [(prio, 0, 0)]
            else:
                fast.enqueue(prio, b"", None, now)
                got = []
                while (item := fast.dequeue(now)) is not None:
                    got.append(item[2:])
            plain.enqueue(prio, b"", None, now)
            want = []
            while (item := plain.dequeue(now)) is not None:
                want.append(item[2:])
            assert got == want
            assert fast.stats() == plain.stats()
            assert [f.last_departure for f in fast.fifos] == [f.last_departure for f in plain.fifos]

