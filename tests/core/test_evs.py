"""EvSet: transitions, spreading, skip expiry, loss/backup swap, probing, floor, planes, control."""

from __future__ import annotations

import random
from collections import Counter, deque

import pytest

from host_agent.core import EvState, LocalProtocolError, PathInfo
from host_agent.core.evs import INDEX_BITS, INDEX_MASK, TAG_BITS, EvSet
from host_agent.core.evstate import TRANSITIONS, EvConfig, EvTrigger, Pool

G, S, B, D = EvState.GOOD, EvState.SKIP, EvState.ASSUMED_BAD, EvState.DENIED
T = EvTrigger


def paths(planes: int = 4, per_plane: int = 4) -> list[PathInfo]:
    return [PathInfo(p, f"p{p}s{s}") for p in range(planes) for s in range(per_plane)]


def make(planes: int = 4, per_plane: int = 4, seed: int = 1, **cfg: object) -> EvSet:
    return EvSet(paths(planes, per_plane), EvConfig(**cfg), random.Random(seed))  # type: ignore[arg-type]


def force(es: EvSet, ev: int, state: EvState, now: float = 0.0) -> None:
    """Drive an EV into `state` through public calls only."""
    if state is S:
        es.on_ecn(ev, now)
    elif state is B:
        es.on_loss(ev, now)
    elif state is D:
        es.set_denied(ev, True)


# ---------------------------------------------------------------- construction


def test_build_counts_values_and_spread() -> None:
    es = make(planes=4, per_plane=4, evs_per_connection=128, backups_per_plane=8)
    assert len(es) == 128 + 4 * 8
    values = [e.ev for e in es.entries()]
    assert len(set(values)) == len(values) and 0 not in values
    assert values == [1 << INDEX_BITS | i for i in range(len(values))]  # tag 1, index i
    per_plane = Counter(e.path.plane for e in es.active())
    assert per_plane == {p: 32 for p in range(4)}
    per_path = Counter(e.path for e in es.active())
    assert set(per_path.values()) == {8}
    backups = [e for e in es.entries() if e.pool is Pool.BACKUP]
    assert Counter(e.path.plane for e in backups) == {p: 8 for p in range(4)}
    assert set(Counter(e.path for e in backups).values()) == {2}
    assert all(e.state is G for e in es.entries())


def test_uneven_split_differs_by_at_most_one() -> None:
    es = make(planes=3, per_plane=2, evs_per_connection=10, backups_per_plane=0)
    assert sorted(Counter(e.path.plane for e in es.active()).values()) == [3, 3, 4]


def test_ev_values_carry_the_tag_above_the_index() -> None:
    tag = (1 << TAG_BITS) - 1
    es = EvSet(paths(2, 1), EvConfig(evs_per_connection=4, backups_per_plane=0, ev_min_active=1),
               random.Random(0), tag=tag)
    assert [e.ev for e in es.entries()] == [tag << INDEX_BITS | i for i in range(4)]
    assert max(e.ev for e in es.entries()) < 1 << 32
    with pytest.raises(LocalProtocolError, match="exceed 4096"):
        EvSet(paths(2, 1), EvConfig(evs_per_connection=4096, backups_per_plane=1))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"evs_per_connection": 0},
        {"backups_per_plane": -1},
        {"skip_time": 0},
        {"probe_interval": float("inf")},
        {"probe_timeout": "1"},
        {"probe_successes_to_reinstate": 0},
        {"ev_min_active": 0},
        {"evs_per_connection": 4, "ev_min_active": 5},
        {"evs_per_connection": True},
    ],
)
def test_bad_config_rejected_with_field_name(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="EvConfig"):
        EvConfig(**kwargs)  # type: ignore[arg-type]


def test_bad_construction_rejected() -> None:
    with pytest.raises(LocalProtocolError, match="at least one path"):
        EvSet([], EvConfig(), random.Random(0))
    with pytest.raises(LocalProtocolError, match="duplicates"):
        EvSet(paths(1, 1) * 2, EvConfig(), random.Random(0))
    for tag in (0, 1 << TAG_BITS, "1"):
        with pytest.raises(LocalProtocolError, match="tag"):
            EvSet(paths(), EvConfig(), random.Random(0), tag=tag)  # type: ignore[arg-type]
    with pytest.raises(LocalProtocolError, match="planes"):
        EvSet(paths(4, 1), EvConfig(evs_per_connection=2, ev_min_active=1), random.Random(0))


def test_for_base_rtt_scales_timers() -> None:
    cfg = EvConfig.for_base_rtt(1e-5, ev_min_active=4)
    assert cfg.skip_time == pytest.approx(4e-5)
    assert cfg.probe_interval == pytest.approx(1e-4)
    assert cfg.probe_timeout == pytest.approx(8e-5)
    assert cfg.ev_min_active == 4


# ---------------------------------------------------------------- transition table


def test_transition_table_is_total_over_listed_pairs_only() -> None:
    table = TRANSITIONS
    assert {t for _, t in table} == set(EvTrigger)  # every trigger moves some state
    # DENIED is entered by DENY and left only by ALLOW
    assert all(new is not D or trig is T.DENY or old is D for (old, trig), new in table.items())
    assert [k for k, v in table.items() if k[0] is D and v is not D] == [(D, T.ALLOW)]


@pytest.mark.parametrize("pair", sorted(TRANSITIONS, key=lambda k: (k[0].name, k[1].value)))
def test_every_legal_transition(pair: tuple[EvState, EvTrigger]) -> None:
    start, trigger = pair
    es = make(backups_per_plane=2, probe_successes_to_reinstate=1)
    ev = es.active()[0].ev
    force(es, ev, start, now=1.0)
    assert es.entry(ev).state is start
    es.drain_changes()
    now = 2.0
    if trigger is T.ECN:
        es.on_ecn(ev, now)
    elif trigger is T.NACK_TRIMMED:
        es.on_nack_trimmed(ev, now)
    elif trigger is T.SKIP_EXPIRED:
        es.advance(1.0 + es.config.skip_time)
    elif trigger is T.LOSS:
        es.on_loss(ev, now)
    elif trigger is T.PATH_DARK:
        es.on_path_dark(es.entry(ev).path, now)
    elif trigger is T.PROBE_SUCCESS_ENOUGH:
        (due,) = es.probes_due(1.0 + es.config.probe_interval)
        es.on_probe_sent(due.ev, now)
        es.on_probe_reply(due.ev, now)
    elif trigger is T.DENY:
        es.set_denied(ev, True)
    else:
        es.set_denied(ev, False)
    expected = TRANSITIONS[pair]
    assert es.entry(ev).state is expected
    changes = [c for c in es.drain_changes() if c[0] == ev]  # path_dark moves its path-mates too
    if expected is not start:
        assert changes == [(ev, start, expected, trigger)]
    else:
        assert changes == []


@pytest.mark.parametrize(
    ("start", "call"),
    [
        (G, lambda es, ev: es.set_denied(ev, False)),  # allow on GOOD
        (S, lambda es, ev: es.set_denied(ev, False)),
        (B, lambda es, ev: es.set_denied(ev, False)),
        (D, lambda es, ev: es.set_denied(ev, True)),  # deny twice
    ],
)
def test_illegal_transitions_raise_naming_state_and_trigger(start, call) -> None:  # type: ignore[no-untyped-def]
    es = make()
    ev = es.active()[0].ev
    force(es, ev, start)
    with pytest.raises(LocalProtocolError) as info:
        call(es, ev)
    assert start.name in str(info.value)
    assert ("'allow'" in str(info.value)) or ("'deny'" in str(info.value))
    assert es.entry(ev).state is start


def test_illegal_internal_triggers_raise() -> None:
    es = make()
    entry = es.active()[0]
    for trigger in (T.SKIP_EXPIRED, T.PROBE_SUCCESS_ENOUGH, T.ALLOW, "bogus"):
        with pytest.raises(LocalProtocolError, match=f"GOOD.*'{trigger}'"):
            es._apply(entry, trigger, 0.0)  # type: ignore[arg-type]
    assert entry.state is G


def test_unknown_ev_and_plane_raise() -> None:
    es = make()
    with pytest.raises(LocalProtocolError, match="not in this EV set"):
        es.on_ecn(0xDEAD_BEEF, 0.0)
    with pytest.raises(LocalProtocolError, match="plane"):
        es.set_plane_usable(9, False)
    assert 0xDEAD_BEEF not in es


# ---------------------------------------------------------------- choosing


def test_choose_spreads_equally_over_planes_and_paths() -> None:
    es = make(planes=4, per_plane=4)
    picks = [es.choose(0.0) for _ in range(128 * 50)]
    assert all(p is not None for p in picks)
    by_ev = Counter(p.ev for p in picks if p)
    assert set(by_ev.values()) == {50} and len(by_ev) == 128
    assert set(Counter(p.path.plane for p in picks if p).values()) == {128 * 50 // 4}
    assert set(Counter(p.path for p in picks if p).values()) == {128 * 50 // 16}
    # consecutive packets go to different planes
    assert all(a.path.plane != b.path.plane for a, b in zip(picks, picks[1:], strict=False))  # type: ignore[union-attr]


def test_choose_is_amortised_constant() -> None:
    """A ring pops at most one extra entry per loss of usability, never a scan per packet."""
    es = make(planes=4, per_plane=4, backups_per_plane=0, ev_min_active=1)
    for entry in es.active(plane=0):
        es.on_ecn(entry.ev, 0.0)  # 32 EVs unusable, never expire before t=0.001
    pops = 0

    class Counting:
        def __init__(self, ring: deque) -> None:
            self.ring = ring

        def __getattr__(self, name: str) -> object:
            return getattr(self.ring, name)

        def __len__(self) -> int:
            return len(self.ring)

        def popleft(self):  # type: ignore[no-untyped-def]
            nonlocal pops
            pops += 1
            return self.ring.popleft()

    es._ix.rings = {p: Counting(r) for p, r in es._ix.rings.items()}  # type: ignore[misc]
    n = 10_000
    for _ in range(n):
        picked = es.choose(0.001)
        assert picked is not None and picked.path.plane != 0
    assert pops <= n + 32


def test_each_usable_plane_keeps_its_share_when_it_loses_evs() -> None:
    """Planes are NIC ports: a plane with a dead route's EVs retired (and no backups to swap
    in) still gets 1/planes of the packets, spread over the EVs it has left."""
    es = make(planes=4, per_plane=4, backups_per_plane=0)
    dead = [e for e in es.active(plane=0)][: len(es.active(plane=0)) // 2]
    for entry in dead:
        es.on_loss(entry.ev, 0.0)
    picks = [es.choose(0.0) for _ in range(4000)]
    by_plane = Counter(p.path.plane for p in picks if p)
    assert set(by_plane.values()) == {1000}, by_plane
    assert not {p.ev for p in picks if p} & {e.ev for e in dead}
    alive0 = Counter(p.ev for p in picks if p and p.path.plane == 0)
    assert len(alive0) == len(es.active(plane=0))
    assert max(alive0.values()) - min(alive0.values()) <= 1


def test_congestion_lowers_a_planes_share_but_failure_does_not() -> None:
    """EVs resting in SKIP (ECN) take their plane's turns with them, so the excess spreads
    over every plane; EVs retired by a loss leave the plane its share (the failure test
    above)."""
    es = make(planes=4, per_plane=4, backups_per_plane=0)
    skipped = es.active(plane=0)[: len(es.active(plane=0)) // 2]
    for entry in skipped:
        es.on_ecn(entry.ev, 0.0)
    n = 5600
    by_plane = Counter(p.path.plane for p in (es.choose(0.0) for _ in range(n)) if p)
    per_plane = len(es.active(plane=1))  # 32 active slots per plane
    weights = {0: per_plane - len(skipped), 1: per_plane, 2: per_plane, 3: per_plane}
    total = sum(weights.values())
    for plane, weight in weights.items():
        assert abs(by_plane[plane] - n * weight / total) <= 1, (by_plane, weights)


def test_a_plane_back_from_down_rejoins_at_its_share_without_a_burst() -> None:
    """The plane keeps the credit it had when it went down; that credit is within one round,
    so from the first pick after it returns, every prefix of the picks stays within two
    packets of each plane's weighted share."""
    for seed in range(40):
        rng = random.Random(seed)
        es = make(planes=4, per_plane=4, backups_per_plane=0, seed=seed)
        for entry in es.active(plane=2)[: rng.randrange(0, 20)]:
            es.on_ecn(entry.ev, 0.0)
        for _ in range(rng.randrange(0, 200)):
            es.choose(0.0)
        down = rng.randrange(4)
        es.set_plane_usable(down, False)
        assert all(es.choose(0.0).path.plane != down for _ in range(rng.randrange(1, 50)))
        es.set_plane_usable(down, True)
        active = len(es.active(plane=0))
        skipping = Counter(e.path.plane for e in es.entries() if e.state is S)
        weights = {p: max(1, active - skipping[p]) for p in range(4)}
        total = sum(weights.values())
        seen: Counter[int] = Counter()
        for n in range(1, 3 * total + 1):
            seen[es.choose(0.0).path.plane] += 1
            for plane, weight in weights.items():
                assert abs(seen[plane] - n * weight / total) <= 2, (seed, n, plane, seen)


def test_skip_then_expiry_back_to_good() -> None:
    es = make(skip_time=0.5)
    ev = es.active()[0].ev
    es.on_ecn(ev, 10.0)
    assert es.entry(ev).state is S
    assert es.next_deadline() == pytest.approx(10.5)
    assert all(es.choose(10.2).ev != ev for _ in range(300))  # type: ignore[union-attr]
    es.on_nack_trimmed(ev, 10.3)  # extends to 10.8
    es.advance(10.6)
    assert es.entry(ev).state is S
    assert es.next_deadline() == pytest.approx(10.8)
    es.choose(10.8)  # choose expires lazily
    assert es.entry(ev).state is G
    assert es.next_deadline() is None
    assert ev in {es.choose(11.0).ev for _ in range(200)}  # type: ignore[union-attr]
    assert es.counters["skips"] == 1 and es.counters["skip_extensions"] == 1
    assert es.counters["skip_expired"] == 1


def test_lasthop_trim_is_not_penalised() -> None:
    es = make()
    ev = es.active()[0].ev
    es.on_nack_trimmed_lasthop(ev, 0.0)
    assert es.entry(ev).state is G
    assert es.counters["nack_trimmed_lasthop"] == 1
    assert es.entry(ev).counters["nack_trimmed_lasthop"] == 1
    assert es.drain_changes() == []


def test_loss_swaps_in_backup_on_same_plane_other_path() -> None:
    es = make(planes=2, per_plane=4, backups_per_plane=4)
    victim = es.active(plane=1)[0]
    before = len(es.active(plane=1))
    es.on_loss(victim.ev, 1.0)
    assert victim.state is B and victim.pool is Pool.OUT
    after = es.active(plane=1)
    assert len(after) == before and len(es.active(plane=0)) == 64
    new = [e for e in after if e.counters["chosen"] == 0 and e.ev & INDEX_MASK >= 128]
    assert len(new) == 1 and new[0].path.plane == 1 and new[0].path != victim.path
    assert es.counters["retired"] == 1 and es.counters["swaps"] == 1
    picks = {es.choose(2.0).ev for _ in range(400)}  # type: ignore[union-attr]
    assert victim.ev not in picks and new[0].ev in picks


def test_backups_exhausted_shrinks_plane() -> None:
    es = make(planes=2, per_plane=2, evs_per_connection=8, backups_per_plane=1, ev_min_active=1)
    a, b = es.active(plane=0)[:2]
    es.on_loss(b.ev, 0.0)  # b's path has no other failing EV: the one backup replaces it
    es.on_loss(a.ev, 0.0)
    assert len(es.active(plane=0)) == 3
    assert es.counters["backups_exhausted"] == 1 and es.counters["retired"] == 2


def test_repeat_loss_counts_retired_once() -> None:
    es = make()
    ev = es.active()[0].ev
    es.on_loss(ev, 1.0)
    es.on_loss(ev, 2.0)
    assert es.counters["retired"] == 1 and es.counters["losses"] == 2
    assert es.entry(ev).failed_at == 2.0
    assert es.entry(ev).counters["retired"] == 1  # per EV too (the bench counts per route)


def test_path_dark_counts_retired_per_ev() -> None:
    es = make(planes=2, per_plane=4)
    path = es.active(plane=1)[0].path
    on_path = [e for e in es.entries() if e.path == path and e.pool is not Pool.OUT]
    es.on_path_dark(path, 1.0)
    assert on_path and all(e.counters["retired"] == 1 for e in on_path)
    assert sum(e.counters["retired"] for e in es.entries()) == es.counters["retired"]


# ---------------------------------------------------------------- probing


def probe_round(es: EvSet, ev: int, now: float, reply: bool) -> None:
    due = [e.ev for e in es.probes_due(now)]
    assert ev in due
    es.on_probe_sent(ev, now)
    assert ev not in [e.ev for e in es.probes_due(now)]  # one probe outstanding at a time
    if reply:
        es.on_probe_reply(ev, now + 0.001)
    else:
        es.on_probe_timeout(ev, now + 0.001)


def test_probe_reinstates_after_n_successes_and_failure_resets() -> None:
    es = make(probe_interval=1.0, probe_successes_to_reinstate=3)
    ev = es.active()[0].ev
    es.on_loss(ev, 0.0)
    assert es.probes_due(0.5) == []
    assert es.next_deadline() == pytest.approx(1.0)
    probe_round(es, ev, 1.0, reply=True)
    probe_round(es, ev, 2.0, reply=True)
    probe_round(es, ev, 3.0, reply=False)  # resets the run
    assert es.entry(ev).probe_successes == 0
    probe_round(es, ev, 4.0, reply=True)
    probe_round(es, ev, 5.0, reply=True)
    assert es.entry(ev).state is B
    probe_round(es, ev, 6.0, reply=True)
    entry = es.entry(ev)
    assert entry.state is G and entry.pool is Pool.BACKUP  # the plane's actives were refilled
    assert es.counters["reinstated"] == 1 and es.counters["probe_timeouts"] == 1
    assert es.counters["probes_sent"] == 6 and es.counters["probe_replies"] == 5
    assert es.probes_due(100.0) == []
    assert (ev, B, G, "probe_success_enough") in es.drain_changes()


def test_reinstated_ev_refills_active_pool_when_backups_ran_out() -> None:
    es = make(planes=1, per_plane=2, evs_per_connection=4, backups_per_plane=0, ev_min_active=1,
              probe_interval=1.0, probe_successes_to_reinstate=1)
    ev = es.active()[0].ev
    es.on_loss(ev, 0.0)
    assert len(es.active()) == 3
    probe_round(es, ev, 1.0, reply=True)
    assert es.entry(ev).pool is Pool.ACTIVE and len(es.active()) == 4


def test_probe_timeout_by_advance_and_late_reply_ignored() -> None:
    es = make(probe_interval=1.0, probe_timeout=0.5)
    ev = es.active()[0].ev
    es.on_loss(ev, 0.0)
    es.on_probe_sent(ev, 1.0)
    assert es.next_deadline() == pytest.approx(1.5)
    es.advance(1.5)
    assert es.counters["probe_timeouts"] == 1
    es.on_probe_reply(ev, 1.6)  # too late: ignored, not a success
    assert es.entry(ev).probe_successes == 0
    assert es.counters["probe_results_ignored"] == 1
    assert es.next_deadline() == pytest.approx(2.0)


def test_probe_misuse_raises() -> None:
    es = make()
    ev = es.active()[0].ev
    with pytest.raises(LocalProtocolError, match="ASSUMED_BAD"):
        es.on_probe_sent(ev, 0.0)
    es.on_loss(ev, 0.0)
    es.on_probe_sent(ev, 0.1)
    with pytest.raises(LocalProtocolError, match="outstanding"):
        es.on_probe_sent(ev, 0.2)


def test_no_probes_on_unusable_plane() -> None:
    es = make(probe_interval=1.0)
    entry = es.active(plane=2)[0]
    es.on_loss(entry.ev, 0.0)
    es.set_plane_usable(2, False)
    assert es.probes_due(5.0) == []
    assert es.next_deadline() is None
    es.set_plane_usable(2, True)
    assert [e.ev for e in es.probes_due(5.0)] == [entry.ev]


# ---------------------------------------------------------------- floor


def test_floor_keeps_least_recently_failed_in_use() -> None:
    es = make(planes=1, per_plane=4, evs_per_connection=4, backups_per_plane=0, ev_min_active=3)
    a, b, c, d = es.active()
    es.on_loss(a.ev, 1.0)
    es.on_loss(b.ev, 2.0)
    es.on_loss(c.ev, 3.0)
    # one usable EV (d); floor 3 -> add the two least recently failed: a, then b
    picks = Counter(es.choose(4.0).ev for _ in range(300))  # type: ignore[union-attr]
    assert set(picks) == {a.ev, b.ev, d.ev} and set(picks.values()) == {100}
    assert a.state is B and b.state is B  # still retired, just used as last resort
    assert es.counters["floor_picks"] == 200
    es.on_loss(a.ev, 5.0)  # a failed again: c is now older than a
    assert {es.choose(6.0).ev for _ in range(30)} == {b.ev, c.ev, d.ev}  # type: ignore[union-attr]


def test_floor_prefers_skip_over_assumed_bad_and_never_denied() -> None:
    es = make(planes=1, per_plane=4, evs_per_connection=4, backups_per_plane=0, ev_min_active=2,
              skip_time=10.0)
    a, b, c, d = es.active()
    es.on_loss(a.ev, 0.0)
    es.on_ecn(b.ev, 0.0)
    es.set_denied(c.ev, True)
    es.set_denied(d.ev, True)
    assert {es.choose(1.0).ev for _ in range(10)} == {a.ev, b.ev}  # type: ignore[union-attr]
    es.set_denied(c.ev, False)  # back to GOOD and into the active pool
    assert c.state is G and c.pool is Pool.ACTIVE
    assert {es.choose(1.0).ev for _ in range(10)} == {b.ev, c.ev}  # type: ignore[union-attr]


def test_choose_none_only_without_usable_plane_or_all_denied() -> None:
    es = make(planes=2, per_plane=1, evs_per_connection=4, backups_per_plane=0, ev_min_active=1)
    for entry in es.active():
        es.on_loss(entry.ev, 0.0)
    assert es.choose(1.0) is not None  # all ASSUMED_BAD: floor still sends
    es.set_plane_usable(0, False)
    es.set_plane_usable(1, False)
    assert es.choose(1.0) is None and es.choose_control(1.0) is None
    es.set_plane_usable(1, True)
    assert es.choose(1.0).path.plane == 1  # type: ignore[union-attr]
    for entry in es.active(plane=1) + [e for e in es.entries() if e.path.plane == 1]:
        if entry.state is not D:
            es.set_denied(entry.ev, True)
    assert es.choose(1.0) is None


# ---------------------------------------------------------------- planes and control


def test_unusable_plane_never_chosen_then_back() -> None:
    es = make(planes=4, per_plane=2)
    es.set_plane_usable(3, False)
    picks = [es.choose(0.0) for _ in range(960)]
    assert all(p is not None and p.path.plane != 3 for p in picks)
    assert set(Counter(p.path.plane for p in picks if p).values()) == {320}
    assert all(e.state is G for e in es.entries())  # state untouched
    es.set_plane_usable(3, True)
    again = Counter(es.choose(0.0).path.plane for _ in range(1280))  # type: ignore[union-attr]
    assert again[3] == 320


def test_control_covers_each_usable_plane_prefers_good() -> None:
    es = make(planes=3, per_plane=2, evs_per_connection=6, backups_per_plane=1, ev_min_active=1)
    picks = [es.choose_control(0.0) for _ in range(30)]
    assert Counter(p.path.plane for p in picks if p) == {0: 10, 1: 10, 2: 10}
    for entry in es.active(plane=1):
        es.on_ecn(entry.ev, 0.0)
    picks = [es.choose_control(0.0) for _ in range(30)]
    assert {p.path.plane for p in picks if p} == {0, 1, 2}
    # plane 1's actives are SKIP: its GOOD backup stands in
    plane1 = {p.ev for p in picks if p and p.path.plane == 1}
    assert len(plane1) == 1 and es.entry(plane1.pop()).pool is Pool.BACKUP
    es.set_plane_usable(2, False)
    assert {es.choose_control(0.0).path.plane for _ in range(10)} == {0, 1}  # type: ignore[union-attr]


def test_control_keeps_a_bad_plane_reachable() -> None:
    es = make(planes=2, per_plane=1, evs_per_connection=2, backups_per_plane=0, ev_min_active=1)
    (bad,) = es.active(plane=0)
    es.on_loss(bad.ev, 0.0)
    assert {es.choose_control(0.0).ev for _ in range(4)} == {bad.ev, es.active(plane=1)[0].ev}  # type: ignore[union-attr]
    assert es.counters["control_fallback"] == 2


def test_counters_and_changes_for_endpoint_events() -> None:
    es = make()
    ev = es.active()[0].ev
    es.on_ecn(ev, 0.0)
    es.on_loss(ev, 0.1)
    es.set_denied(ev, True)
    es.on_delivered(es.active()[1].ev, 0.2)
    assert [c[1:] for c in es.drain_changes()] == [
        (G, S, "ecn"), (S, B, "loss"), (B, D, "deny")
    ]
    assert es.drain_changes() == []
    assert es.counters["denied"] == 1 and es.counters["delivered"] == 1
    assert es.states()[ev] is D
    assert es.entry(ev).pool is Pool.OUT


def test_denied_active_ev_is_replaced_and_never_probed_or_chosen() -> None:
    es = make(planes=2, per_plane=2, probe_interval=1.0)
    victim = es.active(plane=0)[0]
    es.on_loss(victim.ev, 0.0)  # ASSUMED_BAD, would be probed at t=1
    es.set_denied(victim.ev, True)
    assert es.probes_due(5.0) == [] and es.next_deadline() is None
    other = es.active(plane=1)[0]
    es.set_denied(other.ev, True)
    assert len(es.active(plane=1)) == 64 and other.pool is Pool.OUT
    picks = {es.choose(6.0).ev for _ in range(500)}  # type: ignore[union-attr]
    assert victim.ev not in picks and other.ev not in picks
    es.set_denied(victim.ev, False)  # plane 0 already refilled: it becomes a backup
    assert victim.state is G and victim.pool is Pool.BACKUP


# ---------------------------------------------------------------- backups avoid failing paths


def test_backup_comes_from_a_path_without_failing_evs_or_waits() -> None:
    es = make(planes=1, per_plane=2, evs_per_connection=4, backups_per_plane=2, ev_min_active=1,
              probe_interval=1.0, probe_successes_to_reinstate=1)
    on = {r: [e for e in es.entries() if e.path.route == r] for r in ("p0s0", "p0s1")}
    dead_actives = [e for e in on["p0s0"] if e.pool is Pool.ACTIVE]
    (dead_backup,) = [e for e in on["p0s0"] if e.pool is Pool.BACKUP]
    (live_backup,) = [e for e in on["p0s1"] if e.pool is Pool.BACKUP]
    es.on_loss(dead_actives[0].ev, 0.0)
    assert live_backup.pool is Pool.ACTIVE and dead_backup.pool is Pool.BACKUP  # the live path's
    es.on_loss(dead_actives[1].ev, 0.0)
    # the only backup left sits on a path whose EVs are failing: the slot waits
    assert dead_backup.pool is Pool.BACKUP and es.counters["swaps_deferred"] == 1
    assert len(es.active(plane=0)) == 3
    es.on_delivered(live_backup.ev, 0.5)  # still failing: still waiting
    assert dead_backup.pool is Pool.BACKUP
    probe_round(es, dead_actives[0].ev, 1.0, reply=True)  # reinstated: takes the empty slot
    assert dead_actives[0].pool is Pool.ACTIVE and len(es.active(plane=0)) == 4
    probe_round(es, dead_actives[1].ev, 1.0, reply=True)  # plane full: back to the backups
    assert dead_actives[1].pool is Pool.BACKUP and dead_backup.pool is Pool.BACKUP


def test_a_deferred_slot_is_refilled_once_the_path_recovers() -> None:
    es = make(planes=1, per_plane=2, evs_per_connection=4, backups_per_plane=1, ev_min_active=1,
              probe_interval=1.0, probe_successes_to_reinstate=1)
    (backup,) = [e for e in es.entries() if e.pool is Pool.BACKUP]
    same = [e for e in es.entries() if e.pool is Pool.ACTIVE and e.path == backup.path]
    other = [e for e in es.entries() if e.pool is Pool.ACTIVE and e.path != backup.path]
    es.on_loss(same[0].ev, 0.0)  # the backup's own path fails: no swap
    assert backup.pool is Pool.BACKUP and es.counters["swaps_deferred"] == 1
    es.on_loss(other[0].ev, 0.1)  # still the failing path's backup: no swap
    assert backup.pool is Pool.BACKUP and len(es.active(plane=0)) == 2
    probe_round(es, other[0].ev, 1.1, reply=True)  # fills one slot itself
    assert other[0].pool is Pool.ACTIVE and backup.pool is Pool.BACKUP
    probe_round(es, same[0].ev, 1.0 + 0.5, reply=False)
    es.set_denied(same[0].ev, True)  # management takes it away: its path has no bad EV left
    assert backup.pool is Pool.ACTIVE and len(es.active(plane=0)) == 4


# ---------------------------------------------------------------- control EV for an arrival


def test_control_answers_on_the_arrival_plane_and_mirrored_path() -> None:
    es = make(planes=2, per_plane=2, evs_per_connection=8, backups_per_plane=0, ev_min_active=1)
    for peer_ev in es.states():  # the peer's EV n is laid out like ours
        mirror = es.entry(peer_ev)
        for _ in range(3):
            got = es.choose_control(0.0, plane=mirror.path.plane, echo_ev=peer_ev)
            assert got is not None and got.path == mirror.path


def test_control_avoids_paths_with_failing_evs_and_unusable_planes() -> None:
    es = make(planes=2, per_plane=2, evs_per_connection=8, backups_per_plane=0, ev_min_active=1)
    failing = es.active(plane=0)[0]
    es.on_loss(failing.ev, 0.0)
    sibling = next(e for e in es.active(plane=0) if e.path == failing.path)
    for _ in range(4):  # the arrival's mirror sits on a path we know is failing
        got = es.choose_control(0.0, plane=0, echo_ev=sibling.ev)
        assert got is not None and got.path.plane == 0 and got.path != failing.path
    es.set_plane_usable(0, False)
    got = es.choose_control(0.0, plane=0, echo_ev=sibling.ev)
    assert got is not None and got.path.plane == 1


def test_a_dark_path_retires_every_ev_on_it_and_backups_come_from_other_paths() -> None:
    es = make(planes=2, per_plane=2, evs_per_connection=16, backups_per_plane=4)
    dark = es.active(0)[0].path
    assert len(es.active(0)) == 8  # 4 per path, plus 2 backups per path
    on_dark = [e for e in es.entries() if e.path == dark]
    skip, denied = on_dark[1].ev, on_dark[2].ev
    es.on_ecn(skip, 0.5)
    es.set_denied(denied, True)
    es.drain_changes()
    es.on_path_dark(dark, 1.0)
    changes = es.drain_changes()
    assert {ev for ev, *_ in changes} == {e.ev for e in on_dark} - {denied}
    assert all(new is B and reason == "path_dark" for _, _, new, reason in changes)
    assert es.entry(denied).state is D
    assert all(e.state is G for e in es.entries() if e.path != dark and e.ev != skip)
    # the plane's slots are refilled from the GOOD backups of its other path only
    healthy = [e for e in es.entries() if e.path.plane == 0 and e.path != dark]
    assert sorted(e.ev for e in es.active(0)) == sorted(e.ev for e in healthy)
