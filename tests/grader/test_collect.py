"""grader.collect: hand-ins (archives, git repositories) into DEST/<student>/, and every way an
untrusted hand-in is refused for its student alone."""

from __future__ import annotations

import io
import os
import shutil
import stat
import subprocess
import tarfile
import zipfile
from pathlib import Path

import pytest

from grader.collect import REFUSED, Collected, Limits, _remove_tree, collect, write_report


def make_zip(path: Path, files: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return path


def tar_info(name: str, kind: bytes = tarfile.REGTYPE, size: int = 0) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.size = kind, size
    return info


def make_tar(path: Path, files: dict[str, bytes], mode: str = "w:gz",
             extra: list[tarfile.TarInfo] = ()) -> Path:
    with tarfile.open(path, mode, format=tarfile.GNU_FORMAT) as tf:
        for name, data in files.items():
            tf.addfile(tar_info(name, size=len(data)), io.BytesIO(data))
        for info in extra:
            tf.addfile(info)
    return path


def files_under(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def by_student(results: list[Collected]) -> dict[str, Collected]:
    return {r.student: r for r in results}


def assert_refused(result: Collected, *words: str) -> None:
    """Refused with a reason naming the problem, and the folder holds only that reason."""
    assert result.error is not None, result
    for word in words:
        assert word in result.error, result.error
    assert sorted(os.listdir(result.folder)) == [REFUSED]
    assert (result.folder / REFUSED).read_text().strip() == result.error
    assert not any(p.is_symlink() for p in result.folder.parent.parent.rglob("*"))


@pytest.fixture
def source(tmp_path: Path) -> Path:
    (tmp_path / "in").mkdir()
    return tmp_path / "in"


@pytest.fixture
def dest(tmp_path: Path) -> Path:
    return tmp_path / "out"


# -- the happy paths ------------------------------------------------------------------------

def test_zip_with_one_wrapper_folder_is_stripped(source: Path, dest: Path) -> None:
    make_zip(source / "alice.zip", {"repo-main/": b"", "repo-main/README.md": b"hi",
                                    "repo-main/src/a.py": b"x = 1\n",
                                    "repo-main/repo-main/inner.txt": b"same name"})
    [result] = collect(source, dest)
    assert result == Collected("alice", dest / "alice", None)
    assert files_under(dest / "alice") == {"README.md": b"hi", "src/a.py": b"x = 1\n",
                                           "repo-main/inner.txt": b"same name"}
    assert stat.S_IMODE(dest.stat().st_mode) == 0o700
    assert stat.S_IMODE((dest / "alice" / "src").stat().st_mode) == 0o700
    assert stat.S_IMODE((dest / "alice" / "src" / "a.py").stat().st_mode) == 0o600


def test_zip_without_a_wrapper_keeps_its_layout(source: Path, dest: Path) -> None:
    make_zip(source / "alice.zip", {"answers.json": b"{}", "src/a.py": b"pass",
                                    "./notes//notes.txt": b"n"})
    [result] = collect(source, dest)
    assert result.error is None
    assert files_under(dest / "alice") == {"answers.json": b"{}", "src/a.py": b"pass",
                                           "notes/notes.txt": b"n"}


@pytest.mark.parametrize(("suffix", "mode"), [(".tar", "w"), (".tar.gz", "w:gz"),
                                              (".tgz", "w:gz"), (".tar.xz", "w:xz")])
def test_tar_archives_are_collected_and_stripped(source: Path, dest: Path, suffix: str,
                                                 mode: str) -> None:
    make_tar(source / f"bob{suffix}", {"proj/x.txt": b"x", "proj/sub/y.txt": b"yy"}, mode,
             extra=[tar_info("proj/empty", tarfile.DIRTYPE)])
    [result] = collect(source, dest)
    assert (result.student, result.error) == ("bob", None)
    assert files_under(dest / "bob") == {"x.txt": b"x", "sub/y.txt": b"yy"}
    assert (dest / "bob" / "empty").is_dir()


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t",
                    *args], check=True, capture_output=True)


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_git_repo_exports_head_and_runs_nothing_of_the_student(
        source: Path, dest: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = source / "carol"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "main.py").write_text("committed\n")
    (repo / ".gitattributes").write_text("* filter=evil\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "hand-in")
    # After the commit: what the student's repository would run if we let it.
    marker = tmp_path / "ran"
    hook = repo / ".git" / "hooks" / "post-checkout"
    hook.write_text(f"#!/bin/sh\ntouch {marker}\n")
    hook.chmod(0o755)
    git(repo, "config", "filter.evil.smudge", f"touch {marker}; cat")
    git(repo, "config", "core.fsmonitor", f"touch {marker}")
    (repo / "main.py").write_text("not committed\n")
    (repo / "untracked.py").write_text("never handed in\n")
    # The caller's environment must not reach git either: here it would define the filter.
    for key, value in {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "filter.evil.smudge",
                       "GIT_CONFIG_VALUE_0": f"touch {marker}; cat"}.items():
        monkeypatch.setenv(key, value)
    [result] = collect(source, dest)
    assert (result.student, result.error) == ("carol", None)
    assert files_under(dest / "carol") == {".gitattributes": b"* filter=evil\n",
                                           "main.py": b"committed\n"}
    assert not marker.exists()


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_git_repo_over_the_limits_or_without_commits_is_refused(source: Path,
                                                               dest: Path) -> None:
    big, empty = source / "big", source / "empty"
    for repo in (big, empty):
        repo.mkdir()
        git(repo, "init", "-q")
    (big / "blob.bin").write_bytes(os.urandom(300_000))
    git(big, "add", ".")
    git(big, "commit", "-q", "-m", "big")
    results = by_student(collect(source, dest, Limits(max_bytes=100_000, max_members=10)))
    assert_refused(results["big"], "larger than")  # git stopped by its file-size limit
    assert_refused(results["empty"], "HEAD")


def test_git_file_pointing_elsewhere_is_refused(source: Path, dest: Path,
                                                tmp_path: Path) -> None:
    (source / "dave").mkdir()
    (source / "dave" / ".git").write_text(f"gitdir: {tmp_path}/someone-elses/.git\n")
    assert_refused(collect(source, dest)[0], "not a git repository")


# -- refusals -------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["../evil.txt", "ok/../../evil.txt"])
def test_dotdot_escape_is_refused(source: Path, dest: Path, name: str) -> None:
    make_zip(source / "alice.zip", {"fine.txt": b"f", name: b"pwned"})
    make_tar(source / "bob.tar.gz", {"fine.txt": b"f", name: b"pwned"})
    results = collect(source, dest)
    for result in results:
        assert_refused(result, "..")
    assert not (dest / "evil.txt").exists() and not (dest.parent / "evil.txt").exists()


def test_absolute_path_is_refused(source: Path, dest: Path, tmp_path: Path) -> None:
    target = tmp_path / "abs.txt"
    make_tar(source / "alice.tar", {str(target): b"pwned"}, "w")
    make_zip(source / "bob.zip", {str(target): b"pwned"})
    for result in collect(source, dest):
        assert_refused(result, "absolute")
    assert not target.exists()


@pytest.mark.parametrize(("kind", "word"), [(tarfile.SYMTYPE, "symbolic link"),
                                            (tarfile.LNKTYPE, "hard link"),
                                            (tarfile.CHRTYPE, "device"),
                                            (tarfile.FIFOTYPE, "FIFO")])
def test_links_and_special_files_in_a_tar_are_refused(source: Path, dest: Path,
                                                      kind: bytes, word: str) -> None:
    link = tar_info("proj/passwd", kind)
    link.linkname = "/etc/passwd"
    make_tar(source / "alice.tar.gz", {"proj/a.txt": b"a"}, extra=[link])
    assert_refused(collect(source, dest)[0], word, "proj/passwd")


def test_symlink_in_a_zip_is_refused(source: Path, dest: Path) -> None:
    info = zipfile.ZipInfo("proj/passwd")
    info.create_system = 3
    info.external_attr = 0o120777 << 16
    with zipfile.ZipFile(source / "alice.zip", "w") as zf:
        zf.writestr("proj/a.txt", b"a")
        zf.writestr(info, "/etc/passwd")
    assert_refused(collect(source, dest)[0], "symbolic link")


def test_zip_bomb_stops_at_the_file_limit(source: Path, dest: Path) -> None:
    make_zip(source / "alice.zip", {"bomb.bin": bytes(5_000_000)})
    assert (source / "alice.zip").stat().st_size < 20_000
    result = collect(source, dest, Limits(max_file_bytes=100_000))[0]
    assert_refused(result, "bomb.bin", "100000")


def test_total_size_is_counted_across_files(source: Path, dest: Path) -> None:
    make_zip(source / "alice.zip", {f"f{i}.bin": bytes(40_000) for i in range(3)})
    make_zip(source / "bob.zip", {f"f{i}.bin": bytes(40_000) for i in range(2)})
    results = by_student(collect(source, dest, Limits(max_bytes=100_000)))
    assert_refused(results["alice"], "100000 bytes")
    assert results["bob"].error is None


def test_too_many_members_is_refused_at_the_limit(source: Path, dest: Path) -> None:
    make_zip(source / "alice.zip", {f"f{i}": b"" for i in range(10)})
    make_zip(source / "bob.zip", {f"f{i}": b"" for i in range(11)})
    make_zip(source / "carol.zip", {"top.txt": b"", "a/b/c/d/e/f/g/h/i/j.txt": b""})
    results = by_student(collect(source, dest, Limits(max_members=10)))
    assert results["alice"].error is None
    assert_refused(results["bob"], "more than 10 members")
    assert_refused(results["carol"], "more than 10 members")  # unlisted folders count


def test_corrupt_archives_are_refused(source: Path, dest: Path, tmp_path: Path) -> None:
    (source / "alice.zip").write_bytes(b"PK\x03\x04 not really a zip")
    whole = make_tar(tmp_path / "whole.tar.gz", {"a.txt": os.urandom(50_000)}).read_bytes()
    (source / "bob.tar.gz").write_bytes(whole[: len(whole) // 2])
    results = collect(source, dest)
    assert [r.student for r in results] == ["alice", "bob"]
    for result in results:
        assert_refused(result, "corrupt")


def test_unknown_entries_are_refused_under_their_own_name(source: Path, dest: Path) -> None:
    (source / "dave.rar").write_bytes(b"Rar!")
    (source / "erin").mkdir()
    (source / "erin" / "main.py").write_text("no .git here")
    results = by_student(collect(source, dest))
    assert_refused(results["dave.rar"], "neither a supported archive")
    assert_refused(results["erin"], "not a git repository")


def test_two_hand_ins_for_one_student_are_refused(source: Path, dest: Path) -> None:
    make_zip(source / "alice.zip", {"a.txt": b"a"})
    make_tar(source / "alice.tar", {"a.txt": b"a"}, "w")
    [result] = collect(source, dest)
    assert_refused(result, "alice.zip", "alice.tar")


@pytest.mark.parametrize(("name", "word"), [("\udcffbad.txt", "not UTF-8"),
                                            ("x" * 256, "too long"),
                                            (f"proj/{REFUSED}", "reserved")])
def test_names_the_filesystem_cannot_hold_or_reserved_are_refused(source: Path, dest: Path,
                                                                  name: str, word: str) -> None:
    make_tar(source / "alice.tar", {"proj/ok.txt": b"", name: b"pwned"}, "w")
    assert_refused(collect(source, dest)[0], word)


def test_huge_extended_tar_header_is_refused_before_it_is_read(source: Path,
                                                              dest: Path) -> None:
    with tarfile.open(source / "alice.tar.gz", "w:gz", format=tarfile.PAX_FORMAT) as tf:
        info = tar_info("a.txt")
        info.pax_headers = {"comment": "x" * 2_000_000}
        tf.addfile(info)
    assert_refused(collect(source, dest)[0], "extended header")


def test_unsafe_student_name_is_reported_and_gets_no_folder(source: Path, dest: Path) -> None:
    make_zip(source / "evil\nname.zip", {"a.txt": b"a"})
    [result] = collect(source, dest)
    assert result.error is not None and "unsafe student name" in result.error
    assert os.listdir(dest) == []
    assert write_report([result]).count("\n") == 0  # the newline is escaped, not printed


def test_one_bad_student_never_stops_the_others(source: Path, dest: Path) -> None:
    make_zip(source / "alice.zip", {"a.txt": b"a"})
    make_zip(source / "bob.zip", {"ok.txt": b"ok", "../../../evil.txt": b"pwned"})
    (source / "bob2.zip").write_bytes(b"garbage")
    make_tar(source / "carol.tgz", {"c.txt": b"c"})
    (source / ".DS_Store").write_bytes(b"hidden: ignored")
    results = collect(source, dest)
    assert [r.student for r in results] == ["alice", "bob", "bob2", "carol"]
    assert [r.error is None for r in results] == [True, False, False, True]
    assert files_under(dest / "alice") == {"a.txt": b"a"}
    assert files_under(dest / "carol") == {"c.txt": b"c"}
    report = write_report(results).splitlines()
    assert report[0] == "alice: collected" and report[3] == "carol: collected"
    assert report[1].startswith("bob: refused: member '../../../evil.txt' leads out")


def test_dest_must_be_new_or_empty(source: Path, dest: Path) -> None:
    make_zip(source / "alice.zip", {"a.txt": b"a"})
    dest.mkdir(mode=0o755)
    assert collect(source, dest)[0].error is None  # an empty folder of ours will do
    assert stat.S_IMODE(dest.stat().st_mode) == 0o700
    with pytest.raises(FileExistsError):
        collect(source, dest)
    link = dest.parent / "link"
    link.symlink_to(dest.parent / "fresh", target_is_directory=True)
    (dest.parent / "fresh").mkdir()
    with pytest.raises(OSError):
        collect(source, link)


def test_a_half_extracted_tree_is_removed_without_following_links(tmp_path):
    """_mark_refused clears what was extracted: 1,500 folders deep (past the recursion
    limit), with links to files and folders outside, which must survive."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("keep")
    base = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.mkdir("s", dir_fd=base)
        fd = os.open("s", os.O_RDONLY | os.O_DIRECTORY, dir_fd=base)
        os.symlink(outside / "keep", "link", dir_fd=fd)
        os.symlink(outside, "dirlink", dir_fd=fd)
        for _ in range(1500):
            os.mkdir("d", dir_fd=fd)
            below = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = below
            os.close(os.open("f", os.O_CREAT | os.O_WRONLY, 0o600, dir_fd=fd))
        os.close(fd)
        _remove_tree(base, "s")
    finally:
        os.close(base)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["outside"]
    assert (outside / "keep").read_text() == "keep"
