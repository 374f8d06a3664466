"""An index over a P4Info message, and the check that a P4Info is one the software switch can run.

Nothing hard-codes ids: the controller, the software switch and the tests look everything
up by name (p4rt.names) in the P4Info in use, so a recompiled program with renumbered ids
still works.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from google.protobuf import text_format
from p4.config.v1 import p4info_pb2

from p4rt.errors import P4rtError

MATCH_EXACT = p4info_pb2.MatchField.EXACT
MATCH_LPM = p4info_pb2.MatchField.LPM
MATCH_TERNARY = p4info_pb2.MatchField.TERNARY
MATCH_RANGE = p4info_pb2.MatchField.RANGE
MATCH_OPTIONAL = p4info_pb2.MatchField.OPTIONAL

COMMITTED_P4INFO = Path(__file__).resolve().parent.parent / "p4src" / "mrc.p4info.txtpb"


class PipelineMismatch(P4rtError, ValueError):
    """The offered P4Info lacks something the software pipeline needs; message says what."""


@dataclass(frozen=True)
class MatchFieldInfo:
    id: int
    name: str
    bitwidth: int
    match_type: int


@dataclass(frozen=True)
class ActionInfo:
    id: int
    name: str
    params: dict[int, tuple[str, int]]  # param id -> (name, bitwidth)


@dataclass
class TableInfo:
    id: int
    name: str
    match_fields: list[MatchFieldInfo]
    action_ids: set[int]
    default_only_ids: set[int]
    table_only_ids: set[int]
    const_default_action_id: int
    implementation_id: int
    direct_counter_id: int = 0
    size: int = 0
    initial_default: tuple = (0, ())  # (action_id, params in P4Info order)

    @property
    def needs_priority(self) -> bool:
        return any(f.match_type in (MATCH_TERNARY, MATCH_RANGE, MATCH_OPTIONAL)
                   for f in self.match_fields)


@dataclass(frozen=True)
class ActionProfileInfo:
    id: int
    name: str
    table_ids: tuple[int, ...]
    with_selector: bool
    size: int
    max_group_size: int
    # P4Runtime 1.4 selector_size_semantics: with SumOfWeights (the default when unset) `size`
    # and `max_group_size` bound sums of member weights; with SumOfMembers they bound member
    # counts and each weight is at most max_member_weight (0 = no bound given).
    sum_of_members: bool = False
    max_member_weight: int = 0


@dataclass(frozen=True)
class ArrayInfo:
    """An indirect counter or register: `size` cells."""

    id: int
    name: str
    size: int
    bitwidth: int = 0  # registers only


@dataclass
class P4InfoIndex:
    p4info: p4info_pb2.P4Info
    tables: dict[int, TableInfo] = field(default_factory=dict)
    actions: dict[int, ActionInfo] = field(default_factory=dict)
    profiles: dict[int, ActionProfileInfo] = field(default_factory=dict)
    counters: dict[int, ArrayInfo] = field(default_factory=dict)
    registers: dict[int, ArrayInfo] = field(default_factory=dict)
    direct_counters: dict[int, int] = field(default_factory=dict)  # counter id -> table id
    names: dict[str, int] = field(default_factory=dict)

    @classmethod
    def build(cls, p4info: p4info_pb2.P4Info) -> P4InfoIndex:
        idx = cls(p4info)
        for a in p4info.actions:
            idx.actions[a.preamble.id] = ActionInfo(
                a.preamble.id, a.preamble.name,
                {p.id: (p.name, p.bitwidth) for p in a.params})
        for t in p4info.tables:
            refs = t.action_refs
            idx.tables[t.preamble.id] = TableInfo(
                t.preamble.id, t.preamble.name,
                [MatchFieldInfo(m.id, m.name, m.bitwidth, m.match_type) for m in t.match_fields],
                {r.id for r in refs},
                {r.id for r in refs if r.scope == p4info_pb2.ActionRef.DEFAULT_ONLY},
                {r.id for r in refs if r.scope == p4info_pb2.ActionRef.TABLE_ONLY},
                t.const_default_action_id, t.implementation_id, size=t.size)
            if t.HasField("initial_default_action"):
                call = t.initial_default_action
                args = {a.param_id: int.from_bytes(a.value, "big") for a in call.arguments}
                order = [p.id for a in p4info.actions if a.preamble.id == call.action_id
                         for p in a.params]
                idx.tables[t.preamble.id].initial_default = (
                    call.action_id, tuple(args.get(pid, 0) for pid in order))
            elif t.const_default_action_id:
                idx.tables[t.preamble.id].initial_default = (t.const_default_action_id, ())
        for p in p4info.action_profiles:
            idx.profiles[p.preamble.id] = ActionProfileInfo(
                p.preamble.id, p.preamble.name, tuple(p.table_ids), p.with_selector,
                p.size, p.max_group_size, p.HasField("sum_of_members"),
                p.sum_of_members.max_member_weight)
        for c in p4info.counters:
            idx.counters[c.preamble.id] = ArrayInfo(c.preamble.id, c.preamble.name, c.size)
        for c in p4info.direct_counters:
            idx.direct_counters[c.preamble.id] = c.direct_table_id
            if c.direct_table_id in idx.tables:
                idx.tables[c.direct_table_id].direct_counter_id = c.preamble.id
        for r in p4info.registers:
            width = r.type_spec.bitstring.bit.bitwidth
            idx.registers[r.preamble.id] = ArrayInfo(r.preamble.id, r.preamble.name, r.size, width)
        for group in (p4info.tables, p4info.actions, p4info.action_profiles, p4info.counters,
                      p4info.direct_counters, p4info.registers):
            for obj in group:
                idx.names[obj.preamble.name] = obj.preamble.id
                if obj.preamble.alias:
                    idx.names.setdefault(obj.preamble.alias, obj.preamble.id)
        return idx

    def id_of(self, name: str) -> int:
        try:
            return self.names[name]
        except KeyError:
            raise PipelineMismatch(f"P4Info has no object named {name!r}") from None

    def table(self, name: str) -> TableInfo:
        return self.tables[self.id_of(name)]

    def action(self, name: str) -> ActionInfo:
        return self.actions[self.id_of(name)]


def load_text(path: Path) -> p4info_pb2.P4Info:
    msg = p4info_pb2.P4Info()
    text_format.Merge(path.read_text(), msg)
    return msg


def _signature(idx: P4InfoIndex) -> dict[str, object]:
    """Name-keyed structure that must agree between two P4Infos (ids may differ)."""
    sig: dict[str, object] = {}
    for t in idx.tables.values():
        sig["table " + t.name] = (
            sorted((m.name, m.bitwidth, m.match_type) for m in t.match_fields),
            sorted(idx.actions[a].name for a in t.action_ids if a in idx.actions),
            bool(t.implementation_id), bool(t.direct_counter_id))
    for a in idx.actions.values():
        sig["action " + a.name] = sorted(a.params.values())
    for p in idx.profiles.values():
        sig["action profile " + p.name] = (p.with_selector,)
    for c in idx.counters.values():
        sig["counter " + c.name] = (c.size,)
    for r in idx.registers.values():
        sig["register " + r.name] = (r.size, r.bitwidth)
    return sig


def check_compatible(offered: P4InfoIndex, reference: P4InfoIndex) -> None:
    """Raise PipelineMismatch naming every object the offered P4Info lacks or changes."""
    want, have = _signature(reference), _signature(offered)
    problems = []
    for key, value in sorted(want.items()):
        if key not in have:
            problems.append(f"missing {key}")
        elif have[key] != value:
            problems.append(f"{key} differs (need {value}, got {have[key]})")
    if problems:
        raise PipelineMismatch("P4Info cannot run on the software switch: " + "; ".join(problems))


def load_committed() -> p4info_pb2.P4Info:
    """The committed P4Info: what p4c emits for p4src/ (checked byte for byte by a test)."""
    return load_text(COMMITTED_P4INFO)
