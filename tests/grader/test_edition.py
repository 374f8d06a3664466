"""The student edition (grader/edition.py): what it holds, what it refuses, and how grading
and the test suite behave in it."""

from __future__ import annotations

import csv
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from grader import catalog, edition, regions, workspace

ALL = [ex.number for ex in catalog.load_all()]
CUT = [ex for ex in catalog.load_all() if ex.kind != "lab"]


@pytest.fixture(scope="module")
def student(tmp_path_factory) -> Path:
    dest = tmp_path_factory.mktemp("edition") / "course"
    edition.write(dest, ALL)
    return dest


def _lines(text: str) -> set[str]:
    return {line.strip() for line in text.splitlines() if len(line.strip()) > 3}


def _text_files(root: Path):
    for path in root.rglob("*"):
        if ".git" in path.relative_to(root).parts or not path.is_file() or path.is_symlink():
            continue
        try:
            yield path, path.read_text()
        except UnicodeDecodeError:
            continue


def _reference_only_lines() -> set[str]:
    """Lines of the chosen regions' reference bodies that appear nowhere else in the
    project's tracked files (outside those regions, the wrong fixtures and the instructors'
    notes): the lines only a solution holds."""
    inside: set[str] = set()
    cut_text: dict[str, str] = {}
    for ex in CUT:
        for rel, names in ex.regions().items():
            text = cut_text.get(rel, (catalog.ROOT / rel).read_text())
            for name in names:
                inside |= _lines(regions.body(text, ex.number, name))
            cut_text[rel] = regions.replace(text, ex.number, {n: "" for n in names}, rel)
    elsewhere: set[str] = set()
    for rel in edition._tracked(catalog.ROOT):
        path = catalog.ROOT / rel
        if "/wrong/" in rel or rel.endswith("INSTRUCTORS.md"):
            continue  # a wrong fixture is the reference with one mistake: the instructor's
        if path.is_file() and not path.is_symlink():
            try:
                elsewhere |= _lines(cut_text.get(rel) or path.read_text())
            except UnicodeDecodeError:
                continue
    return inside - elsewhere


def test_no_line_only_in_a_reference_body_is_anywhere_in_the_edition(student):
    secret = _reference_only_lines()
    assert len(secret) > 50, "the regions' bodies should hold solution-only lines to look for"
    leaks = {(str(path.relative_to(student)), line) for path, text in _text_files(student)
             for line in _lines(text) & secret}
    assert not leaks, sorted(leaks)[:10]


def test_it_is_a_clean_repository_of_one_commit_without_solutions_or_fixtures(student):
    log = subprocess.run(["git", "-c", f"safe.directory={student}", "log", "--oneline"],
                         cwd=student, capture_output=True, text=True, check=True).stdout
    assert len(log.splitlines()) == 1, log
    status = subprocess.run(["git", "-c", f"safe.directory={student}", "status",
                             "--porcelain"], cwd=student, capture_output=True, text=True,
                            check=True).stdout
    assert status == ""
    assert not list(student.glob("exercises/*/wrong"))
    assert not (student / "exercises" / "INSTRUCTORS.md").exists()
    assert "INSTRUCTORS.md" not in (student / "exercises" / "README.md").read_text()
    assert edition.load(student) == edition.Edition(tuple(ALL), edition._head(catalog.ROOT))
    for ex in CUT:  # every region holds its stub, so every chosen exercise waits
        assert sorted(edition.stubbed(catalog.load(ex.number, student / "exercises"),
                                      student)) == sorted(ex.files)
    assert sorted(edition.waiting(student)) == [ex.number for ex in CUT]


def _in(student: Path, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *argv], cwd=student, capture_output=True,
                          text=True, timeout=120)


def test_the_instructors_commands_refuse_there(student, tmp_path):
    for argv in (["solution", "4", str(tmp_path / "out")], ["grade", "4", "--solution"],
                 ["grade", "1", "--wrong", "shift-by-8"]):
        done = _in(student, "-m", "grader", *argv)
        assert done.returncode == 2, (argv, done.stdout, done.stderr)
        assert "student edition" in done.stderr, done.stderr
    assert not (tmp_path / "out").exists()
    done = _in(student, "-m", "grader", "exercise", "4")  # the student's loop still starts,
    assert done.returncode == 0, done.stderr  # on the edition's own files
    assert "host_agent/core/evs.py" in done.stdout and "in the project itself" in done.stdout
    assert not (student / "exercises/work").exists()


def test_the_lab_starts_from_its_template_and_broken_markers_are_said(tmp_path):
    dest = tmp_path / "course"
    edition.write(dest, [3, 7])
    lab = catalog.load(7, dest / "exercises")
    assert edition.in_place(lab, dest) and 7 not in edition.waiting(dest)  # no region
    done = _in(dest, "-m", "grader", "exercise", "7")  # answers.json from its template,
    assert done.returncode == 0, done.stdout + done.stderr  # at the top: committed, pushed
    assert (dest / "answers.json").read_text() == workspace.skeleton(lab)["answers.json"]
    (dest / "answers.json").write_text("{}")
    assert _in(dest, "-m", "grader", "exercise", "7").returncode == 0
    assert (dest / "answers.json").read_text() == "{}"  # never overwritten
    rel = catalog.load(3).files[0]
    (dest / rel).write_text((dest / rel).read_text().replace("# END exercise 3", "# END"))
    assert "its markers" in edition.waiting(dest)[3][0]
    done = _in(dest, "-m", "grader", "classroom", "waiting")
    assert done.returncode == 1 and "its markers" in done.stdout, done.stdout + done.stderr


def test_a_chosen_exercise_is_worked_on_and_checked_in_place(tmp_path):
    dest = tmp_path / "course"
    edition.write(dest, [3])
    ex3, ex4 = catalog.load(3, dest / "exercises"), catalog.load(4, dest / "exercises")
    assert edition.in_place(ex3, dest) and not edition.in_place(ex4, dest)
    done = subprocess.run([sys.executable, "-m", "grader", "check", "3"], cwd=dest,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "MRC_GRADE_SKIP_LIVE": "1"})
    assert done.returncode == 1 and "exercise 3: " + str(dest) in done.stdout, done.stdout
    assert "TODO exercise 3" in done.stdout  # the stub in the project is what was graded


def test_the_student_learns_what_waits_and_the_demo_says_so_first(student):
    done = _in(student, "-m", "grader", "classroom", "waiting")
    assert done.returncode == 1, done.stdout
    assert "exercise 4: host_agent/core/evs.py" in done.stdout
    assert "exercise 7" not in done.stdout  # the lab has no region: nothing of it waits
    script = (student / "testbed").read_text()
    assert "classroom waiting --before demo" in script.split("\n    demo)", 1)[1].split(";;")[0]
    done = _in(catalog.ROOT, "-m", "grader", "classroom", "waiting")
    assert done.returncode == 0 and "nothing waits" in done.stdout


def test_tests_that_need_a_stub_skip_naming_the_exercise(student):
    done = _in(student, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
               "tests/core/test_evs.py", "tests/grader/test_regions.py",
               "tests/grader/exercises/test_exercises.py")
    assert done.returncode == 0, done.stdout[-3000:]
    assert "waits for exercise 4 (host_agent/core/evs.py" in done.stdout, done.stdout[-3000:]
    # one test over several exercises: each case waits for its own (its exercise(n) mark)
    for n in (3, 5, 6):
        assert f"waits for exercise {n} (" in done.stdout, done.stdout[-3000:]
    assert " passed" in done.stdout  # the regions' own tests need no solved region


def test_a_region_the_student_solved_stops_waiting(tmp_path):
    dest = tmp_path / "course"
    edition.write(dest, [3])
    assert sorted(edition.waiting(dest)) == [3]
    rel = catalog.load(3).files[0]
    (dest / rel).write_text((catalog.ROOT / rel).read_text())  # the student's answer
    assert edition.waiting(dest) == {}


def test_the_instructor_grades_one_exercise_on_the_reference_elsewhere():
    """Exercise 5's evs.py also holds the student's exercise 4: the instructor's grading
    takes only exercise 5's regions from it."""
    ex4, ex5 = catalog.load(4), catalog.load(5)
    submitted = workspace.solution(ex5)
    submitted["host_agent/core/evs.py"] = regions.replace(
        submitted["host_agent/core/evs.py"], 4,
        {n: "raise NotImplementedError\n" for n in ex4.regions()["host_agent/core/evs.py"]})
    submitted["host_agent/core/evs.py"] += "\nSOMETHING_ELSE = 1\n"
    grafted = edition.graft(ex5, submitted)
    assert grafted == workspace.solution(ex5)
    broken = workspace.skeleton(ex5)
    assert edition.graft(ex5, broken) == broken  # its own regions are the student's


def test_an_edition_is_made_only_into_a_new_folder(tmp_path):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    with pytest.raises(edition.EditionError, match="not an empty folder"):
        edition.write(tmp_path / "full", [3])


def test_from_edition_to_gradebook_through_a_pushed_repository(tmp_path, no_live):
    """The course's whole path: the student clones the edition, solves exercise 3 in place
    and commits; the instructor collects the repository and grades it."""
    from grader import collect
    from grader.__main__ import main

    repo = tmp_path / "handin" / "alice"
    edition.write(repo, [3])
    ex = catalog.load(3)
    workspace.write(workspace.solution(ex), repo)
    git = ["git", "-c", "user.name=a", "-c", "user.email=a@a"]
    subprocess.run([*git, "commit", "-qam", "ex3"], cwd=repo, check=True, timeout=60)
    edition.write(tmp_path / "handin" / "bob", [3])  # handed in untouched
    assert not [r for r in collect.collect(tmp_path / "handin", tmp_path / "class") if r.error]
    book = tmp_path / "grades.csv"
    assert main(["grade", "3", "--submission", str(tmp_path / "class"), "--csv",
                 str(book)]) == 1
    rows = {r["student"]: r for r in csv.DictReader(io.StringIO(book.read_text()))}
    assert int(rows["alice"]["score"]) == int(rows["alice"]["max"]) - 4  # all but live
    assert rows["bob"]["score"] == "0" and "TODO exercise 3" in rows["bob"]["error"]
