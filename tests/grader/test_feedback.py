"""What a student may see (grader.feedback): visibility per check, no expected value, the
student's loop (`check`), feedback files and Gradescope's results.json. Every wrong fixture's
student view is held to it in test_python_fixtures.py, ex7's wrong answers in test_ex7.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from grader import catalog, feedback, workspace
from grader.__main__ import main
from grader.report import AFTER_DUE_DATE, HIDDEN, Check, Grade
from safety.privdir import UnsafePathError
from sandbox import contain

SECRET = "port 3 to 0x0a0b0c0d0e0f"  # what a judge derived from the reference


def _grade() -> Grade:
    return Grade(7, "subs/alice", "soft", (
        Check("a.form", "the form", 1, False, expected=SECRET, observed="mine: 2",
              hint="look again"),
        Check("b.figure", "a figure", 3, False, expected=SECRET, observed="41.5",
              hint="reread the RTT", visibility=AFTER_DUE_DATE),
        Check("c.secret", "a hidden one", 2, True, expected=SECRET, observed="ok",
              visibility=HIDDEN)))


def test_the_student_sees_their_own_output_and_never_an_expected_value():
    g = _grade()
    before = feedback.student_text(g)
    assert "a.form" in before and "mine: 2" in before and "look again" in before
    assert "b.figure" not in before and "41.5" not in before and "c.secret" not in before
    assert "2 more check(s), 5 point(s)" in before and "0/1 on the checks shown" in before
    after = feedback.student_text(g, after_due=True)
    assert "b.figure" in after and "41.5" in after and "c.secret" not in after
    for text in (before, after, feedback.student_markdown(g), feedback.student_markdown(
            g, after_due=True), json.dumps(feedback.gradescope_results(g))):
        assert SECRET not in text and "expected" not in text


def test_gradescope_results_carry_each_checks_visibility():
    out = feedback.gradescope_results(_grade())
    assert out["score"] == 2 and out["visibility"] == "visible"
    assert [(t["name"].split(":")[0], t["score"], t["max_score"], t["visibility"])
            for t in out["tests"]] == [("a.form", 0, 1, "visible"),
                                       ("b.figure", 0, 3, "after_due_date"),
                                       ("c.secret", 2, 2, "hidden")]
    assert out["tests"][0]["output"] == "observed: mine: 2\nhint: look again"


def test_feedback_files_go_into_a_private_folder_only(tmp_path: Path):
    dest = tmp_path / "feedback"
    written = feedback.write_all(dest, [("alice", _grade()), ("bob", _grade())],
                                 gradescope=True, after_due=False)
    assert written == [dest / "alice" / "results.json", dest / "bob" / "results.json"]
    assert json.loads(written[0].read_text())["score"] == 2
    assert (dest.stat().st_mode & 0o077) == 0  # made private: nobody else plants a folder
    (md,) = feedback.write_all(dest, [("", _grade())], gradescope=False, after_due=False)
    assert md == dest / "feedback.md" and SECRET not in md.read_text()
    link = tmp_path / "elsewhere"
    link.symlink_to(dest)
    with pytest.raises(UnsafePathError):
        feedback.write_all(link, [("alice", _grade())], gradescope=True, after_due=False)


@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0, reason="grading sandboxes the submissions: root")
@pytest.mark.skipif(bool(contain.available(True)), reason=contain.available(True) or "")
def test_check_is_the_students_loop(tmp_path: Path, no_live, capsys):
    ex = catalog.load(4)
    mine = tmp_path / "mine"
    workspace.write(workspace.skeleton(ex), mine)
    assert main(["check", "4", "--submission", str(mine), "--target", "soft"]) == 1
    out = capsys.readouterr().out
    assert "[FAIL] spray.spread" in out and "observed:" in out
    assert "expected:" not in out and "on the checks shown" in out
