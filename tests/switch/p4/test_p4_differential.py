"""Switch against switch (tests/switch/differential.py): 2,000 generated frames of every kind
a veth delivers (tests/switch/difframes.py) plus a held-queue sequence through BMv2 and the
software switch must come out identically, nothing excused: port, priority and every byte,
or the same drop reason; afterwards every counter (packets and bytes, indexed and direct)
and the register read back alike, over P4Runtime from both and over Thrift from BMv2."""

from __future__ import annotations

import pytest

from tests.support import require_bmv2, require_root
from tests.switch import differential as D
from tests.switch import difframes as F

SEED, COUNT = 1, 2000


def test_generator_is_seeded_and_covers_every_kind() -> None:
    a, b = F.generate(SEED, 600), F.generate(SEED, 600)
    assert a == b
    assert F.generate(SEED + 1, 600) != a
    kinds = {p.category for p in a}
    assert {"data", "control", "trimmed", "baseline", "random", "vlan", "foreign"} <= kinds
    assert {k for k in kinds if k.startswith("mutated_")} == {
        f"mutated_{m}" for m in ("truncate", "outer_len", "inner_len", "version", "hop",
                                 "ethertype", "next_header", "udp_port", "flip")}
    assert {p.preset[1] for p in a if p.preset} == set(F.DEPTHS)
    opcodes = {p.frame[102] for p in a if p.category == "data"}
    assert opcodes == set(F.W.DATA_OPCODES)


def test_frames_are_what_a_veth_delivers() -> None:
    """At least the Ethernet header, at most the MTU plus the header (plus one tag when
    tagged); short and full-size frames, tags of both kinds, two tags, and non-unicast
    MACs all occur."""
    probes = F.generate(SEED, 4000)
    for p in probes:
        dot1q = p.frame[12:14] == F.TPIDS[0]
        assert F.MIN_FRAME <= len(p.frame) <= F.MAX_FRAME + (F.VLAN_TAG if dot1q else 0), p
        assert p.frame[12:14] not in F.TPIDS or len(p.frame) >= F.MIN_TAGGED, p
    sizes = [len(p.frame) for p in probes]
    assert min(sizes) == F.MIN_FRAME and max(sizes) > F.MAX_FRAME - 100
    vlan = [p.frame for p in probes if p.category == "vlan"]
    assert {f[12:14] for f in vlan} == set(F.TPIDS)
    assert any(f[16:18] in F.TPIDS for f in vlan)  # two tags
    assert any(f[14:16] == bytes(2) for f in vlan)  # a priority tag, VID 0 (PCP 0)
    assert any(len(f) > F.MAX_FRAME for f in vlan)
    assert any(p.frame[0] & 1 for p in probes if p.category in ("random", "foreign"))
    foreign = {p.frame[12:14] for p in probes if p.category == "foreign"}
    assert foreign == set(F.FOREIGN_TYPES)


@pytest.mark.bmv2
@pytest.mark.root
@pytest.mark.timeout(900)
def test_bmv2_and_software_switch_agree() -> None:
    require_bmv2(("simple_switch_grpc", "p4c-bm2-ss"))
    require_root("veth pairs and namespaces")
    report = D.differential(SEED, COUNT)
    print({k: report[k] for k in ("categories", "outcomes", "lost", "seconds",
                                  "priorities_seen")})
    assert report["lost"] == {"soft": 0, "bmv2": 0}, report["lost"]
    assert report["disagreements"] == [], report["disagreements"][:5]
    outcomes = report["outcomes"]
    assert outcomes["out"] > COUNT // 5 and outcomes["drop"] > COUNT // 5
    assert report["priorities_seen"]["data"] > 100 and report["priorities_seen"]["high"] > 100
    drops = report["readback"]["bmv2"]["counters"][D.N.DROP_COUNTER]
    assert sum(c[0] for c in drops) >= outcomes["drop"] and all(
        c[1] > 0 for c in drops if c[0]), drops  # bytes are counted and read back
    assert report["readback"]["bmv2"]["direct"], "direct counters were read"
    held = report["held_queue"]
    trimmed = [s for s in held if s[0] == "out" and len(bytes.fromhex(s[1][0][1])) == 134]
    assert len(trimmed) == 2, held  # the data frame sent while held, and the trimmed header
    assert len(held[5][1]) == 4, held  # the four held data frames drained
    sack = held[1]  # sent behind three held data frames, it left at once: priority 1 first
    assert sack[0] == "out" and [len(h) // 2 for _, h in sack[1]] == [150], held
