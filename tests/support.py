"""Helpers every test layer shares: what a test needs (BMv2, root) and polling with a deadline.

BMv2 tests skip with a reason where the P4 toolchain is absent (users' machines), but fail
where the toolchain is required (CI: `.ci/run` installs it and sets MRC_REQUIRE_BMV2=1), so a
broken install can never pass as a row of skips. Live tests wait for a counter to reach a
value with `wait_until` and a generous deadline, never for a fixed time.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable
from typing import TypeVar

import pytest

REQUIRE_ENV = "MRC_REQUIRE_BMV2"
BMV2_TOOLS = ("p4c-bm2-ss", "simple_switch_grpc", "simple_switch_CLI")
INSTALL_HINT = "install the P4 toolchain with scripts/install-p4lang.sh (docs/lab.md, 'BMv2')"
NOBODY = 65534  # the unprivileged user a test plays to plant files for root to trip on


def bmv2_required() -> bool:
    return os.environ.get(REQUIRE_ENV, "") == "1"


def require_bmv2(tools: tuple[str, ...] = BMV2_TOOLS) -> None:
    """Skip (or, with MRC_REQUIRE_BMV2=1, fail) unless every tool is on PATH."""
    missing = [t for t in tools if shutil.which(t) is None]
    if not missing:
        return
    reason = f"{', '.join(missing)} not on PATH: {INSTALL_HINT}"
    if bmv2_required():
        pytest.fail(f"{REQUIRE_ENV}=1 but {reason}", pytrace=False)
    pytest.skip(reason)


def require_root(what: str) -> None:
    if os.geteuid() != 0:
        pytest.skip(f"{what} needs root")


def as_nobody(script: str) -> subprocess.CompletedProcess:
    """Run a shell script as the unprivileged user nobody (no groups, no capabilities): the
    other user of a shared machine, planting what a root run must not trust."""
    return subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}",
                           "--clear-groups", "sh", "-c", script],
                          capture_output=True, text=True, timeout=30)


T = TypeVar("T")


def wait_until(probe: Callable[[], T], what: str, timeout: float = 10.0,
               interval: float = 0.05) -> T:
    """Poll `probe` until it returns something true; fail naming `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"after {timeout:.0f} s still waiting for {what} (last: {value!r})")
        time.sleep(interval)
