"""In a student edition (grader/edition.py), which tests wait for an exercise: a test needs a
region that still holds its stub when its module imports, directly or through the project,
a Python file with such a region; when the region is P4 (ingress.p4), when it runs BMv2 (the
`bmv2` mark) or compiles the program (imports rubrics.p4 or nodes.targets); and the
grader's own tests of exercise N (tests/grader/exercises/test_exN.py, one that loads or grades
exercise N, or one marked `exercise(N)`) wait for exercise N. Those tests
skip, naming the exercise and the file, and run again as soon as the student's region is no
longer the stub. In the instructor's project nothing is skipped (grader.edition.waiting is
empty)."""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_P4_USERS = ("rubrics.p4", "nodes.targets")
_EX_TEST = re.compile(r"^test_ex(\d+)\.py$")
# A grader test that grades an exercise's reference or fixtures names the exercise so.
_NAMES_EXERCISE = re.compile(r"catalog\.load\((\d+)\)|\[\"(?:grade|check)\", \"(\d+)\"")


def _module(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


@cache
def _imports() -> dict[str, frozenset[str]]:
    """Project module -> the project modules it imports (any `import` anywhere in it)."""
    files = {_module(p): p for top in ROOT.iterdir() if top.is_dir() and not
             top.name.startswith(".") for p in top.rglob("*.py")}
    out = {}
    for name, path in files.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.add(node.module)
                found.update(f"{node.module}.{a.name}" for a in node.names)
        out[name] = frozenset(m for m in found if m in files)
    return out


@cache
def _closure(module: str) -> frozenset[str]:
    graph, seen, todo = _imports(), {module}, [module]
    while todo:
        for dep in graph.get(todo.pop(), ()):
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return frozenset(seen)


@cache
def _named_exercises(path: Path) -> frozenset[int]:
    """The exercises a grader test grades (by its name test_exN.py or by what it loads)."""
    match = _EX_TEST.match(path.name)
    named = {int(match[1])} if match else set()
    if path.relative_to(ROOT).parts[:2] == ("tests", "grader"):
        named |= {int(a or b) for a, b in _NAMES_EXERCISE.findall(path.read_text())}
    return frozenset(named)


def waits_for(path: Path, bmv2: bool, waiting: dict[int, list[str]],
              marked: frozenset[int] = frozenset()) -> str:
    """Why the test in `path` cannot pass yet ('' when it can); `marked`: the exercises its
    `exercise(n)` marks name (one test over several exercises:
    tests/grader/exercises/test_exercises.py)."""
    for n in sorted((_named_exercises(path) | marked) & set(waiting)):
        return f"waits for exercise {n} ({', '.join(waiting[n])} still holds its stubs)"
    reach = _closure(_module(path))
    for n, files in sorted(waiting.items()):
        for rel in files:
            if rel.endswith(".py"):
                needed = _module(ROOT / rel) in reach
            else:
                needed = bmv2 or any(m in reach for m in _P4_USERS)
            if needed:
                return f"waits for exercise {n} ({rel} still holds its stubs)"
    return ""
