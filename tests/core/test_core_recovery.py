"""Loss detection across paths of different delay, and RTT sampling (sender recovery)."""

from __future__ import annotations

import functools

import pytest

import wire
from host_agent.core import (
    ConfigError,
    EndpointConfig,
    EvConfig,
    EvState,
    EvStateChanged,
    FailReason,
    FixedWindow,
    MessageReceived,
    RxMeta,
    WriteCompleted,
    WriteFailed,
)
from tests.core.harness import BASE_RTT, QP_A, QP_B, Harness, pattern, small_config

SLOW = ("A", 0, 1)  # plane 0, spine 1: the route the tests delay


def _paced(seed: int) -> Harness:
    """Two paths, a 16-packet window: a 1 MB write lasts ~60 base RTTs of steady spraying."""
    cfg = small_config(cc_factory=functools.partial(FixedWindow, 16 * 1024))
    return Harness(planes=1, spines=2, seed=seed, config=cfg)


def _transfer(h: Harness, size: int) -> bytes:
    mr = h.b.register_memory(size)
    data = pattern(size, 5)
    h.a.post_write(QP_A, data, mr.va, mr.rkey, now=0.0)
    h.run(until=1.0, stop=lambda: h.of_type("A", WriteCompleted))
    assert h.of_type("A", WriteCompleted) == [WriteCompleted(QP_A, 1)]
    return bytes(mr.buffer) if bytes(mr.buffer) == data else b""


def _growing_queue(h: Harness, start: float, per_rtt: float, top: float):
    """A filter that lets everything through but grows SLOW's delay like a filling queue:
    from `start`, by `per_rtt` base RTTs per base RTT, up to `top` base RTTs (FIFO kept)."""
    def grow(src: str, tx) -> bool:
        ramp = max(0.0, (h.now - start) / BASE_RTT * per_rtt)
        h.link.route_delay[SLOW] = min(top, ramp) * BASE_RTT
        return True
    return grow


def _data_on(h: Harness, route: object) -> list:
    return [tx for src, tx in h.sent if src == "A" and tx.route == route
            and tx.dscp != wire.DSCP_CONTROL]


def test_a_path_whose_queue_grows_reorders_without_any_loss_being_declared() -> None:
    h = _paced(31)
    h.link.filter = _growing_queue(h, 5 * BASE_RTT, 0.3, 4.0)  # RTT ends 9x the other path's
    assert _transfer(h, 1_000_000)
    s = h.a.stats()
    assert h.now > 30 * BASE_RTT and len(_data_on(h, SLOW)) > 200  # it carried traffic, late
    assert s["retransmits"] == 0 and s["timeouts"] == 0 and s["ev_retired"] == 0


def test_a_real_drop_on_the_slow_path_is_found_by_later_packets_on_that_path() -> None:
    h = _paced(32)
    grow = _growing_queue(h, 5 * BASE_RTT, 0.3, 4.0)
    dropped: list = []

    def drop_one(src: str, tx) -> bool:
        grow(src, tx)
        if (src == "A" and tx.route == SLOW and tx.dscp == wire.DSCP_TRIMMABLE and not dropped
                and h.now > 25 * BASE_RTT):
            dropped.append(tx)
            return False
        return True

    h.link.filter = drop_one
    assert _transfer(h, 1_000_000)
    s = h.a.stats()
    assert len(dropped) == 1
    assert s["retransmits"] == 1 and s["timeouts"] == 0 and s["spurious_retransmits"] == 0
    # untrimmed loss = path failure (MRC): the EV that lost the packet is retired
    assert h.a.connection(QP_A).evs.entry(dropped[0].ev).counters["losses"] == 1
    assert s["ev_retired"] == 1


def _sack(cack: int, offset: int, ev: int, bitmap: int = 0) -> bytes:
    return wire.encode_packet(wire.SackPacket(
        bth=wire.Bth(opcode=wire.OP_SACK, dest_qp=QP_A, psn=cack),
        sack=wire.SackExt(cack_psn=cack, ack_psn_offset=offset, entropy=ev, sack_offset=1,
                          sack_bitmap=bitmap), cc=wire.CcState()))


def _meta() -> RxMeta:
    return RxMeta("B", 0, 1, wire.DSCP_CONTROL, 0)


def test_a_sack_overtaken_by_a_cumulative_ack_still_times_its_packet() -> None:
    h = Harness(planes=1)
    mr = h.b.register_memory(4096)
    h.a.post_write(QP_A, b"x" * 2048, mr.va, mr.rkey, now=0.0)  # two 1024-byte packets
    first, second = h.a.packets_to_send(now=0.0)
    sender = h.a.connection(QP_A).sender
    h.a.receive_packet(_sack(2, -1, second.ev), _meta(), now=4e-6)  # acks PSN 0 and 1
    assert sender.rto.srtt == pytest.approx(4e-6)
    h.a.receive_packet(_sack(2, -2, first.ev), _meta(), now=20e-6)  # PSN 0's own, late SACK
    assert sender.rto.srtt == pytest.approx(0.875 * 4e-6 + 0.125 * 20e-6)
    h.a.receive_packet(_sack(2, -2, first.ev), _meta(), now=30e-6)  # a duplicate: no sample
    assert sender.rto.srtt == pytest.approx(0.875 * 4e-6 + 0.125 * 20e-6)


def test_a_sack_echoing_an_ev_its_trigger_never_used_is_refused() -> None:
    """A receiver echoes the EV the trigger arrived on; any other EV means the SACK answers
    nothing we sent (a forgery): nothing is acknowledged, timed or completed."""
    h = Harness(planes=1)
    mr = h.b.register_memory(4096)
    h.a.post_write(QP_A, b"x" * 2048, mr.va, mr.rkey, now=0.0)
    first, _ = h.a.packets_to_send(now=0.0)
    h.a.post_write(QP_A, b"y" * 1024, mr.va, mr.rkey, now=3e-6)
    (third,) = h.a.packets_to_send(now=3e-6)
    other = next(ev for ev in h.a.ev_states(QP_A) if ev not in (first.ev, third.ev))
    h.a.receive_packet(_sack(3, -3, other), _meta(), now=10e-6)
    sender = h.a.connection(QP_A).sender
    assert sender.rto.srtt is None and sender.snd_una == 0
    assert h.a.stats()["answers_refused"] == 1 and h.a.next_event() is None
    h.a.receive_packet(_sack(3, -3, first.ev), _meta(), now=10e-6)  # the genuine answer
    assert sender.snd_una == 3 and sender.rto.srtt == pytest.approx(10e-6)


def test_a_dead_path_is_abandoned_within_a_few_rtts() -> None:
    h = _paced(33)
    mr = h.b.register_memory(1_000_000)
    h.a.post_write(QP_A, pattern(1_000_000), mr.va, mr.rkey, now=0.0)
    h.run(until=10 * BASE_RTT)
    t_fail = h.now
    on_dead: list[float] = []

    def dead(src: str, tx) -> bool:
        if tx.route == SLOW and tx.dscp != wire.DSCP_CONTROL:
            on_dead.append(h.now)
        return tx.route != SLOW

    h.link.filter = dead
    h.run(until=1.0, stop=lambda: h.of_type("A", WriteCompleted))
    assert bytes(mr.buffer) == pattern(1_000_000)
    # a lost packet is declared lost ~1.5 base RTTs after it was sent (rule B or the RTO,
    # whichever comes first); the second such loss on the path retires all its EVs (one
    # verdict per EV, before path_dark, left the last data on it 2 base RTTs after the failure)
    assert on_dead and max(on_dead) - t_fail < 1.5 * BASE_RTT
    conn = h.a.connection(QP_A)
    assert all(e.state is EvState.ASSUMED_BAD for e in conn.evs.entries() if e.path.route == SLOW)
    assert {e.reason for e in h.of_type("A", EvStateChanged)} >= {"path_dark"}


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_loss_retires_single_evs_never_a_whole_path(seed: int) -> None:
    h = _paced(seed)
    h.link.faults.drop = 0.03
    assert _transfer(h, 500_000)
    reasons = [e.reason for e in h.of_type("A", EvStateChanged)]
    assert reasons.count("loss") > 5 and "path_dark" not in reasons


# ---- the single-path RoCE-like baseline: go-back-N on exactly one EV -------------------------


def _single_path(recovery: str, seed: int) -> Harness:
    ev = EvConfig.for_base_rtt(BASE_RTT, evs_per_connection=1, backups_per_plane=0,
                               ev_min_active=1)
    cfg = small_config(ev=ev, recovery=recovery,
                       cc_factory=functools.partial(FixedWindow, 16 * 1024))
    return Harness(planes=1, spines=1, seed=seed, config=cfg)


@pytest.mark.parametrize("recovery", ["go_back_n", "selective"])
def test_single_ev_transfer_with_loss_completes(recovery: str) -> None:
    h = _single_path(recovery, seed=41)
    h.link.faults.drop = 0.01
    size = 400_000
    mr = h.b.register_memory(size)
    data = pattern(size, 9)
    h.a.post_write(QP_A, data, mr.va, mr.rkey, now=0.0)
    h.run(until=1.0, stop=lambda: h.of_type("A", WriteCompleted))
    assert bytes(mr.buffer) == data
    conn = h.a.connection(QP_A)
    assert len(conn.evs) == 1  # one EV, no backups: it keeps carrying data even when retired
    sent = [tx for src, tx in h.sent if src == "A" and tx.dscp != wire.DSCP_CONTROL]
    s = h.a.stats()
    assert s["retransmits"] == len(sent) - (-(-size // 1024)) > 0
    assert {tx.ev for tx in sent} == set(conn.evs.states())


def _drop_first_send_of(psn: int, dropped: list):  # type: ignore[no-untyped-def]
    """A link filter that loses A's first transmission of `psn` (appended to `dropped`)."""
    def drop(src: str, tx) -> bool:  # type: ignore[no-untyped-def]
        if (src == "A" and tx.dscp == wire.DSCP_TRIMMABLE and not dropped
                and wire.decode_packet(tx.payload).bth.psn == psn):
            dropped.append(tx)
            return False
        return True
    return drop


def test_go_back_n_resends_everything_after_the_lost_psn() -> None:
    counts = {}
    for recovery in ("go_back_n", "selective"):
        h = _single_path(recovery, seed=42)
        target: list = []
        h.link.filter = _drop_first_send_of(40, target)
        assert _transfer(h, 200_000)
        assert len(target) == 1
        counts[recovery] = h.a.stats()["retransmits"]
    assert counts["selective"] == 1
    # everything in flight behind PSN 40 (a 16-packet window) went again
    assert counts["go_back_n"] >= 8


def test_a_go_back_n_receiver_places_only_the_expected_psn() -> None:
    """As a RoCE responder: after PSN 40 is lost, what follows it is dropped unplaced until
    40 is resent, so it all has to be resent; a selective receiver keeps it."""
    dropped, resent = {}, {}
    for recovery in ("go_back_n", "selective"):
        h = _single_path(recovery, seed=43)
        h.link.filter = _drop_first_send_of(40, [])
        assert _transfer(h, 200_000)
        dropped[recovery] = h.b.stats()["out_of_order_dropped"]
        resent[recovery] = h.a.stats()["retransmits"]
    assert dropped["selective"] == 0 and dropped["go_back_n"] >= 8
    assert resent["go_back_n"] >= dropped["go_back_n"] + 1  # the lost one and all it held up


def test_recovery_mode_is_validated() -> None:
    with pytest.raises(ConfigError, match="go_back_n"):
        EndpointConfig(recovery="go-back")


# ---- a refused write is never reported complete, whatever happens to the NACK ---------------


@pytest.mark.parametrize("nack_fate", ["lost", "delivered"])
def test_refused_write_never_completes_whatever_happens_to_the_nack(nack_fate: str) -> None:
    """A refusal consumes no PSN, so no cumulative ack can pass it: the later write's SACKs
    cannot complete the refused one, and a lost NACK only means the PSN is refused again."""
    h = Harness(planes=1, spines=2, seed=51)
    mr = h.b.register_memory(1500)
    nacks: list = []

    def lose_first_nack(src: str, tx) -> bool:
        if src == "B" and wire.decode_packet(tx.payload).bth.opcode == wire.OP_NACK:
            nacks.append(tx)
            return nack_fate == "delivered" or len(nacks) > 1
        return True

    h.link.filter = lose_first_nack
    # PSN 0 fits, PSN 1 runs past the region's end (refused), PSN 2 is a later, valid write
    h.a.post_write(QP_A, pattern(2048, 1), mr.va, mr.rkey, now=0.0)
    h.a.post_write(QP_A, pattern(100, 2), mr.va, mr.rkey, now=0.0)
    h.run(until=1.0)
    assert h.of_type("A", (WriteCompleted, WriteFailed)) == [
        WriteFailed(QP_A, 1, FailReason.BOUNDS_VIOLATION), WriteFailed(QP_A, 2, FailReason.FLUSHED)]
    assert len(nacks) == (2 if nack_fate == "lost" else 1)
    assert h.b.stats()["bounds_violations"] == len(nacks)
    assert h.b.connection(QP_B).receiver.cack == 1  # PSN 1 was never consumed
    assert h.of_type("B", MessageReceived) == []



def test_feedback_paused_by_an_incast_backlog_is_not_a_timeout() -> None:
    """Mininet incast in miniature: the first window crosses a fast bottleneck (RTT samples
    near the base RTT, so the RTO settles near rto_min), then other senders' windows land in
    the bottleneck queue just ahead of the next packets, and no SACK comes back for 2.5 base
    RTTs. An RTO of max(rto_min, srtt + 4 rttvar) = 2.25 base RTTs timed the whole second
    window out; srtt + max(4 rttvar, rto_min), from the last progress, waits for its SACKs."""
    cfg = small_config(cc_factory=functools.partial(FixedWindow, 32 * 1024))
    h = Harness(planes=1, spines=2, seed=33, config=cfg)
    service = BASE_RTT / 64  # per data packet at the bottleneck A shares
    free_at = [0.0]
    backlog = [1.5 * BASE_RTT]  # queued ahead of the first packet of the second window

    def bottleneck(src: str, tx) -> bool:
        delay = 0.0
        if src == "A" and tx.dscp != wire.DSCP_CONTROL:
            if backlog and wire.decode_packet(tx.payload).bth.psn == 32:
                free_at[0] = h.now + backlog.pop()
            free_at[0] = max(h.now, free_at[0]) + service
            delay = free_at[0] - h.now  # FIFO: departures in order
        h.link.route_delay[tx.route] = delay
        return True

    h.link.filter = bottleneck
    assert _transfer(h, 200_000)
    s = h.a.stats()
    assert s["timeouts"] == 0 and s["retransmits"] == 0


def _stall(h: Harness, start: float, length: float, drop: bool):
    """A's data sent in [start, start + length) is lost (drop) or held until the interval ends,
    like frames waiting in the socket buffer of a paused receiver process."""
    def stall(src: str, tx) -> bool:
        held = src == "A" and start <= h.now < start + length
        h.link.route_delay[tx.route] = start + length - h.now if held and not drop else 0.0
        return not (held and drop)
    return stall


@pytest.mark.parametrize("drop, trim", [(False, 0.0), (False, 0.3), (True, 0.0)],
                         ids=["late", "late-and-trimmed", "lost"])
def test_a_timeout_answered_by_the_timed_out_transmission_counts_as_spurious(
        drop: bool, trim: float) -> None:
    """Late answers are SACKs or, for trimmed packets, NACKs; both name the transmission."""
    h = _paced(36)
    h.link.faults.trim = trim
    h.link.filter = _stall(h, 10 * BASE_RTT, 40 * BASE_RTT, drop)
    assert _transfer(h, 300_000)
    s = h.a.stats()
    assert s["timeouts"] > 0
    if drop:
        assert s["spurious_timeouts"] == 0
    else:  # all 48 when nothing is trimmed; 44 of 48 with 30% trimmed
        assert 0.9 * s["timeouts"] <= s["spurious_timeouts"] <= s["timeouts"]


def test_stranded_sacks_cost_no_wait() -> None:
    """Packets past a link when it fails still arrive, but their SACKs take the dead link back:
    those PSNs are acknowledged only cumulatively, which proves them written (a refused PSN is
    never consumed), so the writes complete without waiting for their own SACKs."""
    h = _paced(35)
    mr = h.b.register_memory(8 * 16 * 1024)
    data = pattern(8 * 16 * 1024, 6)
    for i in range(8):  # 16-packet writes, all posted at once like the bench's chunked flows
        chunk = slice(i * 16 * 1024, (i + 1) * 16 * 1024)
        h.a.post_write(QP_A, data[chunk], mr.va + i * 16 * 1024, mr.rkey, now=0.0)
    stranded = {5, 21, 37, 53}  # one PSN in each of writes 1-4
    lost_sacks: list[int] = []

    def strand(src: str, tx) -> bool:
        if src != "B":
            return True
        pkt = wire.decode_packet(tx.payload)
        if isinstance(pkt, wire.SackPacket):
            trigger = wire.psn_add(pkt.sack.cack_psn, pkt.sack.ack_psn_offset)
            if trigger in stranded:
                stranded.discard(trigger)
                lost_sacks.append(trigger)
                return False
        return True

    h.link.filter = strand
    h.run(until=1.0, stop=lambda: len(h.of_type("A", WriteCompleted)) == 8)
    assert bytes(mr.buffer) == data and len(lost_sacks) == 4
    assert h.a.stats()["retransmits"] == 0
    rto = h.a.connection(QP_A).sender.rto.rto
    assert h.now < 8 * BASE_RTT + 0.5 * rto, (h.now / BASE_RTT, rto / BASE_RTT)
