"""The run's private directory, and files in it that no other user can have planted.

A fabric runs as root on machines other users share. Whatever root reads, locks, deletes or
acts on must be something only root could have written: the run state (fabric lock, run
manifest, the per-run keys and secrets of the switches) lives in one directory, by default
/run/mrc-testbed, created 0700. Before use, the directory is opened one path component at a
time with O_NOFOLLOW (a symbolic link anywhere in the path is refused), every ancestor must
be owned by root or by us and not writable by others unless sticky (like /tmp), and the
directory itself must be ours with no access for group or others. A file in it is opened with
O_NOFOLLOW and O_NONBLOCK (a FIFO cannot hang us) and must be a regular file, ours, with one
link and no access for group or others. Anything else is refused with an UnsafePathError that
names the path and what is wrong with it; nothing it names is ever acted on.

Files a user names for output live wherever the user says, often /tmp: open_new_file makes
one that must not exist yet (--report, a capture); open_output_file (fabric.outfile, re-exported
here) may also replace a plain file of ours with one link (--json FILE), and refuses a link, a
FIFO, a device or another user's file with an UnsafeOutputError.

MRC_RUN_DIR overrides the directory (tests; a lab that wants it elsewhere). Without root the
default is $XDG_RUNTIME_DIR/mrc-testbed, else /tmp/mrc-testbed-UID (the same checks apply).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

# A file a user named for output (--json FILE, a CSV, an export) that may exist already: defined
# in fabric/ so that fabric.options.write_json, below this layer, uses the same one; re-exported
# here beside open_new_file, for the files root makes safely.
from fabric.outfile import UnsafeOutputError as UnsafeOutputError
from fabric.outfile import open_output_file as open_output_file
from safety.errors import SafetyError

RUN_DIR_ENV = "MRC_RUN_DIR"
ROOT_RUN_DIR = Path("/run/mrc-testbed")
DIR_MODE = 0o700
FILE_MODE = 0o600
_OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class UnsafePathError(SafetyError, RuntimeError):
    """A path another user could have made or changed: refused, never acted on."""


def default_run_dir() -> Path:
    if os.environ.get(RUN_DIR_ENV):
        return Path(os.environ[RUN_DIR_ENV])
    if os.geteuid() == 0:
        return ROOT_RUN_DIR
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    base = Path(runtime) if runtime else Path(tempfile.gettempdir())
    return base / "mrc-testbed" if runtime else base / f"mrc-testbed-{os.geteuid()}"


def _refuse(path: Path | str, why: str) -> UnsafePathError:
    return UnsafePathError(f"refusing {path}: {why}; it may have been planted by another user. "
                           f"Remove it (as root, after looking at it) and run again")


def _check_ancestor(fd: int, path: str) -> None:
    st = os.fstat(fd)
    if st.st_uid not in (0, os.geteuid()):
        raise _refuse(path, f"this ancestor directory belongs to uid {st.st_uid}")
    if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
        raise _refuse(path, f"this ancestor directory is writable by others "
                            f"(mode {stat.S_IMODE(st.st_mode):o}) and not sticky")


def check_private(fd: int, path: Path | str, kind: str = "directory") -> None:
    """`fd` is ours and closed to group and others (and, for a file, a plain file)."""
    st = os.fstat(fd)
    if kind == "file" and not stat.S_ISREG(st.st_mode):
        raise _refuse(path, "it is not a regular file")
    if kind == "file" and st.st_nlink != 1:
        raise _refuse(path, f"it has {st.st_nlink} hard links")
    if st.st_uid != os.geteuid():
        raise _refuse(path, f"it belongs to uid {st.st_uid}, not {os.geteuid()}")
    if st.st_mode & 0o077:
        raise _refuse(path, f"its mode {stat.S_IMODE(st.st_mode):o} lets group or others in "
                            f"(want {DIR_MODE if kind == 'directory' else FILE_MODE:o})")


def open_private_dir(path: Path, create: bool = True,
                     check: Callable[[int, Path], None] | None = None) -> int:
    """An fd of directory `path`, reached without following any link, its ancestors checked
    and itself checked by `check` (default: check_private); the last component is created
    0700 if missing (and `create`). The caller closes it."""
    path = Path(os.path.abspath(path))
    fd = os.open("/", _OPEN_DIR)
    try:
        parts = path.parts[1:]
        for i, name in enumerate(parts):
            here = Path("/", *parts[:i + 1])
            last = i == len(parts) - 1
            if last and create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, DIR_MODE, dir_fd=fd)
            try:
                child = os.open(name, _OPEN_DIR, dir_fd=fd)
            except OSError as exc:
                raise _refuse(here, f"cannot open it as a directory without following links "
                                    f"({exc.strerror})") from None
            os.close(fd)
            fd = child
            if last:
                (check or check_private)(fd, here)
            else:
                _check_ancestor(fd, here)
        return fd
    except BaseException:
        os.close(fd)
        raise


class PrivateDir:
    """A checked private directory, held open: every file operation is relative to its fd,
    so swapping the path for a link after the check changes nothing."""

    def __init__(self, path: Path | None = None, create: bool = True) -> None:
        self.path = Path(os.path.abspath(path or default_run_dir()))
        self.fd = open_private_dir(self.path, create)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> PrivateDir:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def open(self, name: str, flags: int, create: bool = False) -> int:
        """A checked fd of file `name` (flags: O_RDONLY/O_RDWR/...); None-free: a missing file
        raises FileNotFoundError, anything unsafe UnsafePathError."""
        if "/" in name or name in ("", ".", ".."):
            raise ValueError(f"{name!r} is not a plain file name")
        extra = os.O_CREAT if create else 0
        try:
            fd = os.open(name, flags | extra | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                         FILE_MODE, dir_fd=self.fd)
        except OSError as exc:
            if isinstance(exc, FileNotFoundError):
                raise
            raise _refuse(self.path / name, f"cannot open it without following links "
                                            f"({exc.strerror})") from None
        try:
            check_private(fd, self.path / name, "file")
        except BaseException:
            os.close(fd)
            raise
        os.set_blocking(fd, True)
        return fd

    def read_bytes(self, name: str, limit: int = 1 << 20) -> bytes:
        fd = self.open(name, os.O_RDONLY)
        with os.fdopen(fd, "rb") as f:
            data = f.read(limit + 1)
        if len(data) > limit:
            raise _refuse(self.path / name, f"it is over {limit} bytes")
        return data

    def write_bytes(self, name: str, data: bytes) -> Path:
        """Write `name` atomically: a fresh temporary name, then rename over the old one."""
        tmp = f".{name}.{os.getpid()}.{secrets.token_hex(4)}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     FILE_MODE, dir_fd=self.fd)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp, dir_fd=self.fd)
            raise
        return self.path / name

    def unlink(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=self.fd)

    def exists(self, name: str) -> bool:
        try:
            os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return False
        return True



def _check_workdir(fd: int, path: Path | str) -> None:
    st = os.fstat(fd)
    if st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise _refuse(path, f"a work directory must be ours and writable by nobody else "
                            f"(uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):o})")


def new_file_problem(path: Path) -> str | None:
    """Why an output file the user named (a report, a capture) cannot be made new at `path`,
    or None: it must not exist yet, not even as a dangling link, in an existing directory."""
    if path.exists() or path.is_symlink():
        return f"{path} exists: name a new file"
    if not path.parent.is_dir():
        return f"{path.parent} is not a directory"
    return None


def open_new_file(path: Path) -> BinaryIO:
    """An output file the user named, created new and never through a symlink (we run as
    root; the directory may be one others write, like /tmp): a file already there, whoever
    made it, is an error (FileExistsError or, for a link, OSError), never overwritten.
    open_output_file is the variant that may overwrite a plain file of ours."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o644)
    return os.fdopen(fd, "wb")


def check_workdir(path: Path) -> None:
    """A work directory the caller named (logs, agents' control sockets): created 0700 if
    missing; if it exists, it must be ours and writable by nobody else (reading is the
    caller's choice), reached without links."""
    os.close(open_private_dir(path, create=True, check=_check_workdir))
