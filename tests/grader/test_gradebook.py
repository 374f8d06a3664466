"""The gradebook CSV (grade --csv): one row per student with every declared check's column,
graded or not, formulas neutralised, and written only where root may write."""

from __future__ import annotations

import csv
import io
import os
from pathlib import Path

import pytest

from grader import gradebook
from grader.__main__ import build_parser
from grader.report import Check, CheckSpec, Grade

SPECS = (CheckSpec("a.one", "first", 2), CheckSpec("b.two", "second", 3))


def _rows(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def test_every_student_gets_every_declared_column():
    graded = Grade(4, "subs/alice", "soft", (Check("a.one", "first", 2, True),
                                             Check("b.two", "second", 3, False)))
    missing = Grade(4, "subs/bob", "soft", (), error="not graded: missing evs.py")
    text = gradebook.to_csv([("alice", graded), ("bob", missing)], SPECS)
    assert text.splitlines()[0] == "student,status,score,max,a.one,b.two,error"
    alice, bob = _rows(text)
    assert (alice["status"], alice["score"], alice["max"]) == ("graded", "2", "5")
    assert (alice["a.one"], alice["b.two"], alice["error"]) == ("2", "0", "")
    assert (bob["status"], bob["score"], bob["max"], bob["a.one"]) == ("not graded", "0", "5",
                                                                       "0")
    assert bob["error"] == "not graded: missing evs.py"


def test_a_name_a_spreadsheet_would_run_is_quoted():
    evil = "=HYPERLINK(\"http://x\",\"y\")"
    text = gradebook.to_csv([(evil, Grade(4, evil, "soft", (), error="-1+1"))], SPECS)
    (row,) = _rows(text)
    assert row["student"] == "'" + evil and row["error"] == "'-1+1"


def test_a_planted_link_is_refused_before_grading(tmp_path: Path, capsys):
    victim = tmp_path / "victim"
    victim.write_text("keep")
    link = tmp_path / "grades.csv"
    link.symlink_to(victim)
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["grade", "4", "--solution", "--csv", str(link)])
    assert exit_.value.code == 2 and "link" in capsys.readouterr().err
    assert victim.read_text() == "keep"


@pytest.mark.skipif(os.geteuid() != 0, reason="another user's file: root makes it")
def test_another_users_file_is_left_alone(tmp_path: Path):
    other = tmp_path / "grades.csv"
    other.write_text("theirs")
    os.chown(other, 65534, 65534)
    with pytest.raises(OSError):
        gradebook.write_csv(other, [], SPECS)
    assert other.read_text() == "theirs"
