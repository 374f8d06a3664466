"""Device state behind P4Runtime Write/Read: tables, action profiles, counters, registers.

Validation follows the P4Runtime spec's error codes: ALREADY_EXISTS for a duplicate
insert, NOT_FOUND for modifying or deleting what is not there, INVALID_ARGUMENT for
unknown ids, wrong widths and missing parameters, FAILED_PRECONDITION for deleting
something still referenced.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import grpc
from p4.v1 import p4runtime_pb2

from p4rt.codec import canonical
from p4rt.p4info import P4InfoIndex, TableInfo
from softswitch.errors import P4RTError, invalid
from softswitch.tables import Entry, TableRuntime, canonical_entry, not_found, to_int

# A held message, or a function that makes it when first read (softswitch.preload)
ProtoOrMaker = Any

INSERT = p4runtime_pb2.Update.INSERT
MODIFY = p4runtime_pb2.Update.MODIFY
DELETE = p4runtime_pb2.Update.DELETE


class Group:
    """An ECMP group: members expanded by weight so the data plane indexes by hash.

    Slots follow the members' handles, as BMv2 orders a group (the hash modulo the size
    picks the nth of its member handles in ascending order), so both targets pick the same
    member."""

    def __init__(self, proto: ProtoOrMaker, members: Sequence[tuple[int, int]],
                 handles: dict[int, int]) -> None:
        """`members`: (member id, weight) as `proto` lists them (read once from it);
        `proto` may be a function that makes it (softswitch.preload), called when read."""
        self._proto = proto
        self.member_ids = [mid for mid, _ in members]
        ordered = sorted(members, key=lambda m: handles[m[0]])
        self.slots: list[int] = [mid for mid, weight in ordered for _ in range(weight)]
        self.weights = len(self.slots)  # what the group takes of a SumOfWeights profile

    @property
    def proto(self) -> p4runtime_pb2.ActionProfileGroup:
        if callable(self._proto):
            self._proto = self._proto()
        return self._proto


class DeviceState:
    """Everything a Write can change, for one installed pipeline."""

    def __init__(self, index: P4InfoIndex) -> None:
        self.index = index
        self.lock = threading.Lock()
        self.tables = {tid: TableRuntime(info, info.initial_default)
                       for tid, info in index.tables.items()}
        self.members: dict[int, dict[int, tuple]] = {p: {} for p in index.profiles}
        self.member_protos: dict[int, dict[int, p4runtime_pb2.ActionProfileMember]] = {
            p: {} for p in index.profiles}
        self.groups: dict[int, dict[int, Group]] = {p: {} for p in index.profiles}
        # BMv2 gives each new member the lowest free handle, and orders groups by handle
        self.member_handles: dict[int, dict[int, int]] = {p: {} for p in index.profiles}
        self.counters = {cid: [[0, 0] for _ in range(c.size)] for cid, c in index.counters.items()}
        self.registers = {rid: [0] * r.size for rid, r in index.registers.items()}
        # moves after every Write: the data plane drops its cached lookups when it changes
        self.generation = 0

    # ---- Write ---------------------------------------------------------------------

    def write(self, updates: list[p4runtime_pb2.Update]) -> list[P4RTError | None]:
        """Apply updates in order; one result per update (None = applied)."""
        results: list[P4RTError | None] = []
        touched: set[int] = set()
        with self.lock:
            try:
                for u in updates:
                    try:
                        self._apply(u, touched)
                        results.append(None)
                    except P4RTError as err:
                        results.append(err)
                for tid in touched:
                    self.tables[tid].rebuild()
            finally:
                self.generation += 1
        return results

    def _apply(self, u: p4runtime_pb2.Update, touched: set[int]) -> None:
        kind = u.entity.WhichOneof("entity")
        if u.type not in (INSERT, MODIFY, DELETE):
            raise invalid("update type must be INSERT, MODIFY or DELETE")
        if kind == "table_entry":
            self._write_table(u.type, u.entity.table_entry, touched)
        elif kind == "action_profile_member":
            self._write_member(u.type, u.entity.action_profile_member)
        elif kind == "action_profile_group":
            self._write_group(u.type, u.entity.action_profile_group)
        elif kind == "counter_entry":
            self._write_counter(u.type, u.entity.counter_entry)
        elif kind == "direct_counter_entry":
            self._write_direct_counter(u.type, u.entity.direct_counter_entry)
        elif kind == "register_entry":
            self._write_register(u.type, u.entity.register_entry)
        else:
            raise P4RTError(grpc.StatusCode.UNIMPLEMENTED, f"entity {kind} is not supported")

    def _table(self, table_id: int) -> TableRuntime:
        if table_id not in self.tables:
            raise invalid(f"unknown table id {table_id}")
        return self.tables[table_id]

    def compile_action(self, info: TableInfo | None, action: p4runtime_pb2.Action,
                       where: str) -> tuple:
        """(action_id, params in P4Info order) after checking membership and widths."""
        a = self.index.actions.get(action.action_id)
        if a is None:
            raise invalid(f"{where}: unknown action id {action.action_id}")
        if info is not None and action.action_id not in info.action_ids:
            raise invalid(f"{where}: action {a.name} is not an action of table {info.name}")
        given: dict[int, bytes] = {}
        for p in action.params:
            if p.param_id not in a.params:
                raise invalid(f"{where}: action {a.name} has no parameter id {p.param_id}")
            if p.param_id in given:
                raise invalid(f"{where}: parameter id {p.param_id} given twice")
            given[p.param_id] = p.value
        values = []
        for pid, (pname, width) in a.params.items():
            if pid not in given:
                raise invalid(f"{where}: action {a.name} is missing parameter {pname}")
            values.append(to_int(given[pid], width, f"{where}: {a.name}.{pname}"))
        return (action.action_id, tuple(values))

    def _entry_action(self, t: TableRuntime, e: p4runtime_pb2.TableEntry) -> tuple:
        which = e.action.WhichOneof("type")
        where = f"table {t.info.name}"
        if t.info.implementation_id:
            if which == "action_profile_member_id":
                return self.check_reference(t, "member", e.action.action_profile_member_id)
            if which == "action_profile_group_id":
                return self.check_reference(t, "group", e.action.action_profile_group_id)
            raise invalid(f"{where}: entries of this table name a profile member or group")
        if which != "action":
            raise invalid(f"{where}: entry needs a direct action")
        if e.action.action.action_id in t.info.default_only_ids:
            raise invalid(f"{where}: action {e.action.action.action_id} is default-only")
        return self.compile_action(t.info, e.action.action, where)

    def _write_table(self, op: int, e: p4runtime_pb2.TableEntry, touched: set[int]) -> None:
        t = self._table(e.table_id)
        if e.is_default_action:
            self._write_default(op, t, e)
            return
        match = t.normalise_key(e)
        key = match + (e.priority,)
        if op == DELETE:
            if key not in t.entries:
                raise not_found(f"table {t.info.name}: no such entry to delete")
            del t.entries[key]
        else:
            self.admit_entry(t, op, key)
            action = self._entry_action(t, e)
            old = t.entries.get(key)
            new = Entry(match, e.priority, action, canonical_entry(e))
            if op == MODIFY and old is not None and not e.HasField("counter_data"):
                new.packets, new.bytes = old.packets, old.bytes
            if e.HasField("counter_data"):
                new.packets, new.bytes = e.counter_data.packet_count, e.counter_data.byte_count
            t.entries[key] = new
        touched.add(t.info.id)

    @staticmethod
    def admit_entry(t: TableRuntime, op: int, key: tuple) -> None:
        """An INSERT or MODIFY of `key` may go ahead: it is new (or there), the table has room."""
        if op == INSERT and key in t.entries:
            raise P4RTError(grpc.StatusCode.ALREADY_EXISTS,
                            f"table {t.info.name}: entry already exists")
        if op == MODIFY and key not in t.entries:
            raise not_found(f"table {t.info.name}: no such entry to modify")
        if op == INSERT and t.info.size and len(t.entries) >= t.info.size:
            raise P4RTError(grpc.StatusCode.RESOURCE_EXHAUSTED, f"table {t.info.name} is full")

    def check_reference(self, t: TableRuntime, kind: str, ref: int) -> tuple:
        """("member"|"group", id) of an entry of profile table `t`, once it names one held."""
        prof = t.info.implementation_id
        held = self.members[prof] if kind == "member" else self.groups[prof]
        if ref not in held:
            raise not_found(f"table {t.info.name}: no {kind} {ref}")
        return (kind, ref)

    def _write_default(self, op: int, t: TableRuntime, e: p4runtime_pb2.TableEntry) -> None:
        if op != MODIFY:
            raise invalid(f"table {t.info.name}: the default entry can only be modified")
        if e.match:
            raise invalid(f"table {t.info.name}: the default entry has no match fields")
        if t.info.const_default_action_id:
            raise P4RTError(grpc.StatusCode.PERMISSION_DENIED,
                            f"table {t.info.name}: the default action is const")
        if not e.HasField("action"):
            t.default_action = t.initial_default
            return
        if e.action.WhichOneof("type") != "action":
            raise invalid(f"table {t.info.name}: default entry needs a direct action")
        if e.action.action.action_id in t.info.table_only_ids:
            raise invalid(f"table {t.info.name}: action is table-only, not a default action")
        t.default_action = self.compile_action(t.info, e.action.action, f"table {t.info.name}")

    def _profile(self, profile_id: int) -> int:
        if profile_id not in self.members:
            raise invalid(f"unknown action profile id {profile_id}")
        return profile_id

    def _write_member(self, op: int, m: p4runtime_pb2.ActionProfileMember) -> None:
        prof = self._profile(m.action_profile_id)
        members = self.members[prof]
        if op == DELETE:
            if m.member_id not in members:
                raise not_found(f"no action profile member {m.member_id}")
            if any(m.member_id in g.member_ids for g in self.groups[prof].values()) or any(
                    e.action == ("member", m.member_id) for t in self._profile_tables(prof)
                    for e in t.entries.values()):
                raise P4RTError(grpc.StatusCode.FAILED_PRECONDITION,
                                f"member {m.member_id} is still referenced")
            del members[m.member_id]
            del self.member_protos[prof][m.member_id]
            del self.member_handles[prof][m.member_id]
            return
        self.admit_member(prof, op, m.member_id)
        tables = self._profile_tables(prof)
        info = tables[0].info if tables else None
        action = self.compile_action(info, m.action, f"member {m.member_id}")
        proto = p4runtime_pb2.ActionProfileMember()
        proto.CopyFrom(m)
        for p in proto.action.params:
            p.value = canonical(int.from_bytes(p.value, "big"))
        self.keep_member(prof, m.member_id, action, proto)

    def admit_member(self, prof: int, op: int, member_id: int) -> None:
        members = self.members[prof]
        if op == INSERT and member_id in members:
            raise P4RTError(grpc.StatusCode.ALREADY_EXISTS, f"member {member_id} exists")
        if op == MODIFY and member_id not in members:
            raise not_found(f"no action profile member {member_id}")
        info = self.index.profiles[prof]
        if op == INSERT and info.size and len(members) >= info.size:
            raise P4RTError(grpc.StatusCode.RESOURCE_EXHAUSTED,
                            f"action profile {info.name} is full ({info.size} members)")

    def keep_member(self, prof: int, member_id: int, action: tuple, proto: ProtoOrMaker) -> None:
        """Hold an admitted member; `proto` (canonical, what Read returns, or a function that
        makes it) is never changed."""
        self.members[prof][member_id] = action
        handles = self.member_handles[prof]
        if member_id not in handles:
            used = set(handles.values())
            handles[member_id] = next(h for h in range(len(used) + 1) if h not in used)
        self.member_protos[prof][member_id] = proto

    def member_proto(self, prof: int, member_id: int) -> p4runtime_pb2.ActionProfileMember:
        """The member's message as Read returns it (made now if it was held as a maker)."""
        protos = self.member_protos[prof]
        proto = protos[member_id]
        if callable(proto):
            proto = protos[member_id] = proto()
        return proto

    def _profile_tables(self, prof: int) -> list[TableRuntime]:
        return [t for t in self.tables.values() if t.info.implementation_id == prof]

    def _write_group(self, op: int, g: p4runtime_pb2.ActionProfileGroup) -> None:
        prof = self._profile(g.action_profile_id)
        groups = self.groups[prof]
        if op == DELETE:
            if g.group_id not in groups:
                raise not_found(f"no action profile group {g.group_id}")
            if any(e.action == ("group", g.group_id) for t in self._profile_tables(prof)
                   for e in t.entries.values()):
                raise P4RTError(grpc.StatusCode.FAILED_PRECONDITION,
                                f"group {g.group_id} is still referenced")
            del groups[g.group_id]
            return
        members = [(m.member_id, m.weight) for m in g.members]
        proto = p4runtime_pb2.ActionProfileGroup()
        proto.CopyFrom(g)
        self.put_group(prof, op, g.group_id, members, g.max_size, proto)

    def put_group(self, prof: int, op: int, group_id: int, members: Sequence[tuple[int, int]],
                  max_size: int, proto: ProtoOrMaker) -> None:
        """Check and hold a group; `members` are (member id, weight) as `proto` lists them,
        and `proto` (what Read returns) is never changed."""
        groups = self.groups[prof]
        if op == INSERT and group_id in groups:
            raise P4RTError(grpc.StatusCode.ALREADY_EXISTS, f"group {group_id} exists")
        if op == MODIFY and group_id not in groups:
            raise not_found(f"no action profile group {group_id}")
        self._check_group(prof, group_id, members, max_size, op)
        groups[group_id] = Group(proto, members, self.member_handles[prof])

    def _check_group(self, prof: int, group_id: int, members: Sequence[tuple[int, int]],
                     max_size: int, op: int) -> None:
        """Members exist, weights >= 1, and the P4Info's capacity holds (P4Runtime 1.4
        selector_size_semantics): per group against max_group_size and the request's
        max_size, over all groups of the profile against its size; the group count is
        bounded by size too, since every group takes at least one slot on a target."""
        info = self.index.profiles[prof]
        groups = self.groups[prof]
        where = f"group {group_id}"
        seen: set[int] = set()
        held = self.members[prof]
        for member_id, weight in members:
            if member_id not in held:
                raise not_found(f"{where}: no member {member_id}")
            if member_id in seen:
                raise invalid(f"{where}: member {member_id} listed twice")
            seen.add(member_id)
            if weight < 1:
                raise invalid(f"{where}: member weight must be >= 1")
            if info.sum_of_members and info.max_member_weight and (
                    weight > info.max_member_weight):
                raise P4RTError(grpc.StatusCode.RESOURCE_EXHAUSTED,
                                f"{where}: weight {weight} exceeds the profile's max "
                                f"member weight {info.max_member_weight}")
        unit = "members" if info.sum_of_members else "summed weights"
        size = len(members) if info.sum_of_members else sum(w for _, w in members)
        if info.max_group_size and max_size > info.max_group_size:
            raise invalid(f"{where}: max_size {max_size} exceeds the profile's max group "
                          f"size {info.max_group_size}")
        limit = max_size or info.max_group_size
        if limit and size > limit:
            raise P4RTError(grpc.StatusCode.RESOURCE_EXHAUSTED,
                            f"{where}: {size} {unit} exceed the group's max size {limit}")
        if not info.size:
            return
        if op == INSERT and len(groups) >= info.size:
            raise P4RTError(grpc.StatusCode.RESOURCE_EXHAUSTED,
                            f"action profile {info.name} holds at most {info.size} groups")
        others = sum(len(grp.member_ids) if info.sum_of_members else grp.weights
                     for gid, grp in groups.items() if gid != group_id)
        if others + size > info.size:
            raise P4RTError(grpc.StatusCode.RESOURCE_EXHAUSTED,
                            f"{where}: action profile {info.name} would hold "
                            f"{others + size} {unit}, more than its size {info.size}")

    def _cell(self, arrays: dict, obj_id: int, index: int, kind: str) -> list:
        if obj_id not in arrays:
            raise invalid(f"unknown {kind} id {obj_id}")
        cells = arrays[obj_id]
        if not 0 <= index < len(cells):
            raise P4RTError(grpc.StatusCode.OUT_OF_RANGE,
                            f"{kind} index {index} outside 0..{len(cells) - 1}")
        return cells

    def _write_counter(self, op: int, c: p4runtime_pb2.CounterEntry) -> None:
        if op != MODIFY:
            raise invalid("counter entries can only be modified")
        cells = self._cell(self.counters, c.counter_id, c.index.index, "counter")
        cells[c.index.index] = [c.data.packet_count, c.data.byte_count]

    def _write_direct_counter(self, op: int, d: p4runtime_pb2.DirectCounterEntry) -> None:
        if op != MODIFY:
            raise invalid("direct counter entries can only be modified")
        t = self._table(d.table_entry.table_id)
        key = t.normalise_key(d.table_entry) + (d.table_entry.priority,)
        if key not in t.entries:
            raise not_found(f"table {t.info.name}: no such entry")
        t.entries[key].packets = d.data.packet_count
        t.entries[key].bytes = d.data.byte_count

    def _write_register(self, op: int, r: p4runtime_pb2.RegisterEntry) -> None:
        if op != MODIFY:
            raise invalid("register entries can only be modified")
        cells = self._cell(self.registers, r.register_id, r.index.index, "register")
        if r.data.WhichOneof("data") != "bitstring":
            raise invalid("register data must be a bitstring")
        width = self.index.registers[r.register_id].bitwidth
        cells[r.index.index] = to_int(r.data.bitstring, width, "register value")
