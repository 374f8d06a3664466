"""Scenarios where the fabric keeps failing: a flapping link and a switch that reboots, under
one transfer as the bench runs them, and a fabric-wide flap process for longer runs.

Timing is in base RTTs of the simulated fabric (the bench's 0.5 s flap half period and its
reboot times are wall-clock figures of an emulation whose RTT is milliseconds; here a
transfer lasts milliseconds, so the same shape is kept relative to the RTT):
- flap: the sender's T0 loses its busiest plane-0 uplink (scenario_kit.FailingUplink) for
  FLAP_HALF_PERIOD_RTTS, gets it back for as long, and so on from FAILURE_AT x the ideal
  transfer time until the end.
- switch-reboot: the spine at the far end of that uplink goes down at FAILURE_AT, with its
  tables and queues, and is back REBOOT_RTTS later with the controller's tables reinstalled.
Both report the retirements of the sender's EVs on the routes through the failure and on
every other (healthy) route; a healthy route should keep its EVs, as in the bench.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from sim.harness import Harness
from sim.host import HostAdapter
from sim.network import LinkState
from sim.scenario_kit import (
    FAILURE_AT,
    FailingUplink,
    Finisher,
    ideal_time_for,
    recovery,
)

FLAP_HALF_PERIOD_RTTS = 20.0  # flap: down this long, then up as long
REBOOT_RTTS = 60.0  # switch-reboot: how long the spine is away


def retirements(h: Harness, sender: HostAdapter, failed_routes: set) -> dict[str, int]:
    """EVs of the sender's first transfer's QPs that moved into ASSUMED_BAD, on the routes
    through the failure and on every other route."""
    failed = healthy = 0
    names = {str(r) for r in failed_routes}
    for send_qpn, _ in h.transfers[0].lanes:
        for entry in sender.endpoint.connection(send_qpn).evs.entries():
            retired = int(entry.counters["retired"])
            if str(entry.path.route) in names:
                failed += retired
            else:
                healthy += retired
    return {"failed_route_retirements": failed, "healthy_route_retirements": healthy}


def flap_link(h: Harness, link: LinkState, start: float, half_period: float,
              active: Callable[[], bool]) -> list[float]:
    """Take `link` down at `start`, up half a period later, and so on while `active()`; the
    times it went down, filled in as the run goes."""
    downs: list[float] = []

    def down() -> None:
        if not active():
            return
        downs.append(h.loop.now)
        h.net.set_link_up(link, False)
        h.at(h.loop.now + half_period, up)

    def up() -> None:
        h.net.set_link_up(link, True)
        h.at(h.loop.now + half_period, down)
    h.at(start, down)
    return downs


def flap(h: Harness, size: int) -> Finisher:
    up = FailingUplink(h, size)
    start = FAILURE_AT * ideal_time_for(h, size)
    half = FLAP_HALF_PERIOD_RTTS * h.path_rtt(up.src, up.dst)
    downs: dict[str, list[float]] = {}

    def begin() -> None:  # the busiest uplink when the flapping starts keeps flapping
        link = h.net.link(up.t0, up.pick())
        downs["times"] = flap_link(h, link, start, half, lambda: h.pending > 0)
    h.loop.at(start, begin)

    def finish(result: dict[str, Any]) -> None:
        result.update(flapping_link=[up.t0, up.t1], flap_from_s=start, flap_half_period_s=half,
                      flaps=len(downs.get("times", [])),
                      recovery_rtts=recovery(h, up.sender, up.routes, start),
                      **retirements(h, up.sender, up.routes))
    return finish


def switch_reboot(h: Harness, size: int) -> Finisher:
    up = FailingUplink(h, size)  # the busiest uplink's spine reboots
    t_fail = FAILURE_AT * ideal_time_for(h, size)
    away = REBOOT_RTTS * h.path_rtt(up.src, up.dst)

    def down() -> None:
        name = up.pick()
        h.net.set_switch_up(name, False)
        h.at(t_fail + away, lambda: h.net.set_switch_up(name, True))
    h.at(t_fail, down)

    def finish(result: dict[str, Any]) -> None:
        result.update(rebooted_switch=up.t1, reboot_at_s=t_fail, reboot_down_s=away,
                      recovery_rtts=recovery(h, up.sender, up.routes, t_fail),
                      **retirements(h, up.sender, up.routes))
    return finish


class FabricFlapper:
    """Flaps across the whole fabric: at `rate` flaps per simulated second in all (a seeded
    Poisson process), one T0-T1 link chosen at random goes down for `down_s`. Why T0-T1
    links: a host link going down is a NIC failure, which the plane-failure scenario covers."""

    def __init__(self, h: Harness, rate: float, down_s: float, seed: int) -> None:
        if rate <= 0 or down_s <= 0:
            raise ValueError("a flap rate and a down time must be positive")
        self.h, self.rate, self.down_s = h, rate, down_s
        self.rng = random.Random(seed)
        switches = h.net.switches
        self.links = [link for link in h.net.links.values()
                      if link.a in switches and link.b in switches]
        self.flaps: list[tuple[float, str, str]] = []  # (time, a, b)
        self.active: Callable[[], bool] = lambda: h.pending > 0

    def start(self, at: float) -> None:
        self.h.loop.at(at + self.rng.expovariate(self.rate), self._flap)

    def _flap(self) -> None:
        if not self.active():
            return
        loop, net = self.h.loop, self.h.net
        link = self.links[self.rng.randrange(len(self.links))]
        if link.up:
            self.flaps.append((loop.now, link.a, link.b))
            net.set_link_up(link, False)
            loop.at(loop.now + self.down_s, net.set_link_up, link, True)
        loop.at(loop.now + self.rng.expovariate(self.rate), self._flap)
