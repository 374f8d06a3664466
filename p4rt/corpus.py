"""Loader for the golden packet corpus (tests/golden/cases.json, format in tests/golden/README.md).

One truth for every data plane: the BMv2 runner (rigs/bmv2_corpus.py), the software
switch's and the simulator's tests and the P4 exercises' grader (rubrics/p4.py) feed these cases
to their pipeline and compare. It lives here, not in tests/, because the grader is production
code and must not import tests (docs/architecture.md). API:

    load_cases(path=CASES_PATH) -> list[Case]

Integers that may exceed 53 bits (match values, params, addresses) are hex strings in the
JSON and plain ints here; frames are bytes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from p4rt import names as p4names
from p4rt.codec import Codec
from p4rt.entities import Action, Entity, Exact, Lpm, RegisterCell, TableEntry
from p4rt.errors import P4rtError
from p4rt.program import ecmp_group, ecmp_member

CASES_PATH = Path(__file__).resolve().parents[1] / "tests" / "golden" / "cases.json"  # data
FORMAT_VERSION = 2  # 2: optional `prelude`


class CorpusError(P4rtError, ValueError):
    """The corpus file does not follow README.md; the message names the case and field."""


@dataclass(frozen=True)
class Output:
    port: int
    frame: bytes


@dataclass(frozen=True)
class Case:
    """One packet in, and what must come out.

    Exactly one of these holds:
    - drop_reason is set: nothing is transmitted and drop_counter[DROP_REASONS[reason]] rises
      by one;
    - one_of is False: exactly the frames in `outputs` are transmitted, each on its port;
    - one_of is True: exactly one frame is transmitted and it equals one of `outputs`
      (ECMP: which member the hash picks is target-specific).
    Registers not listed in `registers` start at 0. `counters` holds expected increments of
    indexed counters, {counter name: {index: packets}}, counted from after the prelude.
    `prelude` frames are sent first, in order, each after the previous one has left the
    switch; what they become is not checked: they set up queue state (egress writes the
    depth register) that the case frame must see.
    """

    name: str
    description: str
    switch: str
    ingress_port: int
    frame: bytes
    entities: tuple[Entity, ...]  # p4rt entities in write order (members, group, entry)
    registers: dict[str, dict[int, int]]
    outputs: tuple[Output, ...]
    one_of: bool
    drop_reason: str | None
    counters: dict[str, dict[int, int]]
    prelude: tuple[Output, ...] = ()

    @property
    def entries(self) -> list[TableEntry]:
        return [e for e in self.entities if isinstance(e, TableEntry)]

    @property
    def register_cells(self) -> tuple[RegisterCell, ...]:
        return tuple(RegisterCell(name, index, value) for name, cells in self.registers.items()
                     for index, value in sorted(cells.items()))


def case_updates(codec: Codec, case: Case) -> list:
    """P4Runtime updates that program a case: its entities, then its register presets."""
    return codec.inserts(case.entities + case.register_cells)


def _int(value: Any, where: str) -> int:
    if isinstance(value, bool):
        raise CorpusError(f"{where}: expected an integer, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value, 0)
        except ValueError:
            pass
    raise CorpusError(f"{where}: expected an int or a 0x-prefixed hex string, got {value!r}")


def _hex_bytes(value: Any, where: str) -> bytes:
    try:
        return bytes.fromhex(value)
    except (TypeError, ValueError) as exc:
        raise CorpusError(f"{where}: expected a hex string of bytes ({exc})") from exc


def _action(raw: dict[str, Any], where: str) -> Action:
    name = raw.get("action")
    if name not in p4names.ACTION_PARAMS:
        raise CorpusError(f"{where}: unknown action {name!r}")
    params = {k: _int(v, f"{where}.params.{k}") for k, v in raw.get("params", {}).items()}
    expected = [p for p, _ in p4names.ACTION_PARAMS[name]]
    if sorted(params) != sorted(expected):
        raise CorpusError(f"{where}: {name} takes params {expected}, got {sorted(params)}")
    return Action(name, tuple((p, params[p]) for p in expected))


def parse_entities(raws: list[dict[str, Any]], name: str) -> tuple[Entity, ...]:
    """The case's entries as p4rt entities; an ECMP entry becomes its members (ids 1.. across
    the case), one group (ids 1..) and the table entry pointing at the group."""
    out: list[Entity] = []
    next_member = next_group = 1
    for i, raw in enumerate(raws):
        where = f"{name}.entries[{i}]"
        match = []
        for fname, spec in raw.get("match", {}).items():
            if isinstance(spec, dict):
                match.append((fname, Lpm(_int(spec.get("value"), f"{where}.match.{fname}"),
                                         _int(spec.get("prefix_len"), f"{where}.match.{fname}"))))
            else:
                match.append((fname, Exact(_int(spec, f"{where}.match.{fname}"))))
        action = _action(raw["action"], f"{where}.action") if "action" in raw else None
        calls = [_action(m, f"{where}.group[{j}]") for j, m in enumerate(raw.get("group", []))]
        if (action is None) == (not calls):
            raise CorpusError(f"{where}: give exactly one of 'action' and 'group'")
        table = str(raw.get("table"))
        if action is not None:
            out.append(TableEntry(table, tuple(match), action))
            continue
        ids = list(range(next_member, next_member + len(calls)))
        for member_id, call in zip(ids, calls, strict=True):
            params = call.param_dict
            out.append(ecmp_member(member_id, params[p4names.PARAM_PORT],
                                   params[p4names.PARAM_DMAC]))
        out.append(ecmp_group(next_group, ids))
        out.append(TableEntry(table, tuple(match), group_id=next_group))
        next_member += len(calls)
        next_group += 1
    return tuple(out)


def _indexed(raw: dict[str, Any], where: str) -> dict[str, dict[int, int]]:
    return {name: {_int(i, f"{where}.{name}"): _int(v, f"{where}.{name}[{i}]")
                   for i, v in values.items()}
            for name, values in raw.items()}


def _prelude(raw: Any, name: str) -> tuple[Output, ...]:
    """A prelude is a list of {"port", "frame"} objects; anything else is a corpus error
    (not a crash in a runner half-way through a switch session)."""
    if not isinstance(raw, list):
        raise CorpusError(f"{name}.prelude: expected a list of {{port, frame}} objects, "
                          f"got {type(raw).__name__}")
    frames = []
    for i, item in enumerate(raw):
        where = f"{name}.prelude[{i}]"
        if not isinstance(item, dict) or set(item) != {"port", "frame"}:
            raise CorpusError(f"{where}: expected an object with exactly 'port' and 'frame'")
        frame = _hex_bytes(item["frame"], f"{where}.frame")
        if not frame:
            raise CorpusError(f"{where}.frame: empty")
        frames.append(Output(_int(item["port"], f"{where}.port"), frame))
    return tuple(frames)


def _case(raw: dict[str, Any]) -> Case:
    name = raw.get("name", "?")
    expect = raw.get("expect", {})
    drop = expect.get("drop")
    if drop is not None and drop not in p4names.DROP_REASONS:
        raise CorpusError(f"{name}: unknown drop reason {drop!r}")
    kinds = [k for k in ("drop", "outputs", "one_of") if k in expect]
    if len(kinds) != 1:
        raise CorpusError(f"{name}: expect needs exactly one of 'drop', 'outputs', 'one_of'")
    one_of = kinds == ["one_of"]
    outs = expect.get(kinds[0], []) if drop is None else []
    if drop is None and not outs:
        raise CorpusError(f"{name}: expect.{kinds[0]} lists no frames")
    return Case(
        name=name,
        description=raw.get("description", ""),
        switch=raw.get("switch", ""),
        ingress_port=_int(raw.get("ingress_port"), f"{name}.ingress_port"),
        frame=_hex_bytes(raw.get("frame"), f"{name}.frame"),
        entities=parse_entities(raw.get("entries", []), name),
        registers=_indexed(raw.get("registers", {}), f"{name}.registers"),
        outputs=tuple(Output(_int(o.get("port"), f"{name}.port"),
                             _hex_bytes(o.get("frame"), f"{name}.output"))
                      for o in outs),
        one_of=one_of,
        drop_reason=drop,
        counters=_indexed(expect.get("counters", {}), f"{name}.counters"),
        prelude=_prelude(raw.get("prelude", []), name),
    )


def load_cases(path: Path = CASES_PATH) -> list[Case]:
    """Parse and validate the corpus; raises CorpusError saying which case is wrong."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise CorpusError(f"cannot read corpus {path}: {exc}") from exc
    if doc.get("format_version") != FORMAT_VERSION:
        raise CorpusError(f"{path}: format_version {doc.get('format_version')!r}, "
                          f"this loader reads {FORMAT_VERSION}")
    cases = [_case(raw) for raw in doc.get("cases", [])]
    names = [c.name for c in cases]
    if len(set(names)) != len(names):
        raise CorpusError(f"{path}: duplicate case names")
    return cases
