"""The gradebook CSV (grade --csv): one row per student with every declared check's column,
graded or not, formulas neutralised, and written only where root may write."""

from __future__ import annotations

import csv
import io
import os
from pathlib import Path

import pytest

from grader import gradebook
from grader.__main__ import build_parser, main
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


def test_a_grader_failure_has_its_own_exit_status(tmp_path: Path, monkeypatch, capsys):
    """Exit 1 says "graded, some below full marks"; 3 says the grader itself failed on a
    submission, whose grade then means nothing. Each submission of a class gets a progress
    line."""
    from grader import catalog, workspace

    ex = catalog.load(4)
    for name in ("alice", "bob"):
        workspace.write(workspace.solution(ex), tmp_path / "subs" / name)

    def fake(ex, files, name, target, trust=False, student="", timeout_s=None):
        if student == "bob":
            raise RuntimeError("our own bug")
        return Grade(ex.number, name, target, (Check("a.one", "first", 2, True),))

    monkeypatch.setattr(workspace, "grade", fake)
    assert main(["grade", "4", "--submission", str(tmp_path / "subs")]) == 3
    err = capsys.readouterr().err
    assert "[1/2] alice: 2/2" in err and "[2/2] bob: not graded" in err
    monkeypatch.setattr(workspace, "grade", lambda ex, files, name, target, **_: Grade(
        ex.number, name, target, (Check("a.one", "first", 2, False),)))
    assert main(["grade", "4", "--submission", str(tmp_path / "subs")]) == 1
