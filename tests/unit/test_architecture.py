"""The layering of docs/architecture.md, read from the code's own imports, and the rule that
frame offsets and DSCP classes are defined once (wire/layout.py)."""

from __future__ import annotations

import ast
import builtins
import re
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Each unit may import only the units listed: read from docs/architecture.md's table "Who may
# import whom", so the page and this test cannot drift apart.
CONTRACTS = {"wire", "fabric", "p4rt"}
PAGE = ROOT / "docs" / "architecture.md"


def allowed_from_page(text: str) -> dict[str, set[str]]:
    """unit -> the units it may import, from the page's table: backticked names in the
    second column before any "never" (what follows "never" is excluded, as is the
    parenthesis that names files), plus every unit of the rows above for "all of the above"."""
    rows = re.findall(r"^\| ([^|]+) \| ([^|]+) \|$", text.split("| unit | may import |", 1)[1]
                      .split("\n\n", 1)[0], re.M)
    allowed: dict[str, set[str]] = {}
    for units_cell, may in rows:
        if set(units_cell) <= {"-"}:
            continue  # the header rule
        granted, _, refused = may.partition("never")
        names = set(re.findall(r"`([\w.]+)`", granted.split("(")[0]))
        if "all of the above" in granted:
            names |= set(allowed)
        names -= set(re.findall(r"`([\w.]+)`", refused.split("(")[0]))
        for unit in re.findall(r"`([\w.]+)`", units_cell):
            allowed[unit] = names - {unit}
    return allowed


ALLOWED = allowed_from_page(PAGE.read_text())
UNITS = set(ALLOWED) | {"tests"}
# Python modules a sans-IO core must never use: sockets, threads, clocks, event loops.
IO_MODULES = {"socket", "select", "selectors", "threading", "time", "asyncio", "subprocess",
              "os"}


def unit_of(module: str) -> str | None:
    parts = module.split(".")
    if parts[:2] == ["host_agent", "core"]:
        return "host_agent.core"
    return parts[0] if parts[0] in UNITS else None


def python_files() -> list[Path]:
    return [p for p in ROOT.rglob("*.py")
            if not {".venv", "build", ".git"} & set(p.parts) and p.relative_to(ROOT).parts]


def imports_of(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out |= {f"{node.module}.{a.name}" for a in node.names}
    return out


def unit_graph() -> dict[str, dict[str, set[str]]]:
    """{importing unit: {imported unit: files that import it}}."""
    graph: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for path in python_files():
        rel = path.relative_to(ROOT).with_suffix("")
        src = unit_of(".".join(rel.parts))
        if src is None:
            continue
        for name in imports_of(path):
            dst = unit_of(name)
            if dst is not None and dst != src:
                graph[src][dst].add(str(rel))
    return graph


def test_every_package_is_placed_in_a_layer() -> None:
    top = {p.parent.name for p in ROOT.glob("*/__init__.py")}
    assert top - UNITS == set(), "add the new package to ALLOWED and docs/architecture.md"


def test_units_import_only_the_layers_below() -> None:
    bad = [f"{src} imports {dst} ({', '.join(sorted(files))})"
           for src, deps in unit_graph().items() if src != "tests"
           for dst, files in deps.items() if dst not in ALLOWED[src]]
    assert bad == []


def test_contracts_import_no_project_package() -> None:
    graph = unit_graph()
    assert {c: sorted(graph[c]) for c in CONTRACTS if graph.get(c)} == {}


def test_no_import_cycles_between_units() -> None:
    graph = {src: set(deps) for src, deps in unit_graph().items()}
    state: dict[str, int] = {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for nxt in graph.get(node, ()):
            assert state.get(nxt) != 1, f"import cycle: {' -> '.join(trail + [node, nxt])}"
            if nxt not in state:
                visit(nxt, trail + [node])
        state[node] = 2

    for node in list(graph):
        if node not in state:
            visit(node, [])


def test_the_core_never_touches_io() -> None:
    bad = {}
    for path in (ROOT / "host_agent" / "core").glob("*.py"):
        used = {name.split(".")[0] for name in imports_of(path)} & IO_MODULES
        if used:
            bad[path.name] = sorted(used)
    assert bad == {}


def test_code_outside_the_core_uses_its_public_api() -> None:
    """Production code imports `host_agent.core`, never its submodules (tests may, to reach
    internals such as EvSet; so may an exercise's checks, rubrics/exN.py, which test
    the internals the student writes, such as evstate.TRANSITIONS)."""
    bad = []
    for path in python_files():
        rel = path.relative_to(ROOT)
        if rel.parts[0] in ("tests", "rubrics") or rel.parts[:2] == ("host_agent", "core"):
            continue
        bad += [f"{rel}: {name}" for name in imports_of(path)
                if name.startswith("host_agent.core.")
                and name.rsplit(".", 1)[0] != "host_agent.core"]
    assert bad == []


def test_no_test_module_imports_another() -> None:
    bad = []
    for path in (ROOT / "tests").rglob("test_*.py"):
        bad += [f"{path.relative_to(ROOT)}: {name}" for name in imports_of(path)
                if re.search(r"(^|\.)test_\w+$", name.rsplit(".", 1)[0])
                or re.search(r"(^|\.)test_\w+$", name)]
    assert bad == []


# Frame-handling code must name offsets and classes from wire.layout, never spell them out.
FRAME_CODE = ["softswitch", "sim", "host_agent", "safety", "nodes", "emulation", "views", "demo",
              "rigs", "topologies", "bench", "controller"]
STRAY = [
    (re.compile(r"\[\s*\d+\s*:\s*\d+\s*\]"), "a byte slice with literal offsets"),
    (re.compile(r"\b(frame|out|data|buf|pkt|raw|payload)\[\d{2,}\]"), "a literal byte offset"),
    (re.compile(r"^\s*[A-Z_]*(DSCPS|ECT_CODES|ECT)\s*=", re.M), "a DSCP/ECN class"),
    (re.compile(r"^\s*[A-Z_]*(TRIMMED|HEADERS)_[A-Z_]*LEN\s*=", re.M), "a header/trim length"),
    (re.compile(r"^\s*(OUTER|INNER|UDP|BTH)(_[A-Z]+)*\s*=\s*\d", re.M), "a frame offset"),
    (re.compile(r"\bfrozenset\(\{[^}]*DSCP_"), "a set of DSCP values"),
    (re.compile(r"PSN_(MASK|HALF)\b|PSN_MOD\s*(-\s*1|>>\s*1)"),
     "PSN serial arithmetic by hand (wire.psn_add, wire.psn_diff)"),
]


def test_offsets_and_dscp_classes_are_defined_once() -> None:
    hits = []
    for top in FRAME_CODE:
        for path in (ROOT / top).rglob("*.py"):
            text = path.read_text()
            for pattern, what in STRAY:
                for m in pattern.finditer(text):
                    line = text.count("\n", 0, m.start()) + 1
                    hits.append(f"{path.relative_to(ROOT)}:{line}: {what}: {m.group(0).strip()}")
    assert hits == [], "use the names in wire/layout.py and wire's PSN arithmetic"


def test_the_stray_literal_check_catches_what_it_should() -> None:
    samples = {'prefix = frame[38:44]': True, 'out[21] = 3': True,
               'HIGH_DSCPS = frozenset({DSCP_CONTROL})': True, 'TRIMMED_UDP_LEN = 40': True,
               'OUTER = 14': True, 'x = frame[OUTER_DST:_DST_END]': False,
               'ports[10] = p': False, '_PSN_HALF = wire.PSN_MOD >> 1': True,
               'rel = ((psn - cack + _PSN_HALF) & _PSN_MASK) - _PSN_HALF': True,
               'mask = PSN_MOD - 1': True, 'rel = psn_diff(psn, cack)': False}
    for text, stray in samples.items():
        assert any(p.search(text) for p, _ in STRAY) == stray, text


# ---- one base per unit for its exceptions (issue 51) -------------------------------------

BUILTIN_EXCEPTIONS = {name for name, obj in vars(builtins).items()
                      if isinstance(obj, type) and issubclass(obj, BaseException)}


def root_exceptions() -> dict[str, list[str]]:
    """top-level package -> its exception classes whose bases are all builtins (no project
    base): at most one each, control-flow signals included."""
    found: dict[str, list[str]] = defaultdict(list)
    for path in python_files():
        rel = path.relative_to(ROOT)
        unit = unit_of(".".join(rel.with_suffix("").parts))
        if unit in (None, "tests"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ClassDef) or not node.bases:
                continue
            names = [b.id if isinstance(b, ast.Name) else None for b in node.bases]
            if all(n in BUILTIN_EXCEPTIONS for n in names):
                found[rel.parts[0]].append(f"{rel}:{node.name}")
    return found


def test_each_unit_has_one_exception_base() -> None:
    """A caller catches everything a unit refuses with one class (h11's model): every other
    exception of the unit derives from that base (and may keep a builtin beside it, so
    `except ValueError` still catches what it caught). A new class straight off a builtin
    fails here, named."""
    many = {unit: classes for unit, classes in root_exceptions().items() if len(classes) > 1}
    assert many == {}
    assert root_exceptions()["host_agent"] == ["host_agent/core/errors.py:MrcHostError"]
