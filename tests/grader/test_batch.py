"""Grading a class (grader/batch.py): the resume cache, its key, slots and progress lines.
The parallel workers themselves are exercised on real submissions in test_whole_class.py."""

from __future__ import annotations

import shutil

import pytest

from grader import batch, catalog, workspace
from grader.report import Check, Grade
from sandbox import contain

EX = catalog.load(3)


@pytest.fixture
def counted(monkeypatch):
    """grade_one replaced by a quick fake that records who it graded."""
    calls: list[str] = []

    def fake(ex, name, student, files, target, trust, timeout_s=None):
        calls.append(student)
        if isinstance(files, Exception):
            return Grade(ex.number, name, target, (), error=f"not graded: {files}")
        if "crash" in student:
            return Grade(ex.number, name, target, (), error="not graded: the grader failed")
        ok = "good" in student
        return Grade(ex.number, name, target, (Check("a", "a", 2, ok, observed="x"),))
    monkeypatch.setattr(batch, "grade_one", fake)
    return calls


def _todo(*students: str, text: str = "mine") -> list[batch.Submission]:
    return [(f"subs/{s}", s, {EX.files[0]: f"{text} {s}"}) for s in students]


def test_resume_grades_only_what_changed_or_failed(tmp_path, counted):
    cache = batch.GradeCache(EX, "soft", folder=tmp_path / "graded")
    todo = _todo("good1", "bad1", "crash1")
    seen: list[tuple[int, bool]] = []
    first = batch.grade_all(EX, todo, "soft", False, cache=cache,
                            done=lambda i, g, cached: seen.append((i, cached)))
    assert counted == ["good1", "bad1", "crash1"] and [g.score for g in first] == [2, 0, 0]
    assert seen == [(0, False), (1, False), (2, False)]
    counted.clear()
    seen.clear()
    todo[1] = _todo("bad1", text="fixed")[0]  # bad1 handed in again
    again = batch.grade_all(EX, todo, "soft", False, cache=cache,
                            done=lambda i, g, cached: seen.append((i, cached)))
    assert counted == ["bad1", "crash1"]  # good1 from the cache; the grader's failure retried
    assert again[0] == first[0] and (0, True) in seen
    assert (cache.folder.stat().st_mode & 0o777) == 0o700


def test_the_key_holds_student_files_timeout_and_grader(tmp_path):
    a = batch.GradeCache(EX, "soft", folder=tmp_path / "a")
    files = {EX.files[0]: "x"}
    assert a.key("alice", files) != a.key("bob", files)  # a copied file is not a cache hit
    assert a.key("alice", files) != a.key("alice", {EX.files[0]: "y"})
    assert a.key("alice", files) != batch.GradeCache(EX, "bmv2", folder=tmp_path / "b").key(
        "alice", files)
    assert a.key("alice", files) != batch.GradeCache(EX, "soft", 30.0,
                                                     folder=tmp_path / "c").key("alice", files)


def test_the_grader_version_follows_its_sources(tmp_path):
    root = tmp_path / "project"
    for top in ("grader", "host_agent"):
        shutil.copytree(catalog.ROOT / top, root / top,
                        ignore=shutil.ignore_patterns("__pycache__"))
    before = batch.grader_version(root)
    assert batch.grader_version(root) == before
    path = root / "host_agent" / "core" / "evs.py"
    path.write_text(path.read_text() + "\n# changed\n")
    assert batch.grader_version(root) != before


def test_a_cached_grade_reads_back_whole(tmp_path):
    cache = batch.GradeCache(EX, "soft", folder=tmp_path / "graded")
    g = Grade(3, "subs/x", "soft", (Check("a", "t", 2, False, "e", "o", "h", "hidden"),))
    cache.put("k", g)
    assert cache.get("k") == g and cache.get("other") is None


def test_slots_give_each_job_its_own_uid(monkeypatch):
    monkeypatch.setattr(contain, "SANDBOX_UID", contain.BASE_UID)
    monkeypatch.setattr(contain, "SANDBOX_GID", contain.BASE_UID)
    contain.use_slot(3)
    assert contain.SANDBOX_UID == contain.SANDBOX_GID == contain.BASE_UID + 3
    with pytest.raises(contain.SandboxError):
        contain.use_slot(contain.MAX_SLOTS)


def test_jobs_beyond_the_cores_are_refused(capsys):
    from grader.__main__ import main
    with pytest.raises(SystemExit) as exit_:
        main(["grade", "3", "--jobs", "999", "--solution"])
    assert exit_.value.code == 2 and "cores" in capsys.readouterr().err


def test_progress_says_done_total_score_and_time_left():
    g = Grade(3, "subs/x", "soft", (Check("a", "t", 2, True),))
    line = batch.progress(2, 8, "x", g, began=0.0, cached=True)
    assert line.startswith("[2/8] x: 2/2 (cached), ") and "to go" in line


def test_a_refused_hand_in_is_that_students_error(tmp_path):
    folder = tmp_path / "bob"
    folder.mkdir()
    (folder / ".collect-refused").write_text("member ../x escapes the folder")
    with pytest.raises(workspace.SubmissionError, match="refused at hand-in: member ../x"):
        workspace.read(EX, folder)
