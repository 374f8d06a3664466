"""Regression, on both targets: a standing data queue is trimmed on every data packet while
SACKs and trimmed headers flow through the same port.

BMv2 1.15.1 reports queue depths per priority queue. When egress wrote every packet's
enq_qdepth into queue_depth_register, each SACK or trimmed header leaving the (empty)
high-priority queue wrote ~0 and the data packet behind it was not trimmed: trimming
alternated on and off under a standing queue. The old egress is compiled from a patched
copy of p4src/ and must fail the same check, so the test is known to catch the bug.
"""

from __future__ import annotations

import random
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from controller import p4build
from p4rt import names as N
from rigs.vethlab import VethLab
from tests.golden import generate as G
from tests.support import require_bmv2, require_root
from tests.switch import differential as D
from tests.switch.frame_support import flow_frame, sack_frame, trimmed_header

pytestmark = [pytest.mark.root, pytest.mark.timeout(300)]

# The data queue of the uplink drains at STANDING_PPS; each departure writes the depth it
# leaves behind. BUILD_UP frames leave about 18 departures above the trim threshold (20) for
# the mixed phase, and at 2 packets/s those are 9 s: the phase takes well under a second, so
# a machine slowed tenfold still finishes it while the queue stands. At 20 packets/s the
# margin was 0.9 s, and a busy CI machine ran past it (15 of 16 trimmed, 1 run in 5).
STANDING_PPS = 2
BUILD_UP, MIXED = 40, 16  # data frames that build the queue; data frames mixed with control
# The mixed phase (well under a second) starts once a departure wrote at least this depth:
# 4 departures (2 s) above the trim threshold still to go. Beside two busy loops BMv2 took
# in only about 30 of the 40 frames, so the standing depth read 29-36. At most
# STANDING_WAIT_S more for the first departure to write it.
STANDING_MIN, STANDING_WAIT_S = G.TRIM_THRESHOLD + 4, 5.0
OLD_EGRESS = """        queue_depth_register.write((bit<32>)standard_metadata.egress_port,
                                   standard_metadata.enq_qdepth);"""


def _old_program(tmp: Path) -> bytes:
    """The egress before the fix (every packet writes its own queue's enq_qdepth)."""
    src = tmp / "p4src"
    shutil.copytree(p4build.P4SRC, src, ignore=shutil.ignore_patterns("build"))
    egress = src / "include" / "egress.p4"
    text = egress.read_text()
    start, end = text.index("    apply {"), text.index("#endif")
    egress.write_text(text[:start] + "    apply {\n" + OLD_EGRESS + "\n    }\n}\n\n"
                      + text[end:])
    subprocess.run([str(src / "build.sh"), str(tmp / "build")], check=True,
                   capture_output=True, text=True)
    return (tmp / "build" / "mrc.json").read_bytes()


def _wait_standing(target: D.LiveTarget) -> None:
    """Until a departure has written the standing depth into the register, at most
    STANDING_WAIT_S: on a loaded machine the first departures can come late, and a mixed
    phase begun before them met the idle depth (CI7 trimmed 0 of 16 on BMv2). What the
    test asserts is unchanged; a queue that never stands fails here, saying so."""
    deadline, depth = time.monotonic() + STANDING_WAIT_S, 0
    while time.monotonic() < deadline:
        depth = target.register(N.QUEUE_DEPTH_REGISTER)[D.UPLINK]
        if depth >= STANDING_MIN:
            return
        time.sleep(0.05)
    pytest.fail(f"no standing queue: the uplink's depth register read {depth} after "
                f"{BUILD_UP} frames at {STANDING_PPS} pps (needs {STANDING_MIN})")


def standing_queue(target: D.LiveTarget, wire: D.Wire,
                   wait: bool = True) -> tuple[int, int, int]:
    """(data frames sent while the queue stood, of them trimmed, trim_counter delta)."""
    rng = random.Random(5)
    target.set_queue_rate(STANDING_PPS, D.UPLINK, N.PRIORITY_DATA)
    time.sleep(1.0 / STANDING_PPS * 2)
    for _ in range(BUILD_UP):
        wire.send(D.HOST_PORT, flow_frame(D.W.DSCP_TRIMMABLE, rng))
    time.sleep(3.0 / STANDING_PPS)  # departures write the standing depth (about 37)
    if wait:  # the old egress writes each packet's enqueue-time depth: never the standing one
        _wait_standing(target)
    wire.until_quiet(0.01)
    trims_before = target.counter(N.TRIM_COUNTER)[D.UPLINK][0]  # packets
    seen: list[tuple[int, str]] = []
    headers = 0
    for i in range(MIXED):
        extra = sack_frame(rng) if i % 2 else trimmed_header(rng)
        headers += not i % 2
        for frame in (flow_frame(D.W.DSCP_TRIMMABLE, rng), extra):
            step = D.exchange(target, wire, D.HOST_PORT, frame)
            seen += step[1] if step[0] == "out" else []
    seen += wire.until_quiet(0.05)
    short = sum(len(h) // 2 == D.W.TRIMMED_FRAME_LEN for _, h in seen)
    trimmed = short - headers  # every 134-byte frame is a trimmed data frame or our header
    trims = target.counter(N.TRIM_COUNTER)[D.UPLINK][0] - trims_before
    target.set_queue_rate(D.UNLIMITED_PPS, D.UPLINK, N.PRIORITY_DATA)
    return MIXED, trimmed, trims


def _run(cls: type[D.LiveTarget], wait: bool = True) -> tuple[int, int, int]:
    with VethLab(f"qd{cls.name[:4]}", len(D.PORTS)) as lab, cls(lab) as target:
        wire = D.Wire(lab)
        try:
            return standing_queue(target, wire, wait)
        finally:
            wire.close()


@pytest.mark.parametrize("target", ["soft", pytest.param("bmv2", marks=pytest.mark.bmv2)])
def test_standing_queue_trims_every_data_packet(target: str) -> None:
    require_root("veth pairs and namespaces")
    if target == "bmv2":
        require_bmv2(("simple_switch_grpc", "p4c-bm2-ss"))
    sent, trimmed, counted = _run(D.SoftTarget if target == "soft" else D.Bmv2Target)
    assert (trimmed, counted) == (sent, sent), (sent, trimmed, counted)


@pytest.mark.bmv2
def test_the_old_egress_fails_this_check(tmp_path: Path) -> None:
    require_root("veth pairs and namespaces")
    require_bmv2(("simple_switch_grpc", "p4c-bm2-ss"))
    blob = _old_program(tmp_path)

    class OldBmv2(D.Bmv2Target):
        name = "old"

        def device_config(self) -> bytes:
            return blob

    sent, trimmed, _ = _run(OldBmv2, wait=False)
    assert trimmed < sent, "the pre-fix program trimmed every packet: the check is blind"
