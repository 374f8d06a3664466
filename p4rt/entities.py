"""The P4 program's table contents as plain data: what the controller computes, the software
switch and BMv2 hold, the golden corpus programs and the tests compare.

Names, not ids (p4rt.names); values as integers; p4rt.codec turns them into P4Runtime
messages for one P4Info and back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


def _hash_once(self: Any) -> int:
    """The fields' hash, computed at the first call and kept: entities key the simulator's
    per-fabric caches and are hashed again for every switch that holds them."""
    state = self.__dict__
    value = state.get("_hash")
    if value is None:
        value = state["_hash"] = hash(tuple(state[name] for name in self.__dataclass_fields__))
    return value


def _state(self: Any) -> dict[str, Any]:
    """Pickled and copied without the kept hash: a string's hash differs between processes."""
    return {k: v for k, v in self.__dict__.items() if k != "_hash"}


@dataclass(frozen=True)
class Exact:
    __hash__ = _hash_once
    __getstate__ = _state

    value: int


@dataclass(frozen=True)
class Lpm:
    __hash__ = _hash_once
    __getstate__ = _state

    value: int
    prefix_len: int


MatchValue = Exact | Lpm


@dataclass(frozen=True)
class Action:
    __hash__ = _hash_once
    __getstate__ = _state

    name: str
    params: tuple[tuple[str, int], ...] = ()

    @property
    def param_dict(self) -> dict[str, int]:
        return dict(self.params)


@dataclass(frozen=True)
class TableEntry:
    """One entry; exactly one of `action`, `member_id`, `group_id` is set."""

    __hash__ = _hash_once
    __getstate__ = _state

    table: str
    match: tuple[tuple[str, MatchValue], ...]
    action: Action | None = None
    member_id: int | None = None
    group_id: int | None = None

    @property
    def key(self) -> tuple:
        return ("entry", self.table, self.match)

    @property
    def match_dict(self) -> dict[str, MatchValue]:
        return dict(self.match)


@dataclass(frozen=True)
class Member:
    __hash__ = _hash_once
    __getstate__ = _state

    profile: str
    member_id: int
    action: Action

    @property
    def key(self) -> tuple:
        return ("member", self.profile, self.member_id)


@dataclass(frozen=True)
class Group:
    __hash__ = _hash_once
    __getstate__ = _state

    profile: str
    group_id: int
    member_ids: tuple[int, ...]  # sorted

    @property
    def key(self) -> tuple:
        return ("group", self.profile, self.group_id)


@dataclass(frozen=True)
class RegisterCell:
    """One cell of a register array, written with MODIFY (registers have no INSERT)."""

    register: str
    index: int
    value: int

    @property
    def key(self) -> tuple:
        return ("register", self.register, self.index)


Entity = TableEntry | Member | Group


@dataclass(frozen=True)
class Update:
    kind: str  # "INSERT" | "MODIFY" | "DELETE" (P4Runtime Update.Type names)
    entity: Entity
