"""A file a user named for output (--json FILE, a CSV, an export), opened so that another user
cannot steer what we write into a file of someone else's.

Entry points run as root on machines other users share, and the path they are given often
lies in a directory anyone may write (/tmp). Whatever sits at that path may have been planted:
a symbolic link to a file of root's, a 0666 file its planter can read and edit afterwards
(every grade of a class), a hard link to another file, a FIFO that hangs a write. So the last
component is opened with O_NOFOLLOW (a link is refused, not followed) and O_NONBLOCK (a FIFO
cannot hang us); a new file is created O_CREAT|O_EXCL mode 0644; a file already there is kept
only if fstat of the opened fd says it is a plain file of ours with one link, and only then is
it truncated and closed to writers other than us. Everything is decided on the fd, never by a
stat before the open, so swapping the file in between changes nothing.

It lives in fabric/ (beside options.write_json, its first user) because fabric is the lowest
layer every entry point may import; safety.privdir, which owns the files root makes
safely, re-exports it rather than defining it again.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import BinaryIO, TextIO

from fabric.errors import FabricError

OUTPUT_MODE = 0o644  # a new output file; an existing one keeps at most these bits
_OPEN = os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_OPEN_ERRORS = {errno.ELOOP: "it is a symbolic link",
                errno.ENXIO: "it is a FIFO or a socket, not a regular file",
                errno.EISDIR: "it is a directory, not a regular file"}


class UnsafeOutputError(FabricError, OSError):
    """An output path that holds something we must not write through: refused, untouched."""


def _kind(mode: int) -> str:
    """What a non-regular file is, for the message."""
    for test, name in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISDIR, "a directory")):
        if test(mode):
            return name
    return "something else"


def output_problem(st: os.stat_result) -> str | None:
    """Why an existing file with this stat must not be overwritten by us, or None. The one
    rule, for an fstat of the opened file (open_output_file) and an early lstat alike
    (existing_output_problem): a regular file of our euid with exactly one link."""
    if not stat.S_ISREG(st.st_mode):
        return f"it is {_kind(st.st_mode)}, not a regular file"
    if st.st_uid != os.geteuid():
        return f"it belongs to uid {st.st_uid}, not to us (uid {os.geteuid()})"
    if st.st_nlink != 1:
        return f"it has {st.st_nlink} hard links (another name of it could be anyone's file)"
    return None


def refusal(path: Path | str, why: str) -> UnsafeOutputError:
    """The error for an output path we will not write: what is wrong and what to do."""
    return UnsafeOutputError(f"refusing to write {path}: {why}; it may have been planted by "
                             f"another user. Choose another path, or remove the file (after "
                             f"looking at it) and run again")


def existing_output_problem(path: Path | str) -> str | None:
    """An early warning (at argument parsing, before a long run), not the guard: what
    output_problem says of whatever is at `path` now, None if nothing is. open_output_file
    decides again on the file it opens."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    return output_problem(st)


def open_output_file(path: Path | str) -> BinaryIO:
    """`path` opened for writing from its start, for a file the user named: created new
    (O_CREAT|O_EXCL, mode 0644 less the umask), or an existing regular file of ours with one
    link, truncated and stripped of any bit beyond 0644 (so no group or other write).
    A symbolic link as the last component, a FIFO, a socket, a device, a directory, a file
    of another uid or a hard-linked file raises UnsafeOutputError and is left as it was.
    The caller closes the file."""
    fd, st = _open_checked(path, 0)
    try:
        os.ftruncate(fd, 0)
        os.fchmod(fd, stat.S_IMODE(st.st_mode) & OUTPUT_MODE)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "wb")


def open_log_file(path: Path | str) -> TextIO:
    """A log file the user named (an agent's --log), opened to append, by the same rule as
    open_output_file: created new (0644), or a plain file of ours with one link, never
    through a link or into a FIFO. Raises UnsafeOutputError and leaves the file as it was."""
    fd, _ = _open_checked(path, os.O_APPEND)
    return os.fdopen(fd, "a", buffering=1)


def _open_checked(path: Path | str, extra: int) -> tuple[int, os.stat_result]:
    """`path` opened for writing with `extra` flags, created new (O_EXCL, OUTPUT_MODE) or,
    if something is there, reopened without following a link and kept only if fstat says
    output_problem has nothing against it; blocking again once checked. The one rule of
    open_output_file and open_log_file."""
    try:
        fd = os.open(path, _OPEN | extra | os.O_CREAT | os.O_EXCL, OUTPUT_MODE)
    except FileExistsError:
        try:
            fd = os.open(path, _OPEN | extra)
        except OSError as exc:
            why = _OPEN_ERRORS.get(exc.errno or 0,
                                   f"it cannot be opened without following a link "
                                   f"({exc.strerror})")
            raise refusal(path, why) from None
    try:
        st = os.fstat(fd)
        problem = output_problem(st)
        if problem is not None:
            raise refusal(path, problem)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd, st
