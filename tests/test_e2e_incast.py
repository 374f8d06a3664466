"""End to end 4:1 incast on the software data plane: four senders write to one receiver at once.

The smallest fabric with five hosts and traffic across spines: 2 planes x 2 T0 x 2 T1 with 3
hosts per T0 (6 hosts). The receiver's host-facing ports are the bottleneck, so its T0 trims
(TRIMMED_LASTHOP) and the receiver NACKs; MRC recovers trimmed packets from NACKs, not
timeouts. Before the core's RTO left rto_min of headroom above srtt and restarted on progress
(host_agent/core/sender.py docstring), some runs timed out up to a whole window on one flow
while the fabric dropped nothing; the feedback pause behind the incast queue outlasted an RTO
that had collapsed to rto_min.
"""

from __future__ import annotations

import pytest

from tests.e2e_support import skip_reason, snapshot

pytest.importorskip("mininet.net", reason="Mininet is not importable (apt install mininet)")

from controller.topology import Fabric  # noqa: E402
from topologies.network import MrcNetwork, NetworkConfig  # noqa: E402

pytestmark = [pytest.mark.root, pytest.mark.timeout(240),
              pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or "")]

FABRIC = Fabric(planes=2, t0_per_plane=2, t1_per_plane=2, hosts_per_t0=3)
RECEIVER = FABRIC.hosts - 1
SENDERS = (0, 1, 2, 3)  # three from the other T0, one from the receiver's own T0
NBYTES = 1_000_000


def test_incast_4_to_1_trims_without_timeouts():
    before = snapshot()
    net = MrcNetwork(NetworkConfig(fabric=FABRIC, target="soft", port_rate_pps=500),
                     log=lambda *_: None)
    try:
        net.start()
        start = net.stats(RECEIVER)["endpoint"]
        handles = [net.start_transfer(s, RECEIVER, NBYTES) for s in SENDERS]
        results = [h.wait() for h in handles]
        end = net.stats(RECEIVER)["endpoint"]
    finally:
        net.stop()
    for r in results:
        assert r["ok"] and r["verified"], r
    assert end["trims_received"] > start["trims_received"], results
    assert end["nacks_sent"] > start["nacks_sent"]
    # Trimming turns congestion into NACKs: nothing is lost, so nothing may time out.
    assert sum(r["timeouts"] for r in results) == 0, results
    after = snapshot()
    assert not after.leaks_since(before), after.leaks_since(before)
