"""The baseline's routing in the simulator (sim.routing): the controller's convergence on the
simulation's clock, so a single-path contender waits out the hold time and then moves."""

from __future__ import annotations

from fabric.topology import Fabric
from sim.engine import EventLoop
from sim.harness import SimSettings
from sim.network import Network
from sim.routing import converge
from sim.scenarios import run_scenario

SIZE = 1024 * 1024
FABRIC = Fabric(planes=2, t0_per_plane=2, t1_per_plane=2, hosts_per_t0=1)


def test_a_single_path_waits_for_the_hold_time_then_finishes() -> None:
    quick, slow = (run_scenario("link-failure", size=SIZE,
                                settings=SimSettings(contender="single_port",
                                                     convergence_delay_s=delay))
                   for delay in (0.002, 0.02))
    assert quick["ok"] and slow["ok"]
    assert 0.002 < quick["duration_s"] < 0.02 < slow["duration_s"] < 0.04
    assert slow["timeouts"] > quick["timeouts"] > 0  # it retried into the dead link meanwhile


def test_mrc_does_not_wait_for_routing() -> None:
    r = run_scenario("link-failure", size=SIZE, settings=SimSettings(convergence_delay_s=10.0))
    assert r["ok"] and r["duration_s"] < 0.01


def _group_sizes(net: Network, name: str) -> list[int]:
    pipeline = net.switches[name].pipeline
    return sorted(len(g.member_ids) for g in pipeline.groups.values())


def test_convergence_rewrites_the_plane_and_a_reboot_keeps_it() -> None:
    loop = EventLoop()
    net = Network(FABRIC, loop)
    conv = converge(net, 0.5)
    t0 = FABRIC.t0(0, 0).name
    healthy = _group_sizes(net, t0)
    link = net.link(t0, FABRIC.t1(0, 0).name)
    net.set_link_up(link, False)
    loop.run(until=0.4)
    assert _group_sizes(net, t0) == healthy and not conv.history  # still holding
    loop.run(until=0.6)
    assert conv.history and not conv.history[-1].errors
    converged = _group_sizes(net, t0)
    assert converged != healthy and t0 in net.current_tables
    net.set_switch_up(t0, False)  # a reboot reinstalls what the controller wants now
    net.set_switch_up(t0, True)
    assert _group_sizes(net, t0) == converged
    other_plane = FABRIC.t0(1, 0).name
    assert other_plane not in net.current_tables  # only the failed link's plane is rewritten


def test_a_flap_shorter_than_the_hold_changes_nothing() -> None:
    loop = EventLoop()
    net = Network(FABRIC, loop)
    conv = converge(net, 0.5)
    link = net.link(FABRIC.t0(0, 0).name, FABRIC.t1(0, 0).name)
    net.flap(link, 0.1, 0.3)
    loop.run(until=2.0)
    assert not conv.history and not net.current_tables
