"""End to end 4:1 incast on both switch targets (software switch and BMv2, same fabric, each
at the rate it calibrates, port_rate_pps "auto"): four senders write to one receiver at once.

The smallest fabric with five hosts and traffic across spines: 2 planes x 2 T0 x 2 T1 with 3
hosts per T0 (6 hosts). The receiver's host-facing ports are the bottleneck, so its T0 trims
(TRIMMED_LASTHOP) and the receiver NACKs; MRC recovers trimmed packets from NACKs, not
timeouts. Before the core's RTO left rto_min of headroom above srtt and restarted on progress
(host_agent/core/sender.py docstring), some runs timed out up to a whole window on one flow
while the fabric dropped nothing; the feedback pause behind the incast queue outlasted an RTO
that had collapsed to rto_min. A CI run later showed 36 timeouts in one run that this machine
never reproduced, idle, under two busy loops or pinned to one core; the test now tells a late
answer (spurious timeout) from a loss and says where packets or time were lost.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from tests.e2e.support import fabric_drops, loss_report, skip_reason, snapshot
from tests.support import require_bmv2

pytest.importorskip("mininet.net", reason="Mininet is not importable (apt install mininet)")

from emulation.netconfig import AUTO_RATE  # noqa: E402
from emulation.network import MrcNetwork, NetworkConfig  # noqa: E402
from fabric.topology import Fabric  # noqa: E402
from wire.layout import DEFAULT_MTU  # noqa: E402

pytestmark = [pytest.mark.root, pytest.mark.timeout(240),
              pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or "")]

FABRIC = Fabric(planes=2, t0_per_plane=2, t1_per_plane=2, hosts_per_t0=3)
RECEIVER = FABRIC.hosts - 1
SENDERS = (0, 1, 2, 3)  # three from the other T0, one from the receiver's own T0
NBYTES = 1_000_000


# The pause starts at PAUSE_AT of the ideal incast time and lasts at least PAUSE_S, and until
# some sender has timed out (at most PAUSE_MAX_S). A fixed 0.3 s pause raced the senders' RTO,
# which grows as the calibrated rate falls on a busy machine: no timeout, and nothing to test.
PAUSE_AT, PAUSE_S, PAUSE_MAX_S = 0.35, 0.3, 10.0
POLL_S = 0.02


def timeouts_so_far(net: MrcNetwork) -> int:
    return sum(net.stats(s)["endpoint"]["timeouts"] for s in SENDERS)


def pause_until_a_timeout(net: MrcNetwork, pid: int) -> float:
    """SIGSTOP the receiver's agent for PAUSE_S and until the senders' timeouts rose; the
    seconds it was stopped (the SIGCONT is sent whatever happens)."""
    before = timeouts_so_far(net)
    began = time.monotonic()
    os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(PAUSE_S)
        while (timeouts_so_far(net) <= before
               and time.monotonic() - began < PAUSE_MAX_S):
            time.sleep(POLL_S)
    finally:
        os.kill(pid, signal.SIGCONT)
    return time.monotonic() - began


def ideal_s(port_rate_pps: int) -> float:
    """The incast's time at the receiver's line rate: all senders' bytes through its NICs."""
    return len(SENDERS) * NBYTES / (FABRIC.planes * port_rate_pps * DEFAULT_MTU)


@pytest.mark.parametrize("target", ["soft", pytest.param("bmv2", marks=pytest.mark.bmv2)])
@pytest.mark.parametrize("pause", [False, True], ids=["incast", "receiver-paused"])
def test_incast_4_to_1_trims_without_timeouts(pause: bool, target: str):
    """With `pause`, the receiver's agent is stopped mid-incast (SIGSTOP) until a sender
    times out, as a busy CI host may do: the senders time out (about 46 in all when measured
    with a 0.3 s pause), but the timed-out packets are answered later from the socket
    buffer: spurious, not losses."""
    if target == "bmv2":
        require_bmv2()
    before = snapshot()
    net = MrcNetwork(NetworkConfig(fabric=FABRIC, target=target, port_rate_pps=AUTO_RATE),
                     log=lambda *_: None)
    try:
        net.start()
        start = net.stats(RECEIVER)["endpoint"]
        losses_before = loss_report(net, (*SENDERS, RECEIVER))
        handles = [net.start_transfer(s, RECEIVER, NBYTES) for s in SENDERS]
        if pause:
            time.sleep(PAUSE_AT * ideal_s(net.config.port_rate_pps))
            pid = net.agent_pid(RECEIVER)
            assert pid is not None
            paused_s = pause_until_a_timeout(net, pid)
            print(f"receiver stopped {paused_s:.2f} s at {net.config.port_rate_pps} pps")
        results = [h.wait() for h in handles]
        end = net.stats(RECEIVER)["endpoint"]
        losses = loss_report(net, (*SENDERS, RECEIVER))
    finally:
        net.stop()
    for r in results:
        assert r["ok"] and r["verified"], r
    assert end["trims_received"] > start["trims_received"], results
    assert end["nacks_sent"] > start["nacks_sent"]
    # Trimming turns congestion into NACKs: nothing is lost, so no packet may need a timeout.
    # A timeout whose timed-out transmission is answered later was a delay, not a loss: the
    # emulation host paused a process for longer than the RTO headroom (losses shows how
    # late the agents' timers ran). Those are reported, not failed.
    # The detector cannot name every late answer (an EV reused by a retransmission, a NACK
    # for an older transmission taken for the newest): in the core harness it named 44-48 of
    # 48 late ones. So a few unnamed ones pass when the fabric lost nothing during the
    # transfer. A frame the fabric lost is recovered by a timeout, correctly: on a busy
    # machine BMv2's switch in front of the receiver loses frames to it (docs/decisions.md,
    # "Incast on a busy machine"), and a timeout the detector did not name may then be one of
    # those, up to as many as the switches' kernel counters lost since the transfers began.
    flows = [{k: r[k] for k in ("src", "duration_s", "retransmits", "nacks", "timeouts",
                                "spurious_timeouts")} for r in results]
    timeouts = sum(r["timeouts"] for r in results)
    unnamed = timeouts - sum(r["spurious_timeouts"] for r in results)
    dropped = fabric_drops(losses, before=losses_before)
    allowed = max(timeouts // 10, dropped)
    assert unnamed <= allowed, (unnamed, dropped, flows, losses)
    if pause:
        assert timeouts > 0, (flows, losses)
    elif timeouts:
        print(f"late answers, not losses (host pauses): {flows} {losses}")
    after = snapshot()
    assert not after.leaks_since(before), after.leaks_since(before)
