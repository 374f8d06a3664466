"""BMv2's queue behaviours the program relies on, checked live on simple_switch_grpc and on the
software switch alike (p4src/README.md, "BMv2 behaviours"): which priority queue is served
first, what a rate or depth set without a priority applies to, and the default depth.
Checks count frames and their order, never time them."""

from __future__ import annotations

import random
import time

import pytest

from p4rt import names as N
from rigs.vethlab import VethLab
from tests.support import require_bmv2, require_root
from tests.switch import differential as D
from tests.switch.frame_support import flow_frame, sack_frame

pytestmark = [pytest.mark.root, pytest.mark.timeout(300)]
DEFAULT_DEPTH = 64  # simple_switch's default queue depth, packets


@pytest.fixture(params=["soft", pytest.param("bmv2", marks=pytest.mark.bmv2)])
def live(request):
    require_root("veth pairs and namespaces")
    if request.param == "bmv2":
        require_bmv2(("simple_switch_grpc", "p4c-bm2-ss"))
    cls = D.SoftTarget if request.param == "soft" else D.Bmv2Target
    with VethLab(f"qb{request.param[:4]}", len(D.PORTS)) as lab, cls(lab) as target:
        wire = D.Wire(lab)
        try:
            yield target, wire
        finally:
            wire.close()


def _burst(wire: D.Wire, frames: list[bytes], gap: float = 0.0) -> list[tuple[int, str]]:
    """Send, then collect until quiet. `gap` spaces the frames: BMv2 reads its ports through
    libpcap rings of about 32 frames and loses the rest of a longer back-to-back burst
    before any queue (test_burst_losses_are_charged_to_the_switch)."""
    for frame in frames:
        wire.send(D.HOST_PORT, frame)
        if gap:
            time.sleep(gap)
    return wire.until_quiet(0.5)


def test_high_priority_is_served_first(live) -> None:
    """A SACK sent behind queued data leaves before it (priority 1 before 0)."""
    target, wire = live
    rng = random.Random(1)
    target.set_queue_rate(10, D.UPLINK, N.PRIORITY_DATA)
    time.sleep(0.2)
    out = _burst(wire, [flow_frame(D.W.DSCP_NO_TRIM, rng) for _ in range(4)] + [sack_frame(rng)])
    sizes = [len(h) // 2 for _, h in out]
    assert len(sizes) == 5 and sizes.index(150) <= 1, sizes  # behind at most the first data


def test_rate_without_priority_applies_to_every_queue(live) -> None:
    target, wire = live
    rng = random.Random(2)
    target.set_queue_rate(1, D.UPLINK, None)
    time.sleep(1.1)
    for frame in (flow_frame(D.W.DSCP_NO_TRIM, rng), sack_frame(rng), sack_frame(rng)):
        wire.send(D.HOST_PORT, frame)
    first, later = wire.until_quiet(0.3), wire.until_quiet(1.2)
    assert sorted(len(h) // 2 for _, h in first) == [150, 646]  # one of each queue at once
    assert [len(h) // 2 for _, h in later] == [150]  # the second SACK waited for its pacer
    # a priority-1 rate leaves the data queue alone, and the reverse
    target.set_queue_rate(D.UNLIMITED_PPS, D.UPLINK, N.PRIORITY_DATA)
    target.set_queue_rate(1, D.UPLINK, N.PRIORITY_HIGH)
    time.sleep(1.1)
    for frame in (sack_frame(rng), sack_frame(rng)):
        wire.send(D.HOST_PORT, frame)
    first = wire.until_quiet(0.3)
    data = D.exchange(target, wire, D.HOST_PORT, flow_frame(D.W.DSCP_NO_TRIM, rng))
    assert [len(h) // 2 for _, h in first] == [150]  # the second SACK waits a second
    assert data[0] == "out" and len(data[1][0][1]) // 2 == 646  # data is not held by it
    wire.until_quiet(1.5)


def test_default_and_set_depth_tail_drop(live) -> None:
    target, wire = live
    rng = random.Random(3)
    target.set_queue_rate(100, D.UPLINK, N.PRIORITY_DATA)
    time.sleep(0.1)
    frames = [flow_frame(D.W.DSCP_NO_TRIM, rng, 64) for _ in range(DEFAULT_DEPTH + 24)]
    out = _burst(wire, frames, gap=0.0005)
    assert DEFAULT_DEPTH <= len(out) <= DEFAULT_DEPTH + 12, len(out)  # the rest tail-dropped
    target.set_queue_depth(4, D.UPLINK)
    target.set_queue_rate(20, D.UPLINK, N.PRIORITY_DATA)
    time.sleep(0.1)
    out = _burst(wire, [flow_frame(D.W.DSCP_NO_TRIM, rng, 64) for _ in range(12)], gap=0.0005)
    assert 5 <= len(out) <= 6, len(out)  # one leaves at once, four wait, the rest are dropped


def test_burst_losses_are_charged_to_the_switch(live) -> None:
    """Whatever a back-to-back burst loses inside the switch process (BMv2: most of 160
    frames beyond its capture ring) shows as frames in minus frames out on the switch's
    own interfaces, the accounting MrcNetwork.switch_frames uses."""
    target, wire = live
    rng = random.Random(4)
    lab_in, lab_out = wire.lab.ports[D.HOST_PORT], wire.lab.ports[D.UPLINK]

    def count(ifname: str, what: str) -> int:
        with open(f"/sys/class/net/{ifname}/statistics/{what}") as f:
            return int(f.read())

    rx0, tx0 = count(lab_in, "rx_packets"), count(lab_out, "tx_packets")
    out = _burst(wire, [flow_frame(D.W.DSCP_NO_TRIM, rng, 64) for _ in range(160)])
    rx, tx = count(lab_in, "rx_packets") - rx0, count(lab_out, "tx_packets") - tx0
    assert rx == 160 and tx == len(out), (rx, tx, len(out))
    print(f"{type(target).__name__}: {160 - len(out)} of 160 lost inside the switch")
