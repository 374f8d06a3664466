"""A sandboxed command the grader talks to while it runs: one request line in, one reply line
out, over the command's stdin and stdout.

sandbox.contain.run waits for a command and reads its report; a stage the grader runs itself
(the simulator, driving a student's endpoints) needs the student's code alive beside it, yet
still contained. The same chain starts it (sandbox.contain.launch: namespaces, the sandbox uid,
rlimits); this module adds what a conversation with a hostile peer needs:
- every read and write has a deadline (the call's, and the session's wall time), so a
  command that stops answering or stops reading costs a timeout, never a hang;
- a reply is one line of at most `max_line` bytes: a longer one is refused before it fills
  the grader's memory;
- stderr goes to an unlinked file of ours (the command cannot make it block us), and its
  tail is kept for the student's feedback;
- close() ends the command: EOF on its stdin, a short grace, then the PID namespace's init is
  killed and the grader waits until nothing of it is left, also on an error or Ctrl-C.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

from sandbox import contain, supervise
from sandbox.errors import ContainmentError

_EXIT_GRACE_S = 2.0


class PipeError(ContainmentError):
    """The sandboxed command did not answer as the protocol says: it exited, timed out, or
    wrote more than a reply may hold. The message is for the student."""


def _plain(argv: Sequence[str], cwd: Path, env: dict[str, str],
           stdio: tuple) -> tuple[subprocess.Popen, int, float]:
    """Without a sandbox: the same conversation with a plain child (no init to report: the
    info pipe's write end is closed at once)."""
    info_r, info_w = os.pipe()
    os.close(info_w)
    try:
        proc = subprocess.Popen(argv, cwd=cwd, env={**os.environ, **env}, stdin=stdio[0],
                                stdout=stdio[1], stderr=stdio[2], start_new_session=True)
    except BaseException:
        os.close(info_r)
        raise
    return proc, info_r, time.monotonic()


class PipeSession:
    def __init__(self, argv: Sequence[str], *, copy: Path, results: Path, venv: Path,
                 env: dict[str, str], limits: contain.Limits, max_line: int = 32 << 20,
                 contained: bool = True) -> None:
        self._err = tempfile.TemporaryFile()  # noqa: SIM115 (closed by close())
        stdio = (subprocess.PIPE, subprocess.PIPE, self._err)
        try:
            if contained:
                self.proc, self._info_r, start = contain.launch(
                    argv, copy=copy, results=results, venv=venv, env=env, limits=limits,
                    live=False, scratch=(), stdio=stdio)
            else:  # --trust-submissions: a plain process of ours, as grader.workspace's
                self.proc, self._info_r, start = _plain(argv, copy, env, stdio)
        except BaseException:
            self._err.close()
            raise
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._in, self._out = self.proc.stdin.fileno(), self.proc.stdout.fileno()
        os.set_blocking(self._in, False)
        os.set_blocking(self._out, False)
        self._deadline = start + limits.wall_s
        self._max_line = max_line
        self._buf = bytearray()
        self._info = bytearray()
        self._init: tuple[int, int] | None = None
        self._closed = False

    def __enter__(self) -> PipeSession:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def request(self, line: bytes, timeout: float) -> bytes:
        """Send one line (ending in a newline) and return the reply line, without its
        newline; PipeError if none comes within `timeout` s (or the session's wall time)."""
        deadline = min(time.monotonic() + timeout, self._deadline)
        self._write(line, deadline)
        return self._read_line(deadline)

    def stderr_tail(self, limit: int = 2000) -> str:
        self._err.seek(0, os.SEEK_END)
        size = self._err.tell()
        self._err.seek(max(0, size - limit))
        return self._err.read().decode("utf-8", "replace")

    # ---- the two directions ------------------------------------------------------------
    def _wait(self, fd: int, event: int, deadline: float) -> None:
        with selectors.DefaultSelector() as sel:
            sel.register(fd, event)
            sel.register(self._info_r, selectors.EVENT_READ)
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise PipeError(self._why("did not answer in time"))
                for key, _ in sel.select(timeout=min(left, 1.0)):
                    if key.fd == self._info_r:
                        self._read_info(sel)
                    else:
                        return

    def _read_info(self, sel: selectors.BaseSelector) -> None:
        chunk = os.read(self._info_r, 4096)
        if not chunk:
            sel.unregister(self._info_r)
            return
        self._info += chunk
        self._init = self._init or supervise.init_of(self._info)

    def _write(self, data: bytes, deadline: float) -> None:
        view = memoryview(data)
        while view:
            self._wait(self._in, selectors.EVENT_WRITE, deadline)
            try:
                view = view[os.write(self._in, view):]
            except BrokenPipeError:
                raise PipeError(self._why("stopped reading")) from None
            except BlockingIOError:
                continue

    def _read_line(self, deadline: float) -> bytes:
        while True:
            end = self._buf.find(b"\n")
            if end >= 0:
                line = bytes(self._buf[:end])
                del self._buf[:end + 1]
                return line
            if len(self._buf) > self._max_line:
                raise PipeError(f"a reply of more than {self._max_line} bytes was refused")
            self._wait(self._out, selectors.EVENT_READ, deadline)
            try:
                chunk = os.read(self._out, 1 << 20)
            except BlockingIOError:
                continue
            if not chunk:  # it closed its stdout: most likely it is ending, so say how
                with contextlib.suppress(subprocess.TimeoutExpired):  # else: lives on
                    self.proc.wait(timeout=_EXIT_GRACE_S)
                raise PipeError(self._why("exited" if self.proc.poll() is not None
                                          else "closed its output"))
            self._buf += chunk

    def _why(self, what: str) -> str:
        rc = self.proc.poll()
        status = "" if rc is None else f" (exit status {rc})"
        tail = self.stderr_tail(600).strip()
        return f"the sandboxed process {what}{status}" + (f": {tail}" if tail else "")

    # ---- the end ----------------------------------------------------------------------
    def close(self) -> None:
        """End the command and wait until nothing of its sandbox is left."""
        if self._closed:
            return
        self._closed = True
        try:
            assert self.proc.stdin is not None and self.proc.stdout is not None
            self._info += self._drain_info()
            self._init = self._init or supervise.init_of(self._info)
            self.proc.stdin.close()  # EOF: a well-behaved server exits by itself
            try:
                self.proc.wait(timeout=_EXIT_GRACE_S)
            except subprocess.TimeoutExpired:
                supervise.kill(self.proc, self._init)
                self.proc.wait(timeout=30)
            if self._init is not None:
                supervise.wait_gone(*self._init)
        finally:
            self.proc.stdout.close()
            os.close(self._info_r)
            self._err.close()

    def _drain_info(self) -> bytes:
        os.set_blocking(self._info_r, False)
        try:
            return os.read(self._info_r, 4096)
        except BlockingIOError:
            return b""
