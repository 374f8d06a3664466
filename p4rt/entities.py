"""The P4 program's table contents as plain data: what the controller computes, the software
switch and BMv2 hold, the golden corpus programs and the tests compare.

Names, not ids (p4rt.names); values as integers; p4rt.codec turns them into P4Runtime
messages for one P4Info and back.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Exact:
    value: int


@dataclass(frozen=True)
class Lpm:
    value: int
    prefix_len: int


MatchValue = Exact | Lpm


@dataclass(frozen=True)
class Action:
    name: str
    params: tuple[tuple[str, int], ...] = ()

    @property
    def param_dict(self) -> dict[str, int]:
        return dict(self.params)


@dataclass(frozen=True)
class TableEntry:
    """One entry; exactly one of `action`, `member_id`, `group_id` is set."""

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
    profile: str
    member_id: int
    action: Action

    @property
    def key(self) -> tuple:
        return ("member", self.profile, self.member_id)


@dataclass(frozen=True)
class Group:
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
