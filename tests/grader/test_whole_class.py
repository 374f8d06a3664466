"""A whole class, end to end (issue 50's "done when"): hand-ins collected from archives and a
git repository, then graded in one command with --jobs 2 and --csv. The class holds
solutions, skeletons, every wrong fixture of exercise 3, an infinite loop, a disk filler, a
malformed and an escaping archive, a special file and an empty folder: every student gets a
row with the right status, and nothing stops the class."""

from __future__ import annotations

import csv
import io
import os
import subprocess
import tarfile
import zipfile
from pathlib import Path

import pytest

from grader import catalog, collect, workspace
from grader.__main__ import main
from sandbox import contain

EX = catalog.load(3)
REL = EX.files[0]  # controller/tables.py
LOOP = "while True:\n    pass\n"
FILLER = ("import os\nwith open(os.path.join(os.environ.get('TMPDIR', '/tmp'), 'fill'), 'wb') "
          "as f:\n    while True:\n        f.write(b'x' * (1 << 20))\n")
TIMEOUT_S = 30  # the loop's grade: the checks' wall time, as a course would set it

pytestmark = [pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="grading sandboxes: root"),
              pytest.mark.skipif(bool(contain.available(True)),
                                 reason=contain.available(True) or "")]


def _zip(path: Path, files: workspace.FileSet, top: str = "") -> None:
    with zipfile.ZipFile(path, "w") as z:
        for rel, text in files.items():
            z.writestr(f"{top}{rel}", text)


def _tgz(path: Path, files: workspace.FileSet) -> None:
    with tarfile.open(path, "w:gz") as t:
        for rel, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(rel)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))


def _git_repo(path: Path, files: workspace.FileSet) -> None:
    workspace.write(files, path)
    env = {"PATH": os.environ["PATH"], "HOME": str(path), "GIT_CONFIG_NOSYSTEM": "1"}
    for argv in (["init", "-q"], ["add", "-A"],
                 ["-c", "user.name=s", "-c", "user.email=s@s", "commit", "-q", "-m", "mine"]):
        subprocess.run(["git", *argv], cwd=path, env=env, check=True)


def hand_in(source: Path) -> dict[str, str]:
    """The class's hand-in folder; student -> what they handed in."""
    source.mkdir()
    kinds = {}
    solution = workspace.solution(EX)
    for i in range(6):
        _zip(source / f"sol{i}.zip", solution, top=f"sol{i}-main/" if i % 2 else "")
        kinds[f"sol{i}"] = "solution"
    for i in range(3):
        _tgz(source / f"skel{i}.tar.gz", workspace.skeleton(EX))
        kinds[f"skel{i}"] = "skeleton"
    for wrong in EX.wrong_solutions():
        _zip(source / f"w-{wrong.name}.zip", workspace.fixture(EX, wrong))
        kinds[f"w-{wrong.name}"] = "wrong"
    _zip(source / "loop.zip", workspace._cut(EX, {"neighbours": LOOP}))
    _zip(source / "filler.zip", workspace._cut(EX, {"neighbours": FILLER}))
    _git_repo(source / "gitrepo", solution)
    (source / "broken.zip").write_bytes(b"PK\x03\x04 not really a zip")
    with tarfile.open(source / "escape.tar", "w") as t:
        data = b"x"
        info = tarfile.TarInfo("../outside.py")
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))
    kinds.update(loop="loop", filler="filler", gitrepo="solution", broken="refused",
                 escape="refused")
    return kinds


def test_a_class_of_twenty_is_graded_in_one_command(tmp_path, no_live, capsys):
    kinds = hand_in(tmp_path / "handin")
    dest = tmp_path / "class"
    results = collect.collect(tmp_path / "handin", dest)
    assert {r.student for r in results if r.error} == {"broken", "escape"}, results
    os.mkfifo(_mkdirs(dest / "fifo", REL))
    kinds["fifo"] = "special"
    (dest / "empty").mkdir()
    kinds["empty"] = "empty"
    assert len(kinds) >= 20
    book = tmp_path / "grades.csv"
    code = main(["grade", "3", "--submission", str(dest), "--jobs", "2", "--csv", str(book),
                 "--timeout", str(TIMEOUT_S)])
    assert code == 1  # graded, some below full marks: not the grader's own failure (3)
    rows = {r["student"]: r for r in csv.DictReader(io.StringIO(book.read_text()))}
    assert sorted(rows) == sorted(kinds)
    err = capsys.readouterr().err
    assert err.count(f"/{len(kinds)}] ") == len(kinds)  # one progress line each
    best = {int(rows[s]["score"]) for s, k in kinds.items() if k == "solution"}
    assert len(best) == 1 and best.pop() == int(rows["sol0"]["max"]) - 4  # all but live
    top = int(rows["sol0"]["score"])
    for student, kind in kinds.items():
        row = rows[student]
        if kind == "solution":
            assert row["status"] == "graded" and row["error"] == "", row
        elif kind in ("skeleton", "wrong"):
            assert row["status"] == "graded" and int(row["score"]) < top, row
        elif kind in ("loop", "filler"):
            assert row["status"] == "graded" and row["score"] == "0", row
        else:
            assert row["status"] == "not graded" and row["score"] == "0", row
    for wrong in EX.wrong_solutions():
        fails = workspace.fixture_expectation(wrong)["fails"]
        assert rows[f"w-{wrong.name}"][fails] == "0", (wrong.name, rows[f"w-{wrong.name}"])
    assert f"did not finish in {TIMEOUT_S} s" in rows["loop"]["error"]
    assert "File too large" in rows["filler"]["error"]  # the sandbox's file size limit
    assert "refused" in rows["broken"]["error"] and "refused" in rows["escape"]["error"]
    assert "tables.py is not a regular file" in rows["fifo"]["error"]
    assert f"missing {REL}" in rows["empty"]["error"]


def _mkdirs(folder: Path, rel: str) -> Path:
    (folder / rel).parent.mkdir(parents=True)
    return folder / rel
