"""--link-delay on BMv2: the netem qdiscs the fabric puts on each link end (emulation.linkdelay),
checked as the commands and qdisc strings they are; the kernel side runs in
tests/e2e/test_link_delay.py where the kernel has netem."""

from __future__ import annotations

import pytest

from emulation.faults import restore_cmd
from emulation.linkdelay import (
    NETEM_LIMIT_MIN,
    NETEM_UNPACED_LIMIT,
    link_end_qdisc,
    netem_limit,
    netem_qdisc,
)
from emulation.netconfig import NetworkConfig
from emulation.nicpacing import CLASS_LIMIT, CONTROL_RATE_FACTOR, pacing_cmds
from fabric.topology import Fabric

FABRIC = Fabric(planes=2, t0_per_plane=2, t1_per_plane=2, hosts_per_t0=1)


def test_the_qdisc_names_the_delay_in_microseconds_and_the_limit() -> None:
    assert netem_qdisc(0.059, 1234) == "netem delay 59000us limit 1234"
    assert netem_qdisc(0.0000015, 1000) == "netem delay 2us limit 1000"
    with pytest.raises(ValueError, match="> 0"):
        netem_qdisc(0.0, 1000)


def test_the_limit_holds_what_a_port_sends_during_the_delay() -> None:
    # 500 data frames/s plus the control queue at CONTROL_RATE_FACTOR times that, for 1 s
    assert netem_limit(1.0, 500, 128) == 500 * (1 + CONTROL_RATE_FACTOR) + 256
    assert netem_limit(0.001, 500, 128) == NETEM_LIMIT_MIN  # never below netem's default
    assert netem_limit(0.5, None, 128) == NETEM_UNPACED_LIMIT


def test_only_bmv2_with_a_delay_gets_netem() -> None:
    def config(target: str, delay: float) -> NetworkConfig:
        return NetworkConfig(fabric=FABRIC, target=target, port_rate_pps=500,
                             link_delay_s=delay)

    assert link_end_qdisc(config("soft", 0.01)) is None  # the switches delay frames
    assert link_end_qdisc(config("bmv2", 0.0)) is None
    assert link_end_qdisc(config("bmv2", 0.01)) == "netem delay 10000us limit 1000"


def test_a_paced_nic_delays_both_classes_with_the_leaf_it_is_given() -> None:
    plain = pacing_cmds("h0-p0", 500)
    delayed = pacing_cmds("h0-p0", 500, "netem delay 10000us limit 1000")
    leaves = [c for c in delayed if " parent 1:" in c and "qdisc" in c]
    assert len(leaves) == 2 and all(c.endswith("netem delay 10000us limit 1000")
                                    for c in leaves)
    assert sum(f"pfifo limit {CLASS_LIMIT}" in c for c in plain) == 2
    assert [c for c in plain if "qdisc" not in c] == [c for c in delayed if "qdisc" not in c]


def test_a_link_brought_up_gets_its_delay_back() -> None:
    assert restore_cmd("p0l0-eth3", None) == "tc qdisc del dev p0l0-eth3 root"
    assert restore_cmd("p0l0-eth3", "netem delay 5us limit 1000") == (
        "tc qdisc replace dev p0l0-eth3 root netem delay 5us limit 1000")
