"""Path, plane and peer failures: EV retirement, probes, PORT_STATUS, timeouts."""

from __future__ import annotations

import functools
import random

import pytest

import wire
from host_agent.core import (
    EvConfig,
    EvState,
    EvStateChanged,
    FixedWindow,
    PeerPlaneChanged,
    PlaneStateChanged,
    RecoveryMode,
    WriteCompleted,
)
from tests.core.harness import BASE_RTT, QP_A, QP_B, Harness, pattern, small_config


def _data_from(h: Harness, src: str, since: int = 0) -> list:
    return [tx for s, tx in h.sent[since:] if s == src and tx.dscp != wire.DSCP_CONTROL]


def test_dead_path_retires_its_evs_and_data_still_arrives() -> None:
    h = Harness(planes=2, spines=2, seed=21)
    dead = ("A", 0, 1)
    mr = h.b.register_memory(2_000_000)
    data = pattern(2_000_000, 3)
    h.a.post_write(QP_A, data, mr.va, mr.rkey, now=0.0)
    h.run(until=5 * BASE_RTT)
    h.link.dead_routes.add(dead)
    t_fail, mark = h.now, len(h.sent)
    h.run(until=1.0, stop=lambda: h.of_type("A", WriteCompleted))
    assert bytes(mr.buffer) == data
    conn = h.a.connection(QP_A)
    dead_evs = {e.ev for e in conn.evs.entries() if e.path.route == dead}
    assert all(conn.evs.entry(ev).state is EvState.ASSUMED_BAD for ev in dead_evs
               if conn.evs.entry(ev).counters["chosen"])  # every dead EV that was used is retired
    retired = [e for e in h.of_type("A", EvStateChanged)
               if e.new is EvState.ASSUMED_BAD and e.ev in dead_evs]
    assert retired
    assert h.a.stats()["ev_retired"] >= len(retired)
    # after the last retirement (well within a few RTTs) no new data rides the dead route
    last = max(i for i, (s, tx) in enumerate(h.sent) if s == "A" and tx.route == dead
               and tx.dscp != wire.DSCP_CONTROL)
    late = [tx for tx in _data_from(h, "A", last + 1)]
    assert len(late) > 100 and all(tx.route != dead for tx in late)
    assert last > mark  # the dead route was used after the failure, then abandoned
    assert h.now - t_fail < 0.01


def test_probes_reinstate_a_repaired_path() -> None:
    h = Harness(planes=1, spines=2, seed=22)
    dead = ("A", 0, 0)
    h.link.dead_routes.add(dead)
    mr = h.b.register_memory(300_000)
    h.a.post_write(QP_A, pattern(300_000), mr.va, mr.rkey, now=0.0)
    h.run(until=1.0, stop=lambda: h.of_type("A", WriteCompleted))
    conn = h.a.connection(QP_A)
    bad = [ev for ev, st in conn.evs.states().items() if st is EvState.ASSUMED_BAD]
    assert bad
    h.run(until=h.now + 50 * BASE_RTT)  # probes keep failing while the route is dead
    s = h.a.stats()
    assert s["probes_sent"] > 0 and s["ev_reinstated"] == 0
    h.link.dead_routes.clear()
    h.run(until=h.now + 200 * BASE_RTT)
    s = h.a.stats()
    assert s["probe_replies"] >= 3 and s["ev_reinstated"] >= len(bad)
    assert all(conn.evs.entry(ev).state is EvState.GOOD for ev in bad)
    replies = [wire.decode_packet(tx.payload) for src, tx in h.sent if src == "B"]
    probe_resps = [p for p in replies if isinstance(p, wire.SackPacket) and p.sack.probe_resp]
    assert probe_resps and {p.sack.entropy for p in probe_resps} <= set(bad)


def test_tail_loss_recovered_by_timeout() -> None:
    h = Harness(seed=23)
    dropped = []

    def drop_last_once(src: str, tx) -> bool:
        if src == "A" and tx.dscp == wire.DSCP_TRIMMABLE and not dropped:
            pkt = wire.decode_packet(tx.payload)
            if pkt.bth.ack_req:
                dropped.append(pkt.bth.psn)
                return False
        return True

    h.link.filter = drop_last_once
    mr = h.b.register_memory(10_000)
    data = pattern(10_000)
    h.a.post_write(QP_A, data, mr.va, mr.rkey, now=0.0)
    h.run(until=1.0, stop=lambda: h.of_type("A", WriteCompleted))
    assert dropped and bytes(mr.buffer) == data
    assert h.a.stats()["timeouts"] == 1 and h.a.stats()["retransmits"] == 1


def _plane_down(h: Harness, node: str, plane: int) -> None:
    h.link.dead_planes.add((node, plane))
    h.eps[node].set_plane_up(plane, False, now=h.now)


def test_plane_down_peer_stops_sending_on_it_and_back_up() -> None:
    h = Harness(planes=2, spines=2, seed=24)
    mr_a = h.a.register_memory(3_000_000)
    data = pattern(3_000_000, 5)
    h.b.post_write(QP_B, data, mr_a.va, mr_a.rkey, now=0.0)  # B sends to A
    h.run(until=5 * BASE_RTT)
    _plane_down(h, "A", 1)
    h.flush()
    assert PlaneStateChanged(1, False) in h.events["A"]
    h.run(until=h.now + 3 * BASE_RTT)
    assert PeerPlaneChanged("A", 1, False) in h.events["B"]
    assert h.b.peer_planes_up("A") == {0}
    mark = len(h.sent)
    h.run(until=h.now + 20 * BASE_RTT)
    assert _data_from(h, "B", mark) and all(tx.plane == 0 for tx in _data_from(h, "B", mark))
    assert all(tx.plane == 0 for s, tx in h.sent[mark:] if s == "A")  # A's control too
    assert h.a._pending_announce == {}  # EP_RSP received: no more retries
    h.run(until=1.0, stop=lambda: h.of_type("B", WriteCompleted))
    assert bytes(mr_a.buffer) == data
    h.link.dead_planes.clear()
    h.a.set_plane_up(1, True, now=h.now)
    h.run(until=h.now + 3 * BASE_RTT)
    assert PeerPlaneChanged("A", 1, True) in h.events["B"]
    assert h.b.peer_planes_up("A") == {0, 1}
    mark = len(h.sent)
    h.b.post_write(QP_B, data[:100_000], mr_a.va, mr_a.rkey, now=h.now)
    h.run(until=1.0, stop=lambda: len(h.of_type("B", WriteCompleted)) == 2)
    assert {tx.plane for tx in _data_from(h, "B", mark)} == {0, 1}
    assert h.b.stats()["ev_retired"] == 0  # a plane going away is not a path failure


def test_port_status_is_retried_until_answered() -> None:
    h = Harness(planes=2, seed=25)
    lost = {"n": 0}

    def drop_first_requests(src: str, tx) -> bool:
        if src == "A" and tx.dscp == wire.DSCP_CONTROL and lost["n"] < 3:
            pkt = wire.decode_packet(tx.payload)
            if isinstance(pkt, wire.PortStatusPacket):
                lost["n"] += 1
                return False
        return True

    h.link.filter = drop_first_requests
    h.a.set_plane_up(1, False, now=0.0)
    h.run(until=1.0, stop=lambda: not h.a._pending_announce)
    assert lost["n"] == 3
    reqs = [wire.decode_packet(tx.payload) for s, tx in h.sent if s == "A"]
    assert all(p.bth.opcode == wire.OP_EP_REQ and p.bth.dest_qp == wire.QPN_ENDPOINT
               and p.status.port_mask == 0b01 for p in reqs)
    assert len(reqs) == 4  # one live plane: three lost requests, the fourth answered
    assert h.b.peer_planes_up("A") == {0}
    rsps = [wire.decode_packet(tx.payload) for s, tx in h.sent if s == "B"]
    assert [p.bth.opcode for p in rsps] == [wire.OP_EP_RSP]
    assert h.b.stats()["port_status_received"] == 1


def test_both_planes_down_then_up_delivers_everything() -> None:
    h = Harness(planes=2, seed=26)
    mr = h.b.register_memory(400_000)
    data = pattern(400_000)
    h.a.post_write(QP_A, data, mr.va, mr.rkey, now=0.0)
    h.run(until=3 * BASE_RTT)
    _plane_down(h, "A", 0)
    _plane_down(h, "A", 1)
    h.run(until=h.now + 30 * BASE_RTT)
    assert not h.of_type("A", WriteCompleted)
    for p in (0, 1):
        h.link.dead_planes.discard(("A", p))
        h.a.set_plane_up(p, True, now=h.now)
    h.run(until=1.0, stop=lambda: h.of_type("A", WriteCompleted))
    assert bytes(mr.buffer) == data


def test_denied_ev_is_never_used_until_allowed() -> None:
    h = Harness(seed=27)
    ev = next(iter(h.a.ev_states(QP_A)))
    h.a.set_ev_denied(QP_A, ev, True)
    assert h.a.ev_states(QP_A)[ev] is EvState.DENIED
    mr = h.b.register_memory(200_000)
    h.a.post_write(QP_A, pattern(200_000), mr.va, mr.rkey, now=0.0)
    h.run(stop=lambda: h.of_type("A", WriteCompleted))
    assert all(tx.ev != ev for s, tx in h.sent if s == "A")
    h.a.set_ev_denied(QP_A, ev, False)
    assert h.a.ev_states(QP_A)[ev] is EvState.GOOD
    h.flush()
    changes = [(e.old, e.new) for e in h.of_type("A", EvStateChanged) if e.ev == ev]
    assert changes == [(EvState.GOOD, EvState.DENIED), (EvState.DENIED, EvState.GOOD)]


def test_a_receiver_that_sends_no_data_stops_acking_over_a_dead_reverse_path() -> None:
    paced = small_config(cc_factory=functools.partial(FixedWindow, 16 * 1024))
    h = Harness(planes=2, spines=2, seed=23, config=paced)
    mr = h.b.register_memory(1_000_000)
    data = pattern(1_000_000, 4)
    h.a.post_write(QP_A, data, mr.va, mr.rkey, now=0.0)
    h.run(until=5 * BASE_RTT)
    h.link.dead_routes.update({("A", 0, 1), ("B", 0, 1)})  # spine 1 of plane 0, both ways
    h.run(until=30 * BASE_RTT)
    mark = len(h.sent)
    h.run(until=1.0, stop=lambda: h.of_type("A", WriteCompleted))
    assert bytes(mr.buffer) == data
    late_acks = [tx for src, tx in h.sent[mark:] if src == "B"]
    assert len(late_acks) > 500
    # B learns nothing from its own sending; its SACKs follow the data's (live) spines
    assert all(tx.route != ("B", 0, 1) for tx in late_acks)
    assert sum(tx.plane == 0 for tx in late_acks) > len(late_acks) // 4


@pytest.mark.parametrize("seed", [139, 165, 7, 21])
def test_single_path_write_completes_when_only_a_probe_reply_acknowledges_it(seed: int) -> None:
    """The single-path (RoCE-like) contender: one EV, go-back-N. Its path dies in both
    directions mid-write, long enough for every SACK to be lost and the EV to be probed; when
    the path comes back the first answer can be a probe reply whose cumulative ack covers the
    whole write. Before: that ack ended the write's PSNs but not the write, nothing was left in
    flight, and it hung until the write timeout (the bench's BMv2 all-reduce stalls)."""
    ev = EvConfig.for_base_rtt(BASE_RTT, evs_per_connection=1, backups_per_plane=0,
                               ev_min_active=1)
    h = Harness(planes=1, spines=1, seed=seed,
                config=small_config(ev=ev, recovery=RecoveryMode.GO_BACK_N))
    mr = h.b.register_memory(4 * 24576)
    rng = random.Random(seed)
    h.a.post_write(QP_A, pattern(24576, seed), mr.va, mr.rkey, now=0.0)
    h.run(until=1.0, stop=lambda: bool(h.of_type("A", WriteCompleted)))
    t_fail = h.now + rng.random() * 20 * BASE_RTT
    h.a.post_write(QP_A, pattern(24576, seed + 1), mr.va + 24576, mr.rkey, now=h.now)
    h.run(until=t_fail)
    routes = {("A", 0, 0), ("B", 0, 0)}
    which = rng.choice([{("A", 0, 0)}, {("B", 0, 0)}, routes])
    h.link.dead_routes |= which
    h.run(until=t_fail + rng.choice([50, 200, 1000, 3000]) * BASE_RTT)
    h.link.dead_routes -= which
    t_up = h.now
    h.run(until=t_up + 0.5, stop=lambda: len(h.of_type("A", WriteCompleted)) == 2)
    assert h.of_type("A", WriteCompleted) == [WriteCompleted(QP_A, 1), WriteCompleted(QP_A, 2)]
    assert h.now - t_up < 5000 * BASE_RTT
    assert bytes(mr.buffer[:2 * 24576]) == pattern(24576, seed) + pattern(24576, seed + 1)
