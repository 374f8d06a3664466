"""Grading a class: every submission inside its own error boundary, `jobs` at a time, one
progress line each, and a cache so that an interrupted class resumes where it stopped.

- Jobs. With jobs > 1 each submission is graded in a worker process (multiprocessing's spawn,
  so no lock or thread of ours is inherited). Worker k claims sandbox slot k
  (sandbox.contain.use_slot): its own uid, so one student's fork bomb cannot spend another's
  process budget. The live stages still take the machine's fabric lock one at a time.
- Resume. A grade is cached under the course folder (.course/graded/, the instructor's, 0700)
  by a digest of the exercise, the target, the student, the submitted files and the grader's
  version (a digest of every project source grading reads). A grade with an error (the
  grader could not grade) is never cached: resuming retries it.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import BrokenExecutor, Future, ProcessPoolExecutor, as_completed
from pathlib import Path

from grader import catalog, course, gradingcopy, workspace
from grader.catalog import ROOT, Exercise
from grader.report import Check, Grade
from safety.privdir import check_workdir
from sandbox import contain

# name, student ('' outside a class), the files or why they could not be read
Submission = tuple[str, str, "workspace.FileSet | Exception"]
# Sources whose change changes a grade: everything a grading copy is made of.
VERSIONED = (*gradingcopy.PACKAGES, "exercises")
_SUFFIXES = (".py", ".p4", ".json", ".txtpb")


def grade_one(ex: Exercise, name: str, student: str, files: workspace.FileSet | Exception,
              target: str, trust: bool, timeout_s: float | None = None) -> Grade:
    """One student's grade inside its own error boundary: whatever goes wrong is this
    student's Grade.error (0 points, the reason), and the class goes on."""
    if isinstance(files, Exception):
        return Grade(ex.number, name, target, (), error=f"not graded: {files}")
    try:
        return workspace.grade(ex, files, name, target, trust=trust, student=student,
                               timeout_s=timeout_s)
    except (OSError, ValueError, RuntimeError) as exc:
        return Grade(ex.number, name, target, (), error=f"not graded: the grader failed on "
                     f"this submission ({type(exc).__name__}: {exc})")


def grader_version(root: Path = ROOT) -> str:
    """A digest of every source grading reads (VERSIONED): a cached grade is reused only by
    the grader that made it."""
    h = hashlib.sha256()
    for top in VERSIONED:
        for path in sorted((root / top).rglob("*")):
            rel = path.relative_to(root).as_posix()
            if (path.suffix in _SUFFIXES and path.is_file() and "/work/" not in f"/{rel}"
                    and "/build/" not in rel and "__pycache__" not in rel):
                h.update(rel.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


class GradeCache:
    """Grades already made, by submission digest (module docstring, "Resume")."""

    def __init__(self, ex: Exercise, target: str, timeout_s: float | None = None,
                 folder: Path | None = None) -> None:
        self.folder = folder or course.key_path().parent / "graded"
        self.folder.parent.mkdir(mode=0o700, exist_ok=True)
        check_workdir(self.folder)
        self._salt = f"{ex.number}\0{target}\0{timeout_s}\0{grader_version()}\0"

    def key(self, student: str, files: workspace.FileSet) -> str:
        h = hashlib.sha256(self._salt.encode() + student.encode() + b"\0")
        for rel in sorted(files):
            h.update(rel.encode() + b"\0" + files[rel].encode() + b"\0")
        return h.hexdigest()

    def get(self, key: str) -> Grade | None:
        try:
            fd = os.open(self.folder / f"{key}.json", os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            return None
        with os.fdopen(fd, "rb") as f:
            return grade_from_json(json.loads(f.read()))

    def put(self, key: str, grade: Grade) -> None:
        tmp = self.folder / f".{key}.{os.getpid()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(grade.to_json(), f)
        os.replace(tmp, self.folder / f"{key}.json")


def grade_from_json(data: dict) -> Grade:
    return Grade(int(data["exercise"]), str(data["submission"]), str(data["target"]),
                 tuple(Check.from_dict(c) for c in data["checks"]), str(data["error"]))


Done = Callable[[int, Grade, bool], None]  # index into the submissions, grade, from cache


def grade_all(ex: Exercise, todo: Sequence[Submission], target: str, trust: bool,
              jobs: int = 1, cache: GradeCache | None = None,
              done: Done = lambda *_: None, timeout_s: float | None = None) -> list[Grade]:
    """Every submission's grade, in `todo`'s order; `done` hears of each as it ends."""
    grades: list[Grade | None] = [None] * len(todo)
    keys: dict[int, str] = {}
    pending = []
    for i, (_name, student, files) in enumerate(todo):
        if cache is not None and not isinstance(files, Exception):
            keys[i] = cache.key(student, files)
            hit = cache.get(keys[i])
            if hit is not None:
                grades[i] = hit
                done(i, hit, True)
                continue
        pending.append(i)

    def finish(i: int, grade: Grade) -> None:
        grades[i] = grade
        if cache is not None and i in keys and not grade.error:
            cache.put(keys[i], grade)
        done(i, grade, False)

    if jobs <= 1 or len(pending) <= 1:
        for i in pending:
            finish(i, grade_one(ex, *todo[i], target, trust, timeout_s))
    else:
        _in_workers(ex, todo, pending, (target, trust, timeout_s), jobs, finish)
    return [g for g in grades if g is not None]


def _in_workers(ex: Exercise, todo: Sequence[Submission], pending: list[int], how: tuple,
                jobs: int, finish: Callable[[int, Grade], None]) -> None:
    """`pending` graded in `jobs` worker processes; `how` is grade_one's (target, trust,
    timeout_s)."""
    ctx = multiprocessing.get_context("spawn")
    slots = ctx.Queue()
    for slot in range(jobs):
        slots.put(slot)
    with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx, initializer=_claim_slot,
                             initargs=(slots,)) as pool:
        futures: dict[Future, int] = {
            pool.submit(_grade_in_worker, ex.number, *todo[i], *how): i
            for i in pending}
        for fut in as_completed(futures):
            i = futures[fut]
            try:
                grade = fut.result()
            except BrokenExecutor as exc:  # a worker died (killed, out of memory)
                grade = Grade(ex.number, todo[i][0], how[0], (), error=(
                    f"not graded: its grading process died ({exc})"))
            finish(i, grade)


def _claim_slot(slots) -> None:
    contain.use_slot(slots.get(timeout=30))


def _grade_in_worker(number: int, name: str, student: str,
                     files: workspace.FileSet | Exception, target: str, trust: bool,
                     timeout_s: float | None) -> Grade:
    return grade_one(catalog.load(number), name, student, files, target, trust, timeout_s)


def progress(done: int, total: int, who: str, grade: Grade, began: float,
             cached: bool = False) -> str:
    """One line per graded submission of a class: done/total, score, time, ETA."""
    spent = time.monotonic() - began
    left = spent / done * (total - done)
    score = f"{grade.score}/{grade.total}" if not grade.error else "not graded"
    return (f"[{done}/{total}] {who}: {score}{' (cached)' if cached else ''}, {spent:.0f} s "
            f"so far, about {left:.0f} s to go")
