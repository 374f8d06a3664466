"""The floor per plane (host_agent.core.evfloor): random loss that retires a plane's EVs does not
take its NIC port out of the spray, a dead route does."""

from __future__ import annotations

import random
from collections import Counter

from host_agent.core.evs import EvSet
from host_agent.core.evstate import EvConfig
from host_agent.core.types import PathInfo

PLANES, SPINES = 4, 2


def _set(ev_min_active: int) -> EvSet:
    paths = [PathInfo(p, f"p{p}s{s}") for p in range(PLANES) for s in range(SPINES)]
    return EvSet(paths, EvConfig(evs_per_connection=16, backups_per_plane=0,
                                 ev_min_active=ev_min_active), random.Random(3))


def _retire_planes(es: EvSet, planes: range, now: float) -> None:
    for entry in es.entries():
        if entry.path.plane in planes:
            es.on_loss(entry.ev, now)


def _planes_chosen(es: EvSet, now: float, n: int = 400) -> Counter[int]:
    picks = [es.choose(now) for _ in range(n)]
    assert all(p is not None for p in picks)
    return Counter(p.path.plane for p in picks)  # type: ignore[union-attr]


def test_random_loss_on_every_ev_of_three_planes_keeps_their_ports_in_turn() -> None:
    """Every EV of planes 0-2 lost a packet, but their paths delivered again afterwards (what
    random loss looks like): each plane still gets a quarter of the packets. The floor over
    the whole set sprayed all of them on plane 3's EVs (its one NIC queued, three idled)."""
    es = _set(ev_min_active=8)
    _retire_planes(es, range(3), now=1.0)
    for entry in es.entries():
        es.on_delivered(entry.ev, 1.1)  # later packets on each path arrived
    assert _planes_chosen(es, 1.2) == {0: 100, 1: 100, 2: 100, 3: 100}
    assert es.counters["floor_picks"] == 300


def test_a_plane_whose_routes_went_silent_passes_its_turn_while_others_carry() -> None:
    """The same retirements with nothing delivered since (dead routes): while the set has its
    ev_min_active usable EVs, planes 0-2 get nothing; a delivery on one of their paths brings
    that plane back."""
    es = _set(ev_min_active=4)  # plane 3's four EVs meet it, a floor of 1 per plane
    _retire_planes(es, range(3), now=1.0)
    assert _planes_chosen(es, 1.2) == {3: 400}
    alive = next(e for e in es.entries() if e.path == PathInfo(1, "p1s0"))
    es.on_delivered(alive.ev, 1.3)
    chosen = _planes_chosen(es, 1.4)
    assert set(chosen) == {1, 3} and chosen[1] == 200
    picked = {es.choose(1.5).path for _ in range(40)}  # type: ignore[union-attr]
    assert PathInfo(1, "p1s1") not in picked  # its sister path is still silent


def test_below_ev_min_active_failed_evs_stand_in_on_every_plane() -> None:
    """Short of usable EVs altogether, the floor sprays wide whatever the paths last did,
    spread over the planes: the least recently failed EVs of each plane stand in."""
    es = _set(ev_min_active=8)
    _retire_planes(es, range(4), now=1.0)
    assert _planes_chosen(es, 1.2) == {0: 100, 1: 100, 2: 100, 3: 100}
