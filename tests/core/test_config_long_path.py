"""EndpointConfig.for_base_rtt on a long path: the PSN window spans PSN_WINDOW_BDPS products,
and the RoCE-like baseline's window survives a timeout."""

from __future__ import annotations

from host_agent.core.cc import DEFAULT_MTU
from host_agent.core.config import PSN_WINDOW_BDPS, EndpointConfig
from host_agent.modes import roce_endpoint_config


def test_the_psn_window_spans_several_bandwidth_delay_products() -> None:
    rate, rtt = 4 * 500 * DEFAULT_MTU * 8, 0.5  # 4 ports of 500 packets/s, 0.5 s
    bdp_packets = 1000
    config = EndpointConfig.for_base_rtt(rtt, rate)
    assert config.window == PSN_WINDOW_BDPS * bdp_packets
    assert EndpointConfig.for_base_rtt(0.001, rate).window == EndpointConfig().window  # floor
    assert EndpointConfig.for_base_rtt(rtt).window == EndpointConfig().window  # rate unknown


def test_a_timeout_shrinks_mrcs_window_but_not_the_roce_baselines() -> None:
    mrc = EndpointConfig.for_base_rtt(0.01, 1e9).cc_factory()
    roce = roce_endpoint_config(0.01, 1e9).cc_factory()
    before = (mrc.cwnd, roce.cwnd)
    mrc.on_timeout(1.0)
    roce.on_timeout(1.0)
    assert mrc.cwnd < before[0] and roce.cwnd == before[1]
