"""The exercises, as their folders describe them (exercises/NN-slug/exercise.json).

exercise.json: {"title": str, "minutes": [min, max], "kind": "p4" | "python" | "lab",
"files": [project-relative paths the student edits]}. Beside it: README.md, stubs/REGION
(a skeleton's body for each region of the exercise) and wrong/NAME/ fixtures (REGION files
plus expect.json: {"fails": CHECK_ID, "why": str}). The checks live in
rubrics/exN.py.

A lab ("kind": "lab") has no code to cut: its files are what the student hands in (e.g.
answers.json), at the root of the submission folder. Its skeleton is the folder's
template/FILE; its solution is computed by rubrics/exN.py's `solution(ex)` (the
measurement answered by the grader itself); a wrong/NAME/FILE fixture holds JSON that is
merged over that solution (only the answers it gets wrong).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from grader import regions
from grader.errors import GraderError

ROOT = Path(__file__).resolve().parent.parent
EXERCISES = ROOT / "exercises"
WORK = EXERCISES / "work"  # students' working folders (git-ignored)
KINDS = ("p4", "python", "lab")
_FOLDER = re.compile(r"^(\d\d)-([a-z0-9-]+)$")


class CatalogError(GraderError, ValueError):
    """An exercise folder that does not say what the grader needs: the message says what."""


@dataclass(frozen=True)
class Exercise:
    number: int
    slug: str
    title: str
    minutes: tuple[int, int]
    kind: str
    files: tuple[str, ...]
    folder: Path

    @property
    def name(self) -> str:
        return f"{self.number:02d}-{self.slug}"

    def regions(self, root: Path = ROOT) -> dict[str, list[str]]:
        """Per file the exercise edits: its regions' names, as the markers in `root` say."""
        if self.kind == "lab":
            return {}  # a lab's files are the student's own, not cut from the project
        out = {}
        for rel in self.files:
            text = (root / rel).read_text()
            out[rel] = [r.name for r in regions.find(text, rel) if r.number == self.number]
        return out

    def stub(self, region: str) -> str:
        return (self.folder / "stubs" / region).read_text()

    def wrong_solutions(self) -> list[Path]:
        wrong = self.folder / "wrong"
        return sorted(p for p in wrong.iterdir() if p.is_dir()) if wrong.is_dir() else []


def load(number: int, exercises: Path = EXERCISES) -> Exercise:
    for ex in load_all(exercises):
        if ex.number == number:
            return ex
    known = ", ".join(str(e.number) for e in load_all(exercises))
    raise CatalogError(f"no exercise {number}: the exercises are {known}")


def load_all(exercises: Path = EXERCISES) -> list[Exercise]:
    found = []
    for folder in sorted(exercises.iterdir()) if exercises.is_dir() else []:
        m = _FOLDER.match(folder.name)
        if m is None or not (folder / "exercise.json").exists():
            continue
        found.append(_parse(int(m[1]), m[2], folder))
    return found


def _parse(number: int, slug: str, folder: Path) -> Exercise:
    where = folder / "exercise.json"
    try:
        data = json.loads(where.read_text())
        title, (lo, hi), kind = str(data["title"]), data["minutes"], data["kind"]
        files = tuple(str(f) for f in data.get("files", ()))
    except (ValueError, KeyError, TypeError) as exc:
        raise CatalogError(f"{where}: {exc!r}: needs title, minutes [min, max], kind and "
                           f"files") from exc
    if kind not in KINDS:
        raise CatalogError(f"{where}: kind {kind!r} is not one of {KINDS}")
    if kind != "lab" and not files:
        raise CatalogError(f"{where}: a {kind} exercise lists the files the student edits")
    return Exercise(number, slug, title, (int(lo), int(hi)), kind, files, folder)
