"""The one translation between p4rt.entities and P4Runtime messages, and its byte encoding.

Used by the controller (install, read-back), the simulator's in-process switches and the
tests; the software switch's server decodes with the same canonical byte rules.
"""

from __future__ import annotations

import itertools

from p4.v1 import p4runtime_pb2

from p4rt.entities import (
    Action,
    Entity,
    Exact,
    Group,
    Lpm,
    Member,
    RegisterCell,
    TableEntry,
    Update,
)
from p4rt.errors import P4rtError
from p4rt.p4info import COMMITTED_P4INFO, P4InfoIndex, load_text


class P4InfoError(P4rtError, ValueError):
    """An entity names something the P4Info lacks, or a value does not fit its field."""


def canonical(value: int) -> bytes:
    """P4Runtime's canonical bytestring: shortest big-endian, at least one byte."""
    return value.to_bytes(max(1, (value.bit_length() + 7) // 8), "big")


def encode_value(value: int, bitwidth: int) -> bytes:
    """A field or parameter value as a canonical bytestring, rejecting values too wide."""
    if value < 0 or value >> bitwidth:
        raise P4InfoError(f"{value:#x} does not fit in {bitwidth} bits")
    return canonical(value)


class Codec:
    """Name <-> id translation between p4rt.entities and P4Runtime protobuf, for one P4Info."""

    def __init__(self, index: P4InfoIndex) -> None:
        self.index = index
        self.names = {o.id: o.name for group in (index.tables, index.actions, index.profiles)
                      for o in group.values()}
        self.fields = {t.id: {m.name: (m.id, m.bitwidth) for m in t.match_fields}
                       for t in index.tables.values()}
        self.params = {a.id: {name: (pid, width) for pid, (name, width) in a.params.items()}
                       for a in index.actions.values()}
        self.table_ids = list(index.tables)
        self.profile_ids = list(index.profiles)

    @classmethod
    def committed(cls) -> Codec:
        """The codec of the committed P4Info (p4src/mrc.p4info.txtpb)."""
        return cls(P4InfoIndex.build(load_text(COMMITTED_P4INFO)))

    def id(self, name: str) -> int:
        try:
            return self.index.names[name]
        except KeyError:
            raise P4InfoError(f"P4Info has no object {name!r}: P4Info and "
                              "p4rt/names.py disagree") from None

    def _action(self, action: Action, out: p4runtime_pb2.Action) -> None:
        out.action_id = self.id(action.name)
        params = self.params[out.action_id]
        for name, value in action.params:
            pid, width = params[name]
            out.params.add(param_id=pid, value=encode_value(value, width))

    def update(self, kind: str, entity: Entity | RegisterCell) -> p4runtime_pb2.Update:
        """A P4Runtime update; `kind` is an Update.Type name (INSERT, MODIFY, DELETE)."""
        out = p4runtime_pb2.Update(type=p4runtime_pb2.Update.Type.Value(kind))
        self._encode_into(entity, out.entity)  # in place: pure-Python protobuf copies are slow
        return out

    def inserts(self, entities: list | tuple) -> list[p4runtime_pb2.Update]:
        """INSERT every entity (MODIFY for register cells), in the order given."""
        return [self.update("MODIFY" if isinstance(e, RegisterCell) else "INSERT", e)
                for e in entities]

    def encode(self, entity: Entity | RegisterCell) -> p4runtime_pb2.Entity:
        out = p4runtime_pb2.Entity()
        self._encode_into(entity, out)
        return out

    def _encode_into(self, entity: Entity | RegisterCell, out: p4runtime_pb2.Entity) -> None:
        if isinstance(entity, RegisterCell):
            info = self.index.registers[self.id(entity.register)]
            r = out.register_entry
            r.register_id, r.index.index = info.id, entity.index
            r.data.bitstring = encode_value(entity.value, info.bitwidth)
        elif isinstance(entity, Member):
            m = out.action_profile_member
            m.action_profile_id, m.member_id = self.id(entity.profile), entity.member_id
            self._action(entity.action, m.action)
        elif isinstance(entity, Group):
            g = out.action_profile_group
            g.action_profile_id, g.group_id = self.id(entity.profile), entity.group_id
            for mid in entity.member_ids:
                g.members.add(member_id=mid, weight=1)
        else:
            t = out.table_entry
            t.table_id = self.id(entity.table)
            fields = self.fields[t.table_id]
            for name, value in entity.match:
                fid, width = fields[name]
                if isinstance(value, Exact):
                    t.match.add(field_id=fid).exact.value = encode_value(value.value, width)
                elif value.prefix_len:  # a /0 LPM is expressed by omitting the field
                    lpm = t.match.add(field_id=fid).lpm
                    lpm.value, lpm.prefix_len = encode_value(value.value, width), value.prefix_len
            if entity.action is not None:
                self._action(entity.action, t.action.action)
            elif entity.member_id is not None:
                t.action.action_profile_member_id = entity.member_id
            else:
                t.action.action_profile_group_id = entity.group_id

    def _decode_action(self, action: p4runtime_pb2.Action) -> Action:
        names = {pid: name for name, (pid, _) in self.params[action.action_id].items()}
        return Action(self.names[action.action_id],
                      tuple((names[p.param_id], int.from_bytes(p.value, "big"))
                            for p in sorted(action.params, key=lambda p: p.param_id)))

    def decode(self, entity: p4runtime_pb2.Entity) -> Entity:
        kind = entity.WhichOneof("entity")
        if kind == "action_profile_member":
            m = entity.action_profile_member
            return Member(self.names[m.action_profile_id], m.member_id,
                          self._decode_action(m.action))
        if kind == "action_profile_group":
            g = entity.action_profile_group
            return Group(self.names[g.action_profile_id], g.group_id,
                         tuple(sorted(m.member_id for m in g.members)))
        t = entity.table_entry
        fields = {fid: name for name, (fid, _) in self.fields[t.table_id].items()}
        match = []
        for m in sorted(t.match, key=lambda m: m.field_id):
            if m.WhichOneof("field_match_type") == "exact":
                match.append((fields[m.field_id], Exact(int.from_bytes(m.exact.value, "big"))))
            else:
                match.append((fields[m.field_id],
                              Lpm(int.from_bytes(m.lpm.value, "big"), m.lpm.prefix_len)))
        which = t.action.WhichOneof("type")
        return TableEntry(
            self.names[t.table_id], tuple(match),
            action=self._decode_action(t.action.action) if which == "action" else None,
            member_id=t.action.action_profile_member_id if which == "action_profile_member_id"
            else None,
            group_id=t.action.action_profile_group_id if which == "action_profile_group_id"
            else None)


def write_phases(updates: list[Update]) -> list[list[Update]]:
    """Split into runs that may share a WriteRequest: P4Runtime does not order a batch."""
    return [list(run) for _, run in itertools.groupby(
        updates, key=lambda u: (u.kind == "DELETE", type(u.entity)))]
