"""What a student may see of a grade: `./testbed check N`, the per-student feedback.md and
Gradescope's results.json. The instructor's report (grade --json, the text `grade` prints)
has everything; these show a check by its visibility (grader.report) and never its
`expected` text, which the grader derives from the reference or its own measurement.

What a student sees of a check: its title, pass or fail, the points, what their own code did
(`observed`) and the hint. A check not yet visible (after the due date, hidden) is counted,
not shown. The student sees their own code's output; the judges are written so that
`observed` holds nothing derived from the reference (tests/grader/test_feedback.py holds
every wrong fixture to it).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fabric.outfile import open_output_file
from grader.livelogs import LIVE, RESULTS
from grader.report import AFTER_DUE_DATE, VISIBLE, Check, Grade
from safety.privdir import check_workdir

GRADESCOPE_LOG_BYTES = 1024  # of each live-stage log, inline: results.json holds no files


def shown(check: Check, after_due: bool) -> bool:
    """Whether the student may see `check` now."""
    return check.visibility == VISIBLE or (after_due and check.visibility == AFTER_DUE_DATE)


def _split(grade: Grade, after_due: bool) -> tuple[list[Check], str]:
    """The checks the student may see now, and a sentence on those held back ('' if none)."""
    seen = [c for c in grade.checks if shown(c, after_due)]
    held = [c for c in grade.checks if not shown(c, after_due)]
    note = (f"{len(held)} more check(s), {sum(c.points for c in held)} point(s), are graded "
            "but shown after the due date or not at all") if held else ""
    return seen, note


def _to_fix(check: Check, logs_at: str) -> list[tuple[str, str]]:
    """What a student reads of a failed check: their own output and the hint, never what
    was expected; where a failed live stage left its logs (grader.livelogs)."""
    if check.passed:
        return []
    logs = f"the live stage's log tails and packet counts are in {logs_at}" if \
        check.logs and logs_at else ""
    return [(label, text) for label, text in (("observed", check.observed),
                                              ("hint", check.hint), ("logs", logs)) if text]


def student_text(grade: Grade, after_due: bool = False) -> str:
    """The student's view as text, in the layout of grader.report.render."""
    seen, held = _split(grade, after_due)
    lines = [f"exercise {grade.exercise}: {grade.submission}"]
    if grade.error:
        lines.append(f"  cannot grade: {grade.error}")
    for c in seen:
        lines.append(f"  [{'PASS' if c.passed else 'FAIL'}] {c.id} ({c.score}/{c.points}) "
                     f"{c.title}")
        lines += [f"         {label}: {text}" for label, text in
                  _to_fix(c, f"{RESULTS}/{LIVE}/ in the submission folder")]
    lines.append(f"  score {sum(c.score for c in seen)}/{sum(c.points for c in seen)} "
                 "on the checks shown")
    return "\n".join(lines + ([f"  {held}"] if held else []))


def student_markdown(grade: Grade, after_due: bool = False) -> str:
    """feedback.md: the same view, for a file handed back to the student."""
    seen, held = _split(grade, after_due)
    out = [f"# Exercise {grade.exercise}", ""]
    if grade.error:
        out += [f"**Not graded:** {grade.error}", ""]
    out += ["| check | result | points |", "|---|---|---|"]
    details: list[str] = []
    for c in seen:
        out.append(f"| {c.title} (`{c.id}`) | {'pass' if c.passed else 'FAIL'} | "
                   f"{c.score}/{c.points} |")
        if not c.passed:
            details += [f"## {c.id}", "", *(f"- {label}: {text}" for label, text in
                                             _to_fix(c, f"`{LIVE}/` beside this file")), ""]
    out += ["", f"{held}."] if held else []
    return "\n".join(out + [""] + details).rstrip() + "\n"


def gradescope_results(grade: Grade) -> dict[str, Any]:
    """Gradescope autograder results.json: every check as a test carrying its own visibility
    (Gradescope holds a test back as it says), and an output without `expected`."""
    tests = [{"name": f"{c.id}: {c.title}", "number": str(number), "score": c.score,
              "max_score": c.points, "visibility": c.visibility,
              "output": "\n".join([f"{label}: {text}" for label, text in _to_fix(c, "")]
                                  + [f"--- {name} (end) ---\n{text[-GRADESCOPE_LOG_BYTES:]}"
                                     for name, text in (() if c.passed else c.logs)])}
             for number, c in enumerate(grade.checks, start=1)]
    out: dict[str, Any] = {"score": grade.score, "tests": tests, "visibility": "visible",
                           "stdout_visibility": "hidden"}
    if grade.error:
        out["output"] = f"Not graded: {grade.error}"
    return out


def write_all(dest: Path, rows: list[tuple[str, Grade]], *, gradescope: bool,
              after_due: bool) -> list[Path]:
    """Each student's results.json (`gradescope`) or feedback.md into dest/STUDENT/ (dest/
    itself for a single submission, as Gradescope's /autograder/results wants). `dest` is
    made private first (root writes there: safety.privdir.check_workdir), so no folder
    in it is another user's; each file is opened as fabric.outfile does for any output."""
    check_workdir(dest)
    written = []
    for student, grade in rows:
        folder = dest / student if student else dest
        folder.mkdir(mode=0o755, exist_ok=True)
        if gradescope:
            path, data = folder / "results.json", json.dumps(gradescope_results(grade), indent=1)
        else:
            path, data = folder / "feedback.md", student_markdown(grade, after_due)
        with open_output_file(path) as out:
            out.write(data.encode())
        written.append(path)
        if not gradescope:
            written += _write_logs(folder / LIVE, grade, after_due)
    return written


def visible_logs(grade: Grade, after_due: bool = False) -> dict[str, str]:
    """The logs of the failed checks the student may see now (grader.livelogs): what goes
    beside feedback.md and into the submission's results/live/."""
    return {name: text for c in grade.checks if not c.passed and shown(c, after_due)
            for name, text in c.logs}


def _write_logs(folder: Path, grade: Grade, after_due: bool) -> list[Path]:
    """The failed live stages' logs beside feedback.md (the folder is the grader's own)."""
    logs = visible_logs(grade, after_due).items()
    if folder.is_dir() and not folder.is_symlink():  # an earlier run's (the folder is ours)
        for old in folder.iterdir():
            old.unlink()
    if not logs:
        return []
    folder.mkdir(mode=0o755, exist_ok=True)
    paths = []
    for name, text in logs:
        with open_output_file(folder / name) as out:
            out.write(text.encode())
        paths.append(folder / name)
    return paths
