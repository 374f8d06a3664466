"""A course's hand-ins, turned into the layout the grader reads: DEST/<student>/<files>.

Hand-ins are untrusted and this may run as root, so no library extracts anything: each member
is checked, then written by us, into folders we made (0700) as a regular file opened
O_EXCL|O_NOFOLLOW (0600) relative to a folder's descriptor, so no link, device or `..` can
make us write elsewhere. Limits count the bytes actually written, not what headers claim.
A git repository's HEAD is exported by `git archive` run in a bare repository of ours that
borrows the student's objects: `git archive` runs the smudge filters a repository's own config
defines, so the student's config, like their hooks and working tree, is never used. What is
wrong with one hand-in refuses that student (`.collect-refused` says why), no one else.
"""

from __future__ import annotations

import contextlib
import os
import re
import resource
import signal
import stat
import subprocess
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from grader.errors import GraderError

REFUSED = ".collect-refused"  # file name written inside a refused student's folder
# The project's top-level folders: an archive's single top folder with one of these names is
# part of the hand-in's paths, never a wrapper to strip.
PROJECT_TOPS = frozenset(p.name for p in Path(__file__).resolve().parent.parent.iterdir()
                         if p.is_dir() and not p.name.startswith("."))
GIT_TIMEOUT = 60.0  # seconds, for each git call

_ARCHIVES = (".tar.gz", ".tar.xz", ".tgz", ".tar", ".zip")  # longest first: .tar.gz, then .tar
_CHUNK = 1 << 16
_NAME_MAX, _PATH_MAX = 255, 4095  # bytes in one component, in a member's whole path
_TAR_HEADER_MAX = 1 << 20  # tarfile reads a pax or GNU long-name header into memory whole
_OID = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_SPECIAL = {stat.S_IFLNK: "symbolic link", stat.S_IFCHR: "device file",  # zip: Unix modes
            stat.S_IFBLK: "device file", stat.S_IFIFO: "FIFO", stat.S_IFSOCK: "socket",
            tarfile.SYMTYPE: "symbolic link", tarfile.LNKTYPE: "hard link",  # tar: types
            tarfile.CHRTYPE: "device file", tarfile.BLKTYPE: "device file",
            tarfile.FIFOTYPE: "FIFO"}


@dataclass(frozen=True)
class Limits:
    max_bytes: int = 64 * 1024 * 1024  # total uncompressed bytes per student
    max_members: int = 20_000  # files+dirs per student
    max_file_bytes: int = 16 * 1024 * 1024  # one file


@dataclass(frozen=True)
class Collected:
    student: str
    folder: Path  # DEST/student
    error: str | None  # None = collected; else the reason it was refused


class _Refused(GraderError):
    """A hand-in we will not collect; the message is the reason reported."""


def collect(source: Path, dest: Path, limits: Limits = Limits()) -> list[Collected]:  # noqa: B008
    """Collect every hand-in in `source` into `dest` (new, or an empty folder of ours). Raises
    only for the whole run (no source, an unusable dest): one bad upload costs no one else."""
    source, dest = Path(source), Path(dest)
    if not source.is_dir():
        raise NotADirectoryError(f"{source}: not a folder")
    groups: dict[str, list[Path]] = {}
    for entry in sorted(os.listdir(source)):
        path = source / entry
        if not entry.startswith(".") and path.absolute() != dest.absolute():
            groups.setdefault(_student_of(path), []).append(path)
    dest_fd = _make_dest(dest)
    try:
        return [_collect_one(dest_fd, dest, s, groups[s], limits) for s in sorted(groups)]
    finally:
        os.close(dest_fd)


def write_report(results: list[Collected]) -> str:
    """One line per student. Names and reasons come from hand-ins, so anything unprintable
    (a newline, a terminal escape) is shown escaped rather than sent to the terminal."""
    lines = [f"{r.student}: " + ("collected" if r.error is None else f"refused: {r.error}")
             for r in results]
    return "\n".join(line if line.isprintable() else repr(line)[1:-1] for line in lines)


def _student_of(path: Path) -> str:
    """A folder's name, or an archive's name without its suffix. Any other file keeps its
    whole name, under which it is refused: the instructor sees exactly what was not taken."""
    suffix = None if path.is_dir() and not path.is_symlink() else _archive_suffix(path.name)
    return path.name[: -len(suffix)] if suffix else path.name


def _archive_suffix(name: str) -> str | None:
    return next((s for s in _ARCHIVES if name.lower().endswith(s)), None)


def _make_dest(dest: Path) -> int:
    """Open dest, made 0700 unless already an empty folder of ours: nothing another user
    prepared (a planted link, a folder they can write in) may receive the hand-ins."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(dest, 0o700)
    fd = os.open(dest, _DIR_FLAGS)  # a symlink fails here (O_NOFOLLOW)
    try:
        if (owner := os.fstat(fd).st_uid) != os.geteuid():
            raise PermissionError(f"{dest}: owned by uid {owner}, not by us")
        if os.listdir(fd):
            raise FileExistsError(f"{dest}: not empty")
        os.fchmod(fd, 0o700)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _collect_one(dest_fd: int, dest: Path, student: str, entries: list[Path],
                 limits: Limits) -> Collected:
    """One student, collected or refused with the reason. Never raises, so the caller goes
    on with everyone else; a name unfit for a folder is reported, and no folder is made."""
    if not student or student.startswith(".") or "/" in student or not student.isprintable():
        safe = "".join(c if c.isprintable() and c != "/" else "_" for c in student)
        return Collected(student, dest / (safe.lstrip(".") or "_"),
                         f"unsafe student name {student!r}: not one printable folder name")
    try:  # failing, e.g. Alice and alice on a case-insensitive disk: leave the other alone
        os.mkdir(student, 0o700, dir_fd=dest_fd)
    except OSError as e:
        return Collected(student, dest / student, f"cannot make its folder: {e.strerror}")
    try:
        if len(entries) > 1:
            names = ", ".join(repr(e.name) for e in entries)
            raise _Refused(f"more than one hand-in for this student: {names}")
        _fill(dest_fd, student, entries[0], limits)
        return Collected(student, dest / student, None)
    except _Refused as e:
        reason = str(e)
    except Exception as e:  # what a corrupt archive makes its reader raise is open-ended
        reason = f"unreadable or corrupt hand-in ({type(e).__name__}: {e})"
    try:
        _mark_refused(dest_fd, student, reason)
    except OSError as e:
        reason += f" (and its folder could not be cleared: {e})"
    return Collected(student, dest / student, reason)


def _remove_tree(parent_fd: int, name: str) -> None:
    """rmtree of `name` relative to a folder's descriptor, links removed and never followed
    (shutil.rmtree's dir_fd needs Python 3.11; the floor is 3.10). A loop holding one
    descriptor, not recursion: an archive's path may be 2,000 folders deep. The tree is
    ours (made in our 0700 DEST), so climbing back by ".." reaches the folder we left."""
    names = [name]
    fd = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    try:
        while True:
            with os.scandir(fd) as entries:
                sub = next((e.name for e in entries if e.is_dir(follow_symlinks=False)), None)
            if sub is not None:
                below = os.open(sub, _DIR_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = below
                names.append(sub)
                continue
            with os.scandir(fd) as entries:
                for entry in entries:
                    os.unlink(entry.name, dir_fd=fd)
            if len(names) == 1:
                break
            above = os.open("..", _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = above
            os.rmdir(names.pop(), dir_fd=fd)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=parent_fd)


def _mark_refused(dest_fd: int, student: str, reason: str) -> None:
    """Leave nothing half-extracted that the grader could take for a hand-in: only why."""
    with contextlib.suppress(FileNotFoundError):
        _remove_tree(dest_fd, student)
    os.mkdir(student, 0o700, dir_fd=dest_fd)  # just made by us, in our 0700 dest
    fd = os.open(f"{student}/{REFUSED}", _FILE_FLAGS, 0o600, dir_fd=dest_fd)
    with open(fd, "w", encoding="utf-8", errors="backslashreplace") as out:
        out.write(reason + "\n")


def _fill(dest_fd: int, student: str, entry: Path, limits: Limits) -> None:
    """Put one hand-in's files into the student's folder, by the kind of entry it is."""
    sink = _Sink(os.open(student, _DIR_FLAGS, dir_fd=dest_fd), limits)
    try:
        mode = os.lstat(entry).st_mode
        if stat.S_ISDIR(mode):
            return _export_git(entry, sink)
        if not stat.S_ISREG(mode) or _archive_suffix(entry.name) is None:
            raise _Refused(f"{entry.name!r} is neither a supported archive "
                           f"({', '.join(_ARCHIVES)}) nor a git repository")
        with open(entry, "rb", opener=lambda p, f: os.open(p, f | os.O_NOFOLLOW)) as f:
            (_extract_zip if entry.name.lower().endswith(".zip") else _extract_tar)(f, sink)
        sink.strip_wrapper()
    finally:
        os.close(sink.root)


class _Sink:
    """Writes one student's members, counting members and bytes as they are written. Paths
    are walked a component at a time from the student folder's descriptor with O_NOFOLLOW,
    so no link is ever followed, even one made behind our back."""

    def __init__(self, root: int, limits: Limits) -> None:
        self.root, self.limits, self.members, self.total = root, limits, 0, 0

    def count(self) -> None:
        self.members += 1
        if self.members > self.limits.max_members:
            raise _Refused(f"more than {self.limits.max_members} members (files and folders)")

    def add_dir(self, name: str) -> None:
        self.count()
        os.close(self._open_dir(name, _member_parts(name), listed=True))

    def add_file(self, name: str, stream: IO[bytes]) -> None:
        self.count()
        if not (parts := _member_parts(name)):
            raise _Refused(f"member {name!r} is a file without a name")
        parent = self._open_dir(name, parts[:-1])
        try:
            fd = os.open(parts[-1], _FILE_FLAGS, 0o600, dir_fd=parent)
        except OSError as e:
            raise _Refused(f"cannot create member {name!r}: {e.strerror}") from e
        finally:
            os.close(parent)
        with open(fd, "wb") as out:
            written = 0
            while chunk := stream.read(_CHUNK):
                written, self.total = written + len(chunk), self.total + len(chunk)
                if written > self.limits.max_file_bytes:
                    raise _Refused(f"member {name!r} is over {self.limits.max_file_bytes} bytes")
                if self.total > self.limits.max_bytes:
                    raise _Refused(f"more than {self.limits.max_bytes} bytes uncompressed")
                out.write(chunk)

    def _open_dir(self, name: str, parts: list[str], listed: bool = False) -> int:
        """The folder at parts, made as needed. A folder the archive did not list as a member
        of its own still counts as one (it is an inode like any other)."""
        fd = os.dup(self.root)
        try:
            for i, part in enumerate(parts):
                try:
                    sub = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not (listed and i == len(parts) - 1):
                        self.count()
                    os.mkdir(part, 0o700, dir_fd=fd)
                    sub = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except OSError as e:
                    raise _Refused(f"member {name!r} needs {part!r} as a folder") from e
                os.close(fd)
                fd = sub
        except BaseException:
            os.close(fd)
            raise
        return fd

    def strip_wrapper(self) -> None:
        """A single top-level folder wrapping everything (GitHub's "Download ZIP" gives
        repo-main/...) is removed, so project-relative paths start at the student's folder;
        not one named as a folder of the project (controller/ alone is a hand-in of
        controller/tables.py, not a wrapper)."""
        top = os.listdir(self.root)
        if len(top) != 1 or top[0] in PROJECT_TOPS or not stat.S_ISDIR(
                os.stat(top[0], dir_fd=self.root, follow_symlinks=False).st_mode):
            return
        # Moved aside first, as it may hold its own name (repo-main/repo-main); no member is
        # named REFUSED (_member_parts), so nothing inside clashes with that name.
        os.rename(top[0], REFUSED, src_dir_fd=self.root, dst_dir_fd=self.root)
        inner = os.open(REFUSED, _DIR_FLAGS, dir_fd=self.root)
        try:
            for child in os.listdir(inner):
                os.rename(child, child, src_dir_fd=inner, dst_dir_fd=self.root)
        finally:
            os.close(inner)
        os.rmdir(REFUSED, dir_fd=self.root)


def _member_parts(name: str) -> list[str]:
    """A member's path as components, refused unless it stays inside the student's folder
    and the filesystem can hold it. `.` and empty components (./a, a//b) are dropped."""
    if "\x00" in name or name.startswith("/"):
        raise _Refused(f"member {name!r} has an absolute path or a NUL byte")
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        raise _Refused(f"member name {name!r} is not UTF-8") from None
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise _Refused(f"member {name!r} leads out of the folder (..)")
    if size > _PATH_MAX or any(len(p.encode("utf-8")) > _NAME_MAX for p in parts):
        raise _Refused(f"member name {name[:60]!r}... is too long for the filesystem")
    if parts and parts[-1] == REFUSED:
        raise _Refused(f"member {name!r} has the name reserved for refusals")
    return parts


def _extract_zip(f: IO[bytes], sink: _Sink) -> None:
    """Folders and regular files only, judged by the Unix mode a Unix zip records."""
    with zipfile.ZipFile(f) as zf:
        for info in zf.infolist():
            kind = stat.S_IFMT(info.external_attr >> 16) if info.create_system == 3 else 0
            if info.is_dir() or kind == stat.S_IFDIR:
                sink.add_dir(info.filename)
            elif kind in (0, stat.S_IFREG):
                with zf.open(info) as member:
                    sink.add_file(info.filename, member)
            else:
                what = _SPECIAL.get(kind, "special file")
                raise _Refused(f"member {info.filename!r} is a {what}")


class _BoundedTarInfo(tarfile.TarInfo):
    """Refuses a huge pax or GNU long-name header before tarfile reads it into memory."""

    def _proc_member(self, tf: tarfile.TarFile) -> tarfile.TarInfo:
        headers = (tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE,
                   tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK)
        if self.type in headers and self.size > _TAR_HEADER_MAX:
            raise tarfile.ReadError(f"a {self.size}-byte extended header")
        return super()._proc_member(tf)  # type: ignore[misc]


def _extract_tar(f: IO[bytes], sink: _Sink) -> None:
    """Read as a stream (no seeking, memory bounded); folders and regular files only."""
    with tarfile.open(fileobj=f, mode="r|*", tarinfo=_BoundedTarInfo) as tf:
        for member in tf:
            if member.isdir():
                sink.add_dir(member.name)
            elif member.isreg() and (stream := tf.extractfile(member)) is not None:
                sink.add_file(member.name, stream)
            else:
                kind = _SPECIAL.get(member.type, f"type {member.type!r} entry")
                raise _Refused(f"member {member.name!r} is a {kind}")


def _export_git(repo: Path, sink: _Sink) -> None:
    """HEAD's tree, as a tar read through the same checks as an upload. Nothing is checked
    out and no hook, filter or config of the student's runs (see the module's docstring)."""
    git_dir, objects = repo / ".git", repo / ".git" / "objects"
    if not stat.S_ISDIR(os.lstat(git_dir).st_mode if os.path.lexists(git_dir) else 0):
        raise _Refused(f"{repo.name!r} is a folder but not a git repository (no .git folder)")
    # Objects from elsewhere (a link, alternates, a worktree's commondir) could make us
    # export another repository on this machine.
    if objects.is_symlink() or any(os.path.lexists(git_dir / p) for p in (
            "commondir", "objects/info/alternates", "objects/info/http-alternates")):
        raise _Refused(".git borrows objects from elsewhere: not supported")
    with tempfile.TemporaryDirectory(prefix="collect-git-") as tmp:
        home, shim = Path(tmp, "home"), Path(tmp, "shim.git")
        home.mkdir()
        env = {"PATH": os.environ.get("PATH", os.defpath), "HOME": str(home), "LC_ALL": "C",
               "GIT_CONFIG_NOSYSTEM": "1", "GIT_ATTR_NOSYSTEM": "1", "GIT_TERMINAL_PROMPT": "0"}
        commit = _git(["-c", "safe.directory=*", "-c", "core.fsmonitor=false",
                       f"--git-dir={git_dir}", "rev-parse", "--verify", "--end-of-options",
                       "HEAD^{commit}"], env, "find HEAD's commit").decode().strip()
        if not _OID.fullmatch(commit) or b"\n" in os.fsencode(objects.absolute()):
            raise _Refused(f"unusable HEAD {commit!r} or repository path")
        (shim / "objects" / "info").mkdir(parents=True)
        (shim / "refs").mkdir()
        (shim / "HEAD").write_text(commit + "\n")
        (shim / "objects/info/alternates").write_bytes(os.fsencode(objects.absolute()) + b"\n")
        version = "1\n[extensions]\n\tobjectformat = sha256" if len(commit) == 64 else "0"
        (shim / "config").write_text(f"[core]\n\tbare = true\n\trepositoryformatversion = "
                                     f"{version}\n")
        with tempfile.TemporaryFile(dir=tmp) as tar:
            # The tar may exceed the limits only by its headers: cap git's output there.
            cap = sink.limits.max_bytes + 1024 * (sink.limits.max_members + 16)
            _git([f"--git-dir={shim}", "archive", "--format=tar", commit], env,
                 "export HEAD", out=tar, fsize=cap)
            tar.seek(0)
            _extract_tar(tar, sink)


def _git(args: list[str], env: dict[str, str], what: str, out: IO[bytes] | None = None,
         fsize: int | None = None) -> bytes:
    """Run git with a time limit and, for what it writes, a file-size limit (RLIMIT_FSIZE:
    a huge repository is stopped by the kernel, not after filling the disk)."""
    try:
        proc = subprocess.run(
            ["git", *args], env=env, cwd=env["HOME"], stdin=subprocess.DEVNULL,
            stdout=out or subprocess.PIPE, stderr=subprocess.PIPE, timeout=GIT_TIMEOUT,
            preexec_fn=None if fsize is None else
            lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize)))
    except FileNotFoundError:
        raise _Refused("git is not installed: cannot read the repository") from None
    except subprocess.TimeoutExpired:
        raise _Refused(f"git took longer than {GIT_TIMEOUT:.0f} s to {what}") from None
    if proc.returncode == -signal.SIGXFSZ:
        raise _Refused(f"HEAD's tree is larger than {fsize} bytes as a tar")
    if proc.returncode != 0:
        lines = proc.stderr.decode(errors="replace").strip().splitlines() or ["no message"]
        raise _Refused(f"git could not {what} ({lines[-1][:200]})")
    return proc.stdout or b""
