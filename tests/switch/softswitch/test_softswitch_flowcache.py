"""The software pipeline's per-frame shortcuts on the data path: the single struct read of a
data frame's headers decides exactly as the step-by-step parser does, and the uSID route
cache it feeds never serves a decision from before a table write, nor grows without bound."""

from __future__ import annotations

import random

import wire as W
from fabric.topology import Fabric, shift_usid, usid_prefix
from p4rt import names as N
from p4rt import program
from softswitch import pipeline as pipeline_module
from softswitch.pipeline import ROUTE_CACHE_SIZE, Pipeline
from softswitch.store import DeviceState
from tests.switch.p4rt_support import CODEC, IDX

FABRIC = Fabric()
T0, SPINE = FABRIC.t0(0, 0), FABRIC.t1(0, 0)
MY, NEXT = usid_prefix(T0.usid), usid_prefix(SPINE.usid)
SMAC = 0x020000000100


def data_frame(payload: int = 1366) -> bytes:
    """A 1500-byte data frame (the forwarding benchmark's size) across spine (0, 0)."""
    path = FABRIC.paths(0, 2, 0)[0]
    env = W.Envelope(path.src.mac, T0.mac, path.src.address, path.address, path.src.address,
                     path.dst.address, 0x12345, W.DSCP_TRIMMABLE, W.ECN_ECT0)
    pkt = W.DataPacket(W.Bth(W.OP_WRITE_ONLY, 0x100, 7), W.Meth(1), W.Reth(0x1000, 9, payload),
                       b"\xab" * payload)
    return W.encode_frame(env, W.encode_packet(pkt))


def _write(state: DeviceState, kind: str, *entities) -> None:
    ups = [CODEC.update(kind, e) for e in entities]
    assert state.write(ups) == [None] * len(ups)


def _config(port: int, smac: int, trim: int = 100, ecn: int = 50) -> object:
    return program.port_config(port, host_facing=False, ecn_enabled=True, trim_threshold=trim,
                               ecn_threshold=ecn, smac=smac)


def _programmed() -> DeviceState:
    state = DeviceState(IDX)
    _write(state, "INSERT", program.my_usid(MY), program.usid_fwd(NEXT, 2, 0xA2),
           _config(2, SMAC), _config(3, SMAC + 1), program.ecmp_member(1, 3, 0xB3),
           program.route(MY << 80, 48, member=1))
    return state


def _dst(frame: bytes) -> int:
    return int.from_bytes(frame[W.OUTER_DST:W.OUTER_DST + 16], "big")


def test_decision_follows_writes_on_the_single_read_path():
    """Frames long enough for the single read; every write changes what the next frame
    gets, with no frame in between to let a stale cache age out."""
    state = _programmed()
    p = Pipeline(state)
    frame = data_frame()
    assert len(frame) >= pipeline_module._HEAD_MIN
    port, _, out = p.ingress(frame, 1)
    assert (port, out[:6], _dst(out)) == (2, (0xA2).to_bytes(6, "big"),
                                          shift_usid(_dst(frame)))
    _write(state, "MODIFY", program.usid_fwd(NEXT, 3, 0xA3))
    assert p.ingress(frame, 1)[0] == 3
    _write(state, "MODIFY", _config(3, SMAC + 1, ecn=0))  # every ECT frame is marked now
    p.qdepth[3] = 1
    port, _, out = p.ingress(frame, 1)
    assert port == 3 and out[W.OUTER + 1] >> 4 & 3 == W.ECN_CE
    assert p.ecn_marks[3][0] == 1
    _write(state, "DELETE", program.usid_fwd(NEXT, 3, 0xA3))
    assert p.ingress(frame, 1) is None and p.drops[N.DROP_UNKNOWN_USID][0] == 1
    _write(state, "DELETE", program.my_usid(MY))  # the LPM path: no shift, ECMP member 1
    port, _, out = p.ingress(frame, 1)
    assert (port, _dst(out)) == (3, _dst(frame))
    _write(state, "DELETE", program.route(MY << 80, 48, member=1))
    assert p.ingress(frame, 1) is None and p.drops[N.DROP_NO_ROUTE][0] == 1


def test_route_cache_stays_bounded():
    state = _programmed()
    p = Pipeline(state)
    frame = bytearray(data_frame())
    for usid in range(2 * ROUTE_CACHE_SIZE + 10):  # a new next uSID every frame
        frame[44:46] = usid.to_bytes(2, "big")
        p.ingress(bytes(frame), 1)
        assert len(p._routes) <= ROUTE_CACHE_SIZE
    _write(state, "DELETE", program.my_usid(MY))  # the LPM path: a new destination per frame
    for low in range(ROUTE_CACHE_SIZE + 10):
        frame[50:54] = low.to_bytes(4, "big")
        assert p.ingress(bytes(frame), 1)[0] == 3
        assert len(p._lpm) <= ROUTE_CACHE_SIZE
    _write(state, "INSERT", program.my_usid(MY))
    assert p.ingress(data_frame(), 1)[0] == 2


def _slow(p: Pipeline, frame: bytes) -> object:
    """The same frame through the step-by-step parser only."""
    saved = pipeline_module._HEAD_MIN
    pipeline_module._HEAD_MIN = 1 << 30
    try:
        return p.ingress(frame, 1)
    finally:
        pipeline_module._HEAD_MIN = saved


def test_single_read_parses_as_the_parser_does():
    """Random byte changes in the headers of a long frame: the single read and the parser
    agree on the result, the drop reason and every counter."""
    rng = random.Random(11)
    base = data_frame()
    fast_state, slow_state = _programmed(), _programmed()
    fast, slow = Pipeline(fast_state), Pipeline(slow_state)
    for i in range(3000):
        frame = bytearray(base)
        for _ in range(rng.randrange(1, 4)):
            frame[rng.randrange(12, 140)] = rng.choice((0, 1, 6, 17, 41, 0x60, 0x86, 0xDD,
                                                        0xFF, rng.randrange(256)))
        if i % 7 == 0:
            frame[W.UDP + 2:W.UDP + 4] = (4791).to_bytes(2, "big")
        if i % 5 == 0:
            del frame[rng.randrange(100, len(frame)):]
        depth = rng.choice((0, 60, 200))
        fast.qdepth[2] = fast.qdepth[3] = slow.qdepth[2] = slow.qdepth[3] = depth
        assert fast.ingress(bytes(frame), 1) == _slow(slow, bytes(frame))
        assert fast.drop_stats() == slow.drop_stats()
    assert fast.trims == slow.trims and fast.ecn_marks == slow.ecn_marks
    for tid, table in fast_state.tables.items():
        other = slow_state.tables[tid]
        assert [(e.packets, e.bytes) for e in table.entries.values()] == [
            (e.packets, e.bytes) for e in other.entries.values()]
