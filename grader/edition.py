"""The student edition: a copy of the project a class can be handed, as nbgrader's
generate_assignment and otter-grader's assign make one, and what it changes in grading.

    ./testbed classroom student-edition DIR [--exercises 1,4,5]

writes DIR as a fresh git repository (one commit, no history from this one) of the project's
tracked files, where every chosen exercise's regions hold their stubs, its wrong-solution
fixtures are gone and the instructors' notes (with the lab's answer key) are gone. It records
what it is in exercises/edition.json; there `./testbed solution` and `grade --solution` /
`--wrong` refuse, and the tests that need a region still holding its stub skip, naming the
exercise they wait for (tests/edition_gate.py).

Grading differs by where it runs (`graft`): in the instructor's project every region a
submission does not answer for is the reference, so exercise 5 is graded on its own regions
even though its evs.py also holds the student's exercise 4; in a student edition the other
regions are the student's own work, and a region still holding its stub is named in the
feedback (`waiting_note`).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from grader import catalog, regions
from grader.catalog import Exercise
from grader.errors import GraderError

EDITION_FILE = "exercises/edition.json"
# Files that are the instructor's alone: the notes hold the lab's answer key.
INSTRUCTOR_ONLY = ("exercises/INSTRUCTORS.md",)
_TEACHERS_LINK = "Teachers: [INSTRUCTORS.md](INSTRUCTORS.md).\n"
GIT_TIMEOUT_S = 120
_BROKEN = "its markers"  # a region whose BEGIN/END markers no longer parse


class EditionError(GraderError, ValueError):
    """A student edition that cannot be made or used as asked: the message says what to do."""


@dataclass(frozen=True)
class Edition:
    exercises: tuple[int, ...]
    source_commit: str


def load(root: Path = catalog.ROOT) -> Edition | None:
    """The edition this checkout is, or None for the instructor's full project."""
    path = root / EDITION_FILE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
        return Edition(tuple(int(n) for n in data["exercises"]), str(data["source_commit"]))
    except (ValueError, KeyError, TypeError) as exc:
        raise EditionError(f"{path} is not a student edition's record ({exc!r}): restore it "
                           f"from git, or delete it in the instructor's project") from exc


def in_place(ex: Exercise, root: Path = catalog.ROOT) -> bool:
    """Whether the student works on `ex` in the project itself: in a student edition, a
    chosen exercise's files are the student's own repository's (its regions hold the stubs;
    a lab's answers.json is made from its template at the top by `./testbed exercise N`),
    so `check` grades them there, the demo and the tests run them, and the hand-in is the
    repository. Elsewhere the work goes into exercises/work/ (grader.workspace)."""
    shipped = load(root)
    return shipped is not None and ex.number in shipped.exercises


def refuse_in_edition(what: str, root: Path = catalog.ROOT) -> None:
    """Raise for an instructor's command run in a student edition."""
    if load(root) is not None:
        raise EditionError(f"this is a student edition: {what} is the instructor's (it needs "
                           f"the reference solutions, which are not here)")


def stubbed(ex: Exercise, root: Path = catalog.ROOT) -> dict[str, list[str]]:
    """Per file of `ex`: the regions whose body in `root` is still the exercise's stub."""
    out: dict[str, list[str]] = {}
    try:
        found = ex.regions(root)
    except regions.RegionError as exc:  # markers broken: it cannot work either (the
        return {", ".join(ex.files): [f"{_BROKEN}: {exc}"]}  # message names file and line)
    for rel, names in found.items():
        text = (root / rel).read_text()
        left = [n for n in names
                if regions.body(text, ex.number, n).strip() == ex.stub(n).strip()]
        if left:
            out[rel] = left
    return out


def waiting(root: Path = catalog.ROOT) -> dict[int, list[str]]:
    """In a student edition: exercise -> its files whose regions still hold a stub (the
    parts of the project that cannot work yet). Empty in the instructor's project."""
    edition = load(root)
    if edition is None:
        return {}
    out = {}
    for number in edition.exercises:
        left = stubbed(catalog.load(number, root / "exercises"), root)
        files = sorted(rel if not names[0].startswith(_BROKEN) else f"{rel} ({names[0]})"
                       for rel, names in left.items())
        if files:
            out[number] = files
    return out


def waiting_note(ex: Exercise, root: Path = catalog.ROOT) -> str:
    """For a student's feedback: the other exercises whose stubs this one's later stages
    run on ('' when none, and always in the instructor's project)."""
    others = {n: files for n, files in waiting(root).items() if n != ex.number}
    if not others:
        return ""
    parts = [f"exercise {n} ({', '.join(files)})" for n, files in sorted(others.items())]
    return ("later stages run the whole project, and its regions of " + "; ".join(parts)
            + " still hold their stubs: a stage that needs them waits for those exercises")


def graft(ex: Exercise, files: dict[str, str], root: Path = catalog.ROOT) -> dict[str, str]:
    """The submission's bodies of `ex`'s regions, laid into the project's own files: in the
    instructor's project the rest of each file is the reference; in a student edition the
    submission is taken whole (its other regions are the student's own work)."""
    if ex.kind == "lab" or load(root) is not None:
        return files
    out = {}
    for rel, names in ex.regions(root).items():
        try:
            bodies = {n: regions.body(files[rel], ex.number, n) for n in names}
        except regions.RegionError as exc:
            raise regions.RegionError(f"{rel}: {exc}: keep the BEGIN/END exercise "
                                      f"{ex.number} markers as ./testbed exercise "
                                      f"{ex.number} wrote them") from exc
        out[rel] = regions.replace((root / rel).read_text(), ex.number, bodies, rel)
    return out


def write(dest: Path, numbers: Sequence[int], root: Path = catalog.ROOT) -> list[str]:
    """Make the student edition in `dest` (absent or empty); the project-relative files it
    holds."""
    chosen = [catalog.load(n, root / "exercises") for n in sorted(set(numbers))]
    if load(root) is not None:
        raise EditionError("this checkout is itself a student edition: make editions from "
                           "the instructor's project")
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise EditionError(f"{dest} exists and is not an empty folder: name a new one")
    tracked = _tracked(root)
    dropped = _dropped(chosen, tracked, root)
    cut = _cut_sources(chosen, root)
    dest.mkdir(parents=True, exist_ok=True)
    kept = []
    for rel in tracked:
        if rel in dropped:
            continue
        _copy_one(root, dest, rel, cut.get(rel))
        kept.append(rel)
    record = {"exercises": [ex.number for ex in chosen], "source_commit": _head(root),
              "note": "a student edition: see grader/edition.py"}
    (dest / EDITION_FILE).write_text(json.dumps(record, indent=1) + "\n")
    kept.append(EDITION_FILE)
    _commit(dest, chosen)
    return kept


def _cut_sources(chosen: Iterable[Exercise], root: Path) -> dict[str, str]:
    """Project file -> its text with every chosen exercise's regions cut to their stubs
    (ex4 and ex5 both cut evs.py: the cuts compose)."""
    out: dict[str, str] = {}
    for ex in chosen:
        for rel, names in ex.regions(root).items():
            text = out.get(rel, (root / rel).read_text())
            out[rel] = regions.replace(text, ex.number, {n: ex.stub(n) for n in names}, rel)
    return out


def _dropped(chosen: Iterable[Exercise], tracked: Iterable[str], root: Path) -> set[str]:
    wrong = tuple(f"{ex.folder.relative_to(root).as_posix()}/wrong/" for ex in chosen)
    return {rel for rel in tracked if rel in INSTRUCTOR_ONLY or rel.startswith(wrong)
            or rel == EDITION_FILE}


def _copy_one(root: Path, dest: Path, rel: str, text: str | None) -> None:
    source, target = root / rel, dest / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    if source.is_symlink():
        os.symlink(os.readlink(source), target)
        return
    if text is None and rel == "exercises/README.md":
        text = source.read_text().replace(_TEACHERS_LINK, "")
    data = text.encode() if text is not None else source.read_bytes()
    target.write_bytes(data)
    target.chmod(source.stat().st_mode & 0o777)


def _git(cwd: Path, *args: str) -> str:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(cwd),
           "GIT_CONFIG_NOSYSTEM": "1", "LC_ALL": "C"}
    done = subprocess.run(["git", "-c", f"safe.directory={cwd}", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=GIT_TIMEOUT_S)
    if done.returncode != 0:
        raise EditionError(f"git {args[0]} in {cwd} failed: {done.stderr.strip()}")
    return done.stdout


def _tracked(root: Path) -> list[str]:
    """The project's files as git tracks them: nothing untracked or ignored (the course key,
    students' work, builds, the venv) reaches students."""
    if not (root / ".git").exists():
        raise EditionError(f"{root} is not a git checkout: a student edition is made from the "
                           f"instructor's clone of the project")
    return sorted(p for p in _git(root, "ls-files", "-z").split("\0")
                  if p and os.path.lexists(root / p))


def _head(root: Path) -> str:
    return _git(root, "rev-parse", "HEAD").strip()


def _commit(dest: Path, chosen: Sequence[Exercise]) -> None:
    _git(dest, "init", "-q", "-b", "main")
    _git(dest, "add", "-A")
    names = ", ".join(str(ex.number) for ex in chosen)
    _git(dest, "-c", "user.name=MRC testbed", "-c", "user.email=testbed@localhost",
         "commit", "-q", "-m", f"Student edition (exercises {names})")
