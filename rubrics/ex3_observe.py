"""Exercise 3's canonical table form, and the sandboxed half of its grading.

The sandbox (grader.inner) imports the student's controller/tables.py, so all it reports is
what switch_tables returned for every switch of every fabric rubrics.ex3.shapes asks,
each entity in a canonical JSON form, or the text of the exception it raised; the judge
(rubrics.ex3.judge, in the grader's own process) derives the expected entries from
the fabric's cables and pushes frames through the software pipeline holding the reported
tables itself. So a forged report that claims success has to hold tables that really work.

Canonical form (one dict per entity, `kind` first):
  {"kind": "entry", "table", "match": [[field, value] | [field, value, prefix_len], ...],
   "action": name | None, "params": [[name, value], ...], "member": id | None,
   "group": id | None}
  {"kind": "member", "profile", "member", "action", "params"}
  {"kind": "group", "profile", "group", "members": [id, ...]}
  {"kind": "register", "register", "index", "value"}
"""

from __future__ import annotations

import operator
import traceback
from typing import Any

from p4rt import names as N
from p4rt.entities import Action, Exact, Group, Lpm, Member, RegisterCell, TableEntry

MAX_ENTITIES = 4096  # per switch: the largest fabric's switches hold a few dozen
Json = dict[str, Any]


# ---- the canonical form, both ways -----------------------------------------------------------
def _name(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{what} {value!r:.60} is not a string")
    return value


def _num(value: Any, what: str) -> int:
    """A student's integer (int, bool or anything with __index__) as a plain int."""
    try:
        return int(operator.index(value))
    except TypeError:
        raise TypeError(f"{what} {value!r:.60} is not an integer") from None


def _opt_num(value: Any, what: str) -> int | None:
    return None if value is None else _num(value, what)


def _params(action: Action | None) -> list[list[Any]]:
    if action is None:
        return []
    return [[_name(k, "parameter name"), _num(v, f"parameter {k!r}")] for k, v in action.params]


def entity_json(e: Any) -> Json:
    """One entity of a student's SwitchTables in canonical form; TypeError if it is not one
    the controller could write (the sandbox reports that as what switch_tables did)."""
    if isinstance(e, TableEntry):
        match: list[list[Any]] = []
        for field, value in e.match:
            if isinstance(value, Lpm):
                match.append([_name(field, "match field"), _num(value.value, field),
                              _num(value.prefix_len, f"{field} prefix length")])
            elif isinstance(value, Exact):
                match.append([_name(field, "match field"), _num(value.value, field)])
            else:
                raise TypeError(f"match value {value!r:.60} is neither Exact nor Lpm")
        return {"kind": "entry", "table": _name(e.table, "table"), "match": match,
                "action": None if e.action is None else _name(e.action.name, "action"),
                "params": _params(e.action), "member": _opt_num(e.member_id, "member id"),
                "group": _opt_num(e.group_id, "group id")}
    if isinstance(e, Member):
        return {"kind": "member", "profile": _name(e.profile, "profile"),
                "member": _num(e.member_id, "member id"),
                "action": _name(e.action.name, "action"), "params": _params(e.action)}
    if isinstance(e, Group):
        return {"kind": "group", "profile": _name(e.profile, "profile"),
                "group": _num(e.group_id, "group id"),
                "members": [_num(m, "member id") for m in e.member_ids]}
    if isinstance(e, RegisterCell):
        return {"kind": "register", "register": _name(e.register, "register"),
                "index": _num(e.index, "register index"), "value": _num(e.value, "value")}
    raise TypeError(f"{type(e).__name__} is not a table entity")


def _int(value: Any, what: str) -> int:
    """An integer of an untrusted report: JSON's own ints only."""
    if type(value) is not int:
        raise TypeError(f"{what} is not an integer: {value!r:.60}")
    return value


def _opt_int(value: Any, what: str) -> int | None:
    return None if value is None else _int(value, what)


def _str(value: Any, what: str) -> str:
    if type(value) is not str:
        raise TypeError(f"{what} is not a string: {value!r:.60}")
    return value


def _action(name: Any, params: Any) -> Action:
    return Action(_str(name, "action"), tuple((_str(k, "parameter name"), _int(v, "parameter"))
                                              for k, v in params))


def entity_from_json(d: Any) -> TableEntry | Member | Group | RegisterCell:
    """An entity back from the untrusted report; TypeError/ValueError/KeyError if malformed."""
    kind = d["kind"]
    if kind == "entry":
        match: list[tuple[str, Exact | Lpm]] = []
        for item in d["match"]:
            if not isinstance(item, list) or len(item) not in (2, 3):
                raise ValueError(f"a match is [field, value] or [field, value, prefix_len], "
                                 f"not {item!r:.60}")
            value: Exact | Lpm = Exact(_int(item[1], "match value")) if len(item) == 2 else \
                Lpm(_int(item[1], "match value"), _int(item[2], "prefix length"))
            match.append((_str(item[0], "match field"), value))
        action = None if d["action"] is None else _action(d["action"], d["params"])
        return TableEntry(_str(d["table"], "table"), tuple(match), action,
                          _opt_int(d["member"], "member id"), _opt_int(d["group"], "group id"))
    if kind == "member":
        return Member(_str(d["profile"], "profile"), _int(d["member"], "member id"),
                      _action(d["action"], d["params"]))
    if kind == "group":
        return Group(_str(d["profile"], "profile"), _int(d["group"], "group id"),
                     tuple(_int(m, "member id") for m in d["members"]))
    if kind == "register":
        return RegisterCell(_str(d["register"], "register"), _int(d["index"], "index"),
                            _int(d["value"], "value"))
    raise ValueError(f"unknown entity kind {kind!r:.40}")


def entities_from_json(items: Any, switch: str) -> list[TableEntry | Member | Group | RegisterCell]:
    """A switch's reported entities, refusing a list longer than any real answer's."""
    if not isinstance(items, list):
        raise TypeError(f"{switch}: the entities are not a list")
    if len(items) > MAX_ENTITIES:
        raise ValueError(f"{switch}: {len(items)} entities, more than {MAX_ENTITIES}")
    return [entity_from_json(d) for d in items]


def usid_fwd_rows(entities: list[Any]) -> list[tuple[int, int, int]]:
    """(uSID prefix, port, dmac) of every usid_fwd entry, -1 for a parameter it lacks;
    KeyError if one has no uSID prefix field (the sandbox reports it as switch_tables' error)."""
    out = []
    for e in entities:
        if isinstance(e, TableEntry) and e.table == N.USID_FWD_TABLE:
            prefix = dict(e.match)[N.USID_PREFIX].value
            params = e.action.param_dict if e.action is not None else {}
            out.append((prefix, params.get(N.PARAM_PORT, -1), params.get(N.PARAM_DMAC, -1)))
    return out


# ---- the sandbox -----------------------------------------------------------------------------
def crash_text(exc: BaseException) -> str:
    return "".join(traceback.format_exception_only(type(exc), exc)).strip()


def observe_tables(fabrics: tuple[dict[str, int], ...]) -> Json:
    """{"fabrics": [{switch name: [entity, ...]}, ...] in the order of `fabrics` (ex3.shapes),
    "raised": None} or, when switch_tables raised, the switches done before it (the fabric it
    raised in last, without it) and {"switch", "error"} in "raised"."""
    from controller.tables import switch_tables  # the student's code
    from fabric.topology import Fabric

    out: Json = {"fabrics": [], "raised": None}
    for shape in fabrics:
        fabric = Fabric(**shape)
        seen: dict[str, list[Json]] = {}
        for switch in fabric.switches:
            try:
                tables = switch_tables(fabric, switch)
                seen[switch.name] = [entity_json(e) for e in tables.entities()]
                usid_fwd_rows(entities_from_json(seen[switch.name], switch.name))
            except Exception as exc:  # the student's code: reported, the judge words it
                out["fabrics"].append(seen)  # the switches before it count as checked
                out["raised"] = {"switch": switch.name, "error": crash_text(exc)}
                return out
        out["fabrics"].append(seen)
    return out
