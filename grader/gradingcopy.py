"""The folder one submission is graded in, and the safe ways into and out of it.

The grader runs as root and reads two kinds of files a hostile user may have shaped: the
submission (a student's folder) and, through the checkout, whatever lies beside the project's
sources (other students' folders, earlier grade files, links planted there). So:

- The grading copy is built from an allow-list (PACKAGES, DATA_FILES, plus each exercise's
  exercise.json for the catalog), never from the whole checkout: no other submission, no grade
  file, no wrong-solution fixture, no .git. Only regular files with a SOURCE_SUFFIXES ending
  are copied, each opened without following links and without blocking (a FIFO or a link to
  /proc/kmsg cannot hang the grader), and a symlink anywhere is skipped, never followed.
- A submission's file is read the same way, every folder on its path opened relative to the
  one above with O_NOFOLLOW, and capped at MAX_FILE_BYTES.
- Its results folder (the sandbox's only writable host path) is a tmpfs of RESULTS_BYTES when
  the grader is root, so a submission cannot fill the host's disk.
- Removal never raises: `rm -rf --one-file-system` walks any depth without recursion (a
  submission's 1,500 nested folders made shutil.rmtree raise RecursionError), after the tmpfs
  is unmounted, and what remained, if anything, is reported.
"""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from grader.errors import GraderError

# The project's packages the grading needs (the inner process, the exercises' checks, the
# simulator and the live stage's Mininet fabric); nothing else of the checkout is copied.
PACKAGES = ("controller", "demo", "emulation", "fabric", "grader", "host_agent", "nodes", "p4rt",
            "p4src", "rigs", "rubrics", "safety", "sandbox", "served_core", "sim", "softswitch",
            "topologies", "views", "wire")
DATA_FILES = ("tests/golden/cases.json",)  # the golden corpus the P4 exercises' checks run
SOURCE_SUFFIXES = (".py", ".p4", ".json", ".txtpb", ".css", ".js", ".sh")  # build.sh: p4c
SKIP_DIRS = frozenset({"__pycache__", "build", "results", "work"})
MAX_FILE_BYTES = 4 << 20  # one project source or submitted file: the largest is ~40 KB
RESULTS_BYTES = 64 << 20  # the results tmpfs: a report is at most judging.MAX_REPORT_BYTES
_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class UnsafeFile(GraderError, OSError):
    """A file the grader will not read: a link, not a regular file, or too big."""


def _open_dir(name: str, dir_fd: int | None) -> int:
    return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                   dir_fd=dir_fd)


def _read_at(name: str, dir_fd: int | None, cap: int | None = None) -> bytes:
    """A regular file `name` (relative to dir_fd), never through a link, never blocking."""
    cap = MAX_FILE_BYTES if cap is None else cap
    try:
        fd = os.open(name, _OPEN_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == 40:  # ELOOP: the last component is a symlink
            raise UnsafeFile(f"{name} is a symbolic link: submit the file itself") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeFile(f"{name} is not a regular file")
        if st.st_size > cap:
            raise UnsafeFile(f"{name} is {st.st_size} bytes, over the {cap}-byte limit")
        chunks, left = [], cap + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        if len(data) > cap:
            raise UnsafeFile(f"{name} grew past the {cap}-byte limit while read")
        return data
    finally:
        os.close(fd)


def read_no_follow(folder: Path, rel: str, cap: int | None = None) -> bytes:
    """`folder/rel`, each folder on the way opened with O_NOFOLLOW relative to the last: a
    link anywhere under `folder` (a folder of the submission linked to /root, a file linked
    to a root-only file or to /proc/kmsg) is refused, never followed."""
    parts = Path(rel).parts
    if not parts or any(p in ("..", "/") for p in parts):
        raise UnsafeFile(f"{rel!r} is not a path inside the submission")
    fd = _open_dir(str(folder), None)
    try:
        for part in parts[:-1]:
            try:
                nxt = _open_dir(part, fd)
            except OSError as exc:
                if exc.errno in (40, 20):  # ELOOP (a link), ENOTDIR
                    raise UnsafeFile(f"{part}/ in {rel} is a link or not a folder") from None
                raise
            os.close(fd)
            fd = nxt
        return _read_at(parts[-1], fd, cap)
    finally:
        os.close(fd)


def _copy_tree(src_fd: int, dest: Path, skipped: list[str], where: str) -> None:
    """The allowed sources below the folder src_fd into dest (made here), links skipped."""
    dest.mkdir(mode=0o755, exist_ok=True)
    with os.scandir(src_fd) as entries:
        for entry in entries:
            rel = f"{where}/{entry.name}"
            if entry.is_symlink():
                skipped.append(f"{rel} (a link)")
            elif entry.is_dir(follow_symlinks=False):
                if entry.name in SKIP_DIRS or entry.name.startswith("."):
                    continue
                sub = _open_dir(entry.name, src_fd)
                try:
                    _copy_tree(sub, dest / entry.name, skipped, rel)
                finally:
                    os.close(sub)
            elif entry.name.endswith(SOURCE_SUFFIXES):
                try:
                    (dest / entry.name).write_bytes(_read_at(entry.name, src_fd))
                except UnsafeFile as exc:
                    skipped.append(f"{rel} ({exc})")
                    continue
                executable = entry.stat(follow_symlinks=False).st_mode & 0o111
                (dest / entry.name).chmod(0o755 if executable else 0o644)


def copy_sources(root: Path, dest: Path, exercises: Path) -> list[str]:
    """The allow-listed project sources of `root` laid into `dest`; returns what it skipped
    (links, special files), which a checkout should not hold."""
    skipped: list[str] = []
    dest.mkdir(mode=0o755, exist_ok=True)
    root_fd = _open_dir(str(root), None)
    try:
        for package in PACKAGES:
            try:
                fd = _open_dir(package, root_fd)
            except FileNotFoundError:
                continue
            try:
                _copy_tree(fd, dest / package, skipped, package)
            finally:
                os.close(fd)
        for rel in DATA_FILES:
            try:
                data = read_no_follow(root, rel)
            except (FileNotFoundError, UnsafeFile) as exc:
                skipped.append(f"{rel} ({exc})")
                continue
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            (dest / rel).write_bytes(data)
    finally:
        os.close(root_fd)
    for folder in sorted(exercises.iterdir()) if exercises.is_dir() else []:
        if folder.is_symlink() or not folder.is_dir():
            continue
        try:
            data = read_no_follow(exercises, f"{folder.name}/exercise.json")
        except (FileNotFoundError, NotADirectoryError):
            continue
        except UnsafeFile as exc:
            skipped.append(f"exercises/{folder.name}/exercise.json ({exc})")
            continue
        out = dest / "exercises" / folder.name
        out.mkdir(parents=True, exist_ok=True)
        (out / "exercise.json").write_bytes(data)
    return skipped


@contextmanager
def results_tmpfs(results: Path) -> Iterator[None]:
    """`results` as a tmpfs of RESULTS_BYTES while the sandbox runs (root only: an
    unprivileged grader cannot mount, and keeps RLIMIT_FSIZE's per-file bound alone)."""
    if os.geteuid() != 0:
        yield
        return
    subprocess.run(["mount", "-t", "tmpfs", "-o",
                    f"size={RESULTS_BYTES},mode=0700,nosuid,nodev,noexec",
                    "mrc-grade-results", str(results)], check=True, capture_output=True)
    try:
        yield
    finally:
        subprocess.run(["umount", "--lazy", str(results)], capture_output=True)


def remove(tmp: Path) -> str:
    """Remove a grading folder, whatever the sandbox left in it, without raising; returns ''
    or what remained (for the grader's log)."""
    proc = subprocess.run(["rm", "-rf", "--one-file-system", "--", str(tmp)],
                          capture_output=True, text=True)
    if not os.path.lexists(tmp):
        return ""
    return f"{tmp} was not removed completely: {proc.stderr.strip()[-300:]}"
