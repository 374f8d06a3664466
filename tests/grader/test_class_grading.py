"""A class's submissions as a hostile student shapes them: every student is graded inside
its own error boundary, and root never follows a link or blocks on a submitted file
(issue 54, attacks 2 and 3)."""

from __future__ import annotations

import csv
import io
import json
import os
import signal
from pathlib import Path

import pytest

from grader import catalog, workspace
from grader.__main__ import main
from sandbox import contain

EX = catalog.load(4)


@pytest.fixture
def deadline():
    """A read that blocks (the old grader on a FIFO or /proc/kmsg) fails the test instead of
    hanging the suite."""
    def expire(*_):
        raise TimeoutError("the grader blocked on a submitted file")
    old = signal.signal(signal.SIGALRM, expire)
    signal.alarm(20)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def lay(folder: Path, files: workspace.FileSet) -> None:
    workspace.write(files, folder)


@pytest.mark.skipif(os.geteuid() != 0, reason="the secret is a root-only file: root")
def test_a_linked_file_is_refused_not_followed(tmp_path, deadline):
    """A receiver.py linked to a root-only 0600 file put its contents into the student's
    feedback: the grader read it as root."""
    secret = tmp_path / "root-only"
    secret.write_text("root-secret-7f3a")
    secret.chmod(0o600)
    student = tmp_path / "mallory"
    lay(student, workspace.solution(EX))
    receiver = student / "host_agent" / "core" / "receiver.py"
    receiver.unlink()
    receiver.symlink_to(secret)
    with pytest.raises(workspace.SubmissionError, match="symbolic link") as err:
        workspace.read(EX, student)
    assert "root-secret" not in str(err.value)


@pytest.mark.skipif(os.geteuid() != 0, reason="a linked folder into /root: root")
def test_a_linked_folder_is_refused_not_followed(tmp_path, deadline):
    target = tmp_path / "elsewhere" / "core"
    lay(tmp_path / "elsewhere-root", workspace.solution(EX))
    target.parent.mkdir()
    (tmp_path / "elsewhere-root" / "host_agent" / "core").rename(target)
    student = tmp_path / "mallory"
    (student / "host_agent").mkdir(parents=True)
    (student / "host_agent" / "core").symlink_to(target)
    with pytest.raises(workspace.SubmissionError, match="link or not a folder"):
        workspace.read(EX, student)


@pytest.mark.parametrize("kind", ["fifo", "kmsg"])
def test_special_files_never_block_the_grader(tmp_path, deadline, kind):
    """A file linked to /proc/kmsg (or a FIFO) blocked the grader forever in read()."""
    student = tmp_path / "mallory"
    lay(student, workspace.solution(EX))
    evs = student / "host_agent" / "core" / "evs.py"
    evs.unlink()
    if kind == "fifo":
        os.mkfifo(evs)
    else:
        evs.symlink_to("/proc/kmsg")
    with pytest.raises(workspace.SubmissionError, match="evs.py"):
        workspace.read(EX, student)


def test_an_oversized_file_is_refused(tmp_path, monkeypatch):
    student = tmp_path / "mallory"
    lay(student, workspace.solution(EX))
    monkeypatch.setattr(workspace.gradingcopy, "MAX_FILE_BYTES", 1000)
    with pytest.raises(workspace.SubmissionError, match="limit"):
        workspace.read(EX, student)


@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0, reason="grading sandboxes the submissions: root")
@pytest.mark.skipif(bool(contain.available(True)), reason=contain.available(True) or "")
def test_one_students_folder_never_stops_the_class(tmp_path, no_live, deadline, capsys):
    """A folder missing a file aborted everyone (exit 2, no grades); a file linked to
    /proc/kmsg hung the grader. Now each is that student's error and the others are graded."""
    subs = tmp_path / "submissions"
    lay(subs / "alice", workspace.solution(EX))
    lay(subs / "bob", workspace.solution(EX))
    (subs / "bob" / "host_agent" / "core" / "receiver.py").unlink()
    lay(subs / "carol", workspace.solution(EX))
    evs = subs / "carol" / "host_agent" / "core" / "evs.py"
    evs.unlink()
    evs.symlink_to("/proc/kmsg")
    out, book = tmp_path / "grades.json", tmp_path / "grades.csv"
    assert main(["grade", "4", "--submission", str(subs), "--json", str(out),
                 "--csv", str(book)]) == 1
    graded = {Path(g["submission"]).name: g for g in json.loads(out.read_text())["submissions"]}
    rows = {r["student"]: r for r in csv.DictReader(io.StringIO(book.read_text()))}
    assert sorted(rows) == ["alice", "bob", "carol"]  # one row each, in the gradebook too
    assert [rows[s]["status"] for s in ("alice", "bob", "carol")] == [
        "graded", "not graded", "not graded"]
    assert rows["alice"]["score"] == str(graded["alice"]["score"])
    assert rows["alice"]["max"] == rows["bob"]["max"] == str(graded["alice"]["total"])
    assert sorted(graded) == ["alice", "bob", "carol"]
    assert graded["alice"]["score"] == graded["alice"]["total"] - 4  # all but the live stage
    assert "missing host_agent/core/receiver.py" in graded["bob"]["error"]
    assert "symbolic link" in graded["carol"]["error"]
    assert graded["bob"]["score"] == graded["carol"]["score"] == 0
