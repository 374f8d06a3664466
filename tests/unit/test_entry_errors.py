"""Entry points catch each unit's exception base (docs/architecture.md, "Errors") and print
one line: a refusal named by a subclass alone would let its siblings out as tracebacks."""

from __future__ import annotations

import ast
import builtins
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ENTRY_POINTS = ["sim.__main__", "controller.__main__", "grader.__main__", "softswitch.__main__",
                "host_agent.agent", "host_agent.cli", "served_core.agent", "bench.__main__",
                "topologies.two_tier"]


def unit_base(cls: type) -> type | None:
    """The project class of cls's ancestry that derives straight from a builtin (its unit's
    base); None for a builtin."""
    project = [c for c in cls.__mro__ if c.__module__.split(".")[0] not in ("builtins",)]
    roots = [c for c in project if all(b.__module__ == "builtins" for b in c.__bases__)]
    return roots[0] if roots else None


def local_imports(function: ast.FunctionDef) -> dict[str, object]:
    """Names a function imports itself (an entry point imports late, to answer --help fast)."""
    out: dict[str, object] = {}
    for node in ast.walk(function):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            source = importlib.import_module(node.module)
            for alias in node.names:
                out[alias.asname or alias.name] = getattr(source, alias.name)
    return out


def caught(module: object, local: dict[str, object], handler: ast.ExceptHandler) -> list[type]:
    names = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    out = []
    for node in names:
        if node is None or isinstance(node, ast.Starred):  # a caller's extra bases, given
            continue
        text = ast.unparse(node)
        obj = getattr(builtins, text, None) or local.get(text)
        if obj is None:
            obj = module
            for part in text.split("."):
                obj = getattr(obj, part)
        out.append(obj)
    return out


def stray_catches(module_name: str) -> list[str]:
    """Project exceptions a main's try names without also naming their unit's base."""
    pytest.importorskip("mininet.net")
    module = importlib.import_module(module_name)
    path = Path(module.__file__)  # type: ignore[arg-type]
    tree = ast.parse(path.read_text())
    mains = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "main"]
    bad = []
    for main in mains:
        local = local_imports(main)
        for node in ast.walk(main):
            if not isinstance(node, ast.Try):
                continue
            classes = [c for h in node.handlers for c in caught(module, local, h)]
            for cls in classes:
                base = unit_base(cls)
                if base is not None and base not in classes:
                    bad.append(f"{path.relative_to(ROOT)}:{node.lineno}: {cls.__name__} "
                               f"without {base.__name__}")
    return bad


@pytest.mark.parametrize("module_name", ENTRY_POINTS)
def test_entry_points_catch_each_units_base(module_name: str) -> None:
    assert stray_catches(module_name) == []


def test_the_check_bites() -> None:
    """A subclass alone is named: TopologyError without FabricError."""
    from fabric.errors import FabricError
    from fabric.topology import TopologyError
    assert unit_base(TopologyError) is FabricError
    assert unit_base(FabricError) is FabricError and unit_base(ValueError) is None
