"""Match-action table state: validated entries plus the lookup structure the data plane uses.

Entries are stored twice: as the canonical protobuf the controller reads back, and as
a compiled `Entry` (plain ints) that the packet path matches without touching protobuf.
The lookup structure is rebuilt after each write batch and swapped in with one
assignment, so the packet thread never sees a half-applied batch.
"""

from __future__ import annotations

from collections.abc import Callable

import grpc
from p4.v1 import p4runtime_pb2

from p4rt.codec import canonical
from p4rt.p4info import (
    MATCH_EXACT,
    MATCH_LPM,
    MATCH_OPTIONAL,
    MATCH_RANGE,
    MATCH_TERNARY,
    TableInfo,
)
from softswitch.errors import P4RTError, invalid


def to_int(value: bytes, bitwidth: int, what: str) -> int:
    """Decode a P4Runtime bytestring, rejecting values wider than the field."""
    if not value:
        raise invalid(f"{what}: empty bytestring")
    number = int.from_bytes(value, "big")
    if number >> bitwidth:
        raise invalid(f"{what}: value 0x{value.hex()} does not fit in {bitwidth} bits")
    return number


class Entry:
    """A compiled entry: `action` is (action_id, params) or ("member"|"group", id).

    `proto` is the canonical message Read returns, given or made by `make_proto` when first
    read (softswitch.preload installs without messages); it is never changed once made."""

    __slots__ = ("key", "priority", "action", "_proto", "_make_proto", "packets", "bytes")

    def __init__(self, key: tuple, priority: int, action: tuple,
                 proto: p4runtime_pb2.TableEntry | None = None, *,
                 make_proto: Callable[[], p4runtime_pb2.TableEntry] | None = None) -> None:
        if (proto is None) == (make_proto is None):
            raise ValueError("an entry needs its message or a way to make it, not both")
        self.key, self.priority, self.action = key, priority, action
        self._proto, self._make_proto = proto, make_proto
        self.packets = self.bytes = 0

    @property
    def proto(self) -> p4runtime_pb2.TableEntry:
        if self._proto is None:
            assert self._make_proto is not None
            self._proto = self._make_proto()
        return self._proto

    def __repr__(self) -> str:
        return f"Entry(key={self.key!r}, priority={self.priority}, action={self.action!r})"


def prefix_mask(bitwidth: int, prefix: int) -> int:
    return ((1 << prefix) - 1) << (bitwidth - prefix) if prefix else 0


class TableRuntime:
    """One table: entries by normalised key, default action, and a lookup function."""

    def __init__(self, info: TableInfo, default_action: tuple) -> None:
        self.info = info
        self.entries: dict[tuple, Entry] = {}
        self.default_action = default_action
        self.initial_default = default_action
        self.miss_packets = 0
        self.miss_bytes = 0
        kinds = [f.match_type for f in info.match_fields]
        self.all_exact = all(k == MATCH_EXACT for k in kinds)
        self.lpm_index = kinds.index(MATCH_LPM) if kinds.count(MATCH_LPM) == 1 and all(
            k in (MATCH_EXACT, MATCH_LPM) for k in kinds) else -1
        self.exact: dict[tuple, Entry] = {}
        self._lpm: list[tuple[int, int, dict[tuple, Entry]]] = []
        self._scan: list[Entry] = []

    # ---- control plane -------------------------------------------------------------

    def normalise_key(self, entry: p4runtime_pb2.TableEntry) -> tuple:
        """Match fields in P4Info order as ints; raises INVALID_ARGUMENT on bad input."""
        by_id = {f.id: f for f in self.info.match_fields}
        given: dict[int, p4runtime_pb2.FieldMatch] = {}
        for m in entry.match:
            if m.field_id not in by_id:
                raise invalid(f"table {self.info.name}: unknown match field id {m.field_id}")
            if m.field_id in given:
                raise invalid(f"table {self.info.name}: match field {m.field_id} given twice")
            given[m.field_id] = m
        key = []
        for f in self.info.match_fields:
            m = given.get(f.id)
            what = f"table {self.info.name} field {f.name}"
            if m is None:
                if f.match_type == MATCH_EXACT:
                    raise invalid(f"{what}: exact match field missing")
                key.append(wildcard(f.match_type, f.bitwidth))
                continue
            key.append(_field_key(m, f.match_type, f.bitwidth, what))
        if self.info.needs_priority and entry.priority <= 0:
            raise invalid(f"table {self.info.name}: entries need a priority > 0")
        if not self.info.needs_priority and entry.priority:
            raise invalid(f"table {self.info.name}: priority must be 0 for this table")
        return tuple(key)

    def rebuild(self) -> None:
        """Recompute the lookup structure; swapped in by assignment for the packet thread."""
        entries = list(self.entries.values())
        if self.all_exact:
            self.exact = {e.key: e for e in entries}
            return
        if self.lpm_index >= 0:
            width = self.info.match_fields[self.lpm_index].bitwidth
            by_len: dict[int, dict[tuple, Entry]] = {}
            for e in entries:
                value, plen = e.key[self.lpm_index]
                k = list(e.key)
                k[self.lpm_index] = value
                by_len.setdefault(plen, {})[tuple(k)] = e
            self._lpm = [(plen, prefix_mask(width, plen), by_len[plen])
                         for plen in sorted(by_len, reverse=True)]
            return
        self._scan = sorted(entries, key=lambda e: -e.priority)

    # ---- data plane ----------------------------------------------------------------

    def lookup(self, values: tuple) -> Entry | None:
        """Find the entry for header values (ints in P4Info field order), or None on miss."""
        if self.all_exact:
            return self.exact.get(values)
        if self.lpm_index >= 0:
            i = self.lpm_index
            for _plen, mask, bucket in self._lpm:
                k = values[:i] + (values[i] & mask,) + values[i + 1:]
                hit = bucket.get(k)
                if hit is not None:
                    return hit
            return None
        for e in self._scan:
            if _matches(e.key, values, self.info):
                return e
        return None


def wildcard(match_type: int, bitwidth: int) -> object:
    if match_type == MATCH_LPM:
        return (0, 0)
    if match_type == MATCH_TERNARY:
        return (0, 0)
    if match_type == MATCH_RANGE:
        return (0, (1 << bitwidth) - 1)
    return None  # optional


def _field_key(m: p4runtime_pb2.FieldMatch, match_type: int, width: int, what: str) -> object:
    kind = m.WhichOneof("field_match_type")
    expected = {MATCH_EXACT: "exact", MATCH_LPM: "lpm", MATCH_TERNARY: "ternary",
                MATCH_RANGE: "range", MATCH_OPTIONAL: "optional"}.get(match_type)
    if kind != expected:
        raise invalid(f"{what}: expected a {expected} match, got {kind}")
    if match_type == MATCH_EXACT:
        return to_int(m.exact.value, width, what)
    if match_type == MATCH_LPM:
        value = to_int(m.lpm.value, width, what)
        plen = m.lpm.prefix_len
        if not 0 < plen <= width:
            raise invalid(f"{what}: prefix length {plen} not in 1..{width} (omit the field "
                          "for a wildcard)")
        if value & ~prefix_mask(width, plen):
            raise invalid(f"{what}: value has bits set beyond the /{plen} prefix")
        return (value, plen)
    if match_type == MATCH_TERNARY:
        value, mask = to_int(m.ternary.value, width, what), to_int(m.ternary.mask, width, what)
        if not mask:
            raise invalid(f"{what}: mask 0 is a wildcard; omit the field")
        if value & ~mask:
            raise invalid(f"{what}: value has bits set outside the mask")
        return (value, mask)
    if match_type == MATCH_RANGE:
        low, high = to_int(m.range.low, width, what), to_int(m.range.high, width, what)
        if low > high:
            raise invalid(f"{what}: range low > high")
        return (low, high)
    return to_int(m.optional.value, width, what)


def _matches(key: tuple, values: tuple, info: TableInfo) -> bool:
    for f, k, v in zip(info.match_fields, key, values, strict=True):
        t = f.match_type
        if t == MATCH_EXACT:
            if k != v:
                return False
        elif t == MATCH_LPM:
            if v & prefix_mask(f.bitwidth, k[1]) != k[0]:
                return False
        elif t == MATCH_TERNARY:
            if v & k[1] != k[0]:
                return False
        elif t == MATCH_RANGE:
            if not k[0] <= v <= k[1]:
                return False
        elif k is not None and k != v:
            return False
    return True


def canonical_entry(entry: p4runtime_pb2.TableEntry) -> p4runtime_pb2.TableEntry:
    """A copy with canonical bytestrings and no counter data, as Read returns it."""
    out = p4runtime_pb2.TableEntry()
    out.CopyFrom(entry)
    out.ClearField("counter_data")
    out.ClearField("meter_config")
    for m in out.match:
        kind = m.WhichOneof("field_match_type")
        sub = getattr(m, kind)
        for attr in ("value", "mask", "low", "high"):
            if hasattr(sub, attr):
                setattr(sub, attr, canonical(int.from_bytes(getattr(sub, attr), "big")))
    if out.action.HasField("action"):
        for p in out.action.action.params:
            p.value = canonical(int.from_bytes(p.value, "big"))
    return out


def not_found(what: str) -> P4RTError:
    return P4RTError(grpc.StatusCode.NOT_FOUND, what)
