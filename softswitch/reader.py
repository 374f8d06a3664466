"""P4Runtime Read: turn one request entity (ids of 0 are wildcards) into matching entities."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
from p4.v1 import p4runtime_pb2

from p4rt.codec import canonical
from softswitch.errors import P4RTError, invalid
from softswitch.store import DeviceState
from softswitch.tables import TableRuntime, not_found


def read_entity(state: DeviceState, entity: p4runtime_pb2.Entity) -> list[p4runtime_pb2.Entity]:
    """Snapshot (under the state lock) of every entity the request selects."""
    kind = entity.WhichOneof("entity")
    readers = {
        "table_entry": _tables,
        "action_profile_member": _members,
        "action_profile_group": _groups,
        "counter_entry": _counters,
        "direct_counter_entry": _direct_counters,
        "register_entry": _registers,
    }
    if kind not in readers:
        raise P4RTError(grpc.StatusCode.UNIMPLEMENTED, f"reading {kind} is not supported")
    with state.lock:
        return list(readers[kind](state, getattr(entity, kind)))


def _select(ids: dict, wanted: int, kind: str) -> list[int]:
    if not wanted:
        return list(ids)
    if wanted not in ids:
        raise invalid(f"unknown {kind} id {wanted}")
    return [wanted]


def _with_counters(t: TableRuntime, proto: p4runtime_pb2.TableEntry, packets: int,
                   nbytes: int, want: bool) -> p4runtime_pb2.Entity:
    out = p4runtime_pb2.Entity()
    out.table_entry.CopyFrom(proto)
    if want and t.info.direct_counter_id:
        out.table_entry.counter_data.packet_count = packets
        out.table_entry.counter_data.byte_count = nbytes
    return out


def _default_proto(state: DeviceState, t: TableRuntime) -> p4runtime_pb2.TableEntry:
    proto = p4runtime_pb2.TableEntry(table_id=t.info.id, is_default_action=True)
    action_id, params = t.default_action
    if action_id:
        proto.action.action.action_id = action_id
        info = state.index.actions[action_id]
        for pid, value in zip(info.params, params, strict=True):
            proto.action.action.params.add(param_id=pid, value=canonical(value))
    return proto


def _tables(state: DeviceState, req: p4runtime_pb2.TableEntry) -> Iterator[p4runtime_pb2.Entity]:
    want_counters = req.HasField("counter_data")
    for tid in _select(state.tables, req.table_id, "table"):
        t = state.tables[tid]
        if req.is_default_action:
            yield _with_counters(t, _default_proto(state, t), t.miss_packets, t.miss_bytes,
                                 want_counters)
            continue
        if req.match:
            key = t.normalise_key(req) + (req.priority,)
            e = t.entries.get(key)
            if e is not None:
                yield _with_counters(t, e.proto, e.packets, e.bytes, want_counters)
            continue
        for e in list(t.entries.values()):
            yield _with_counters(t, e.proto, e.packets, e.bytes, want_counters)


def _members(state: DeviceState, req: p4runtime_pb2.ActionProfileMember):
    for prof in _select(state.members, req.action_profile_id, "action profile"):
        held = state.member_protos[prof]
        wanted = [req.member_id] if req.member_id else list(held)
        for member_id in wanted:
            if member_id in held:
                yield p4runtime_pb2.Entity(
                    action_profile_member=state.member_proto(prof, member_id))


def _groups(state: DeviceState, req: p4runtime_pb2.ActionProfileGroup):
    for prof in _select(state.groups, req.action_profile_id, "action profile"):
        groups = state.groups[prof]
        if req.group_id:
            if req.group_id in groups:
                yield p4runtime_pb2.Entity(action_profile_group=groups[req.group_id].proto)
            continue
        for g in groups.values():
            yield p4runtime_pb2.Entity(action_profile_group=g.proto)


def _indices(req, cells: list) -> range:
    if req.HasField("index"):
        if not 0 <= req.index.index < len(cells):
            raise P4RTError(grpc.StatusCode.OUT_OF_RANGE, f"index {req.index.index} out of range")
        return range(req.index.index, req.index.index + 1)
    return range(len(cells))


def _counters(state: DeviceState, req: p4runtime_pb2.CounterEntry):
    for cid in _select(state.counters, req.counter_id, "counter"):
        cells = state.counters[cid]
        for i in _indices(req, cells):
            out = p4runtime_pb2.Entity()
            out.counter_entry.counter_id = cid
            out.counter_entry.index.index = i
            out.counter_entry.data.packet_count, out.counter_entry.data.byte_count = cells[i]
            yield out


def _direct_counters(state: DeviceState, req: p4runtime_pb2.DirectCounterEntry):
    te = req.table_entry
    tables = [t for t in state.tables.values() if t.info.direct_counter_id]
    if te.table_id:
        t = state.tables.get(te.table_id)
        if t is None or not t.info.direct_counter_id:
            raise invalid(f"table id {te.table_id} has no direct counter")
        tables = [t]
    for t in tables:
        if te.match:
            e = t.entries.get(t.normalise_key(te) + (te.priority,))
            if e is None:
                raise not_found(f"table {t.info.name}: no such entry")
            entries = [e]
        else:
            entries = list(t.entries.values())
        for e in entries:
            out = p4runtime_pb2.Entity()
            out.direct_counter_entry.table_entry.CopyFrom(e.proto)
            out.direct_counter_entry.data.packet_count = e.packets
            out.direct_counter_entry.data.byte_count = e.bytes
            yield out


def _registers(state: DeviceState, req: p4runtime_pb2.RegisterEntry):
    for rid in _select(state.registers, req.register_id, "register"):
        cells = state.registers[rid]
        for i in _indices(req, cells):
            out = p4runtime_pb2.Entity()
            out.register_entry.register_id = rid
            out.register_entry.index.index = i
            out.register_entry.data.bitstring = canonical(cells[i])
            yield out
