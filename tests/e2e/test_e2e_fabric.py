"""End to end on both switch targets, the software data plane and BMv2 (simple_switch_grpc
running p4src/): the default fabric (4 planes x 2 T0 x 2 T1, 4 hosts) in Mininet at the port
rate it calibrates for each target (port_rate_pps "auto", as the demo: emulation.calibration;
a fixed rate such as BMv2's former 500 left fabrics emulation-bound, docs/benchmarks.md "BMv2
jitter"), programmed over P4Runtime, one MRC host agent per host. Transfer sizes scale with
the rate, so every test takes the same time on both.

One fabric per target serves the module's tests (bring-up costs seconds on this machine);
every test puts back what it changed (links, NICs) in `finally`; test_no_leaks stops the
fabric and checks that no interface, namespace or process it created remains. The
trimming=False test runs after it on a one-switch fabric of its own (one fabric at a time
per machine).
"""

from __future__ import annotations

import time

import pytest

from tests.e2e.support import skip_reason, snapshot, tcp_echo
from tests.support import require_bmv2

pytest.importorskip("mininet.net", reason="Mininet is not importable (apt install mininet)")

from demo.failure import routes_through  # noqa: E402
from demo.flow import ev_layout, last_event_seq  # noqa: E402
from demo.retirements import classify_retirements  # noqa: E402
from emulation.netconfig import AUTO_RATE, NO_TRIM_THRESHOLD  # noqa: E402
from emulation.network import MrcNetwork, NetworkConfig, NetworkError  # noqa: E402
from fabric.topology import Fabric  # noqa: E402
from p4rt import names as p4names  # noqa: E402

pytestmark = [pytest.mark.root, pytest.mark.timeout(240),
              pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or "")]

FABRIC = Fabric()  # 4 planes x 2 T0 x 2 T1, 2 hosts per T0
SRC, DST = 0, FABRIC.hosts - 1  # different T0s: traffic crosses the spines
BYTES_PER_PPS = 4_000  # 4 planes x ~1 KB: one flow's bytes per second per packet/s of rate


@pytest.fixture(scope="module")
def before():
    return snapshot()


@pytest.fixture(scope="module", params=["soft", pytest.param("bmv2", marks=pytest.mark.bmv2)])
def net(request, before):
    if request.param == "bmv2":
        require_bmv2()
    network = MrcNetwork(NetworkConfig(fabric=FABRIC, target=request.param,
                                       port_rate_pps=AUTO_RATE,
                                       keep_ipv6=True), log=lambda *_: None)
    try:
        network.start()
        yield network
    finally:
        network.stop()


def _second(net: MrcNetwork) -> int:
    """Bytes the fabric carries in about one second for one flow."""
    return net.config.port_rate_pps * BYTES_PER_PPS


def _wait(cond, timeout: float, step: float = 0.1) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(step)
    return cond()


def _bad_evs(net: MrcNetwork, host: int, peer: int) -> int:
    (qpn,) = net.agent(host).call("status")["qps"][str(peer)]  # exchanged, not 0x100 + peer
    states = net.stats(host)["ev_states"].get(f"{qpn:#x}", {})
    return sum(counts.get("ASSUMED_BAD", 0) for counts in states.values())


def _icmp6_unreachables_sent(net: MrcNetwork, host: int) -> int:
    for line in net.host(host).cmd("cat /proc/net/snmp6").splitlines():
        name, _, value = line.partition(" ")
        if name == "Icmp6OutDestUnreachs":
            return int(value)
    raise AssertionError(f"h{host}: no Icmp6OutDestUnreachs in /proc/net/snmp6")


def test_transfer_verified_byte_for_byte(net):
    result = net.transfer(SRC, DST, _second(net))
    assert result["ok"] and result["verified"], result
    assert result["bytes"] == _second(net)
    per_plane = net.stats(SRC)["endpoint"]["per_plane"]
    assert all(per_plane[p]["tx_packets"] > 0 for p in per_plane), "every plane carries data"
    # the hosts' kernels (IPv6 on, keep_ipv6) see the MRC frames too: they must not answer
    # them with errors that compete with data in the fabric's queues
    assert [_icmp6_unreachables_sent(net, h) for h in (SRC, DST)] == [0, 0]


def test_link_failure_mid_transfer_retires_then_reinstates(net):
    a, b = "p0l0", "p0s0"  # plane 0: source T0 to spine 0
    failed = routes_through(net, SRC, DST, a, b, single_path=False)
    assert failed
    start = net.stats(SRC)["endpoint"]
    qpn, evs = ev_layout(net, SRC, DST)
    seq = last_event_seq(net, SRC)
    handle = net.start_transfer(SRC, DST, 3 * _second(net))
    try:
        time.sleep(0.7)
        t_fail = time.monotonic()
        net.link_down(a, b)
        t_down = time.monotonic()
        time.sleep(1.5)
        routes = net.stats(SRC)["per_route"]
        last = max(routes[r]["last_data_tx"] for r in failed if r in routes)
        assert _bad_evs(net, SRC, DST) > 0, "EVs through the dead link must be ASSUMED_BAD"
    finally:
        net.link_up(a, b)
    result = handle.wait()
    assert result["ok"] and result["verified"], result
    assert last < t_down + 1.4, "the sender kept putting data on the failed link"
    assert _wait(lambda: _bad_evs(net, SRC, DST) == 0, 10.0), "probes did not reinstate EVs"
    end = net.stats(SRC)["endpoint"]
    assert end["ev_retired"] > start["ev_retired"]
    assert end["ev_reinstated"] > start["ev_reinstated"]
    retired = classify_retirements(net.agent(SRC).call("events", since=seq)["events"], qpn,
                                   evs, failed, t_fail)
    assert retired["healthy_routes"] == 0, retired  # only the failed route loses EVs
    assert retired["failed_route_after_failure"] > 0


def test_t1_crash_and_reboot_mid_transfer(net):
    handle = net.start_transfer(SRC, DST, 3 * _second(net))
    pid = net.switch_pid("p1s0")
    time.sleep(0.7)
    net.kill_switch("p1s0")
    assert net.switch_down("p1s0")
    net.reboot_switch("p1s0")
    assert not net.switch_down("p1s0")
    result = handle.wait()
    assert result["ok"] and result["verified"], result
    new_pid = net.switch_pid("p1s0")
    if net.target == "bmv2":
        assert new_pid not in (None, pid), "the switch process was replaced"
    else:  # a shared software switch reboots inside its process, the others forwarding on
        assert new_pid == pid
    assert net.controller.verify("p1s0") == "", "the rebooted switch holds its static tables"


def test_nic_down_mid_transfer_costs_about_one_plane(net):
    clean = net.transfer(SRC, DST, 3 * _second(net))
    assert clean["ok"], clean
    since = net.events(DST)[-1]["seq"] if net.events(DST) else 0
    handle = net.start_transfer(SRC, DST, 3 * _second(net))
    try:
        time.sleep(0.3)
        net.nic_down(SRC, 1)
        result = handle.wait()
    finally:
        net.nic_up(SRC, 1)
    assert result["ok"] and result["verified"], result
    notified = [e for e in net.events(DST, since=since)
                if e["type"] == "PeerPlaneChanged" and e["plane"] == 1 and not e["up"]]
    assert notified, "the receiver was not told that the sender's plane 1 went down"
    ratio = result["goodput_bps"] / clean["goodput_bps"]
    # 3 of 4 planes for ~90% of the transfer: ideal ~0.78; generous bounds on a busy machine
    assert 0.4 < ratio < 0.97, (ratio, clean["goodput_bps"], result["goodput_bps"])
    assert _wait(lambda: net.stats(SRC)["peer_planes_up"].get(str(DST), [0, 1, 2, 3])
                 == [0, 1, 2, 3] and all(net.stats(SRC)["planes_up"]), 5.0)


def test_nic_up_restores_kernel_ipv6(net):
    plane, port = 2, 47_001
    nic = FABRIC.nic(SRC, plane)
    assert tcp_echo(net, SRC, DST, plane, port) == "ohce-crm", "no kernel path before the test"
    net.nic_down(SRC, plane)
    try:
        kept = net.host(SRC).cmd(f"ip -6 addr show dev {nic.ifname}")
        assert str(nic.address) in kept, "the NIC lost its address while down"
    finally:
        net.nic_up(SRC, plane)
    route = net.host(SRC).cmd(f"ip -6 route show dev {nic.ifname}")
    assert f"fd00:0:{plane:x}::/48" in route, route
    assert tcp_echo(net, SRC, DST, plane, port + 1) == "ohce-crm", "no kernel path after nic_up"


def test_no_leaks(net, before):
    net.stop()
    after = snapshot()
    assert not after.leaks_since(before), after.leaks_since(before)


def test_trim_threshold_must_be_below_queue_depth_unless_trimming_is_off():
    with pytest.raises(NetworkError, match="trimming=False"):
        NetworkConfig(queue_depth=16, trim_threshold=32)
    assert NetworkConfig(queue_depth=16, trim_threshold=32,
                         trimming=False).port_thresholds.trim == NO_TRIM_THRESHOLD
    with pytest.raises(NetworkError, match="queue_depth below"):
        NetworkConfig(queue_depth=NO_TRIM_THRESHOLD, trimming=False)


def test_no_trimming_fabric_programs_an_unreachable_trim_threshold(before):
    config = NetworkConfig(fabric=Fabric(1, 1, 1, 1), target="soft", agents=False,
                           trimming=False)
    with MrcNetwork(config, log=lambda *_: None) as small:
        small.start()
        trims = {(e.match, e.action.param_dict[p4names.PARAM_TRIM_THRESHOLD])
                 for e in small.controller.read("p0l0")
                 if getattr(e, "table", None) == p4names.PORT_CONFIG_TABLE}
    assert trims, "no port config entries were read back"
    assert {t for _, t in trims} == {NO_TRIM_THRESHOLD}, trims
    after = snapshot()
    assert not after.leaks_since(before), after.leaks_since(before)
