"""What a failed live stage leaves for the student: the tails of its agents', switches' and
network's logs and a packet summary per switch port, kept when the run's own folder is
deleted with the fabric.

The run's workdir is the network's own (0700, made by safety.privdir), so it is read
plainly; only regular files, without following links. The tails travel in the live check
(grader.report.Check.logs) and are written where the student can read them: into the
submission's `results/live/` folder (write_into, for `check N` and `grade N` on one folder,
the folder owning them) or beside each student's feedback.md (grader.feedback.write_all).
Bounded: LOG_TAIL_BYTES per file and MAX_FILES files, so a runaway log costs nothing."""

from __future__ import annotations

import contextlib
import os
import re
import stat
from pathlib import Path
from typing import Any

from grader.errors import GraderError

LOG_TAIL_BYTES = 4096  # the end of each log: where a failure shows
MAX_FILES = 24  # an 8-switch fabric: 8 switch logs, 4 agents, the network's log, packets
RESULTS, LIVE = "results", "live"  # <submission>/results/live/
PACKETS = "packets.txt"
NETWORK = "network.log"
_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")  # whole name: fullmatch


class LiveLogError(GraderError, OSError):
    """The results folder is not one the grader may write into (a link, another user's)."""


def tail(path: Path, limit: int = LOG_TAIL_BYTES) -> str:
    """The last `limit` bytes of a regular file (no links followed), from a line start."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return "(not a regular file)"
        f.seek(max(0, st.st_size - limit))
        data = f.read(limit)
    if st.st_size > limit and b"\n" in data:
        data = data.split(b"\n", 1)[1]
    return data.decode(errors="replace")


def collect(workdir: Path, network_log: list[str], net: Any) -> dict[str, str]:
    """File name -> text: every *.log of the run's workdir (tails), the network's own log
    (the controller's and the fabric's messages) and the packet summary."""
    logs: dict[str, str] = {}
    run_logs = sorted(workdir.glob("*.log")) if workdir.is_absolute() else []  # none made yet
    for path in run_logs[:MAX_FILES - 2]:
        try:
            logs[path.name] = tail(path)
        except OSError as exc:
            logs[path.name] = f"(could not be read: {exc})"
    logs[NETWORK] = "\n".join(network_log)[-LOG_TAIL_BYTES:]
    logs[PACKETS] = packet_summary(net)
    return logs


def packet_summary(net: Any) -> str:
    """Frames received and sent per switch port, and each switch's drop counters: where the
    transfer's frames stopped."""
    lines = ["switch port: frames received / sent"]
    try:
        counts = net.switch_packet_counts()
        frames = net.switch_frames()
    except Exception as exc:  # a switch that died is itself the finding: reported, not hidden
        return f"the switches' counters could not be read: {type(exc).__name__}: {exc}"
    for name in sorted(counts):
        ports = ", ".join(f"{p}: {rx}/{tx}" for p, (rx, tx) in sorted(counts[name].items()))
        lines.append(f"{name}  {ports}")
    lines.append("")
    lines.append("switch: frame counters")
    for name in sorted(frames):
        lines.append(f"{name}  " + ", ".join(f"{k}={v}" for k, v in sorted(frames[name].items())))
    return "\n".join(lines)


def bounded(logs: Any) -> dict[str, str]:
    """A report's logs as the grader keeps them: plain names, text, within the limits (a
    sandboxed run's report is the student's process's word)."""
    if not isinstance(logs, dict):
        return {}
    out = {}
    for name, text in list(logs.items())[:MAX_FILES]:
        if isinstance(name, str) and _SAFE_NAME.fullmatch(name) and isinstance(text, str):
            # a lone surrogate (JSON's "\ud800") would fail every later encode: replaced
            out[name] = text[-LOG_TAIL_BYTES * 2:].encode(errors="replace").decode()
    return out


def write_into(submission: Path, logs: dict[str, str]) -> Path:
    """`submission`/results/live/ holding exactly `logs`, owned by the submission folder's
    owner (the student who ran sudo reads and deletes them). Every step goes through a
    directory fd without following links; an entry that is a link, not ours or the owner's,
    or hard-linked is refused, so nothing outside the folder can be written or chowned."""
    top = os.open(submission, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        owner = os.fstat(top).st_uid
        results = _subdir(top, RESULTS, owner)
        try:
            live = _subdir(results, LIVE, owner)
        finally:
            os.close(results)
        try:
            for name in os.listdir(live):
                if name not in logs:
                    os.unlink(name, dir_fd=live)  # a link is removed, never followed
            for name, text in logs.items():
                _write(live, name, text, owner)
        finally:
            os.close(live)
    finally:
        os.close(top)
    return submission / RESULTS / LIVE


def _trusted(st: os.stat_result, owner: int) -> bool:
    return st.st_uid in (owner, os.geteuid())


def _subdir(parent: int, name: str, owner: int) -> int:
    """The folder `name` in `parent`, made if missing, opened without following a link and
    handed to `owner` through its descriptor (never by name: the entry may have been
    swapped for a hard link to another file since the mkdir)."""
    with contextlib.suppress(FileExistsError):  # an existing one is checked below
        os.mkdir(name, 0o755, dir_fd=parent)
    try:
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                     dir_fd=parent)
    except OSError as exc:
        raise LiveLogError(f"{name} in the submission is not a plain folder: {exc}") from exc
    st = os.fstat(fd)
    if not _trusted(st, owner):
        os.close(fd)
        raise LiveLogError(f"{name} in the submission belongs to another user")
    if os.geteuid() == 0 and st.st_uid != owner:
        os.fchown(fd, owner, -1)
    return fd


def _write(folder: int, name: str, text: str, owner: int) -> None:
    if not _SAFE_NAME.fullmatch(name):
        raise LiveLogError(f"{name!r} is not a plain file name")
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                 0o644, dir_fd=folder)
    with os.fdopen(fd, "wb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1 or not _trusted(st, owner):
            raise LiveLogError(f"results/live/{name} is not a plain file of this submission")
        os.ftruncate(fd, 0)
        f.write(text.encode())
        if os.geteuid() == 0 and st.st_uid != owner:
            os.fchown(fd, owner, -1)
