"""Stopping the processes the testbed started: by their own PID, never by name."""

from __future__ import annotations

import subprocess


def stop_process(proc: subprocess.Popen, timeout: float = 5.0) -> None:
    """SIGTERM, SIGKILL if it is still there after `timeout`; reaped either way."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=timeout)
