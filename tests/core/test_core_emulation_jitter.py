"""The Mininet demo's delays on a lossless fabric must not retire EVs (issue 14, part 5).

Measured in the demo (4 planes x 2 spines, 500 packets/s per port, agents' base RTT 33 ms;
traces in docs/decisions.md, "Loss detection judges a path by its own plane's answers"): every
EV retired outside the failed link belonged to a packet that had arrived. Two things made
delivered packets look lost:
- the sender agent's loop paused (33 ms without reading its sockets, then 150-210 ms to
  drain 300-400 frames) and drained its NICs one after another, so one plane's fresh SACKs,
  and their bitmaps, were judged while the other planes' older SACKs still sat unread;
- the first window of a transfer queued 10-25 ms behind rate-limited ports, while each
  path's largest RTT sample came from one-packet writes on the empty fabric (2-3 ms).

The harness reproduces both with an emulation-like fabric: a 500 packets/s FIFO in front of
the receiver on each plane, 1 ms of wire each way, stalls of both agents' processes, and
one-packet writes before the transfer (as the demo's RTT measurement does).
"""

from __future__ import annotations

import functools
import random

import pytest

import wire
from host_agent.core import EndpointConfig, EvState, FixedWindow, RxMeta, WriteCompleted
from tests.core.harness import BASE_RTT as HARNESS_RTT
from tests.core.harness import QP_A, Harness, pattern, small_config

DEMO_BASE_RTT = 0.035  # the demo agents' base RTT (emulation.netconfig.base_rtt_for(500))
SERVICE = 0.002  # one data packet per 2 ms at each plane's last hop (500 packets/s)
WIRE = 0.001  # one-way delay of every route: an unloaded RTT of ~2 ms, as measured
TRIM_AT = 32  # the demo's trim threshold (controller.tables.DEFAULT_TRIM_THRESHOLD)


def _emulated(seed: int) -> Harness:
    h = Harness(planes=4, spines=2, seed=seed, config=EndpointConfig.for_base_rtt(DEMO_BASE_RTT))
    for name in ("A", "B"):
        for route in h.paths(name):
            h.link.route_delay[route.route] = WIRE
    for plane in range(4):
        h.link.bottleneck[("B", plane)] = SERVICE
    h.link.trim_at = TRIM_AT
    return h


def _write(h: Harness, size: int, seed: int) -> bytes:
    mr = h.b.register_memory(size)
    data = pattern(size, seed)
    done = len(h.of_type("A", WriteCompleted))
    h.a.post_write(QP_A, data, mr.va, mr.rkey, now=h.now)
    h.run(until=h.now + 30.0, stop=lambda: len(h.of_type("A", WriteCompleted)) > done)
    return bytes(mr.buffer) if bytes(mr.buffer) == data else b""


def _unloaded_rtt_writes(h: Harness) -> None:
    """The demo measures the RTT with one-packet writes before its transfer; eight of them
    use eight consecutive EVs, one on each route, so every path's largest RTT sample is the
    unloaded RTT."""
    for i in range(8):
        assert _write(h, 64, i)
        h.run(until=h.now + 0.005)


def _random_stalls(h: Harness, rng: random.Random, start: float, end: float) -> None:
    """Each agent's loop pauses 5-40 ms every 50-250 ms (h0 was seen 33 ms late)."""
    for name in ("A", "B"):
        t = start
        while t < end:
            t += rng.uniform(0.05, 0.25)
            length = rng.uniform(0.005, 0.040)
            h.stall(name, t, t + length)
            t += length


def _assert_nothing_retired(h: Harness) -> None:
    """Nothing is lost but trimmed packets, which are NACKed, resent and cost no EV."""
    s = h.a.stats()
    assert s["ev_retired"] == 0, f"{s['ev_retired']} EVs retired on a fabric that lost nothing"
    assert s["timeouts"] == 0 and s["spurious_retransmits"] == 0
    assert s["retransmits"] == s["nacks_received"]


@pytest.mark.parametrize("seed", [2, 3, 4])
def test_stalled_agents_draining_nic_by_nic_retire_nothing(seed: int) -> None:
    h = _emulated(seed)
    _unloaded_rtt_writes(h)
    start = h.now
    _random_stalls(h, random.Random(seed), start + 0.1, start + 5.0)
    assert _write(h, 4_000_000, seed)  # 2 s at 2000 packets/s
    _assert_nothing_retired(h)
    assert h.now - start < 1.1 * 4_000_000 / 1024 * SERVICE / 4  # goodput >= 90% of capacity


def test_a_first_window_queued_far_beyond_the_unloaded_rtt_retires_nothing() -> None:
    """The first window leaves at once: 8 packets per plane queue 16 ms at the last hop, one
    spine's switches answer 10 ms later than the other's, and the sender reads the first
    answers 20 ms late (all seen at the demo's start): the slow spine's packets are 25 ms old
    when the fast spine's are acknowledged, 4 ms was all their paths had shown before."""
    h = _emulated(4)
    _unloaded_rtt_writes(h)
    slow = [r.route for r in h.paths("A") if r.route[2] == 0]
    for route in slow:
        h.link.route_delay[route] = WIRE + 0.010
    h.stall("A", h.now + 0.003, h.now + 0.025)
    assert _write(h, 200_000, 9)
    _assert_nothing_retired(h)


def _sack_packet(cack: int, trigger: int, ev: int, acked: list[int]) -> bytes:
    bitmap = sum(1 << (psn - cack - 1) for psn in acked)
    return wire.encode_packet(wire.SackPacket(
        bth=wire.Bth(opcode=wire.OP_SACK, dest_qp=QP_A, psn=cack),
        sack=wire.SackExt(cack_psn=cack, ack_psn_offset=trigger - cack, entropy=ev,
                          sack_offset=1, sack_bitmap=bitmap), cc=wire.CcState()))


def test_a_bitmap_from_another_plane_is_no_evidence_against_a_packet_still_queued() -> None:
    """Seen in the demo: a plane-0 SACK's bitmap reported a plane-3 packet Q delivered while
    the SACK of P, sent 13 ms before Q on Q's path, waited unread in plane 3's queue; rule A
    took P for lost (P older than Q's RTT + the reorder window). The bitmap still acknowledges
    Q; only answers from P's own plane may judge P."""
    cfg = small_config(cc_factory=functools.partial(FixedWindow, 64 * 1024))
    h = Harness(planes=2, spines=1, seed=5, config=cfg)
    mr = h.b.register_memory(16 * 1024)
    h.a.post_write(QP_A, pattern(16 * 1024), mr.va, mr.rkey, now=0.0)
    first = h.a.packets_to_send(now=0.0)[:8]
    h.a.post_write(QP_A, pattern(1024, 1), mr.va, mr.rkey, now=4 * HARNESS_RTT)  # Q, later
    sent = first + h.a.packets_to_send(now=4 * HARNESS_RTT)
    psn = {id(tx): wire.decode_packet(tx.payload).bth.psn for tx in sent}
    p = next(tx for tx in first if tx.plane == 1 and psn[id(tx)] > 0)  # PSN 0: the hole
    q = sent[-1] if sent[-1].plane == 1 else None
    if q is None:  # make Q a plane-1 packet whatever plane the ring starts on
        h.a.post_write(QP_A, pattern(1024, 2), mr.va, mr.rkey, now=4 * HARNESS_RTT)
        q = h.a.packets_to_send(now=4 * HARNESS_RTT)[0]
        psn[id(q)] = wire.decode_packet(q.payload).bth.psn
    assert q.plane == 1 and q.route == p.route
    trigger = next(tx for tx in first if tx.plane == 0 and psn[id(tx)] > 0)
    # at 5 base RTTs a plane-0 SACK reports its trigger and Q; P's own SACK is late
    h.a.receive_packet(_sack_packet(0, psn[id(trigger)], trigger.ev,
                                     [psn[id(trigger)], psn[id(q)]]),
                       RxMeta("B", 0, 1, wire.DSCP_CONTROL, 0), now=5 * HARNESS_RTT)
    for t in (6 * HARNESS_RTT, 8 * HARNESS_RTT):  # Q's RTT (1 base RTT) + the window is long past
        when = h.a.get_timer()
        if when is not None and when <= t:
            h.a.handle_timer(now=t)
    h.a.packets_to_send(now=8 * HARNESS_RTT)
    s = h.a.stats()
    assert s["ev_retired"] == 0 and s["retransmits"] == 0
    h.a.receive_packet(_sack_packet(0, psn[id(p)], p.ev, [psn[id(p)]]),
                       RxMeta("B", 1, 1, wire.DSCP_CONTROL, 0), now=8 * HARNESS_RTT)
    assert h.a.connection(QP_A).sender.rto.srtt is not None


def test_a_plane_whose_only_route_dies_is_left_to_the_rto() -> None:
    """The price of judging a path only by its own plane: with one route per plane there is
    no plane-mate to compare with, so a route that dies silently is found by the RTO (about
    5 base RTTs here) instead of rule B (1 base RTT before this change). Comparing a silent
    plane with the others was tried and retired healthy EVs whenever a stalled receiver's
    answers for all planes arrived together and one plane's were read first."""
    cfg = small_config(cc_factory=functools.partial(FixedWindow, 16 * 1024))
    h = Harness(planes=2, spines=1, seed=33, config=cfg)
    mr = h.b.register_memory(1_000_000)
    h.a.post_write(QP_A, pattern(1_000_000), mr.va, mr.rkey, now=0.0)
    h.run(until=10 * HARNESS_RTT)
    t_fail, dead = h.now, ("A", 0, 0)
    on_dead: list[float] = []

    def blackhole(src: str, tx) -> bool:
        if tx.route == dead and tx.dscp != wire.DSCP_CONTROL:
            on_dead.append(h.now)
        return tx.route != dead

    h.link.filter = blackhole
    h.run(until=1.0, stop=lambda: h.of_type("A", WriteCompleted))
    assert bytes(mr.buffer) == pattern(1_000_000)
    assert max(on_dead) - t_fail <= 6 * HARNESS_RTT
    states = {e.path.route: e.state for e in h.a.connection(QP_A).evs.entries()
              if e.state is EvState.ASSUMED_BAD}
    assert set(states) == {dead}  # only the dead route's EVs were retired
