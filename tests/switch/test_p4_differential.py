"""Switch against switch (tests/switch/differential.py): 2,000 generated frames plus a held-queue
sequence through BMv2 and the software switch must come out identically (port and every
byte, or the same drop reason), and their drop, trim and ECN counters must agree."""

from __future__ import annotations

import pytest

from tests.support import require_bmv2, require_root
from tests.switch import differential as D

SEED, COUNT = 1, 2000


def test_generator_is_seeded_and_covers_every_kind() -> None:
    a, b = D.generate(SEED, 600), D.generate(SEED, 600)
    assert a == b
    assert D.generate(SEED + 1, 600) != a
    kinds = {p.category for p in a}
    assert {"data", "control", "trimmed", "baseline", "random"} <= kinds
    assert {k for k in kinds if k.startswith("mutated_")} == {
        f"mutated_{m}" for m in ("truncate", "outer_len", "inner_len", "version", "hop",
                                 "ethertype", "next_header", "udp_port", "flip")}
    assert {p.preset[1] for p in a if p.preset} == set(D.DEPTHS)
    assert all(14 <= len(p.frame) <= 1514 for p in a)
    opcodes = {p.frame[102] for p in a if p.category == "data"}
    assert opcodes == set(D.W.DATA_OPCODES)


@pytest.mark.bmv2
@pytest.mark.root
@pytest.mark.timeout(900)
def test_bmv2_and_software_switch_agree() -> None:
    require_bmv2(("simple_switch_grpc", "p4c-bm2-ss"))
    require_root("veth pairs and namespaces")
    report = D.differential(SEED, COUNT)
    print({k: report[k] for k in ("categories", "outcomes", "lost", "seconds")})
    assert report["lost"] == {"soft": 0, "bmv2": 0}, report["lost"]
    assert report["disagreements"] == [], report["disagreements"][:5]
    outcomes = report["outcomes"]
    assert outcomes["out"] > COUNT // 5 and outcomes["drop"] > COUNT // 5
    held = report["held_queue"]
    trimmed = [s for s in held if s[0] == "out" and len(bytes.fromhex(s[1][0][1])) == 134]
    assert len(trimmed) == 2, held  # the data frame sent while held, and the trimmed header
    assert len(held[5][1]) == 4, held  # the four held data frames drained
    sack = held[1]  # sent behind three held data frames, it left at once: priority 1 first
    assert sack[0] == "out" and [len(h) // 2 for _, h in sack[1]] == [150], held
