"""The course's secret, and what it assigns each student.

A lab whose answers are measurements (exercise 7) would be passed around if every student
measured the same fabric, and a student who chose the fabric could choose one whose answers
they already hold. So the fabric is assigned: derived from a secret only the instructor's
checkout holds (its `.course/key`, git-ignored, never copied into a grading copy or a
student edition) and the student's name, the name of their submission folder. The instructor
hands each student theirs with `./testbed assignment 7 --student NAME` (or `--roster FILE`);
grading holds each submission to its own.

The key is 32 bytes from `secrets`, created on first use as a file only its owner can read.
The grader runs as root, so it refuses a key file another user could have planted or can
read: it must be a regular file of the caller's, mode 0600, reached without a link.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import random
import secrets
import stat
from pathlib import Path

from grader.catalog import ROOT
from grader.errors import GraderError

KEY_ENV = "MRC_COURSE_KEY"  # another key file (tests; a course kept outside the checkout)
KEY_BYTES = 32


class CourseKeyError(GraderError, ValueError):
    """The course key is missing or unsafe: the message says what to do."""


def key_path() -> Path:
    return Path(os.environ.get(KEY_ENV) or ROOT / ".course" / "key")


def _check(fd: int, path: Path) -> None:
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
        raise CourseKeyError(f"{path} must be a regular file of yours with mode 0600 (it is "
                             f"uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):o}): remove "
                             f"it and let the grader make a new one")


def load_key(create: bool = False) -> bytes | None:
    """The course key; None when there is none and `create` is false."""
    path = key_path()
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        if not create:
            return None
        path.parent.mkdir(mode=0o700, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600)
        try:
            os.write(fd, secrets.token_bytes(KEY_BYTES))
        finally:
            os.close(fd)
        return load_key()
    except OSError as exc:
        raise CourseKeyError(f"cannot read the course key {path}: {exc}") from None
    try:
        _check(fd, path)
        key = os.read(fd, KEY_BYTES + 1)
    finally:
        os.close(fd)
    if len(key) != KEY_BYTES:
        raise CourseKeyError(f"{path} holds {len(key)} bytes, not a {KEY_BYTES}-byte key")
    return key


def student_rng(key: bytes, exercise: int, student: str) -> random.Random:
    """The draws of one student's assignment for one exercise (HMAC-SHA256 of the name)."""
    if not student or "/" in student or student.startswith("."):
        raise CourseKeyError(f"{student!r} is not a student's name (a submission folder's)")
    mac = hmac.new(key, f"exercise {exercise}:{student}".encode(), hashlib.sha256).digest()
    return random.Random(int.from_bytes(mac, "big"))
