"""The failure the demo measures: which link fails, the flow's routes through it, the link
taken down and back up mid-transfer, and the capacity it leaves.

MRC: plane 0's source T0 to spine 0; over several servers, a link between two servers on the
flow's paths (a switch link if one crosses, else the destination's NIC), so the cut is a real
cable. Single path: the uplink the flow was hashed onto, found from the T0's port counters.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from emulation.agents import TransferHandle
from emulation.network import MrcNetwork
from fabric.capacity import flow_share_left
from fabric.topology import Fabric


def routes_through(net: MrcNetwork, src: int, dst: int, a: str, b: str,
                   single_path: bool) -> set[str]:
    """Sender routes (outer DAs) whose source route crosses cable a-b."""
    if single_path:  # LPM-routed: the route is the destination NIC address on plane 0
        return {str(net.fabric.nic(dst, 0).address)}
    fabric = net.fabric
    return {str(path.address) for path in fabric.all_paths(src, dst)
            if fabric.crosses(path, a, b)}


def pick_failed_link(net: MrcNetwork, src: int, dst: int, single_path: bool) -> tuple[str, str]:
    """MRC: plane 0, source T0 to spine 0; over a cluster, a link between two servers on the
    flow's paths, a switch link if one crosses, else the destination's NIC on the lowest such
    plane. Single path: the uplink the flow was hashed onto."""
    if not single_path:
        crossing = _crossing_link(net, src, dst)
        if crossing is not None:
            return crossing
    t0 = net.fabric.t0(0, net.fabric.nic(src, 0).t0)
    if single_path:
        sent = net.port_sent(t0.name)
        uplinks = {net.fabric.uplink_port(j): j for j in range(net.fabric.t1_per_plane)}
        busiest = max(uplinks, key=lambda port: sent.get(port, 0))
        return t0.name, net.fabric.t1(0, uplinks[busiest]).name
    return t0.name, net.fabric.t1(0, 0).name


def capacity_left(fabric: Fabric, src: int, dst: int, a: str, b: str,
                  single_path: bool) -> float:
    """The share of the flow's capacity a failed link a-b leaves (fabric.capacity): a host
    NIC takes its plane with it, a switch link leaves the hosts' NICs the bottleneck. A
    single path is judged against the capacity routing restores (one port's), all of it."""
    return 1.0 if single_path else flow_share_left(fabric, src, dst, a, b)


def _crossing_link(net: MrcNetwork, src: int, dst: int) -> tuple[str, str] | None:
    assert net.builder is not None
    server = net.builder.server_of
    fabric = net.fabric
    found: list[tuple[int, str, str]] = []
    for path in fabric.all_paths(src, dst):
        for a, b in fabric.path_links(path):
            if server(a) != server(b):
                switches = a in fabric.by_name and b in fabric.by_name
                rank = 0 if switches else 1 if b == fabric.host_name(dst) else 2
                found.append((rank, a, b))
    return min(found)[1:] if found else None


def fail_and_recover(net: MrcNetwork, handle: TransferHandle, src: int, dst: int, *,
                      started: float, rtt: float, fail_at: float, down_for: float,
                      single_path: bool, log: Callable[[str], object],
                      ) -> tuple[dict[str, Any], set[str], float | None]:
    """Fail and restore a link the flow crosses, mid-transfer: the event the demo measures."""
    if single_path:  # keep the link down past the hold timer, so routing repairs the flow
        down_for = max(down_for, net.config.convergence_delay + 1.5)
    if net.fabric.t0_per_plane <= 1 or handle.done():
        return {}, set(), None
    time.sleep(fail_at)
    a, b = pick_failed_link(net, src, dst, single_path)
    routes = routes_through(net, src, dst, a, b, single_path)
    fail_begin = time.monotonic()
    net.link_down(a, b)
    t_down = time.monotonic()
    log(f"+{t_down - started:.2f} s: link {a} - {b} DOWN")
    sleep_unless_done(handle, down_for)
    per_route = net.stats(src)["per_route"]
    last = max((per_route[r]["last_data_tx"] for r in routes if r in per_route), default=None)
    bypass = None if single_path or last is None or last < fail_begin else last - fail_begin
    repairs = len(net.convergence.history) if net.convergence else 0
    net.link_up(a, b)
    log(f"+{time.monotonic() - started:.2f} s: link {a} - {b} UP")
    failure = {"link": [a, b], "fail_begin_s": fail_begin - started,
               "down_at_s": t_down - started, "link_down_call_s": t_down - fail_begin,
               "up_at_s": time.monotonic() - started, "routes_through_link": len(routes),
               "routes": sorted(routes),
               "last_data_on_failed_route_s": None if last is None else last - started,
               "bypass_s": bypass,
               "bypass_base_rtts": bypass / net.config.effective_base_rtt if bypass
               is not None else None,
               "bypass_unloaded_rtts": bypass / rtt if bypass is not None else None,
               "routing_repairs_while_down": repairs,
               "capacity_left": capacity_left(net.fabric, src, dst, a, b, single_path)}
    return failure, routes, fail_begin


def sleep_unless_done(handle, seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end and not handle.done():
        time.sleep(0.02)
