"""Skeletons, reference solutions and fixtures as file sets, and the temporary project copy
a submission is graded in.

A file set maps project-relative paths to their text. Grading lays one over a fresh copy of
the project's allow-listed sources (grader.gradingcopy: never the whole checkout, never
through a link) and runs `python -m grader.inner` there
inside sandbox.contain: as an unprivileged uid in namespaces of its own, the copy read-only, a
results folder its only writable host path, with limits on time, memory, processes, file size
and output. Its report holds observations only; grader.judging decides the grade here, in a
process that never runs the student's code. Where no sandbox can be had, grading refuses
unless the caller trusts the submissions (`--trust-submissions`).
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from grader import challenge as challenges
from grader import collect, edition, gradingcopy, judging, regions
from grader.catalog import EXERCISES, ROOT, WORK, Exercise
from grader.errors import GraderError
from grader.report import Grade
from sandbox import contain

FileSet = dict[str, str]
CHECKS_TIMEOUT_S = 900  # one submission's checks, all stages: beyond it something hangs


class SubmissionError(GraderError, ValueError):
    """A submission folder the grader cannot use: the message says what to fix."""


def skeleton(ex: Exercise) -> FileSet:
    if ex.kind == "lab":  # a lab's skeleton is its template (catalog.py's docstring)
        return {rel: (ex.folder / "template" / rel).read_text() for rel in ex.files}
    return _cut(ex, {name: ex.stub(name) for names in ex.regions().values() for name in names})


def solution(ex: Exercise) -> FileSet:
    if ex.kind == "lab":  # computed: the grader answers its own questions by measuring
        module = importlib.import_module(f"rubrics.ex{ex.number}")
        return dict(module.solution(ex))
    return {rel: (ROOT / rel).read_text() for rel in ex.files}


def fixture(ex: Exercise, wrong: Path) -> FileSet:
    """A wrong-solution fixture: the reference solution with the regions `wrong` holds
    replaced by its broken bodies."""
    bodies = {p.name: p.read_text() for p in wrong.iterdir() if p.name != "expect.json"}
    if ex.kind == "lab":
        return _lab_fixture(ex, bodies)
    return _cut(ex, bodies)


def _lab_fixture(ex: Exercise, overlays: dict[str, str]) -> FileSet:
    """A lab's wrong answers: each JSON overlay merged over the computed solution's file."""
    out = solution(ex)
    unknown = sorted(set(overlays) - set(out))
    if unknown:
        raise SubmissionError(f"exercise {ex.number}: {unknown} are not among its files "
                              f"{', '.join(ex.files)}")
    for rel, overlay in overlays.items():
        merged = _merge(json.loads(out[rel]), json.loads(overlay))
        out[rel] = json.dumps(merged, indent=2) + "\n"
    return out


def _merge(base: object, overlay: object) -> object:
    if isinstance(base, dict) and isinstance(overlay, dict):
        return {**base, **{k: _merge(base.get(k), v) for k, v in overlay.items()}}
    return overlay


def fixture_expectation(wrong: Path) -> dict[str, str]:
    """{"fails": CHECK_ID, "why": ...} of a wrong-solution fixture."""
    return json.loads((wrong / "expect.json").read_text())


def _cut(ex: Exercise, bodies: dict[str, str]) -> FileSet:
    out = {}
    unused = set(bodies)
    for rel, names in ex.regions().items():
        mine = {n: bodies[n] for n in names if n in bodies}
        unused -= set(mine)
        out[rel] = regions.replace((ROOT / rel).read_text(), ex.number, mine, rel)
    if unused:
        raise SubmissionError(f"exercise {ex.number}: no region named {sorted(unused)} in "
                              f"{', '.join(ex.files)}")
    return out


def write(files: FileSet, dest: Path) -> list[Path]:
    written = []
    for rel, text in files.items():
        path = dest / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        written.append(path)
    return written


def working_folder(ex: Exercise) -> Path:
    """Where the student's files of `ex` are: the project itself for an exercise a student
    edition cut (grader.edition.in_place), else exercises/work/NN-slug/."""
    return ROOT if edition.in_place(ex) else WORK / ex.name


def read(ex: Exercise, folder: Path) -> FileSet:
    """A submission: the exercise's files under `folder`, at their project-relative paths,
    each read without following a link or blocking, and capped (grader.gradingcopy)."""
    refused = _refused_at_hand_in(folder)
    if refused:
        raise SubmissionError(f"{folder}: refused at hand-in: {refused}")
    out, problems = {}, []
    for rel in ex.files:
        try:
            out[rel] = gradingcopy.read_no_follow(folder, rel).decode(errors="replace")
        except FileNotFoundError:
            problems.append(f"missing {rel}")
        except OSError as exc:  # UnsafeFile: a link, a FIFO, too big; or unreadable
            problems.append(f"{rel}: {exc.strerror or exc}" if exc.errno else f"{exc}")
    if problems:
        raise SubmissionError(
            f"{folder}: {'; '.join(problems)} (a submission holds the exercise's files as "
            f"regular files at their project paths, as ./testbed exercise {ex.number} writes "
            f"them)")
    return out


def _refused_at_hand_in(folder: Path) -> str:
    """Why `classroom collect` refused this student's hand-in ('' if it did not)."""
    try:
        return gradingcopy.read_no_follow(folder, collect.REFUSED).decode(errors="replace").strip()
    except FileNotFoundError:
        return ""


def _is_dir(path: Path) -> bool:
    """A real folder (a link to one is not)."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def submissions(ex: Exercise, folder: Path) -> list[Path]:
    """`folder` itself if it is one submission, else each sub-folder (one per student; a
    link is listed too, and refused when read, so its student hears why)."""
    if not _is_dir(folder):
        raise SubmissionError(f"{folder} is not a directory")
    if any(os.path.lexists(folder / rel) for rel in ex.files):
        return [folder]
    subs = sorted(p for p in folder.iterdir() if not p.name.startswith(".")
                  and (_is_dir(p) or p.is_symlink()))
    if not subs:
        raise SubmissionError(f"{folder} holds neither {ex.files[0]} nor sub-folders of "
                              f"submissions")
    return subs


REPORT = "observations.json"


@contextmanager
def project_copy(files: FileSet) -> Iterator[Path]:
    """A temporary copy of the project's allow-listed sources (grader.gradingcopy) with
    `files` laid over; removed on exit without raising. Its folder is 0710 with the
    sandbox's group: the sandbox uid may enter it, no other user (a submission is the
    student's own work), and its copy/ and results/ (a size-capped tmpfs) sit side by side."""
    tmp = Path(tempfile.mkdtemp(prefix="mrc-grade-"))
    try:
        if os.geteuid() == 0:
            os.chown(tmp, 0, contain.SANDBOX_GID)
            tmp.chmod(0o710)
        copy = tmp / "project"
        skipped = gradingcopy.copy_sources(ROOT, copy, EXERCISES)
        if skipped:
            logging.getLogger("grader").warning("not copied into the grading copy: %s",
                                                "; ".join(skipped[:10]))
        write(files, copy)
        (tmp / "results").mkdir(mode=0o700)
        with gradingcopy.results_tmpfs(tmp / "results"):
            yield copy
    finally:
        left = gradingcopy.remove(tmp)
        if left:
            logging.getLogger("grader").warning("%s", left)


# host paths that mean nothing in the sandbox (it has its own /run and cache, both private)
_HOST_PATHS = {"MRC_RUN_DIR", "MRC_P4C_CACHE"}


def _passed_env(root: Path) -> dict[str, str]:
    """What the inner process gets from ours: its import path and the MRC_* switches."""
    mine = {k: v for k, v in os.environ.items()
            if k.startswith("MRC_") and k not in _HOST_PATHS}
    return {**mine, "PYTHONPATH": str(root), "PYTHONDONTWRITEBYTECODE": "1"}


def _run_trusted(argv: list[str], root: Path, timeout_s: float) -> tuple[int, bool, str]:
    """Without a sandbox (--trust-submissions): a plain process of ours."""
    env = {**os.environ, **_passed_env(root)}
    try:
        proc = subprocess.run(argv, cwd=root, env=env, capture_output=True, text=True,
                              timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return -1, True, ""
    return proc.returncode, False, proc.stderr


def _run_contained(argv: list[str], root: Path, timeout_s: float) -> tuple[int, bool, str]:
    result = contain.run(argv, copy=root, results=root.parent / "results",
                         venv=Path(sys.prefix), env=_passed_env(root),
                         limits=contain.Limits(wall_s=timeout_s),
                         live=os.geteuid() == 0)  # root stages run as root of a user namespace
    stderr = result.stderr + (f"\n[stopped by the sandbox's {result.limit} limit]"
                              if result.limit else "")
    return result.returncode, result.timed_out, stderr


def grade(ex: Exercise, files: FileSet, name: str, target: str,
          trust: bool = False, student: str = "", timeout_s: float | None = None) -> Grade:
    """Observe exercise `ex`'s checks on `files` in a project copy, contained in
    sandbox.contain (or, with `trust`, in a plain process), then judge what it reported here
    (grader.judging), never trusting its verdicts. The run's challenge (grader.challenge) is
    fresh: a report written for another run is refused. `student` names a class's student
    (their submission folder): a lab's assignment derives from it (grader.course).
    `timeout_s` bounds the checks (default CHECKS_TIMEOUT_S)."""
    timeout_s = CHECKS_TIMEOUT_S if timeout_s is None else timeout_s
    why = "" if trust else contain.available(live=os.geteuid() == 0)
    if why:
        return Grade(ex.number, name, target, (), error=(
            f"cannot contain the submission's code on this machine: {why}. Grading runs a "
            f"student's code; grade with --trust-submissions only code you trust"))
    token = challenges.new()

    def judged(report: dict | None, problem: str = "", measured: dict | None = None) -> tuple:
        return judging.judge(ex, report, target, problem, challenge=token, student=student,
                             measured=measured)
    with project_copy(files) as root:
        argv = [sys.executable, "-m", "grader.inner", str(ex.number), "--target", target,
                "--out", str(root.parent / "results" / REPORT), "--challenge", token]
        try:
            code, timed_out, stderr = (_run_trusted if trust else _run_contained)(
                argv, root, timeout_s)
        except contain.SandboxError as exc:  # e.g. a venv the sandbox uid cannot reach
            return Grade(ex.number, name, target, (), error=f"cannot sandbox: {exc}")
        if timed_out:
            return Grade(ex.number, name, target, judged(None, (
                f"the checks did not finish in {timeout_s:g} s: does your code loop "
                f"forever or wait on something that never comes?")))
        try:
            data = contain.read_result(root.parent / "results", REPORT,
                                       judging.MAX_REPORT_BYTES)
            report = judging.parse_report(data, token)
        except (OSError, contain.SandboxError, judging.MalformedReport) as exc:
            why = f"no usable report ({exc}; exit {code}): {stderr[-1500:]}"
            return Grade(ex.number, name, target, judged(None, why))
        measured = judging.measure(ex, report, target, challenge=token, copy=root,
                                   contained=not trust)
        return Grade(ex.number, name, target, judged(report, measured=measured))
