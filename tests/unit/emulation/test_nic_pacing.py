"""A paced host NIC (emulation.nicpacing) on a live veth: it spreads a burst at the port rate,
sends a control frame queued behind data first, does not charge control frames to the data
rate, and classifies by DSCP. Pacing is checked from below (it can make a burst slower, never
faster); the one upper bound leaves 3 frame times of slack at 10 frames/s (300 ms), where
charging control to the data rate would add 5."""

from __future__ import annotations

import re
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from emulation.nicpacing import (
    CONTROL_CLASS,
    CONTROL_RATE_FACTOR,
    DATA_CLASS,
    pacing_cmds,
)
from rigs.vethlab import VethLab, receive
from tests.support import require_root
from wire.layout import DSCP_CONTROL, DSCP_TRIMMABLE, FULL_DATA_FRAME_LEN

pytestmark = [pytest.mark.root, pytest.mark.timeout(120)]
RATE_PPS = 50
BURST = 10


def _frame(dscp: int, size: int, tag: int) -> bytes:
    pkt = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / IPv6(
        tc=dscp << 2, src="fd00::1", dst="fd00::2", nh=59) / Raw(bytes([tag]))
    return bytes(pkt) + bytes(size - len(pkt))


def _class_packets(ifname: str) -> dict[str, int]:
    out = subprocess.run(["tc", "-s", "class", "show", "dev", ifname], capture_output=True,
                         text=True, check=True).stdout
    return {m[0]: int(m[1]) for m in re.findall(r"class htb (\S+) .*?Sent \d+ bytes (\d+) pkt",
                                                  out, re.S)}


def test_rejects_a_rate_below_one_packet() -> None:
    with pytest.raises(ValueError, match="at least 1 packet/s"):
        pacing_cmds("eth0", 0)


def test_each_class_has_its_own_rate_like_a_switch_port() -> None:
    rates = {m[0]: (int(m[1]), int(m[2])) for m in re.findall(
        r"classid (\S+) htb rate (\d+)bit ceil (\d+)bit", " ".join(pacing_cmds("eth0", 80)))}
    data = 80 * FULL_DATA_FRAME_LEN * 8
    assert rates == {DATA_CLASS: (data, data),
                     CONTROL_CLASS: (data * CONTROL_RATE_FACTOR, data * CONTROL_RATE_FACTOR)}


def test_control_class_matches_only_dscp_control() -> None:
    (flt,) = [c for c in pacing_cmds("eth0", 500) if " filter " in c]
    value, mask = (int(x, 16) for x in re.search(r"match u16 (\S+) (\S+) at 0", flt).groups())
    tc_word = lambda dscp, ecn: (6 << 12) | (((dscp << 2) | ecn) << 4)  # noqa: E731
    assert all(tc_word(DSCP_CONTROL, ecn) & mask == value for ecn in range(4))
    assert all(tc_word(d, 0) & mask != value for d in range(64) if d != DSCP_CONTROL)


@contextmanager
def _paced_nic(rate: int) -> Iterator[tuple[str, socket.socket, socket.socket]]:
    """A veth paced at `rate`: (its name, a socket sending on it, one receiving at its peer),
    with whatever the kernel sent on link-up already read."""
    require_root("a veth pair and a namespace")
    with VethLab("pace", 1) as lab:
        ifname = lab.ports[1]
        for cmd in pacing_cmds(ifname, rate):
            subprocess.run(cmd.split(), check=True, capture_output=True)
        rx = lab.host_socket(1)
        tx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
        try:
            tx.bind((ifname, 0))
            while receive(rx, 0.05) is not None:
                pass
            yield ifname, tx, rx
        finally:
            tx.close()
            rx.close()


def test_paced_nic_spreads_a_burst_and_sends_control_first() -> None:
    with _paced_nic(RATE_PPS) as (ifname, tx, rx):
        start = time.monotonic()
        for i in range(BURST):
            tx.send(_frame(DSCP_TRIMMABLE, FULL_DATA_FRAME_LEN, i))
        tx.send(_frame(DSCP_CONTROL, 150, 0xC0))
        tags, last = [], start
        while len(tags) < BURST + 1:
            frame = receive(rx, 5.0)
            assert frame is not None, f"only {len(tags)} of {BURST + 1} frames arrived"
            tags.append(frame[54])
            last = time.monotonic()
        counts = _class_packets(ifname)
    # The bucket lets BURST_FRAMES through at once; the rest leave one per 1/RATE_PPS s.
    assert last - start >= 0.8 * (BURST - 2) / RATE_PPS
    assert tags.index(0xC0) < BURST - 2, tags  # overtook the data still queued
    assert [t for t in tags if t != 0xC0] == list(range(BURST))
    assert counts[CONTROL_CLASS] == 1 and counts[DATA_CLASS] == BURST, counts


def test_control_frames_do_not_slow_the_data() -> None:
    """SACK-sized control frames mixed into a data burst leave on their own class: the data
    takes as long as it would alone (charged to the data rate, 40 of them would add about 5
    data frame times)."""
    rate, control = 10, 40
    with _paced_nic(rate) as (ifname, tx, rx):
        start = time.monotonic()
        for i in range(BURST):
            tx.send(_frame(DSCP_TRIMMABLE, FULL_DATA_FRAME_LEN, i))
            for _ in range(control // BURST):
                tx.send(_frame(DSCP_CONTROL, 150, 0xC0))
        data_seen, last_data = 0, start
        while data_seen < BURST:
            frame = receive(rx, 5.0)
            assert frame is not None, f"only {data_seen} of {BURST} data frames arrived"
            if frame[54] != 0xC0:
                data_seen, last_data = data_seen + 1, time.monotonic()
        counts = _class_packets(ifname)
    alone = (BURST - 2) / rate  # the bucket passes two at once
    assert last_data - start < alone + 3 / rate, (last_data - start, alone)
    assert counts[CONTROL_CLASS] == control and counts[DATA_CLASS] == BURST, counts
