"""A contained command watched to its end: both pipes drained to a bounded tail, the wall
time enforced by SIGKILLing the PID namespace's init, and the return only once nothing of the
sandbox is left. By PID and start time, never by name (sandbox.contain starts the command)."""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from sandbox.errors import SandboxError

_KILL_GRACE_S = 10.0  # after the SIGKILL: for the namespace to empty and the pipes to close


@dataclass(frozen=True)
class SandboxResult:
    returncode: int  # the command's; 128+N when signal N ended it (bwrap's convention)
    timed_out: bool
    limit: str  # "", "wall", "cpu", "file_size", "memory" or "processes": the one hit, if known
    stdout: str  # the last Limits.output_bytes of each stream
    stderr: str
    output_truncated: bool
    seconds: float


class _Tail:
    """The last `cap` bytes of a stream, and whether anything was dropped."""

    def __init__(self, cap: int) -> None:
        self.cap, self.data, self.dropped = cap, bytearray(), False

    def add(self, chunk: bytes) -> None:
        self.data += chunk
        if len(self.data) > self.cap:
            del self.data[:len(self.data) - self.cap]
            self.dropped = True


def supervise(proc: subprocess.Popen, info_r: int, start: float, *, wall_s: float,
              output_bytes: int) -> SandboxResult:
    """Drain both pipes until they close; SIGKILL the sandbox's PID namespace at the wall-time
    deadline; return once nothing of the sandbox is left."""
    assert proc.stdout is not None and proc.stderr is not None
    tails = {proc.stdout.fileno(): _Tail(output_bytes),
             proc.stderr.fileno(): _Tail(output_bytes)}
    info = bytearray()
    sel = selectors.DefaultSelector()
    for fd in (*tails, info_r):
        sel.register(fd, selectors.EVENT_READ)
    deadline, timed_out, init = start + wall_s, False, None
    try:
        while any(fd in sel.get_map() for fd in tails):
            now = time.monotonic()
            if now >= deadline:
                if timed_out:
                    if proc.poll() is None:  # the init's SIGKILL did not end bwrap
                        os.killpg(proc.pid, signal.SIGKILL)
                    break
                timed_out, deadline = True, now + _KILL_GRACE_S
                kill(proc, init)
            for key, _ in sel.select(timeout=max(0.0, min(1.0, deadline - now))):
                chunk = os.read(key.fd, 1 << 16)
                if not chunk:
                    sel.unregister(key.fd)
                elif key.fd == info_r:
                    info += chunk
                    init = init or init_of(info)
                else:
                    tails[key.fd].add(chunk)
    finally:
        sel.close()
        proc.stdout.close()
        proc.stderr.close()
    try:
        rc = proc.wait(timeout=_KILL_GRACE_S)
    except subprocess.TimeoutExpired:  # pipes closed yet bwrap lingers: not seen, but bounded
        os.killpg(proc.pid, signal.SIGKILL)
        rc = proc.wait()
    if init is not None:
        wait_gone(*init)
    out, err = tails.values()
    stdout, stderr = (t.data.decode("utf-8", "replace") for t in (out, err))
    return SandboxResult(returncode=rc, timed_out=timed_out,
                         limit=_which_limit(rc, timed_out, stderr), stdout=stdout,
                         stderr=stderr, output_truncated=out.dropped or err.dropped,
                         seconds=time.monotonic() - start)


def _start_time(pid: int) -> int | None:
    """Field 22 of /proc/PID/stat, or None once the PID is gone or a zombie (it has ended)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] == "Z" else int(fields[19])


def init_of(info: bytearray) -> tuple[int, int] | None:
    """(host PID, start time) of the PID namespace's init, from bwrap's --info-fd JSON."""
    try:
        pid = int(json.loads(info.decode())["child-pid"])
    except (ValueError, KeyError, TypeError):
        return None  # not all of it has arrived yet
    started = _start_time(pid)
    return (pid, started) if started is not None else None


def kill(proc: subprocess.Popen, init: tuple[int, int] | None) -> None:
    """SIGKILL the namespace's init (the kernel kills the rest); bwrap's process group only
    while the init is unknown (it then dies of --die-with-parent, an orphan for PID 1).
    By PID, never by name, and only while the PID is the same process (start time)."""
    if init is not None and _start_time(init[0]) == init[1]:
        os.kill(init[0], signal.SIGKILL)
    elif proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)


def wait_gone(pid: int, started: int, timeout: float = _KILL_GRACE_S) -> None:
    """Until the init has ended: its exit waits for every other process of its namespace."""
    end = time.monotonic() + timeout
    while _start_time(pid) == started:
        if time.monotonic() > end:
            raise SandboxError(f"the sandbox's init (PID {pid}) outlived its SIGKILL")
        time.sleep(0.01)


def _which_limit(rc: int, timed_out: bool, stderr: str) -> str:
    """The limit that ended the command, when its exit status or last words tell."""
    if timed_out:
        return "wall"
    if rc in (128 + signal.SIGXCPU, -signal.SIGXCPU):
        return "cpu"
    if rc in (128 + signal.SIGXFSZ, -signal.SIGXFSZ) or "File too large" in stderr:
        return "file_size"  # Python ignores SIGXFSZ: its write raises EFBIG instead
    if "MemoryError" in stderr or "Cannot allocate memory" in stderr or "bad_alloc" in stderr:
        return "memory"
    if any(s in stderr for s in ("Resource temporarily unavailable", "fork: retry",
                                 "can't start new thread")):
        return "processes"  # fork/clone's EAGAIN under RLIMIT_NPROC
    return ""
