"""A switch's tables installed straight from the controller's entities, without P4Runtime
messages: how the simulator loads its hundreds of in-process switches.

Why: p4runtime-shell pins protobuf below 3.21, whose Python 3.11 build has no C
implementation, and a Write then costs about 180 µs per update in message copies and field
reads. A 1,024-host fabric's 768 switches hold 212,736 entries, members and groups: 39 s.
Here each distinct entity is compiled once per fabric (the T0s of a plane share their routes
and groups) into the record DeviceState.write makes of its INSERT, and a switch's install
runs only the checks that depend on its own state, the store's own (admit_entry,
check_reference, admit_member, put_group). An entry's message (what Read returns) is made
when first read. tests/switch/softswitch/test_preload.py holds every switch of a fabric
equal to the state its INSERT messages make.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from p4.v1 import p4runtime_pb2

from p4rt.codec import Codec
from p4rt.entities import Action, Entity, Exact, Group, Lpm, Member, TableEntry
from p4rt.p4info import MATCH_EXACT, MATCH_LPM, TableInfo
from softswitch.errors import invalid
from softswitch.store import INSERT, DeviceState
from softswitch.tables import Entry, canonical_entry, prefix_mask, wildcard


@dataclass(frozen=True)
class _EntryRecord:
    table_id: int
    key: tuple
    action: tuple  # (action_id, params) or ("member"|"group", id), checked at install
    entity: TableEntry
    codec: Codec

    def proto(self) -> p4runtime_pb2.TableEntry:
        """The canonical message Read returns, made when first read and then shared by
        every switch holding the entity (held messages are never changed)."""
        return _made(self, lambda: canonical_entry(self.codec.encode(self.entity).table_entry))


@dataclass(frozen=True)
class _MemberRecord:
    profile_id: int
    member_id: int
    action: tuple
    entity: Member
    codec: Codec

    def proto(self) -> p4runtime_pb2.ActionProfileMember:
        """Made when first read, then shared (codec output is canonical already)."""
        return _made(self, lambda: self.codec.encode(self.entity).action_profile_member)


@dataclass(frozen=True)
class _GroupRecord:
    profile_id: int
    group_id: int
    members: tuple[tuple[int, int], ...]  # (member id, weight)
    entity: Group
    codec: Codec

    def proto(self) -> p4runtime_pb2.ActionProfileGroup:
        return _made(self, lambda: self.codec.encode(self.entity).action_profile_group)


def _made(record: Any, make: Callable[[], Any]) -> Any:
    """A record's message, made by `make` at the first call and kept on the record."""
    made = record.__dict__.get("_proto")
    if made is None:
        made = make()
        object.__setattr__(record, "_proto", made)
    return made


Record = _EntryRecord | _MemberRecord | _GroupRecord


class Preloader:
    """Compiles entities for one P4Info and installs them into fresh device states."""

    def __init__(self, codec: Codec) -> None:
        self.codec = codec
        self._records: dict[Entity, Record] = {}

    def install(self, state: DeviceState, entities: Iterable[Entity]) -> None:
        """INSERT `entities`, in order, into `state` (members before the groups that list
        them, both before the entries: SwitchTables.entities' order); the first refusal
        raises softswitch.errors.P4RTError, as a Write would report it."""
        touched: set[int] = set()
        with state.lock:
            try:
                for entity in entities:
                    record = self._records.get(entity)
                    if record is None:
                        record = self._records[entity] = self._compile(entity)
                    self._apply(state, record, touched)
                for tid in touched:
                    state.tables[tid].rebuild()
            finally:
                state.generation += 1

    def _apply(self, state: DeviceState, record: Record, touched: set[int]) -> None:
        if isinstance(record, _EntryRecord):
            t = state.tables[record.table_id]
            stored = record.key + (0,)  # the store's key: match, then priority
            state.admit_entry(t, INSERT, stored)
            action = record.action
            if action[0] in ("member", "group"):
                state.check_reference(t, action[0], action[1])
            t.entries[stored] = Entry(record.key, 0, action, make_proto=record.proto)
            touched.add(record.table_id)
        elif isinstance(record, _MemberRecord):
            state.admit_member(record.profile_id, INSERT, record.member_id)
            state.keep_member(record.profile_id, record.member_id, record.action, record.proto)
        else:
            state.put_group(record.profile_id, INSERT, record.group_id, record.members, 0,
                            record.proto)

    def _compile(self, entity: Entity) -> Record:
        if isinstance(entity, Member):
            prof = self.codec.id(entity.profile)
            tables = [t for t in self.codec.index.tables.values()
                      if t.implementation_id == prof]
            action = self._action(tables[0] if tables else None, entity.action,
                                  f"member {entity.member_id}")
            return _MemberRecord(prof, entity.member_id, action, entity, self.codec)
        if isinstance(entity, Group):
            return _GroupRecord(self.codec.id(entity.profile), entity.group_id,
                                tuple((mid, 1) for mid in entity.member_ids), entity, self.codec)
        info = self.codec.index.tables[self.codec.id(entity.table)]
        return _EntryRecord(info.id, self._key(info, entity), self._entry_action(info, entity),
                            entity, self.codec)

    def _key(self, info: TableInfo, entity: TableEntry) -> tuple:
        """The store's normalised key (TableRuntime.normalise_key) of the entity's match."""
        given = dict(entity.match)
        unknown = set(given) - {f.name for f in info.match_fields}
        if unknown:
            raise invalid(f"table {info.name}: unknown match fields {sorted(unknown)}")
        if info.needs_priority:
            raise invalid(f"table {info.name}: entries need a priority > 0")
        key: list[object] = []
        for f in info.match_fields:
            value = given.get(f.name)
            what = f"table {info.name} field {f.name}"
            if value is None or (isinstance(value, Lpm) and not value.prefix_len):
                if f.match_type == MATCH_EXACT:
                    raise invalid(f"{what}: exact match field missing")
                key.append(wildcard(f.match_type, f.bitwidth))
            elif isinstance(value, Exact) and f.match_type == MATCH_EXACT:
                key.append(_fits(value.value, f.bitwidth, what))
            elif isinstance(value, Lpm) and f.match_type == MATCH_LPM:
                number = _fits(value.value, f.bitwidth, what)
                if not 0 < value.prefix_len <= f.bitwidth:
                    raise invalid(f"{what}: prefix length {value.prefix_len} not in "
                                  f"1..{f.bitwidth}")
                if number & ~prefix_mask(f.bitwidth, value.prefix_len):
                    raise invalid(f"{what}: value has bits set beyond the /{value.prefix_len} "
                                  "prefix")
                key.append((number, value.prefix_len))
            else:
                raise invalid(f"{what}: expected a match of type {f.match_type}, got {value}")
        return tuple(key)

    def _entry_action(self, info: TableInfo, entity: TableEntry) -> tuple:
        where = f"table {info.name}"
        if info.implementation_id:
            if entity.member_id is not None:
                return ("member", entity.member_id)
            if entity.group_id is not None:
                return ("group", entity.group_id)
            raise invalid(f"{where}: entries of this table name a profile member or group")
        if entity.action is None:
            raise invalid(f"{where}: entry needs a direct action")
        compiled = self._action(info, entity.action, where)
        if compiled[0] in info.default_only_ids:
            raise invalid(f"{where}: action {compiled[0]} is default-only")
        return compiled

    def _action(self, info: TableInfo | None, action: Action, where: str) -> tuple:
        """(action_id, params in P4Info order), as DeviceState.compile_action makes it."""
        action_id = self.codec.id(action.name)
        if info is not None and action_id not in info.action_ids:
            raise invalid(f"{where}: action {action.name} is not an action of table {info.name}")
        given = dict(action.params)
        params = self.codec.index.actions[action_id].params
        unknown = set(given) - {name for name, _ in params.values()}
        if unknown:
            raise invalid(f"{where}: action {action.name} has no parameters {sorted(unknown)}")
        values = []
        for name, width in params.values():
            if name not in given:
                raise invalid(f"{where}: action {action.name} is missing parameter {name}")
            values.append(_fits(given[name], width, f"{where}: {action.name}.{name}"))
        return (action_id, tuple(values))


def _fits(value: int, width: int, what: str) -> int:
    if value < 0 or value >> width:
        raise invalid(f"{what}: value {value:#x} does not fit in {width} bits")
    return value
