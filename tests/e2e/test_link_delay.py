"""--link-delay on the emulation: the software switches hold every frame for the links'
delay, and on BMv2 netem does it on every link end, so the RTT the agents measure across
spines grows by RTT_LINKS (8) times the delay; BMv2 on a kernel without netem refuses the
option, naming the kernel setting.

Measured with one-packet writes one at a time (no queue anywhere), as the agents' RTT
percentiles (1 ms bins). Tolerance: the RTT may exceed 8 x delay by the fabric's own
unloaded RTT (a packet time per rate-limited hop at 500 packets/s, and the agents' Python
processing), which this test bounds at 30 ms, and by one 1 ms bin; it may not fall below."""

from __future__ import annotations

import pytest

from tests.e2e.support import skip_reason
from tests.support import require_bmv2

pytest.importorskip("mininet.net", reason="Mininet is not importable (apt install mininet)")

from emulation.linkdelay import netem_unavailable  # noqa: E402
from emulation.netconfig import RTT_LINKS, NetworkError  # noqa: E402
from emulation.network import MrcNetwork, NetworkConfig  # noqa: E402
from fabric.topology import Fabric  # noqa: E402

pytestmark = [pytest.mark.root, pytest.mark.timeout(240),
              pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or "")]

FABRIC = Fabric(planes=2, t0_per_plane=2, t1_per_plane=2, hosts_per_t0=1)
DELAY_S = 0.010
RATE_PPS = 500
OWN_RTT_MAX_S = 0.030
WRITES = 12


def _measured_rtt(target: str) -> None:
    config = NetworkConfig(fabric=FABRIC, target=target, port_rate_pps=RATE_PPS,
                           link_delay_s=DELAY_S)
    with MrcNetwork(config, log=lambda *_: None) as net:
        net.start()
        for _ in range(WRITES):
            result = net.transfer(0, FABRIC.hosts - 1, 512)
            assert result["ok"] and result["verified"], result
        rtt = net.stats(0)["endpoint"]["rtt_ms"]
    expected_ms = RTT_LINKS * DELAY_S * 1e3
    print(f"{target}: RTT with {DELAY_S * 1e3:g} ms links: {rtt} (8 x delay = {expected_ms:g} ms)")
    assert rtt["samples"] >= WRITES
    assert expected_ms <= rtt["p50"] <= expected_ms + OWN_RTT_MAX_S * 1e3 + 1, rtt
    assert config.effective_base_rtt >= RTT_LINKS * DELAY_S  # the agents' timers know it


def test_soft_switches_delay_every_link() -> None:
    _measured_rtt("soft")


@pytest.mark.bmv2
def test_bmv2_links_delay_every_frame_with_netem() -> None:
    """Runs where the kernel has netem (users' stock kernels); this project's CI kernel has
    none, and the next test checks the refusal there instead."""
    require_bmv2()
    why = netem_unavailable()
    if why is not None:
        pytest.skip(f"needs netem: {why}")
    _measured_rtt("bmv2")


@pytest.mark.bmv2
def test_bmv2_refuses_a_delay_without_netem() -> None:
    require_bmv2()
    why = netem_unavailable()
    if why is None:
        pytest.skip("this kernel has netem; the refusal is for kernels without it")
    config = NetworkConfig(fabric=FABRIC, target="bmv2", link_delay_s=DELAY_S)
    with MrcNetwork(config, log=lambda *_: None) as net, pytest.raises(
            NetworkError, match="CONFIG_NET_SCH_NETEM"):
        net.start()
