"""The golden corpus is current, well formed, and says what docs/wire-format.md says.

These checks run everywhere; feeding the corpus to a data plane happens in
tests/switch/p4/test_p4_bmv2.py (BMv2) and in the software switch's tests. The prelude cases are
also replayed here on the software pipeline against wrong egresses, to show they catch them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from ipaddress import IPv6Address
from pathlib import Path

import pytest

import wire
from fabric.topology import shift_usid
from p4rt import names as n
from p4rt.corpus import CASES_PATH, Case, CorpusError, case_updates, load_cases
from p4rt.entities import Exact
from softswitch.pipeline import Pipeline
from softswitch.queues import PortQueues
from softswitch.store import DeviceState
from tests.golden import generate
from tests.switch.p4rt_support import CODEC, IDX

CASES = load_cases()
BY_NAME = {c.name: c for c in CASES}


def test_committed_corpus_is_generator_output() -> None:
    assert CASES_PATH.read_text() == generate.render(), \
        "tests/golden/cases.json is stale: run python -m tests.golden.generate"


def test_covers_issue_3_checklist() -> None:
    required = ["usid_shift_t0_up", "usid_shift_t1", "usid_last_hop_to_host",
                "usid_unknown_next", "hop_limit_1", "trim_fabric_port", "trim_last_hop",
                "ecn_fabric_port", "ecn_not_on_host_port", "control_sack_not_trimmed",
                "baseline_ecmp_udp", "malformed_short_bth"]
    assert [r for r in required if r not in BY_NAME] == []
    assert {c.drop_reason for c in CASES if c.drop_reason} == set(n.DROP_REASONS)


def test_entries_use_p4info_names() -> None:
    tables = {n.MY_USID_TABLE: {n.USID_PREFIX}, n.USID_FWD_TABLE: {n.USID_PREFIX},
              n.ROUTING_V6_TABLE: {n.DST_ADDR}, n.PORT_CONFIG_TABLE: {n.EGRESS_PORT}}
    for case in CASES:
        for entry in case.entries:
            assert {f for f, _ in entry.match} == tables[entry.table], case.name
            assert (entry.table == n.ROUTING_V6_TABLE) == (entry.group_id is not None), case.name
        assert set(case.registers) <= {n.QUEUE_DEPTH_REGISTER}


def _outer(frame: bytes) -> wire.Envelope:
    return wire.decode_frame(frame)[0]


def _mrc_cases() -> list[Case]:
    out = []
    for c in CASES:
        if c.drop_reason or c.one_of:
            continue
        try:
            wire.decode_frame(c.frame)
        except wire.WireError:
            continue
        out.append(c)
    return out


@pytest.mark.parametrize("case", _mrc_cases(), ids=lambda c: c.name)
def test_mrc_outputs_follow_the_spec(case: Case) -> None:
    (output,) = case.outputs
    before, after = _outer(case.frame), _outer(output.frame)
    assert after.hop_limit == before.hop_limit - 1
    assert int(after.outer_dst) == shift_usid(int(before.outer_dst))
    assert (after.inner_src, after.inner_dst, after.ev) == \
        (before.inner_src, before.inner_dst, before.ev)
    packet = wire.decode_packet(wire.decode_frame(output.frame)[1])
    was_trimmed = len(output.frame) < len(case.frame)
    if was_trimmed:
        assert len(output.frame) == wire.TRIMMED_FRAME_LEN
        assert packet.trimmed and packet.payload == b"" and packet.imm is None
        assert after.dscp in (wire.DSCP_TRIMMED, wire.DSCP_TRIMMED_LASTHOP)
        assert before.dscp in (wire.DSCP_TRIMMABLE, wire.DSCP_TRIMMABLE_RETX)
    else:
        assert len(output.frame) == len(case.frame)
    if after.ecn != before.ecn:
        assert (before.ecn, after.ecn) in ((wire.ECN_ECT0, wire.ECN_CE),
                                           (wire.ECN_ECT1, wire.ECN_CE))
        assert before.dscp != wire.DSCP_CONTROL


@dataclass(frozen=True)
class _Tc:
    dscp: int
    ecn: int


def _dscp_ecn(frame: bytes) -> _Tc:
    """Outer traffic class straight from the bytes (works for non-MRC frames too)."""
    tc = int.from_bytes(frame[wire.ETH_LEN:wire.ETH_LEN + 4], "big") >> 20 & 0xFF
    return _Tc(tc >> 2, tc & 3)


def _port_config(case: Case, port: int) -> dict[str, int]:
    (entry,) = [e for e in case.entries
                if e.table == n.PORT_CONFIG_TABLE and e.match[0][1].value == port]
    return entry.action.param_dict


@pytest.mark.parametrize("case", [c for c in CASES if c.registers.get(n.QUEUE_DEPTH_REGISTER)
                                  and c.outputs and not c.prelude], ids=lambda c: c.name)
def test_queue_outcome_matches_thresholds(case: Case) -> None:
    """Trim iff data at/above the trim threshold; otherwise CE iff ECT on a fabric port at/above
    the ECN threshold and not a high-priority class. (With a prelude the depth the frame sees
    is what the prelude left, checked by test_prelude_cases_catch_wrong_egresses.)"""
    (output,) = case.outputs
    config = _port_config(case, output.port)
    depth = case.registers[n.QUEUE_DEPTH_REGISTER].get(output.port, 0)
    before, after = _dscp_ecn(case.frame), _dscp_ecn(output.frame)
    trimmed = len(output.frame) < len(case.frame)
    high = before.dscp in (wire.DSCP_CONTROL, wire.DSCP_TRIMMED, wire.DSCP_TRIMMED_LASTHOP)
    if trimmed:
        assert depth >= config[n.PARAM_TRIM_THRESHOLD]
    should_mark = (not trimmed and not high and before.ecn in (wire.ECN_ECT0, wire.ECN_ECT1)
                   and config[n.PARAM_ECN_ENABLED] == 1 and config[n.PARAM_HOST_FACING] == 0
                   and depth >= config[n.PARAM_ECN_THRESHOLD])
    assert (after.ecn == wire.ECN_CE and before.ecn != wire.ECN_CE) == should_mark


def test_last_hop_trim_uses_lasthop_dscp() -> None:
    assert _outer(BY_NAME["trim_last_hop"].outputs[0].frame).dscp == wire.DSCP_TRIMMED_LASTHOP
    assert _outer(BY_NAME["trim_fabric_port"].outputs[0].frame).dscp == wire.DSCP_TRIMMED


def test_ecmp_members_differ_only_in_port_and_mac() -> None:
    case = BY_NAME["baseline_ecmp_udp"]
    assert case.one_of and len({o.port for o in case.outputs}) == len(case.outputs) > 1
    assert len({o.frame[12:] for o in case.outputs}) == 1


def test_dropped_cases_expect_one_drop_count() -> None:
    for case in (c for c in CASES if c.drop_reason):
        assert case.outputs == ()
        assert case.counters == {n.DROP_COUNTER: {n.DROP_REASONS[case.drop_reason]: 1}}


def _write(tmp_path: Path, doc: dict) -> Path:
    path = tmp_path / "cases.json"
    path.write_text(json.dumps(doc))
    return path


def _one_case(**changes) -> dict:
    raw = json.loads(CASES_PATH.read_text())
    case = dict(raw["cases"][0], **changes)
    return {"format_version": raw["format_version"], "cases": [case]}


@pytest.mark.parametrize("changes,message", [
    ({"frame": "zz"}, "frame"),
    ({"ingress_port": "port one"}, "ingress_port"),
    ({"expect": {}}, "exactly one"),
    ({"expect": {"drop": "LOST"}}, "unknown drop reason"),
    ({"expect": {"outputs": []}}, "lists no frames"),
    ({"entries": [{"table": n.MY_USID_TABLE, "match": {}, "action": {"action": "x.y"}}]},
     "unknown action"),
    ({"entries": [{"table": n.USID_FWD_TABLE, "match": {},
                   "action": {"action": n.SET_NEXT_HOP, "params": {"port": "0x1"}}}]},
     "takes params"),
    ({"prelude": {"port": 1, "frame": "00"}}, r"prelude: expected a list"),
    ({"prelude": ["0011"]}, r"prelude\[0\]: expected an object"),
    ({"prelude": [{"port": 1}]}, r"prelude\[0\]: expected an object"),
    ({"prelude": [{"port": 1, "frame": "00", "expect": []}]}, r"prelude\[0\]: expected"),
    ({"prelude": [{"port": 1, "frame": "zz"}]}, r"prelude\[0\]\.frame"),
    ({"prelude": [{"port": 1, "frame": ""}]}, r"prelude\[0\]\.frame: empty"),
    ({"prelude": [{"port": "one", "frame": "00"}]}, r"prelude\[0\]\.port"),
])
def test_loader_rejects_bad_cases(tmp_path: Path, changes: dict, message: str) -> None:
    with pytest.raises(CorpusError, match=message):
        load_cases(_write(tmp_path, _one_case(**changes)))


def test_loader_rejects_wrong_version_and_garbage(tmp_path: Path) -> None:
    with pytest.raises(CorpusError, match="format_version"):
        load_cases(_write(tmp_path, {"format_version": 99, "cases": []}))
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(CorpusError, match="cannot read"):
        load_cases(bad)


def test_prelude_is_optional_and_loaded_in_order(tmp_path: Path) -> None:
    assert load_cases(_write(tmp_path, _one_case()))[0].prelude == ()
    frames = [{"port": 2, "frame": "0a0b"}, {"port": "0x1", "frame": "0c"}]
    (case,) = load_cases(_write(tmp_path, _one_case(prelude=frames)))
    assert [(o.port, o.frame) for o in case.prelude] == [(2, b"\x0a\x0b"), (1, b"\x0c")]


# ---- the prelude cases against egress variants, on the software pipeline -------------------

def _real_egress(p: Pipeline, port: int, priority: int, enq: int, deq: int) -> None:
    p.egress(port, priority, enq, deq)


def _every_packet_writes_enq(p: Pipeline, port: int, priority: int, enq: int, deq: int) -> None:
    """The pre-fix egress.p4: every packet, whatever its queue, wrote its enq_qdepth."""
    p.qdepth[port] = enq


def _never_writes(p: Pipeline, port: int, priority: int, enq: int, deq: int) -> None:
    """An egress that records nothing: the register keeps whatever was preset."""


def _replay(case: Case, egress) -> bool:
    """Run the case as the corpus runners do (prelude frames through ingress, their queue
    and `egress`, one at a time); True when the outcome is the expected one."""
    idx = IDX
    state = DeviceState(idx)
    ups = case_updates(CODEC, case)
    assert state.write(ups) == [None] * len(ups)
    p = Pipeline(state)
    for pre in case.prelude:
        forwarded = p.ingress(pre.frame, pre.port)
        assert forwarded is not None, f"{case.name}: a prelude frame must be forwarded"
        queues = PortQueues(n.PRIORITY_QUEUES)  # each leaves before the next: an idle queue
        queues.enqueue(forwarded[1], forwarded[2], None, 0.0)
        _, _, priority, enq, deq = queues.dequeue(0.0)
        egress(p, forwarded[0], priority, enq, deq)
    counters = {name: state.counters[idx.id_of(name)] for name in case.counters}
    before = {name: {i: counters[name][i][0] for i in cells}
              for name, cells in case.counters.items()}
    result = p.ingress(case.frame, case.ingress_port)
    deltas = {name: {i: counters[name][i][0] - before[name][i] for i in cells}
              for name, cells in case.counters.items()}
    got = None if result is None else (result[0], result[2])
    return got in [(o.port, o.frame) for o in case.outputs] and deltas == case.counters


PRELUDE_CASES = [c for c in CASES if c.prelude]
WRONG_EGRESSES = {"every packet writes enq_qdepth": _every_packet_writes_enq,
                  "never writes": _never_writes}


def test_prelude_cases_catch_wrong_egresses() -> None:
    """The prelude cases pass with the real egress, and each wrong egress fails at least one
    of them: the per-queue depth bug (every packet wrote its own queue's enq_qdepth) fails
    every trim_after_* case, as it did on BMv2 (tests/switch/p4/test_p4_behaviour.py runs them there
    against the pre-fix program)."""
    assert len(PRELUDE_CASES) >= 4
    assert [c.name for c in PRELUDE_CASES if not _replay(c, _real_egress)] == []
    caught = {name: sorted(c.name for c in PRELUDE_CASES if not _replay(c, egress))
              for name, egress in WRONG_EGRESSES.items()}
    assert caught["every packet writes enq_qdepth"] == sorted(
        c.name for c in PRELUDE_CASES if c.name.startswith("trim_after_")), caught
    assert caught["never writes"] == ["no_trim_after_data_queue_drained"], caught


def test_loader_returns_ints_and_bytes() -> None:
    case = BY_NAME["usid_shift_t0_up"]
    assert isinstance(case.frame, bytes) and case.ingress_port == 1
    shift = next(e for e in case.entries if e.table == n.MY_USID_TABLE)
    assert shift.match[0][1].value >> 16 == 0xFCBBBBBB and isinstance(shift.match[0][1], Exact)
    route = next(e for e in case.entries if e.table == n.ROUTING_V6_TABLE)
    assert route.match[0][1].prefix_len in (64, 128)
    assert IPv6Address(route.match[0][1].value).exploded.startswith("fd00")
