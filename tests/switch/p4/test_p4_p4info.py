"""The committed P4Info parses and holds every name p4rt/names.py promises.

The controller and the software switch find tables, fields, actions and counters by these
names. The file itself is p4c's output (tests/switch/p4/test_p4_bmv2.py compiles and compares it
byte for byte); these checks hold the names to it on machines without the compiler too.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from google.protobuf import text_format
from p4.config.v1 import p4info_pb2

from p4rt import names as n

ROOT = Path(__file__).resolve().parents[3]
P4INFO = ROOT / "p4src" / "mrc.p4info.txtpb"


@pytest.fixture(scope="module")
def info() -> p4info_pb2.P4Info:
    return text_format.Parse(P4INFO.read_text(), p4info_pb2.P4Info())


def _by_name(entities) -> dict:
    return {e.preamble.name: e for e in entities}


def test_arch_is_v1model(info: p4info_pb2.P4Info) -> None:
    assert info.pkg_info.arch == "v1model"


@pytest.mark.parametrize("table,field,bits,kind", [
    (n.MY_USID_TABLE, n.USID_PREFIX, n.USID_PREFIX_BITS, p4info_pb2.MatchField.EXACT),
    (n.USID_FWD_TABLE, n.USID_PREFIX, n.USID_PREFIX_BITS, p4info_pb2.MatchField.EXACT),
    (n.ROUTING_V6_TABLE, n.DST_ADDR, n.DST_ADDR_BITS, p4info_pb2.MatchField.LPM),
    (n.PORT_CONFIG_TABLE, n.EGRESS_PORT, n.PORT_BITS, p4info_pb2.MatchField.EXACT),
])
def test_table_match_fields(info: p4info_pb2.P4Info, table: str, field: str, bits: int,
                            kind: int) -> None:
    t = _by_name(info.tables)[table]
    assert [(m.id, m.name, m.bitwidth, m.match_type) for m in t.match_fields] == \
        [(1, field, bits, kind)]


@pytest.mark.parametrize("table,action", [
    (n.MY_USID_TABLE, n.SHIFT_USID),
    (n.USID_FWD_TABLE, n.SET_NEXT_HOP),
    (n.ROUTING_V6_TABLE, n.SET_NEXT_HOP),
    (n.PORT_CONFIG_TABLE, n.SET_PORT_CONFIG),
])
def test_table_actions(info: p4info_pb2.P4Info, table: str, action: str) -> None:
    actions = {a.preamble.id: a.preamble.name for a in info.actions}
    t = _by_name(info.tables)[table]
    refs = {actions[r.id]: r.scope for r in t.action_refs}
    assert refs == {action: p4info_pb2.ActionRef.TABLE_AND_DEFAULT,
                    n.NO_ACTION: p4info_pb2.ActionRef.DEFAULT_ONLY}
    assert actions[t.const_default_action_id] == n.NO_ACTION


def test_action_params(info: p4info_pb2.P4Info) -> None:
    actions = _by_name(info.actions)
    for name, params in n.ACTION_PARAMS.items():
        got = [(p.id, p.name, p.bitwidth) for p in actions[name].params]
        assert got == [(i, p, b) for i, (p, b) in enumerate(params, start=1)], name


def test_ecmp_selector(info: p4info_pb2.P4Info) -> None:
    profile = _by_name(info.action_profiles)[n.ECMP_SELECTOR]
    table = _by_name(info.tables)[n.ROUTING_V6_TABLE]
    assert profile.with_selector and profile.size == n.ECMP_SELECTOR_SIZE
    assert list(profile.table_ids) == [table.preamble.id]
    assert table.implementation_id == profile.preamble.id
    others = [t for t in info.tables if t.preamble.name != n.ROUTING_V6_TABLE]
    assert all(t.implementation_id == 0 for t in others)


def test_direct_counters_on_every_table(info: p4info_pb2.P4Info) -> None:
    tables = _by_name(info.tables)
    directs = _by_name(info.direct_counters)
    assert set(directs) == set(n.DIRECT_COUNTERS)
    assert set(n.DIRECT_COUNTERS.values()) == set(tables)
    for counter, table in n.DIRECT_COUNTERS.items():
        assert directs[counter].direct_table_id == tables[table].preamble.id
        assert list(tables[table].direct_resource_ids) == [directs[counter].preamble.id]


def test_indexed_counters_and_register(info: p4info_pb2.P4Info) -> None:
    counters = _by_name(info.counters)
    assert counters[n.DROP_COUNTER].size == n.DROP_REASON_COUNT
    assert counters[n.TRIM_COUNTER].size == n.PORT_COUNT
    assert counters[n.ECN_MARK_COUNTER].size == n.PORT_COUNT
    reg = _by_name(info.registers)[n.QUEUE_DEPTH_REGISTER]
    assert reg.size == n.PORT_COUNT
    assert reg.type_spec.bitstring.bit.bitwidth == n.QDEPTH_BITS


def test_drop_reasons_are_dense() -> None:
    assert sorted(n.DROP_REASONS.values()) == list(range(n.DROP_REASON_COUNT))


def test_ids_follow_p4c_scheme(info: p4info_pb2.P4Info) -> None:
    """Top byte = resource type; NoAction's id is the well-known value p4c always emits."""
    prefix = p4info_pb2.P4Ids
    groups = [(info.tables, prefix.TABLE), (info.actions, prefix.ACTION),
              (info.action_profiles, prefix.ACTION_PROFILE), (info.counters, prefix.COUNTER),
              (info.direct_counters, prefix.DIRECT_COUNTER), (info.registers, prefix.REGISTER)]
    for entities, kind in groups:
        assert all(e.preamble.id >> 24 == kind for e in entities)
    assert _by_name(info.actions)[n.NO_ACTION].preamble.id == 21257015
