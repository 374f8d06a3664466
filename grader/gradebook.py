"""A class's grades for the gradebook: `grade --submission DIR --csv FILE` writes one row per
student, with the points of every check the exercise declares, so a spreadsheet or an LMS
import sees the same columns for every student, graded or not.

Columns: student, status ("graded", or "not graded" with the reason in `error`), score,
max, one column per check id (the points earned), error (also why a graded student got
nothing at all: the first check's observation, e.g. the checks' time limit or a crash). A
cell a student controls (a folder's name, an error quoting it) that a spreadsheet would take
for a formula (=, +, -, @, tab, carriage return first) is written with a leading apostrophe,
as OWASP advises for CSV exports.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from pathlib import Path

from fabric.outfile import open_output_file
from grader.report import CheckSpec, Grade

_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
GRADED, NOT_GRADED = "graded", "not graded"


def _cell(value: object) -> str:
    text = str(value)
    return "'" + text if text.startswith(_FORMULA_START) else text


def header(specs: Iterable[CheckSpec]) -> list[str]:
    return ["student", "status", "score", "max", *(s.id for s in specs), "error"]


def row(student: str, grade: Grade, specs: tuple[CheckSpec, ...]) -> list[str]:
    """One student's row; an ungraded student gets 0 in every check column."""
    earned = {c.id: c.score for c in grade.checks}
    status = NOT_GRADED if grade.error else GRADED
    total = sum(s.points for s in specs)
    return [_cell(student), status, str(grade.score), str(total),
            *(str(earned.get(s.id, 0)) for s in specs), _cell(reason(grade))]


def reason(grade: Grade) -> str:
    """Why a student got nothing: the grade's error, or what the first check observed when
    no check earned a point (a time limit, a crash, a full disk, an unsolved TODO)."""
    if grade.error or not grade.checks or grade.score:
        return grade.error
    return grade.checks[0].observed


def to_csv(rows: Iterable[tuple[str, Grade]], specs: tuple[CheckSpec, ...]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header(specs))
    for student, grade in rows:
        writer.writerow(row(student, grade, specs))
    return out.getvalue()


def write_csv(path: str | Path, rows: Iterable[tuple[str, Grade]],
              specs: tuple[CheckSpec, ...]) -> None:
    """The CSV into `path`, opened as every file root writes for a user option
    (fabric.outfile: never through a link, never into another user's file)."""
    with open_output_file(path) as out:
        out.write(to_csv(rows, specs).encode())
